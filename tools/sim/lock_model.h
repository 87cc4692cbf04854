// LockModel: the lock service's contract as a tiny reference model, the
// simulator's oracle for the replicated lock layer.
//
// Every replica applies the same committed commands to its LockTable and
// the simulator checks that they agree. Agreement is not correctness: a bug
// in LockTable or in apply_lock_command is shared by every replica, so all
// agree and all are wrong. This model is written from
// /work/shared/spec/protocol.md §5-§9 (and §6a, Keep) alone — plain maps and a deque, no
// indexes, no deadline heap, nothing shared with LockTable — so it can be
// read in one sitting and trusted. The simulator feeds it each committed
// command once, in log order, and compares the reply, the token, who is
// handed the key (FIFO), every holder's expiry and every queue with what
// the replicas did (docs/raft.md §5, invariant "lock oracle").
//
// Time: a command applies at max(its leader's now_ns, the latest applied
// now_ns) so a command stamped by a deposed leader never moves the clock
// back (docs/raft.md §3). Times are the cluster's replicated clock.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "lockd/cluster/lock_command.h"
#include "lockd/common/time.h"

namespace lockd::sim {

class LockModel {
 public:
  // One queued acquire, in arrival order.
  struct Waiter {
    std::uint64_t id = 0;
    std::uint64_t client = 0;
    std::string owner;
    std::uint64_t lease_ms = 0;
    TimeNs wait_deadline_ns = 0;
  };
  // A registered key: it always has a holder, whose lease may have ended.
  struct Key {
    std::string owner;
    std::uint64_t token = 0;
    TimeNs expires_ns = 0;
    std::deque<Waiter> queue;
  };

  // Applies one decoded command and returns its canonical outcome: the
  // reply to the caller, then one "+grant token/owner/key/waiter/client" or
  // "+timeout ..." per reply owed to a waiting client, in order.
  std::string apply(const cluster::LockCommand& c);

  const std::map<std::string, Key>& keys() const { return keys_; }
  std::uint64_t next_token() const { return next_token_; }

 private:
  // Gives `key` to its front waiter (FIFO, §9), or deletes it (§6).
  void hand_off_or_delete(const std::string& key, TimeNs now, std::string& out);
  std::uint64_t grant(Key& k, const std::string& owner, std::uint64_t lease_ms, TimeNs now);

  std::map<std::string, Key> keys_;
  std::uint64_t next_token_ = 1;  // the simulator's tables start at token 1
  TimeNs clock_ns_ = 0;           // latest applied now (time never runs back)
};

}  // namespace lockd::sim
