// Listener: a listening TCP socket on the reactor that hands each accepted,
// non-blocking socket to a callback.
#pragma once

#include <functional>
#include <string>

#include "lockd/net/address.h"

struct evconnlistener;
struct event_base;

namespace lockd::net {

class Listener {
 public:
  // Called with an accepted non-blocking fd; the callee owns it.
  using AcceptFn = std::function<void(int fd)>;

  Listener(event_base* base, AcceptFn fn);
  ~Listener();
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  // Binds and listens. On failure returns false with `error` set.
  bool listen(const Endpoint& ep, std::string& error);
  // The bound address (port 0 resolved).
  Endpoint bound() const;
  // Stops accepting and closes the socket.
  void close();

 private:
  static void on_accept(evconnlistener*, int fd, struct sockaddr*, int, void* arg);

  event_base* base_;
  AcceptFn fn_;
  evconnlistener* lev_ = nullptr;
};

}  // namespace lockd::net
