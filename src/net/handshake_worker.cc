// HandshakeWorker; see handshake_worker.h.
#include "lockd/net/handshake_worker.h"

#include <event2/event.h>
#include <sys/eventfd.h>
#include <pthread.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "lockd/common/check.h"
#include "lockd/net/connection.h"

namespace lockd::net {

HandshakeWorker::HandshakeWorker(event_base* base) {
  notify_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  LOCKD_CHECK(notify_fd_ >= 0);
  notify_ev_ = event_new(base, notify_fd_, EV_READ | EV_PERSIST, &HandshakeWorker::on_notify, this);
  LOCKD_CHECK(notify_ev_ != nullptr && event_add(notify_ev_, nullptr) == 0);
  thread_ = std::thread([this] { run(); });
}

HandshakeWorker::~HandshakeWorker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  thread_.join();
  event_free(notify_ev_);
  ::close(notify_fd_);
}

std::uint64_t HandshakeWorker::submit(Connection& conn, std::unique_ptr<tls::TlsSession> session,
                                      std::string cipher) {
  const std::uint64_t ticket = next_ticket_++;
  waiting_.emplace(ticket, &conn);
  Step s;
  s.ticket = ticket;
  s.session = std::move(session);
  s.cipher = std::move(cipher);
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(std::move(s));
  }
  cv_.notify_one();
  return ticket;
}

void HandshakeWorker::run() {
  // Named, so that `top -H`, `ps -L` and tools/bench/hostile_idle --pin
  // can tell it from the loop.
  ::pthread_setname_np(::pthread_self(), "lockd-tls");
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return stop_ || !jobs_.empty(); });
    if (stop_) return;
    Step s = std::move(jobs_.front());
    jobs_.pop_front();
    lock.unlock();
    s.status = s.session->on_input(s.cipher, s.plain);
    s.session->take_output(s.wire);
    s.cipher.clear();
    lock.lock();
    const bool was_empty = done_.empty();
    done_.push_back(std::move(s));
    if (was_empty) {
      const std::uint64_t one = 1;
      // Cannot fail but for an overflow of 2^64 - 1 unread wake-ups.
      [[maybe_unused]] const ssize_t n = ::write(notify_fd_, &one, sizeof one);
    }
  }
}

void HandshakeWorker::on_notify(int, short, void* arg) { static_cast<HandshakeWorker*>(arg)->deliver(); }

void HandshakeWorker::deliver() {
  std::uint64_t count = 0;
  while (::read(notify_fd_, &count, sizeof count) < 0 && errno == EINTR) {
  }
  std::deque<Step> done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    done.swap(done_);
  }
  for (Step& s : done) {
    const auto it = waiting_.find(s.ticket);
    if (it == waiting_.end()) continue;  // closed meanwhile: the session goes with `done`
    Connection* conn = it->second;
    waiting_.erase(it);
    conn->handshake_result(std::move(s));
  }
}

}  // namespace lockd::net
