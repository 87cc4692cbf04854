// LockModel: the lock service's contract as a tiny reference model, the
// simulator's oracle for the replicated lock layer.
//
// Every replica applies the same committed commands to its LockTable and
// the simulator checks that they agree. Agreement is not correctness: a bug
// in LockTable or in LockStateMachine is shared by every replica, so all
// agree and all are wrong. This model is written from
// /work/shared/spec/protocol.md §5-§9 (and §6a, Keep; §5b, shared holders)
// alone — plain maps and a deque, no indexes, no deadline heap, nothing
// shared with LockTable — so it can be read in one sitting and trusted.
// The simulator feeds it each committed command once, in log order, and
// compares the reply, the token, who is handed the key (FIFO), every
// holder's expiry and every queue with what the replicas did (docs/raft.md
// §5, invariant "lock oracle").
//
// Shared keys (§5b): a key is held exclusively (one `A` holder) or shared
// (one or more `S` holders, each with its own token and lease, at most
// `limit` of them when limit > 0). One FIFO queue of `A` and `S` waiters;
// a hand-off grants from the front for as long as the front can be granted.
//
// Cluster rules (§8, §10), from the spec's words:
// - Tokens: a cluster's tokens start at a base above the wall clock, set by
//   the first leader's first entry (LeaderStart) and never changed after;
//   the entry at index i grants tokens from base + i on (one entry may
//   grant several: a run of readers), and never one granted before.
//   Before any LeaderStart no command can take effect ("skipped").
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
    bool shared = false;      // an `S`
    std::uint16_t limit = 0;  // its limit when shared
  };
  // One holder: the exclusive one, or one of a shared key's.
  struct Holder {
    std::string owner;
    TimeNs expires_ns = 0;
  };
  // A registered key: it always has a holder, whose lease may have ended.
  struct Key {
    bool shared = false;                     // its holders are `S` holders
    std::uint16_t limit = 0;                 // the limit they were granted under
    std::map<std::uint64_t, Holder> holders;  // by token
    std::deque<Waiter> queue;
  };

  // Applies one decoded command and returns its canonical outcome: the
  // reply to the caller, then one "+grant token/owner/key/waiter/client" or
  // "+timeout ..." per reply owed to a waiting client, in order.
  // `index` and `term` are the entry's.
  std::string apply(const cluster::LockCommand& c, std::uint64_t index, std::uint64_t term);

  const std::map<std::string, Key>& keys() const { return keys_; }
  std::uint64_t next_token() const { return next_token_; }
  // The latest replicated time applied (what the last command ran at).
  TimeNs now() const { return clock_ns_; }
  // The limit a key's live shared holders or queued `S` waiters carry
  // (§5b), or -1 when it has none of either (any limit is accepted).
  static int limit_in_force(const Key& k, TimeNs now);
  // What the commands did so far (coverage of §5b in a run).
  std::uint64_t shared_grants() const { return shared_grants_; }
  std::uint64_t shared_runs() const { return shared_runs_; }  // hand-offs of 2+ `S` at once
  std::uint64_t limit_mismatches() const { return limit_mismatches_; }

 private:
  // After a holder left (or the front waiter): grants from the front of the
  // queue while the front can be granted (§5b "Hand-off", FIFO §9), then
  // deletes the key if nobody holds it (§6).
  void hand_off(const std::string& key, TimeNs now, std::string& out);
  std::uint64_t grant(Key& k, const std::string& owner, std::uint64_t lease_ms, bool shared,
                      std::uint16_t limit, TimeNs now);
  static bool has_live(const Key& k, TimeNs now);
  static std::size_t live_count(const Key& k, TimeNs now);
  static void drop_ended(Key& k, TimeNs now);

  std::map<std::string, Key> keys_;
  std::uint64_t next_token_ = 1;  // a fresh table's counter, until the base is known
  std::uint64_t token_base_ = 0;  // 0: no LeaderStart applied yet
  TimeNs clock_ns_ = 0;           // latest replicated time applied (never runs back)
  TimeNs leader_diff_ns_ = 0;     // replicated time = the clock leader's now + this
  std::uint64_t clock_term_ = 0;  // term of the LeaderStart that set leader_diff_ns_
  std::uint64_t shared_grants_ = 0;
  std::uint64_t shared_runs_ = 0;
  std::uint64_t limit_mismatches_ = 0;
};

}  // namespace lockd::sim
