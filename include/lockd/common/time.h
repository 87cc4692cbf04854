// Time as the pure cores see it: plain numbers passed in by the caller.
//
// Nothing in src/locks or src/raft reads a clock; the reactor reads the
// monotonic clock once per loop turn and passes it down. Tests pass any
// value they like.
#pragma once

#include <cstdint>

namespace lockd {

// Nanoseconds on the monotonic clock of the process that owns the value.
// Never compared across processes or restarts.
using TimeNs = std::int64_t;

constexpr TimeNs kNsPerMs = 1'000'000;

constexpr TimeNs ms_to_ns(std::uint64_t ms) { return static_cast<TimeNs>(ms) * kNsPerMs; }

}  // namespace lockd
