#include "lockd/net/listener.h"

#include <event2/listener.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace lockd::net {

namespace {

constexpr int kBacklog = 4096;

void no_delay(int listening_fd) {
  const int one = 1;
  setsockopt(listening_fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

}  // namespace

Listener::Listener(event_base* base, AcceptFn fn, std::string what)
    : base_(base), fn_(std::move(fn)), pause_(base, std::move(what)), yield_(base, [this] {
        accepted_in_turn_ = 0;
        if (lev_ != nullptr && !pause_.paused()) evconnlistener_enable(lev_);
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
  pause_.attach(lev_);
  no_delay(evconnlistener_get_fd(lev_));
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
  pause_.attach(lev_);
  no_delay(fd);
  return true;
}

int Listener::fd() const { return lev_ == nullptr ? -1 : evconnlistener_get_fd(lev_); }

Endpoint Listener::bound() const {
  return lev_ == nullptr ? Endpoint{} : local_endpoint(evconnlistener_get_fd(lev_));
}

void Listener::close() {
  yield_.cancel();
  pause_.detach();
  if (lev_ != nullptr) {
    evconnlistener_free(lev_);
    lev_ = nullptr;
  }
}

void Listener::on_accept(evconnlistener*, int fd, struct sockaddr* peer, int peer_len, void* arg) {
  // evconnlistener hands out non-blocking sockets; TCP_NODELAY came with
  // the listening socket's options (no_delay()).
  auto* self = static_cast<Listener*>(arg);
  self->fn_(fd, peer, peer_len);
  // The callback may have closed the listener (a shutdown): then lev_ is gone.
  if (self->lev_ != nullptr && ++self->accepted_in_turn_ >= kAcceptsPerTurn) self->yield();
}

void Listener::yield() {
  // evconnlistener checks, after each callback, whether it was disabled,
  // and stops accepting if so. A zero-delay timer is not ready before the
  // loop polls again, so this turn ends (its replies go out), and the next
  // one runs it with every event that became ready meanwhile (the sockets
  // wait in the backlog; the listening socket stays readable).
  evconnlistener_disable(lev_);
  yield_.arm_after(0);
}

}  // namespace lockd::net
