// Counters of the client-facing server, read by the admin API and metrics.
// Only ever grow. Updated on the reactor thread.
#pragma once

#include <array>
#include <cstdint>

namespace lockd::server {

// The first letter of every reply line, as a counter index.
enum class ReplyKind : std::uint8_t {
  kAcquired,     // `A`
  kHeld,         // `T`
  kBusy,         // `B`
  kReleased,     // `R`
  kNotReleased,  // `N`
  kError,        // `E`
  kMoved,        // `M` (cluster)
  kCount,        // number of kinds; not a reply
};

struct ServerStats {
  std::uint64_t requests_acquire = 0;  // well-formed `A` lines
  std::uint64_t requests_release = 0;  // well-formed `R` lines
  std::uint64_t requests_malformed = 0;
  std::array<std::uint64_t, static_cast<std::size_t>(ReplyKind::kCount)> replies{};
  std::uint64_t connections_accepted = 0;
  std::uint64_t connections_rejected = 0;  // over --max-connections
  std::uint64_t output_overflows = 0;      // closed for unsent output over the cap
  std::uint64_t lines_too_long = 0;

  void count(ReplyKind k) { ++replies[static_cast<std::size_t>(k)]; }
};

}  // namespace lockd::server
