#include "lockd/tls/tls_session.h"

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "lockd/common/check.h"

namespace lockd::tls {

namespace {

// Plaintext decrypted per SSL_read call: a whole record's worth (TLS
// records carry at most 16 KiB of plaintext), so one call takes one record.
constexpr int kPlainChunkBytes = 16 * 1024;

// Where SSL_read decrypts to before the plaintext is appended to the
// caller's string: one buffer per thread, reused by every session, so a
// read neither grows (and zero-fills) the caller's string by a whole
// record nor costs a session 16 KiB it keeps.
char* plain_scratch() {
  thread_local char buf[kPlainChunkBytes];
  return buf;
}

// OpenSSL's SSL_get_error() needs the thread's error queue empty before
// each call. Clearing it every time walks all its slots (~2% of a TLS
// server's CPU under load), so clear it only when something is in it.
void clear_errors_if_any() {
  if (ERR_peek_error() != 0) ERR_clear_error();
}

bool is_ip_literal(const std::string& s) {
  unsigned char buf[16];
  return inet_pton(AF_INET, s.c_str(), buf) == 1 || inet_pton(AF_INET6, s.c_str(), buf) == 1;
}

SSL* new_ssl(const TlsContext& ctx) {
  SSL* ssl = SSL_new(ctx.native());
  LOCKD_CHECK(ssl != nullptr);
  BIO* rbio = BIO_new(BIO_s_mem());
  BIO* wbio = BIO_new(BIO_s_mem());
  LOCKD_CHECK(rbio != nullptr && wbio != nullptr);
  // An empty read BIO means "no more yet" (WANT_READ), not EOF.
  BIO_set_mem_eof_return(rbio, -1);
  SSL_set_bio(ssl, rbio, wbio);
  return ssl;
}

}  // namespace

TlsSession::TlsSession(ssl_st* ssl) : ssl_(ssl) {}

TlsSession::~TlsSession() { SSL_free(ssl_); }

std::unique_ptr<TlsSession> TlsSession::accept(const TlsContext& ctx) {
  std::unique_ptr<TlsSession> s(new TlsSession(new_ssl(ctx)));
  SSL_set_accept_state(s->ssl_);
  return s;
}

std::unique_ptr<TlsSession> TlsSession::connect(const TlsContext& ctx,
                                                std::string_view expected_name) {
  std::unique_ptr<TlsSession> s(new TlsSession(new_ssl(ctx)));
  SSL_set_connect_state(s->ssl_);
  if (!expected_name.empty()) {
    const std::string name(expected_name);
    X509_VERIFY_PARAM* param = SSL_get0_param(s->ssl_);
    if (is_ip_literal(name)) {
      X509_VERIFY_PARAM_set1_ip_asc(param, name.c_str());
    } else {
      // SNI (SSL_set_tlsext_host_name is a macro with a C cast).
      SSL_ctrl(s->ssl_, SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name,
               const_cast<char*>(name.c_str()));
      SSL_set1_host(s->ssl_, name.c_str());
    }
  }
  s->drive_handshake();  // queues the ClientHello
  return s;
}

TlsSession::Status TlsSession::fail(std::string_view what) {
  if (error_.empty()) error_ = openssl_errors(what);
  ERR_clear_error();
  return Status::kError;
}

TlsSession::Status TlsSession::drive_handshake() {
  clear_errors_if_any();
  const int r = SSL_do_handshake(ssl_);
  if (r == 1) {
    handshake_done_ = true;
    peer_ = verified_peer_certificate(ssl_);
    if (!held_plain_.empty()) {
      std::string held;
      held.swap(held_plain_);
      return write(held);
    }
    return Status::kOk;
  }
  const int e = SSL_get_error(ssl_, r);
  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) return Status::kOk;
  if (SSL_get_verify_result(ssl_) != X509_V_OK) {
    error_ = std::string("certificate verify failed: ") +
             X509_verify_cert_error_string(SSL_get_verify_result(ssl_));
  }
  return fail("TLS handshake failed");
}

TlsSession::Status TlsSession::on_input(std::string_view cipher, std::string& plain) {
  if (closed_) return Status::kClosed;
  if (!cipher.empty()) {
    const int n = BIO_write(SSL_get_rbio(ssl_), cipher.data(), static_cast<int>(cipher.size()));
    LOCKD_CHECK(n == static_cast<int>(cipher.size()));  // memory BIOs grow
  }
  if (!handshake_done_) {
    if (drive_handshake() == Status::kError) return Status::kError;
    if (!handshake_done_) return Status::kOk;
  }
  // One SSL_read per record while ciphertext is buffered (in the BIO) or
  // plaintext is (in the session). A record cut short by the read stays in
  // the session, and the next input completes it; a last call that could
  // only say "want read" is not made.
  BIO* rbio = SSL_get_rbio(ssl_);
  char* const scratch = plain_scratch();
  while (BIO_ctrl_pending(rbio) > 0 || SSL_pending(ssl_) > 0) {
    clear_errors_if_any();
    const int n = SSL_read(ssl_, scratch, kPlainChunkBytes);
    if (n > 0) {
      plain.append(scratch, static_cast<std::size_t>(n));
      continue;
    }
    const int e = SSL_get_error(ssl_, n);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) return Status::kOk;
    if (e == SSL_ERROR_ZERO_RETURN) {
      closed_ = true;
      return Status::kClosed;
    }
    return fail("TLS read failed");
  }
  return Status::kOk;
}

TlsSession::Status TlsSession::write(std::string_view plain) {
  if (plain.empty()) return Status::kOk;
  if (!handshake_done_) {
    held_plain_.append(plain);
    return Status::kOk;
  }
  clear_errors_if_any();
  // A memory BIO takes everything, so SSL_write writes it all at once.
  std::size_t written = 0;
  while (written < plain.size()) {
    std::size_t n = 0;
    if (SSL_write_ex(ssl_, plain.data() + written, plain.size() - written, &n) != 1) {
      return fail("TLS write failed");
    }
    written += n;
  }
  return Status::kOk;
}

void TlsSession::take_output(std::string& wire) {
  BIO* w = SSL_get_wbio(ssl_);
  const std::size_t pending = BIO_ctrl_pending(w);
  if (pending == 0) return;
  const std::size_t at = wire.size();
  wire.resize(at + pending);
  const int n = BIO_read(w, wire.data() + at, static_cast<int>(pending));
  LOCKD_CHECK(n == static_cast<int>(pending));
}

bool TlsSession::has_output() const { return BIO_ctrl_pending(SSL_get_wbio(ssl_)) > 0; }

std::string TlsSession::protocol() const {
  return handshake_done_ ? SSL_get_version(ssl_) : "";
}

}  // namespace lockd::tls
