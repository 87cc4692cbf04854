// Listener: a listening TCP socket on the reactor that hands each accepted,
// non-blocking socket to a callback.
//
// When accept() fails for want of descriptors it pauses (accept_pause.h):
// waiting clients are accepted when it resumes and descriptors are free.
//
// After every kAcceptsPerTurn accepts it stops until the loop's next turn, so
// that the turn ends (its replies go out) and the next one serves what
// else is ready before more are accepted: a burst of connections (a flood
// of them, §11a) must not hold a client's reply up behind hundreds of
// accepts. libevent's own listener accepts until the backlog is empty,
// which under a flood measured 100-570 accepts (and as many closes to
// make room) in one callback.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "lockd/net/accept_pause.h"
#include "lockd/net/timer.h"
#include "lockd/net/address.h"

struct evconnlistener;
struct event_base;
struct sockaddr;

namespace lockd::net {

// Accepted sockets have TCP_NODELAY (replies are small and batched per
// turn: Nagle would only add latency), set once on the listening socket:
// Linux copies it, like SO_KEEPALIVE and the TCP_KEEP* values, to each
// socket the listener accepts, which saves a setsockopt per connection.
class Listener {
 public:
  // Called with an accepted non-blocking fd and the peer's address as
  // accept() gave it (no getpeername needed); the callee owns the fd.
  using AcceptFn = std::function<void(int fd, const sockaddr* peer, int peer_len)>;
  // Sockets accepted before the loop's turn ends and other ready events run.
  static constexpr int kAcceptsPerTurn = 4;

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
  // Stops accepting until the loop's next turn (yield_ resumes it).
  void yield();

  event_base* base_;
  AcceptFn fn_;
  evconnlistener* lev_ = nullptr;
  AcceptPause pause_;
  Timer yield_;
  int accepted_in_turn_ = 0;
};

}  // namespace lockd::net
