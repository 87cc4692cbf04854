#include "lockd/net/connection.h"

#include <event2/event.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "lockd/common/check.h"
#include "lockd/net/priority.h"

namespace lockd::net {

namespace {

// Bytes read per readable event: bounds the work one client gets per turn
// (STYLE §6, memcached's reqs_per_event); the rest waits for the next turn.
constexpr std::size_t kReadChunkBytes = 16 * 1024;
// Once the written prefix of the buffer is this large, drop it.
constexpr std::size_t kCompactBytes = 64 * 1024;

}  // namespace

Connection::Connection(event_base* base, int fd, std::uint64_t id, ConnectionHandler& handler,
                       OutputLimits limits, std::unique_ptr<tls::TlsSession> tls)
    : fd_(fd), id_(id), handler_(handler), limits_(limits), tls_(std::move(tls)) {
  read_ev_ = event_new(base, fd, EV_READ | EV_PERSIST, &Connection::on_read_event, this);
  write_ev_ = event_new(base, fd, EV_WRITE | EV_PERSIST, &Connection::on_write_event, this);
  LOCKD_CHECK(read_ev_ != nullptr && write_ev_ != nullptr);
  // A handshake waits for the clients that are in (priority.h).
  handshake_low_ = tls_ != nullptr && has_priorities(base);
  if (handshake_low_) LOCKD_CHECK(event_priority_set(read_ev_, kPriorityHandshake) == 0);
  set_reading(true);
}

Connection::~Connection() {
  if (in_worker_) worker_->forget(ticket_);  // its session is dropped when it comes back
  event_free(read_ev_);
  event_free(write_ev_);
  ::close(fd_);
}

void Connection::set_reading(bool on) {
  if (on == reading_) return;
  reading_ = on;
  if (on) {
    event_add(read_ev_, nullptr);
  } else {
    event_del(read_ev_);
  }
}

void Connection::on_read_event(int, short, void* arg) {
  static_cast<Connection*>(arg)->handle_readable();
}

void Connection::on_write_event(int, short, void* arg) {
  static_cast<Connection*>(arg)->flush();
}

void Connection::settle_priority() {
  // In now: its requests are as urgent as anyone's. libevent refuses while
  // the event is ready to run (a step that came back from the worker):
  // then at its next read, inside its own callback, where it is not.
  if (!handshake_low_ || tls_ == nullptr || !tls_->handshake_done()) return;
  if (event_priority_set(read_ev_, kPriorityNormal) == 0) handshake_low_ = false;
}

void Connection::handle_readable() {
  if (closed_ || closing_) return;
  settle_priority();
  char buf[kReadChunkBytes];
  const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
  if (n > 0) {
    heard_ = true;
    const std::string_view bytes(buf, static_cast<std::size_t>(n));
    if (tls_ != nullptr || in_worker_) {  // TLS (its session maybe on the worker)
      tls_input(bytes);
    } else {
      handler_.on_bytes(*this, bytes);
    }
    return;
  }
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
  // EOF or a socket error. Replies already decided still go out (a client
  // like `printf ... | nc` half-closes and then reads); waiting acquires
  // are cancelled by the owner when the connection closes.
  if (n == 0) {
    close_after_flush();
  } else {
    close();
  }
}

bool Connection::tls_input(std::string_view cipher) {
  if (in_worker_) {
    // Cannot happen: reading pauses while a step is on the worker. Were
    // it to, the bytes are never read as plaintext: the connection goes.
    close();
    return false;
  }
  const bool was_established = tls_->handshake_done();
  if (!was_established && worker_ != nullptr) {
    // Reading waits for the step (the kernel's buffer and TCP's window hold
    // what comes meanwhile): one step at a time, nothing piles up here.
    in_worker_ = true;
    set_reading(false);
    ticket_ = worker_->submit(*this, std::move(tls_), std::string(cipher));
    return true;
  }
  plain_in_.clear();
  const tls::TlsSession::Status st = tls_->on_input(cipher, plain_in_);
  // Handshake messages, alerts, tickets: out with this turn's flush.
  tls_->take_output(wire_);
  return tls_output(st, was_established);
}

void Connection::handshake_result(HandshakeWorker::Step step) {
  in_worker_ = false;
  tls_ = std::move(step.session);
  if (closed_) return;
  if (!closing_ && unsent_bytes() <= limits_.pause_reading_bytes) set_reading(true);
  wire_.append(step.wire);
  plain_in_ = std::move(step.plain);
  if (out_off_ < out_.size()) schedule_flush();  // plaintext queued while it was away
  // Bytes that came while the step ran (the client's Finished, its first
  // requests) wait in the socket: reading resumed above.
  tls_output(step.status, false);
}

bool Connection::tls_output(tls::TlsSession::Status st, bool was_established) {
  if (wire_.size() > wire_off_) schedule_flush();
  if (st == tls::TlsSession::Status::kError) {
    // A plaintext client on a TLS port ends here: nothing it sent was
    // decrypted, so nothing was processed. The alert, if any, goes out.
    handler_.on_tls_failed(*this, tls_->error());
    close_after_flush();
    return false;
  }
  if (!was_established && tls_->handshake_done()) {
    settle_priority();
    handler_.on_tls_established(*this);
    if (closed_ || closing_) return false;
  }
  if (!plain_in_.empty()) handler_.on_bytes(*this, plain_in_);
  if (st == tls::TlsSession::Status::kClosed) close_after_flush();
  return !closed_;
}

void Connection::schedule_flush() {
  if (!pending_ && !closed_) {
    pending_ = true;
    handler_.on_pending_write(*this);
  }
}

bool Connection::reply_queued() {
  if (closed_) return false;
  if (unsent_bytes() == 0) return true;  // e.g. a read that only queued waits
  if (unsent_bytes() > limits_.max_bytes) {
    overflowed_ = true;
    close();
    return false;
  }
  if (unsent_bytes() > limits_.pause_reading_bytes) set_reading(false);
  if (!pending_) {
    pending_ = true;
    handler_.on_pending_write(*this);
  }
  return true;
}

bool Connection::send_from(std::string& buf, std::size_t& off) {
  while (off < buf.size()) {
    const ssize_t n = ::send(fd_, buf.data() + off, buf.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      off += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!write_armed_) {
        write_armed_ = true;
        event_add(write_ev_, nullptr);
      }
      if (off >= kCompactBytes) {
        buf.erase(0, off);
        off = 0;
      }
      return false;
    }
    close();  // the peer is gone
    return false;
  }
  buf.clear();
  off = 0;
  return true;
}

