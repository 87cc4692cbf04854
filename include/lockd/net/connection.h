// Connection: one non-blocking TCP socket on the reactor, with an output
// buffer that is written once per loop turn. Optionally TLS: a TlsSession
// (tls/tls_session.h) sits between the socket and the buffers, so a turn
// still makes one recv and one send per connection.
//
// Replies are appended to out() and the connection is marked pending; the
// owner flushes every pending connection after the turn's callbacks
// (STYLE §6). A write event is armed only after a partial write. Reading
// pauses while too much output is unsent (back-pressure on a client that
// does not read), and a connection past its hard output cap is closed.
// A connection is never freed inside its own callback: close() only marks
// it, and the owner reaps it after the turn (STYLE §7).
//
// Runs on the reactor thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "lockd/net/handshake_worker.h"
#include "lockd/tls/tls_session.h"

struct event;
struct event_base;

namespace lockd::net {

class Connection;

// What the owner of connections is told. Called on the reactor thread,
// never re-entrantly.
class ConnectionHandler {
 public:
  virtual ~ConnectionHandler() = default;
  // Bytes arrived. The view is valid for the call only.
  virtual void on_bytes(Connection& conn, std::string_view bytes) = 0;
  // The connection needs a flush at the end of this turn (called once per
  // turn at most, when it first gets unsent output).
  virtual void on_pending_write(Connection& conn) = 0;
  // The connection is closed (peer, error or ours) and must be reaped
  // after this turn. Called once.
  virtual void on_closed(Connection& conn) = 0;
  // TLS only: the handshake completed (before the first on_bytes()); the
  // session's verified peer certificate is readable now.
  virtual void on_tls_established(Connection& /*conn*/) {}
  // TLS only: the handshake or a record failed (`error` says why); the
  // connection closes after this with nothing more read.
  virtual void on_tls_failed(Connection& /*conn*/, std::string_view /*error*/) {}
};

// Output-buffer bounds of a connection.
struct OutputLimits {
  // Stop reading requests while this much output is unsent.
  std::size_t pause_reading_bytes = 256 * 1024;
  // Close the connection when unsent output exceeds this (only reachable
  // through replies to its waiting acquires, since reading is paused first).
  std::size_t max_bytes = 4 * 1024 * 1024;
};

class Connection {
 public:
  // `tls` null: plaintext. Otherwise every byte goes through the session,
  // and a handshake that fails closes the connection with nothing read.
  Connection(event_base* base, int fd, std::uint64_t id, ConnectionHandler& handler,
             OutputLimits limits, std::unique_ptr<tls::TlsSession> tls = nullptr);
  ~Connection();  // frees its events and closes the socket
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  std::uint64_t id() const { return id_; }
  bool closed() const { return closed_; }
  // Whether the peer has sent a byte yet.
  bool heard() const { return heard_; }

  // Buffer to append replies to; call reply_queued() after appending.
  std::string& out() { return out_; }
  // Marks the connection pending for this turn's flush and enforces the
  // output caps. Returns false if the connection was closed for overflow.
  bool reply_queued();
  // Writes what it can. Arms the write event if the socket is full.
  void flush();
  // Unsent output bytes.
  std::size_t unsent_bytes() const { return out_.size() - out_off_ + wire_.size() - wire_off_; }
  // The TLS session, or null on a plaintext connection (and while a
  // handshake step runs on the HandshakeWorker).
  const tls::TlsSession* tls() const { return tls_.get(); }
  // TLS: the handshake is not done yet.
  bool handshaking() const { return in_worker_ || (tls_ != nullptr && !tls_->handshake_done()); }
  // TLS: run the handshake's steps on `worker` (not owned, outlives the
  // connection) instead of on the loop.
  void offload_handshake(HandshakeWorker* worker) { worker_ = worker; }
  // HandshakeWorker, on the loop: a handshake step came back.
  void handshake_result(HandshakeWorker::Step step);

  // Stops reading for good and closes once the output is flushed.
  void close_after_flush();
  // Closes now, dropping unsent output.
  void close();

  // How many times this connection overflowed its output cap (0 or 1).
  bool overflowed() const { return overflowed_; }

 private:
  static void on_read_event(int fd, short what, void* arg);
  static void on_write_event(int fd, short what, void* arg);
  void handle_readable();
  void set_reading(bool on);
  // TLS: ciphertext in; plaintext to the handler. False when the connection closed.
  bool tls_input(std::string_view cipher);
  // TLS: what a step of the session produced (here or on the worker).
  bool tls_output(tls::TlsSession::Status st, bool was_established);
  void settle_priority();
  // Sends `buf` from `off`; false if the connection closed.
  bool send_from(std::string& buf, std::size_t& off);
  void schedule_flush();

  int fd_;
  std::uint64_t id_;
  ConnectionHandler& handler_;
  OutputLimits limits_;
  event* read_ev_ = nullptr;
  event* write_ev_ = nullptr;
  std::string out_;
  std::size_t out_off_ = 0;  // bytes of out_ already written
  std::unique_ptr<tls::TlsSession> tls_;  // null: plaintext
  std::string wire_;          // TLS: ciphertext not yet sent
  std::size_t wire_off_ = 0;  // bytes of wire_ already sent
  std::string plain_in_;      // TLS: scratch for decrypted input
  bool pending_ = false;     // registered for this turn's flush
  bool reading_ = false;
  bool write_armed_ = false;
  bool handshake_low_ = false;  // TLS on a base with priorities: reads at kPriorityHandshake still
  HandshakeWorker* worker_ = nullptr;  // TLS handshake steps run there (null: here)
  bool in_worker_ = false;             // tls_ is on the worker (ticket_)
  std::uint64_t ticket_ = 0;
  bool heard_ = false;       // a byte arrived
  bool closing_ = false;     // close once drained; read no more
  bool closed_ = false;
  bool overflowed_ = false;
};

}  // namespace lockd::net
