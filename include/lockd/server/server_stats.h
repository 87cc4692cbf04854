// Counters of the client-facing server, read by the admin API and metrics.
// Only ever grow. Updated on the reactor thread.
#pragma once

#include <array>
#include <cstdint>

#include "lockd/common/latency_histogram.h"
#include "lockd/common/recent_keys.h"

namespace lockd::server {

// The first letter of every reply line, as a counter index; `N` is split
// by the verb it answers so metrics can count results per verb.
enum class ReplyKind : std::uint8_t {
  kAcquired,     // `A`
  kHeld,         // `T`
  kBusy,         // `B`
  kReleased,     // `R`
  kNotReleased,  // `N` to an `R`
  kKept,         // `K` (v1.1)
  kNotKept,      // `N` to a `K`
  kError,        // `E`
  kMoved,        // `M` (cluster)
  kHello,        // `H` (v1.2): authenticated
  kShared,       // `S` (v1.2): acquired shared
  kSharedHeld,   // `T` to an `S`
  kSharedBusy,   // `B` to an `S`
  kWatching,     // `W` (v1.3): watching, the state now
  kWatchBusy,    // `B` to a `W`: a watch cap is full
  kUnwatched,    // `U` (v1.3)
  kCount,        // number of kinds; not a reply
};

struct ServerStats {
  std::uint64_t requests_acquire = 0;  // well-formed `A` lines
  std::uint64_t requests_release = 0;  // well-formed `R` lines
  std::uint64_t requests_keep = 0;     // well-formed `K` lines
  std::uint64_t requests_shared = 0;   // well-formed `S` lines (v1.2)
  std::uint64_t requests_malformed = 0;
  std::uint64_t requests_hello = 0;    // well-formed `H` lines (v1.2)
  std::uint64_t requests_watch = 0;    // well-formed `W` lines (v1.3)
  std::uint64_t requests_unwatch = 0;  // well-formed `U` lines (v1.3)
  std::uint64_t requests_refused = 0;  // `E unauthenticated <echo>` or `E forbidden <echo>`
  std::uint64_t auth_failures = 0;     // `H` with a credential not accepted (then closed)
  std::array<std::uint64_t, static_cast<std::size_t>(ReplyKind::kCount)> replies{};
  std::uint64_t connections_accepted = 0;
  std::uint64_t connections_rejected = 0;  // over --max-connections
  std::uint64_t output_overflows = 0;      // closed for unsent output over the cap
  std::uint64_t lines_too_long = 0;
  std::uint64_t tls_handshake_timeouts = 0;  // closed: no completed handshake in time
  std::uint64_t tls_failures = 0;          // TLS handshakes or records that failed (v1.2)
  // Server-side latency of requests answered at once, from before parsing
  // to the reply queued; a waiting acquire is not observed (its wait is the
  // client's choice).
  LatencyHistogram latency;
  RecentKeys recent_keys;  // keys of the latest well-formed requests

  void count(ReplyKind k) { ++replies[static_cast<std::size_t>(k)]; }
  // The reply kinds of an acquire's outcome, for `A` or `S`.
  static ReplyKind granted(bool shared) { return shared ? ReplyKind::kShared : ReplyKind::kAcquired; }
  static ReplyKind held(bool shared) { return shared ? ReplyKind::kSharedHeld : ReplyKind::kHeld; }
  static ReplyKind busy(bool shared) { return shared ? ReplyKind::kSharedBusy : ReplyKind::kBusy; }
};

}  // namespace lockd::server