void Connection::flush() {
  pending_ = false;
  if (closed_) return;
  if (in_worker_) {
    // The session is on the worker: send the ciphertext it made so far;
    // plaintext waits for it (never sent in the clear).
    if (!send_from(wire_, wire_off_)) return;
  } else if (tls_) {
    // Encrypt everything queued this turn into one run of records, then
    // one send of the ciphertext.
    if (out_off_ < out_.size()) {
      const auto st = tls_->write(std::string_view(out_).substr(out_off_));
      out_.clear();
      out_off_ = 0;
      if (st == tls::TlsSession::Status::kError) {
        handler_.on_tls_failed(*this, tls_->error());
        close();
        return;
      }
    }
    tls_->take_output(wire_);
    if (!send_from(wire_, wire_off_)) return;
  } else if (!send_from(out_, out_off_)) {
    return;
  }
  if (write_armed_) {
    write_armed_ = false;
    event_del(write_ev_);
  }
  if (closing_) {
    close();
    return;
  }
  if (!in_worker_) set_reading(true);  // paused for a handshake step: its result resumes
}

void Connection::close_after_flush() {
  if (closed_) return;
  closing_ = true;
  set_reading(false);
  if (unsent_bytes() == 0) {
    close();
  } else if (!pending_) {
    pending_ = true;
    handler_.on_pending_write(*this);
  }
}

void Connection::close() {
  if (closed_) return;
  closed_ = true;
  set_reading(false);
  if (write_armed_) {
    write_armed_ = false;
    event_del(write_ev_);
  }
  handler_.on_closed(*this);
}

}  // namespace lockd::net
