// LockModel: the lock service's contract as a tiny reference model, the
// simulator's oracle for the replicated lock layer.
//
// Every replica applies the same committed commands to its LockTable and
// the simulator checks that they agree. Agreement is not correctness: a bug
// in LockTable or in LockStateMachine is shared by every replica, so all
// agree and all are wrong. This model is written from
// /work/shared/spec/protocol.md §5-§9 (and §6a, Keep) alone — plain maps and a deque, no
// indexes, no deadline heap, nothing shared with LockTable — so it can be
// read in one sitting and trusted. The simulator feeds it each committed
// command once, in log order, and compares the reply, the token, who is
// handed the key (FIFO), every holder's expiry and every queue with what
// the replicas did (docs/raft.md §5, invariant "lock oracle").
//
// Cluster rules (§8, §10), from the spec's words:
// - Tokens: a cluster's tokens start at a base above the wall clock, set by
//   the first leader's first entry (LeaderStart) and never changed after;
//   the entry at index i grants token base + i. Before any LeaderStart no
//   command can take effect ("skipped").
// - Time: each leader's LeaderStart maps its own clock onto the replicated
//   one: its `now` becomes the latest replicated time applied so far (no
//   lease ends early, none gains more than the change took). Commands of
//   that leader's term apply at max(latest, now + that difference);
//   commands of any other term (a deposed leader's, or the new leader's
//   before its LeaderStart) apply at the latest time. Time never runs back.
// - LeaderStart drops every queued waiter (their connections were on the
//   old leader); Clock only moves time.
// - A waiter's id is the index of the entry that queued it.
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
  // `index` and `term` are the entry's.
  std::string apply(const cluster::LockCommand& c, std::uint64_t index, std::uint64_t term);

  const std::map<std::string, Key>& keys() const { return keys_; }
  std::uint64_t next_token() const { return next_token_; }

 private:
  // Gives `key` to its front waiter (FIFO, §9), or deletes it (§6).
  void hand_off_or_delete(const std::string& key, TimeNs now, std::string& out);
  std::uint64_t grant(Key& k, const std::string& owner, std::uint64_t lease_ms, TimeNs now);

  std::map<std::string, Key> keys_;
  std::uint64_t next_token_ = 1;  // a fresh table's counter, until the base is known
  std::uint64_t token_base_ = 0;  // 0: no LeaderStart applied yet
  TimeNs clock_ns_ = 0;           // latest replicated time applied (never runs back)
  TimeNs leader_diff_ns_ = 0;     // replicated time = the clock leader's now + this
  std::uint64_t clock_term_ = 0;  // term of the LeaderStart that set leader_diff_ns_
};

}  // namespace lockd::sim
