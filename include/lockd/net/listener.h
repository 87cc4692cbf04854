// Listener: a listening TCP socket on the reactor that hands each accepted,
// non-blocking socket to a callback.
//
// When accept() fails for want of resources (EMFILE, ENFILE, ENOBUFS,
// ENOMEM) the pending connection stays in the backlog and the socket stays
// readable: retrying at once would spin the loop. The listener pauses
// instead (kAcceptPause), logs one warning per pause, and counts it;
// waiting clients are accepted when it resumes and descriptors are free.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "lockd/common/time.h"
#include "lockd/net/address.h"
#include "lockd/net/timer.h"

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
  // Watches a socket that is already listening (owned from now on, closed
  // on failure too). On failure returns false with `error` set.
  bool listen_on_fd(int fd, std::string& error);
  // The bound address (port 0 resolved).
  Endpoint bound() const;
  // Stops accepting and closes the socket.
  void close();
  // Times accept() failed for want of descriptors or memory (each one a
  // pause of kAcceptPause).
  std::uint64_t accept_pauses() const { return accept_pauses_; }

  static constexpr TimeNs kAcceptPause = 100 * kNsPerMs;
  static constexpr TimeNs kAcceptWarnEvery = 10'000 * kNsPerMs;

 private:
  static void on_accept(evconnlistener*, int fd, struct sockaddr*, int, void* arg);
  static void on_error(evconnlistener*, void* arg);

  event_base* base_;
  AcceptFn fn_;
  evconnlistener* lev_ = nullptr;
  Timer resume_;  // ends a pause
  std::uint64_t accept_pauses_ = 0;
  TimeNs last_warning_ns_ = 0;
};

}  // namespace lockd::net
