#include "tls_stream.h"

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

namespace lockd::client {

namespace {

std::string ssl_errors(const char* what) {
  std::string out = what;
  while (const unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    out += ": ";
    out += buf;
  }
  return out;
}

bool is_ip(const std::string& host) {
  unsigned char buf[16];
  return ::inet_pton(AF_INET, host.c_str(), buf) == 1 || ::inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

}  // namespace

Result<std::unique_ptr<TlsStream>> TlsStream::client(const TlsFiles& files, const std::string& host) {
  std::unique_ptr<TlsStream> t(new TlsStream());
  const auto bad = [](const std::string& why) -> Result<std::unique_ptr<TlsStream>> {
    return Status{Code::kInvalidArgument, why};
  };
  t->ctx_ = SSL_CTX_new(TLS_client_method());
  if (t->ctx_ == nullptr) return bad(ssl_errors("TLS: SSL_CTX_new"));
  SSL_CTX_set_min_proto_version(t->ctx_, TLS1_2_VERSION);
  if (SSL_CTX_load_verify_locations(t->ctx_, files.ca_file.c_str(), nullptr) != 1) {
    return bad(ssl_errors(("TLS: cannot load the CA file " + files.ca_file).c_str()));
  }
  SSL_CTX_set_verify(t->ctx_, SSL_VERIFY_PEER, nullptr);
  if (!files.cert_file.empty() || !files.key_file.empty()) {
    if (SSL_CTX_use_certificate_chain_file(t->ctx_, files.cert_file.c_str()) != 1 ||
        SSL_CTX_use_PrivateKey_file(t->ctx_, files.key_file.c_str(), SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(t->ctx_) != 1) {
      return bad(ssl_errors(("TLS: cannot load the client certificate " + files.cert_file).c_str()));
    }
  }
  t->ssl_ = SSL_new(t->ctx_);
  if (t->ssl_ == nullptr) return bad(ssl_errors("TLS: SSL_new"));
  const std::string name = files.server_name.empty() ? host : files.server_name;
  X509_VERIFY_PARAM* param = SSL_get0_param(t->ssl_);
  if (is_ip(name)) {
    X509_VERIFY_PARAM_set1_ip_asc(param, name.c_str());
  } else {
    X509_VERIFY_PARAM_set1_host(param, name.c_str(), 0);
    // SNI (SSL_set_tlsext_host_name, a macro with a C cast).
    SSL_ctrl(t->ssl_, SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name,
             const_cast<char*>(name.c_str()));
  }
  t->in_ = BIO_new(BIO_s_mem());
  t->out_ = BIO_new(BIO_s_mem());
  BIO_set_mem_eof_return(t->in_, -1);  // empty: "want more", not EOF
  SSL_set_bio(t->ssl_, t->in_, t->out_);
  SSL_set_connect_state(t->ssl_);
  return t;
}

TlsStream::~TlsStream() {
  if (ssl_ != nullptr) SSL_free(ssl_);  // frees in_ and out_
  if (ctx_ != nullptr) SSL_CTX_free(ctx_);
}

void TlsStream::drain_locked(std::string& out) {
  char buf[16 * 1024];
  int n;
  while ((n = BIO_read(out_, buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(n));
}

Result<bool> TlsStream::handshake(std::string_view in, std::string& out) {
  const std::lock_guard lk(mu_);
  if (!in.empty()) BIO_write(in_, in.data(), static_cast<int>(in.size()));
  const int r = SSL_do_handshake(ssl_);
  drain_locked(out);
  if (r == 1) return true;
  const int e = SSL_get_error(ssl_, r);
  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) return false;
  std::string why = ssl_errors("TLS handshake failed");
  const long v = SSL_get_verify_result(ssl_);
  if (v != X509_V_OK) why += std::string(" (") + X509_verify_cert_error_string(v) + ")";
  return Status{Code::kUnreachable, why};
}

bool TlsStream::encrypt(std::string_view plain, std::string& out) {
  const std::lock_guard lk(mu_);
  while (!plain.empty()) {
    const int n = SSL_write(ssl_, plain.data(), static_cast<int>(std::min<std::size_t>(plain.size(), 1 << 20)));
    if (n <= 0) {
      ERR_clear_error();
      return false;
    }
    plain.remove_prefix(static_cast<std::size_t>(n));
  }
  drain_locked(out);
  return true;
}

bool TlsStream::decrypt(std::string_view cipher, std::string& plain, bool& closed, std::string& error) {
  const std::lock_guard lk(mu_);
  if (!cipher.empty()) BIO_write(in_, cipher.data(), static_cast<int>(cipher.size()));
  char buf[16 * 1024];
  for (;;) {
    const int n = SSL_read(ssl_, buf, sizeof buf);
    if (n > 0) {
      plain.append(buf, static_cast<std::size_t>(n));
      continue;
    }
    const int e = SSL_get_error(ssl_, n);
    if (e == SSL_ERROR_WANT_READ) return true;
    if (e == SSL_ERROR_ZERO_RETURN) {
      closed = true;
      return true;
    }
    error = ssl_errors("TLS");
    return false;
  }
}

bool TlsStream::has_pending() const {
  const std::lock_guard lk(mu_);
  return BIO_ctrl_pending(out_) > 0;
}

void TlsStream::take_pending(std::string& out) {
  const std::lock_guard lk(mu_);
  drain_locked(out);
}

}  // namespace lockd::client
