#include "lockd/net/listener.h"

#include <event2/listener.h>
#include <event2/util.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstring>

#include "lockd/net/clock.h"

namespace lockd::net {

namespace {
constexpr int kBacklog = 4096;
}

Listener::Listener(event_base* base, AcceptFn fn)
    : base_(base), fn_(std::move(fn)), resume_(base, [this] {
        if (lev_ != nullptr) evconnlistener_enable(lev_);
      }) {}

Listener::~Listener() { close(); }

bool Listener::listen(const Endpoint& ep, std::string& error) {
  sockaddr_storage ss{};
  socklen_t len = 0;
  if (!resolve(ep, ss, len, error)) return false;
  lev_ = evconnlistener_new_bind(
      base_, &Listener::on_accept, this,
      LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC, kBacklog,
      reinterpret_cast<sockaddr*>(&ss), static_cast<int>(len));
  if (lev_ == nullptr) {
    error = "cannot listen on " + ep.to_string() + ": " + std::strerror(errno);
    return false;
  }
  evconnlistener_set_error_cb(lev_, &Listener::on_error);
  return true;
}

bool Listener::listen_on_fd(int fd, std::string& error) {
  lev_ = evconnlistener_new(base_, &Listener::on_accept, this, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC,
                            0, fd);
  if (lev_ == nullptr) {
    error = std::string("cannot watch listening socket: ") + std::strerror(errno);
    ::close(fd);
    return false;
  }
  evconnlistener_set_error_cb(lev_, &Listener::on_error);
  return true;
}

Endpoint Listener::bound() const {
  return lev_ == nullptr ? Endpoint{} : local_endpoint(evconnlistener_get_fd(lev_));
}

void Listener::close() {
  resume_.cancel();
  if (lev_ != nullptr) {
    evconnlistener_free(lev_);
    lev_ = nullptr;
  }
}

void Listener::on_accept(evconnlistener*, int fd, struct sockaddr*, int, void* arg) {
  // evconnlistener hands out non-blocking sockets. Replies are small and
  // batched per turn, so Nagle would only add latency.
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  static_cast<Listener*>(arg)->fn_(fd);
}

void Listener::on_error(evconnlistener* lev, void* arg) {
  // libevent calls this only for errors that are not retriable at once
  // (EINTR, EAGAIN and ECONNABORTED are handled inside it).
  const int err = EVUTIL_SOCKET_ERROR();
  auto* self = static_cast<Listener*>(arg);
  evconnlistener_disable(lev);
  ++self->accept_pauses_;
  // One line per pause would be ten a second while descriptors stay short.
  const TimeNs now = monotonic_now_ns();
  if (self->last_warning_ns_ == 0 || now - self->last_warning_ns_ >= kAcceptWarnEvery) {
    spdlog::warn("accept on {} failed: {}; pausing accepts for {} ms each time ({} pauses so far; "
                 "raise the descriptor limit, ulimit -n / LimitNOFILE, or lower --max-connections)",
                 self->bound().to_string(), std::strerror(err), kAcceptPause / kNsPerMs,
                 self->accept_pauses_);
    self->last_warning_ns_ = now;
  }
  self->resume_.arm_after(kAcceptPause);
}

}  // namespace lockd::net
