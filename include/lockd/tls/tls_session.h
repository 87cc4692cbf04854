// TlsSession: one TLS connection's state machine over in-memory buffers.
//
// The session never touches a socket: the owner reads ciphertext from its
// socket (one recv per loop turn, as for plaintext), hands it to
// on_input(), gets the plaintext back; it gives plaintext to write() and
// sends what take_output() returns (one send per loop turn). So TLS keeps
// the reactor's property of one read and one write per connection per turn,
// and the same code serves the client port, the raft port and clients.
//
// (Kernel TLS, SSL_OP_ENABLE_KTLS, needs OpenSSL to own the socket; see
// docs/security.md for why lockd does not use it.)
//
// Not thread-safe; one owner.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "lockd/tls/peer_certificate.h"
#include "lockd/tls/tls_context.h"

struct ssl_st;

namespace lockd::tls {

class TlsSession {
 public:
  // What an input or write did to the session.
  enum class Status {
    kOk,      // go on (maybe with plaintext or output produced)
    kClosed,  // the peer sent close_notify: no more input will come
    kError,   // the handshake failed or a record was bad; error() says why; close the connection
  };

  // A session that accepts a handshake (server side).
  static std::unique_ptr<TlsSession> accept(const TlsContext& ctx);
  // A session that dials: queues the ClientHello at once (take_output()).
  // `expected_name`, when not empty, must be named by the server's
  // certificate (SAN DNS or CN), and is sent as SNI when it is a host name.
  // `san_only` (a member's name, protocol.md §11a): a SAN DNS entry equal to
  // it, never the CN, never a wildcard.
  static std::unique_ptr<TlsSession> connect(const TlsContext& ctx, std::string_view expected_name,
                                             bool san_only = false);
  ~TlsSession();
  TlsSession(const TlsSession&) = delete;
  TlsSession& operator=(const TlsSession&) = delete;

  // Ciphertext read from the wire. Drives the handshake and appends every
  // plaintext byte now readable to `plain`. Handshake replies, alerts and
  // tickets may be queued as output: check has_output() afterwards.
  Status on_input(std::string_view cipher, std::string& plain);
  // Plaintext to send. Before the handshake is done it is held and sent
  // when it completes.
  Status write(std::string_view plain);
  // Appends the ciphertext to send to `wire` and forgets it.
  void take_output(std::string& wire);
  bool has_output() const;

  bool handshake_done() const { return handshake_done_; }
  // The peer's verified certificate (after the handshake).
  const std::optional<PeerCertificate>& peer_certificate() const { return peer_; }
  // The negotiated protocol, e.g. "TLSv1.3" ("" before the handshake).
  std::string protocol() const;
  const std::string& error() const { return error_; }

 // The ciphertext both ways between the caller and OpenSSL (tls_session.cc).
  struct Pipe;

 private:
  explicit TlsSession(const TlsContext& ctx);
  Status drive_handshake();
  Status read_input(std::string& plain);
  Status fail(std::string_view what);

  std::unique_ptr<Pipe> pipe_;
  ssl_st* ssl_ = nullptr;
  std::string held_plain_;  // written before the handshake completed
  std::optional<PeerCertificate> peer_;
  std::string error_;
  bool handshake_done_ = false;
  bool closed_ = false;
};

}  // namespace lockd::tls
