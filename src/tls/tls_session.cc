#include "lockd/tls/tls_session.h"

#include <arpa/inet.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <cstring>

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

}  // namespace

// The session's ends of the wire, in place of two memory BIOs: OpenSSL
// reads ciphertext straight from the caller's input (no copy into a BIO
// first) and appends what it writes to `out`, which take_output() hands
// over whole (no copy out of a BIO). BIO_s_mem's growth (a clearing
// realloc) and its BIO_ctrl round trips were ~8% of a TLS server's CPU.
struct TlsSession::Pipe {
  std::string_view in;  // ciphertext not yet read by OpenSSL
  std::string carry;    // `in` kept between two on_input calls (rare)
  std::string out;      // ciphertext written by OpenSSL, not yet taken
};

namespace {

using Pipe = TlsSession::Pipe;

int pipe_read(BIO* b, char* buf, size_t len, size_t* done) {
  Pipe* p = static_cast<Pipe*>(BIO_get_data(b));
  BIO_clear_retry_flags(b);
  if (p->in.empty()) {
    // No more yet (WANT_READ), not EOF.
    BIO_set_retry_read(b);
    *done = 0;
    return 0;
  }
  const std::size_t n = std::min(len, p->in.size());
  std::memcpy(buf, p->in.data(), n);
  p->in.remove_prefix(n);
  *done = n;
  return 1;
}

int pipe_write(BIO* b, const char* buf, size_t len, size_t* done) {
  Pipe* p = static_cast<Pipe*>(BIO_get_data(b));
  BIO_clear_retry_flags(b);
  p->out.append(buf, len);
  *done = len;
  return 1;
}

long pipe_ctrl(BIO* b, int cmd, long /*num*/, void* /*ptr*/) {
  const Pipe* p = static_cast<const Pipe*>(BIO_get_data(b));
  switch (cmd) {
    case BIO_CTRL_FLUSH:
      return 1;
    case BIO_CTRL_PENDING:
      return static_cast<long>(p->in.size());
    case BIO_CTRL_WPENDING:
      return static_cast<long>(p->out.size());
    default:
      return 0;
  }
}

int pipe_create(BIO* b) {
  BIO_set_init(b, 1);
  return 1;
}

const BIO_METHOD* pipe_method() {
  static BIO_METHOD* const method = [] {
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "lockd TLS pipe");
    LOCKD_CHECK(m != nullptr);
    BIO_meth_set_read_ex(m, pipe_read);
    BIO_meth_set_write_ex(m, pipe_write);
    BIO_meth_set_ctrl(m, pipe_ctrl);
    BIO_meth_set_create(m, pipe_create);
    return m;
  }();
  return method;
}

SSL* new_ssl(const TlsContext& ctx, Pipe* pipe) {
  SSL* ssl = SSL_new(ctx.native());
  LOCKD_CHECK(ssl != nullptr);
  BIO* bio = BIO_new(pipe_method());
  LOCKD_CHECK(bio != nullptr);
  BIO_set_data(bio, pipe);
  SSL_set_bio(ssl, bio, bio);  // one BIO both ways, as SSL_set_fd does
  // Read-ahead: one BIO read takes all the input (not a header and then a
  // body per record); the records wait in the session, and each SSL_read
  // decrypts the next one.
  SSL_set_read_ahead(ssl, 1);
  return ssl;
}

}  // namespace

TlsSession::TlsSession(const TlsContext& ctx) : pipe_(std::make_unique<Pipe>()) {
  ssl_ = new_ssl(ctx, pipe_.get());
}

TlsSession::~TlsSession() { SSL_free(ssl_); }

std::unique_ptr<TlsSession> TlsSession::accept(const TlsContext& ctx) {
  std::unique_ptr<TlsSession> s(new TlsSession(ctx));
  SSL_set_accept_state(s->ssl_);
  return s;
}

std::unique_ptr<TlsSession> TlsSession::connect(const TlsContext& ctx,
                                                std::string_view expected_name, bool san_only) {
  std::unique_ptr<TlsSession> s(new TlsSession(ctx));
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
      if (san_only) {
        SSL_set_hostflags(s->ssl_,
                          X509_CHECK_FLAG_NEVER_CHECK_SUBJECT | X509_CHECK_FLAG_NO_WILDCARDS);
      }
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
  Pipe& p = *pipe_;
  if (p.carry.empty()) {
    p.in = cipher;
  } else {
    p.carry.append(cipher);
    p.in = p.carry;
  }
  const Status st = read_input(plain);
  // OpenSSL takes all it is given unless it stopped early (an error, a
  // close_notify, a handshake still waiting): keep the rest for next time.
  if (p.in.empty()) {
    p.carry.clear();
  } else if (p.in.data() >= p.carry.data() && p.in.data() < p.carry.data() + p.carry.size()) {
    p.carry.erase(0, static_cast<std::size_t>(p.in.data() - p.carry.data()));
  } else {
    p.carry.assign(p.in);
  }
  p.in = {};
  return st;
}

TlsSession::Status TlsSession::read_input(std::string& plain) {
  if (!handshake_done_) {
    if (drive_handshake() == Status::kError) return Status::kError;
    if (!handshake_done_) return Status::kOk;
  }
  // SSL_read while ciphertext is unread or held by the session (read-ahead
  // takes it all at once), one record per call; a call that could only say
  // "want read" is made only when a record is cut short.
  char* const scratch = plain_scratch();
  while (!pipe_->in.empty() || SSL_has_pending(ssl_) == 1) {
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
  // The pipe takes everything, so SSL_write writes it all at once.
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
  std::string& out = pipe_->out;
  if (out.empty()) return;
  if (wire.empty()) {
    wire.swap(out);  // both keep their capacity: no copy, no allocation
  } else {
    wire.append(out);
  }
  out.clear();
}

bool TlsSession::has_output() const { return !pipe_->out.empty(); }

std::string TlsSession::protocol() const {
  return handshake_done_ ? SSL_get_version(ssl_) : "";
}

}  // namespace lockd::tls
