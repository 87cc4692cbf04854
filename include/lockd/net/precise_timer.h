// PreciseTimer: a one-shot timer that fires within microseconds of its
// moment, for deadlines a client can see (a lease's end, a wait's end, the
// lost notice `X`).
//
// Why not a libevent timer: libevent 2.1 keeps its own time with
// CLOCK_MONOTONIC_COARSE, which moves in scheduler ticks (4 ms at HZ=250,
// and steps of 8 ms were measured here), so a timer fires up to a tick or
// two late: `X` measured 5-8 ms after the lease's end at p99, a hand-off to
// a waiter as late. EVENT_BASE_FLAG_PRECISE_TIMER would fix every timer,
// but makes libevent call timerfd_settime on every loop turn (+5% CPU per
// request at pipeline 1). This is a timerfd of its own, set only when the
// moment changes.
//
// The moment is given with the `now` it was computed against and armed as
// a delay (so a faked clock, libfaketime in the chaos runs, scales it as it
// scales every other wait). Runs on the reactor thread.
#pragma once

#include <functional>

#include "lockd/common/time.h"

struct event;
struct event_base;

namespace lockd::net {

class PreciseTimer {
 public:
  PreciseTimer(event_base* base, std::function<void()> fn);
  ~PreciseTimer();
  PreciseTimer(const PreciseTimer&) = delete;
  PreciseTimer& operator=(const PreciseTimer&) = delete;

  // Fires once at `at_ns` (now_ns: the monotonic time it is measured
  // against; a moment already past fires at the next loop turn). Replaces
  // any earlier arming.
  void arm_at(TimeNs at_ns, TimeNs now_ns);
  void cancel();
  bool armed() const { return armed_; }

 private:
  static void on_event(int fd, short, void* arg);

  int fd_ = -1;
  event* ev_ = nullptr;
  std::function<void()> fn_;
  bool armed_ = false;
};

}  // namespace lockd::net
