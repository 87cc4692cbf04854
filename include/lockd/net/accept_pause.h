// AcceptPause: what a listening socket does when accept() fails for want of
// resources (EMFILE, ENFILE, ENOBUFS, ENOMEM).
//
// The pending connection stays in the backlog and the socket stays
// readable, so libevent would retry at once: spinning, and — without an
// error callback — logging a line per try. Instead the listener is
// disabled for kPause, waiting clients stay in the backlog, and one
// warning is logged at most every kWarnEvery. Works for any evconnlistener,
// including the one evhttp owns (whose callback argument is evhttp's, so
// the pause is found by listener, not by argument).
//
// Runs on the reactor thread.
#pragma once

#include <cstdint>
#include <string>

#include "lockd/common/time.h"
#include "lockd/net/timer.h"

struct evconnlistener;
struct event_base;

namespace lockd::net {

class AcceptPause {
 public:
  static constexpr TimeNs kPause = 100 * kNsPerMs;
  static constexpr TimeNs kWarnEvery = 10'000 * kNsPerMs;

  // `what` names the listener in the warning ("client", "raft", "admin").
  AcceptPause(event_base* base, std::string what);
  ~AcceptPause();
  AcceptPause(const AcceptPause&) = delete;
  AcceptPause& operator=(const AcceptPause&) = delete;

  // Handles `lev`'s accept errors from now on (one listener per pause).
  void attach(evconnlistener* lev);
  // Stops: the listener is about to be freed.
  void detach();
  // Whether the listener is paused now (a pause re-enables it when it ends).
  bool paused() const { return resume_.armed(); }
  // Times accept() failed and the listener paused.
  std::uint64_t pauses() const { return pauses_; }

 private:
  static void on_error(evconnlistener* lev, void* arg);
  void pause(int err);

  std::string what_;
  evconnlistener* lev_ = nullptr;
  Timer resume_;
  std::uint64_t pauses_ = 0;
  TimeNs last_warning_ns_ = 0;
};

}  // namespace lockd::net
