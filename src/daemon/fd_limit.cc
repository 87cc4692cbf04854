// The descriptor budget; see fd_limit.h.
#include "lockd/daemon/fd_limit.h"

#include <sys/resource.h>

#include <algorithm>

namespace lockd::daemon {

FdBudget ensure_fd_budget(std::uint64_t max_connections, std::uint64_t peers) {
  FdBudget b;
  b.needed = max_connections + peers * kFdsPerPeer + kReservedFds;
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return b;
  b.before = b.after = rl.rlim_cur;
  b.hard = rl.rlim_max;
  if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < b.needed) {
    rlimit want = rl;
    want.rlim_cur = rl.rlim_max == RLIM_INFINITY ? b.needed : std::min<rlim_t>(b.needed, rl.rlim_max);
    if (setrlimit(RLIMIT_NOFILE, &want) == 0) b.after = want.rlim_cur;
  }
  return b;
}

}  // namespace lockd::daemon
