// The descriptor budget: every client connection holds one descriptor, so
// the process's RLIMIT_NOFILE must cover --max-connections plus what the
// daemon itself keeps open (listeners, peers, WAL, admin connections).
//
// Like redis at start-up: a soft limit below the need is raised toward it,
// up to the hard limit; what still falls short is reported, not fatal
// (the listener copes with running out: net/listener.h).
#pragma once

#include <cstdint>

namespace lockd::daemon {

// Descriptors kept for the daemon's own use on top of the client budget:
// listeners, the WAL segment, snapshot files, the data dir's LOCK, admin
// connections, the log.
constexpr std::uint64_t kReservedFds = 64;
// Per cluster peer: one connection each way.
constexpr std::uint64_t kFdsPerPeer = 2;

struct FdBudget {
  std::uint64_t needed = 0;  // max_connections + peers * kFdsPerPeer + kReservedFds
  std::uint64_t before = 0;  // soft limit found
  std::uint64_t after = 0;   // soft limit now (after raising it)
  std::uint64_t hard = 0;    // hard limit
  bool raised() const { return after > before; }
  bool short_of_need() const { return after < needed; }
};

// Raises the soft RLIMIT_NOFILE toward max_connections + peers *
// kFdsPerPeer + kReservedFds (never above the hard limit, never lowering
// it) and says what it found. `peers`: the other cluster members (0 in
// single mode).
FdBudget ensure_fd_budget(std::uint64_t max_connections, std::uint64_t peers = 0);

}  // namespace lockd::daemon
