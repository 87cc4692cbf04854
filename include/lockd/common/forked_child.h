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

namespace lockd {

// Call first thing in the child. `parent` is the parent's pid as read before
// fork(); `keep_fd` is one descriptor the child still needs (-1: none).
// Standard input, output and error stay open.
inline void forked_child_detach(pid_t parent, int keep_fd = -1) {
  // Die with the parent: a half-written snapshot of a dead node is useless.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(9);  // the parent died before prctl
  if (keep_fd > 3) ::close_range(3, static_cast<unsigned>(keep_fd) - 1, 0);
  ::close_range(keep_fd >= 3 ? static_cast<unsigned>(keep_fd) + 1 : 3, UINT_MAX, 0);
}

}  // namespace lockd
