#include "lockd/tls/tls_context.h"

#include <openssl/err.h>
#include <openssl/ssl.h>

namespace lockd::tls {

std::string openssl_errors(std::string_view fallback) {
  std::string out;
  while (const unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? std::string(fallback) : out;
}

namespace {

// Builds a fresh SSL_CTX from `o`'s files, or returns null with `error`.
SSL_CTX* build(const TlsOptions& o, std::string& error) {
  ERR_clear_error();
  SSL_CTX* ctx = SSL_CTX_new(o.role == TlsRole::kServer ? TLS_server_method() : TLS_client_method());
  if (ctx == nullptr) {
    error = "TLS: " + openssl_errors("SSL_CTX_new failed");
    return nullptr;
  }
  auto fail = [&](const std::string& what) {
    error = what + ": " + openssl_errors("failed");
    SSL_CTX_free(ctx);
    return nullptr;
  };
  // TLS 1.2 at least (protocol.md §11); 1.3 is preferred by OpenSSL's
  // negotiation whenever both sides have it.
  if (SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1) return fail("TLS: min version");
  SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
  // The session writes into its own buffer (a BIO) and is retried with the same
  // buffer only by its own logic; let the buffer move between calls.
  SSL_CTX_set_mode(ctx, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  if (o.role == TlsRole::kServer && (o.cert_file.empty() || o.key_file.empty())) {
    error = "TLS: a listening port needs --tls-cert and --tls-key";
    SSL_CTX_free(ctx);
    return nullptr;
  }
  if (!o.cert_file.empty()) {
    if (SSL_CTX_use_certificate_chain_file(ctx, o.cert_file.c_str()) != 1) {
      return fail("TLS certificate " + o.cert_file);
    }
    if (o.key_file.empty()) {
      error = "TLS: a certificate needs its key";
      SSL_CTX_free(ctx);
      return nullptr;
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, o.key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
      return fail("TLS key " + o.key_file);
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
      return fail("TLS key " + o.key_file + " does not match " + o.cert_file);
    }
  }
  if (!o.ca_file.empty()) {
    if (SSL_CTX_load_verify_locations(ctx, o.ca_file.c_str(), nullptr) != 1) {
      return fail("TLS CA " + o.ca_file);
    }
    if (o.role == TlsRole::kServer) {
      // The CA names sent in the CertificateRequest, so a client with
      // several certificates picks the right one.
      if (STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(o.ca_file.c_str())) {
        SSL_CTX_set_client_CA_list(ctx, names);
      }
    }
  } else if (o.role == TlsRole::kClient) {
    SSL_CTX_set_default_verify_paths(ctx);
  }
  if (o.role == TlsRole::kServer && o.peer != PeerCertPolicy::kNone && o.ca_file.empty()) {
    error = "TLS: checking client certificates needs --tls-ca";
    SSL_CTX_free(ctx);
    return nullptr;
  }
  int mode = SSL_VERIFY_NONE;
  if (o.role == TlsRole::kClient) {
    // A client always checks the server (against ca_file or the system).
    mode = SSL_VERIFY_PEER;
  } else if (o.peer == PeerCertPolicy::kOptional) {
    mode = SSL_VERIFY_PEER;
  } else if (o.peer == PeerCertPolicy::kRequired) {
    mode = SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
  }
  SSL_CTX_set_verify(ctx, mode, nullptr);
  ERR_clear_error();
  return ctx;
}

}  // namespace

std::unique_ptr<TlsContext> TlsContext::create(const TlsOptions& options, std::string& error) {
  std::unique_ptr<TlsContext> c(new TlsContext(options));
  c->ctx_ = build(options, error);
  if (c->ctx_ == nullptr) return nullptr;
  return c;
}

TlsContext::~TlsContext() {
  SSL_CTX_free(staged_);
  SSL_CTX_free(ctx_);
}

bool TlsContext::reload(std::string& error) {
  if (!stage_reload(error)) return false;
  commit_reload();
  return true;
}

bool TlsContext::stage_reload(std::string& error) {
  drop_staged();
  staged_ = build(options_, error);
  return staged_ != nullptr;
}

void TlsContext::commit_reload() {
  if (staged_ == nullptr) return;
  // Sessions made from the old context hold their own reference to it.
  SSL_CTX_free(ctx_);
  ctx_ = staged_;
  staged_ = nullptr;
  ++reloads_;
}

void TlsContext::drop_staged() {
  SSL_CTX_free(staged_);
  staged_ = nullptr;
}

}  // namespace lockd::tls
