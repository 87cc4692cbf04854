// The only places lockd reads clocks. Everything below the reactor gets
// time passed in.
#pragma once

#include <ctime>

#include "lockd/common/time.h"

namespace lockd::net {

// Monotonic nanoseconds: leases, waits, timers.
inline TimeNs monotonic_now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<TimeNs>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// Wall-clock nanoseconds since the Unix epoch: only to seed fencing tokens
// (see docs/architecture.md, "Tokens across restarts").
inline TimeNs realtime_now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<TimeNs>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace lockd::net
