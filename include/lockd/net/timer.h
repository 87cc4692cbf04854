// Timer: a libevent timer that calls a function, one-shot or periodic.
// Runs on the reactor thread.
#pragma once

#include <functional>

#include "lockd/common/time.h"

struct event;
struct event_base;

namespace lockd::net {

class Timer {
 public:
  Timer(event_base* base, std::function<void()> fn);
  ~Timer();
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;

  // Fires once after `delay_ns` (negative counts as 0). Replaces any
  // earlier arming.
  void arm_after(TimeNs delay_ns);
  // Fires every `period_ns` until cancelled.
  void arm_every(TimeNs period_ns);
  void cancel();
  bool armed() const { return armed_; }

 private:
  static void on_event(int, short, void* arg);

  event_base* base_;
  event* ev_ = nullptr;
  std::function<void()> fn_;
  bool armed_ = false;
  bool periodic_ = false;
};

}  // namespace lockd::net
