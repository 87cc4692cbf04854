// What a forked worker child (a snapshot written or exported from a copy
// of the table) does first, so that it never outlives or blocks its parent.
//
// The child inherits every descriptor of the parent: the client, raft and
// admin listening sockets and the data dir's lock. Left open, a child still
// writing a large snapshot when the parent is killed with SIGKILL keeps the
// ports bound and the data dir locked, and the restarted node fails with
// "Address already in use" (or exit 2 on the lock) until the child ends.
#pragma once

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <climits>
#include <utility>

namespace lockd {

// Call first thing in the child. `parent` is the parent's pid as read before
// fork(); `keep_fd` and `keep_fd2` are descriptors the child still needs
// (-1: none). Standard input, output and error stay open.
inline void forked_child_detach(pid_t parent, int keep_fd = -1, int keep_fd2 = -1) {
  // Die with the parent: a half-written snapshot of a dead node is useless.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(9);  // the parent died before prctl
  int keep[2] = {keep_fd < 3 ? -1 : keep_fd, keep_fd2 < 3 ? -1 : keep_fd2};
  if (keep[0] > keep[1]) std::swap(keep[0], keep[1]);  // ascending; -1 first
  unsigned from = 3;
  for (const int k : keep) {
    if (k < 0 || static_cast<unsigned>(k) < from) continue;
    if (static_cast<unsigned>(k) > from) ::close_range(from, static_cast<unsigned>(k) - 1, 0);
    from = static_cast<unsigned>(k) + 1;
  }
  ::close_range(from, UINT_MAX, 0);
}

}  // namespace lockd
