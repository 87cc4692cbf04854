// Listener: a listening TCP socket on the reactor that hands each accepted,
// non-blocking socket to a callback.
//
// When accept() fails for want of descriptors it pauses (accept_pause.h):
// waiting clients are accepted when it resumes and descriptors are free.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "lockd/net/accept_pause.h"
#include "lockd/net/address.h"

struct evconnlistener;
struct event_base;

namespace lockd::net {

// Accepted sockets have TCP_NODELAY (replies are small and batched per
// turn: Nagle would only add latency), set once on the listening socket:
// Linux copies it, like SO_KEEPALIVE and the TCP_KEEP* values, to each
// socket the listener accepts, which saves a setsockopt per connection.
class Listener {
 public:
  // Called with an accepted non-blocking fd; the callee owns it.
  using AcceptFn = std::function<void(int fd)>;

  // `what` names it in warnings ("client", "raft").
  Listener(event_base* base, AcceptFn fn, std::string what = "client");
  ~Listener();
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  // Binds and listens. On failure returns false with `error` set.
  bool listen(const Endpoint& ep, std::string& error);
  // Watches a socket that is already listening (owned from now on, closed
  // on failure too). On failure returns false with `error` set.
  bool listen_on_fd(int fd, std::string& error);
  // The bound address (port 0 resolved).
  Endpoint bound() const;
  // The listening socket (-1 before listen()). Options set on it with
  // setsockopt (keepalive) are copied by Linux to every socket it accepts.
  int fd() const;
  // Stops accepting and closes the socket.
  void close();
  // Times accept() failed for want of descriptors or memory (each one a
  // pause of AcceptPause::kPause).
  std::uint64_t accept_pauses() const { return pause_.pauses(); }

 private:
  static void on_accept(evconnlistener*, int fd, struct sockaddr*, int, void* arg);

  event_base* base_;
  AcceptFn fn_;
  evconnlistener* lev_ = nullptr;
  AcceptPause pause_;
};

}  // namespace lockd::net
