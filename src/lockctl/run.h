// `lockctl run KEY [--owner O] [--lease MS] [--wait MS] [--shared [--limit N]] -- CMD ARGS...`:
// holds a lock while a command runs (flock(1), `consul lock`, `etcdctl
// lock` for lockd). Kept in its own file, apart from the other commands.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "commands.h"

namespace lockd::lockctl {

struct RunOptions {
  std::string key;
  std::optional<std::string> owner;  // default: lockctl-run@HOST:PID
  std::uint64_t lease_ms = 30'000;   // kept alive every lease/3 while the command runs
  std::uint64_t wait_ms = 0;         // how long to wait for the lock
  bool shared = false;               // `S` (v1.2): a read lock or a semaphore permit
  std::uint32_t limit = 0;           // with `shared`: the key's limit (0: no cap)
  std::vector<std::string> command;  // program and arguments
};

// Acquires, runs the command with LOCKD_TOKEN/LOCKD_KEY/LOCKD_OWNER in its
// environment, keeps the lease alive, forwards signals sent to lockctl,
// releases when the command exits. Returns the command's exit status
// (128+N if killed by signal N); 1 with a line on stderr if the lock was
// not acquired or was lost mid-run (the command then gets SIGTERM, and
// SIGKILL after kLostKillGraceMs); 2 for usage errors; 3 if lockd cannot
// be reached.
int cmd_run(const Globals& g, const RunOptions& options);

// How long a command may take to exit after SIGTERM (lock lost) before
// it gets SIGKILL.
constexpr int kLostKillGraceMs = 10'000;

}  // namespace lockd::lockctl
