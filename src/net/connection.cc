#include "lockd/net/connection.h"

#include <event2/event.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "lockd/common/check.h"

namespace lockd::net {

namespace {

// Bytes read per readable event: bounds the work one client gets per turn
// (STYLE §6, memcached's reqs_per_event); the rest waits for the next turn.
constexpr std::size_t kReadChunkBytes = 16 * 1024;
// Once the written prefix of the buffer is this large, drop it.
constexpr std::size_t kCompactBytes = 64 * 1024;

}  // namespace

Connection::Connection(event_base* base, int fd, std::uint64_t id, ConnectionHandler& handler,
                       OutputLimits limits)
    : fd_(fd), id_(id), handler_(handler), limits_(limits) {
  read_ev_ = event_new(base, fd, EV_READ | EV_PERSIST, &Connection::on_read_event, this);
  write_ev_ = event_new(base, fd, EV_WRITE | EV_PERSIST, &Connection::on_write_event, this);
  LOCKD_CHECK(read_ev_ != nullptr && write_ev_ != nullptr);
  set_reading(true);
}

Connection::~Connection() {
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

void Connection::handle_readable() {
  if (closed_ || closing_) return;
  char buf[kReadChunkBytes];
  const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
  if (n > 0) {
    handler_.on_bytes(*this, std::string_view(buf, static_cast<std::size_t>(n)));
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

void Connection::flush() {
  pending_ = false;
  if (closed_) return;
  while (out_off_ < out_.size()) {
    const ssize_t n =
        ::send(fd_, out_.data() + out_off_, out_.size() - out_off_, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      out_off_ += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!write_armed_) {
        write_armed_ = true;
        event_add(write_ev_, nullptr);
      }
      if (out_off_ >= kCompactBytes) {
        out_.erase(0, out_off_);
        out_off_ = 0;
      }
      return;
    }
    close();  // the peer is gone
    return;
  }
  out_.clear();
  out_off_ = 0;
  if (write_armed_) {
    write_armed_ = false;
    event_del(write_ev_);
  }
  if (closing_) {
    close();
    return;
  }
  set_reading(true);
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
