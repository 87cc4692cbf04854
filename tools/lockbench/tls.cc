#include "tls.h"

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

namespace lockbench {

namespace {

bool is_ip_literal(const std::string& s) {
  unsigned char buf[16];
  return inet_pton(AF_INET, s.c_str(), buf) == 1 || inet_pton(AF_INET6, s.c_str(), buf) == 1;
}

}  // namespace

void tls_clear_errors() {
  if (ERR_peek_error() != 0) ERR_clear_error();
}

std::string tls_error(const std::string& what) {
  std::string s = what;
  unsigned long e = 0;
  char buf[256];
  while ((e = ERR_get_error()) != 0) {
    ERR_error_string_n(e, buf, sizeof buf);
    s += s == what ? ": " : "; ";
    s += buf;
  }
  return s;
}

std::unique_ptr<TlsClient> TlsClient::make(const TlsOptions& opts, std::string& error) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  if (ctx == nullptr) {
    error = tls_error("SSL_CTX_new");
    return nullptr;
  }
  std::unique_ptr<TlsClient> c(new TlsClient(ctx, opts.server_name));
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  // A write may be partial (the socket is nonblocking) and retried from a
  // buffer that moved (the runner's output string grows).
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  // Read whole socket buffers, not a record header then its body: one
  // read() per event, as for plaintext.
  SSL_CTX_set_read_ahead(ctx, 1);
  // A server that closes without close_notify: an end of stream like
  // plaintext's, not a TLS error.
  SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
  if (SSL_CTX_load_verify_locations(ctx, opts.ca.c_str(), nullptr) != 1) {
    error = tls_error("cannot load --tls-ca " + opts.ca);
    return nullptr;
  }
  if (!opts.cert.empty()) {
    if (SSL_CTX_use_certificate_chain_file(ctx, opts.cert.c_str()) != 1) {
      error = tls_error("cannot load --tls-cert " + opts.cert);
      return nullptr;
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, opts.key.c_str(), SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(ctx) != 1) {
      error = tls_error("cannot use --tls-key " + opts.key);
      return nullptr;
    }
  }
  return c;
}

TlsClient::~TlsClient() { SSL_CTX_free(ctx_); }

SSL* TlsClient::handshake(int fd, const std::string& host, std::string& error) const {
  ERR_clear_error();
  SSL* ssl = SSL_new(ctx_);
  if (ssl == nullptr || SSL_set_fd(ssl, fd) != 1) {
    error = tls_error("SSL_new");
    SSL_free(ssl);
    return nullptr;
  }
  const std::string& name = server_name_.empty() ? host : server_name_;
  X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
  if (is_ip_literal(name)) {
    X509_VERIFY_PARAM_set1_ip_asc(param, name.c_str());
  } else {
    // SNI (SSL_set_tlsext_host_name is a macro with a C cast).
    SSL_ctrl(ssl, SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name,
             const_cast<char*>(name.c_str()));
    SSL_set1_host(ssl, name.c_str());
  }
  if (SSL_connect(ssl) != 1) {
    const long v = SSL_get_verify_result(ssl);
    error = v != X509_V_OK
                ? std::string("TLS handshake failed: certificate verify failed: ") +
                      X509_verify_cert_error_string(v)
                : tls_error("TLS handshake failed");
    ERR_clear_error();
    SSL_free(ssl);
    return nullptr;
  }
  return ssl;
}

}  // namespace lockbench
