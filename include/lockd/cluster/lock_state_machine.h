// LockStateMachine: the replicated lock table, as every replica applies it
// from the Raft log. Pure: no clock, socket or file.
//
// It wraps a LockTable with the three things replication adds:
// - Tokens from the log. The first token granted by the entry at index i
//   is token_base + i, or the table's next token if that is already
//   higher (an entry that hands a key to a run of shared waiters grants
//   several, §5b), so every replica grants the same tokens and they only
//   grow. The base is the wall clock
//   in ns of the first leader, carried by its LeaderStart entry: a cluster's
//   tokens start above every single-mode token handed out before (§10).
//   Nothing is granted before the base is set.
// - Table time. Commands carry their leader's monotonic clock reading
//   (`now_ns`), meaningless on any other node. The table runs on "table
//   time" = now_ns + offset, where the offset is set by each leader's first
//   entry (LeaderStart) so that the new leader's now maps to the latest
//   table time applied before it (`floor`), i.e. the latest old-leader
//   reading the new leader has seen. Table time never goes back, and a
//   lease is extended by the leader change's duration (the gap between the
//   old leader's last stamped entry and the new leader's first), never
//   ended early (§8). Only commands from the term of the latest LeaderStart
//   advance the clock: anything else applies at the floor.
// - Waiter ids from the log: an acquire's waiter id is its entry index.
// - The cluster id: fixed by the first LeaderStart applied (a mix of its
//   token base, the first leader's wall clock in ns), so every replica of
//   any version agrees on it without a new entry kind, and kept in
//   snapshots. A data dir from before 1.2 gets it from its token base.
//   A restored group (start_restored_group) gets a new one from its
//   backup file, and its first LeaderStart raises the token base.
// - Only the log decides (§10, v1.2): the caps entries apply with
//   (max keys, waiters per key, waiters) are replicated configuration set
//   by kConfig entries and kept in snapshots, never this node's flags;
//   before any kConfig they are locks::Limits{} (the documented defaults)
//   on every replica. An entry that
//   does not decode stops the machine (undecodable()): nothing after it
//   is applied, and the node stops with one line.
//
// Runs on the node's loop thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "lockd/cluster/lock_command.h"
#include "lockd/common/time.h"
#include "lockd/locks/lock_table.h"
#include "lockd/raft/types.h"

namespace lockd::cluster {

// What applying one entry did; the leader turns it into replies.
struct EntryResult {
  bool command = false;  // a lock command (false: a Raft no-op or undecodable bytes)
  LockCommand cmd;       // when `command`
  TimeNs table_now_ns = 0;  // the table time it applied at
  bool skipped = false;  // no token base yet: changed nothing
  // The entry does not decode (an encoding version this binary does not
  // apply, or bad bytes): nothing changed, applied() did not move, and the
  // machine applies nothing more. The node stops (cluster_node.h).
  bool undecodable = false;
  std::uint16_t version = 0;  // the encoding version the entry claims
  locks::AcquireOutcome acquire = locks::AcquireOutcome::kHeld;  // kAcquire, kAcquireShared
  locks::Token granted = 0;  // kAcquire, kAcquireShared: the token granted to the caller
  bool changed = false;  // kRelease released, kKeep kept, kExpire expired, kCancelWaiter cancelled
  std::size_t waiters_dropped = 0;  // kLeaderStart
  bool rebased = false;  // kLeaderStart: the first of a restored group moved the token base
  std::vector<locks::Delivery> deliveries;  // replies owed to waiting clients
};

class LockStateMachine {
 public:
  // `local` is this node's own flags: only compared with the cluster's caps
  // (local_differs()), never applied.
  explicit LockStateMachine(locks::Limits local);

  // Applies the entry at applied() + 1. The result is valid until the next call.
  const EntryResult& apply(const raft::Entry& e);

  // Snapshot bytes: a small header (version, applied index, token base,
  // clock offset, floor, clock term) as the lock table snapshot's app
  // header (locks/lock_table_snapshot.h), then the table.
  std::string snapshot() const;
  // The same bytes for a single-mode table (a backup, cluster/backup_file.h):
  // as if a cluster had applied it at index 1, with the token base just
  // below its next token, so a cluster started from it grants above every
  // token the single lockd handed out. `now_ns` is the table's clock now
  // (the restored cluster's table time starts there). Requires
  // table.next_token() - 1 within [kMinTokenBase, kMaxTokenBase].
  static std::string single_mode_snapshot(const locks::LockTable& table, TimeNs now_ns);
  // Replaces everything with a snapshot taken at `index` (untrusted bytes:
  // false with a one-line `error`, and the machine unchanged, when they do
  // not decode).
  bool restore(std::string_view bytes, raft::Index index, std::string& error);
  // Whether restore() would take these bytes, leaving this machine as it
  // is: the full decode and every check (limits, tokens, waiter ids no
  // later than `index`) into a scratch machine. Raft asks before it stores
  // a snapshot from a peer (raft::Config::check_snapshot).
  bool check_snapshot(std::string_view bytes, raft::Index index, std::string& error) const;
  // The same decode and checks, keeping the scratch machine: null (with
  // `error`) when restore() would refuse the bytes. adopt() then takes it
  // in place of a second restore() of the same bytes — for a 1 M-lock
  // snapshot that halves what a catching-up follower spends installing it.
  std::unique_ptr<LockStateMachine> decode_snapshot(std::string_view bytes, raft::Index index,
                                                    std::string& error) const;
  // Replaces everything with a machine decode_snapshot() returned (from
  // a machine with the same local limits).
  void adopt(LockStateMachine&& decoded);
  // Makes the restored state (restore() of a backup) a new group's
  // (cluster/restore.h): a new cluster id derived from `seed` (the same on
  // every member seeded from the same file, never the old id), kept in
  // every later snapshot; and the first LeaderStart applied from now on
  // raises the token base to its leader's wall clock (as a new group's
  // first LeaderStart sets it), so tokens granted by the old group after
  // the backup are never granted again.
  void start_restored_group(std::uint64_t seed);
  bool rebase_pending() const { return rebase_pending_; }

  // The leader's clock <-> table time, with the offset of the latest
  // LeaderStart applied (only meaningful on the node that proposed it).
  TimeNs to_table_ns(TimeNs leader_now_ns) const { return leader_now_ns + offset_ns_; }
  TimeNs to_leader_ns(TimeNs table_ns) const { return table_ns - offset_ns_; }

  const locks::LockTable& table() const { return *table_; }
  // Who the table tells of changed keys (the watch index, v1.3). The table
  // is replaced whole by restore() and adopt(): call again after those.
  void set_observer(locks::KeyObserver* o) { table_->set_observer(o); }
  raft::Index applied() const { return applied_; }
  std::uint64_t token_base() const { return token_base_; }
  TimeNs offset_ns() const { return offset_ns_; }
  TimeNs floor_ns() const { return floor_ns_; }
  raft::Term clock_term() const { return clock_term_; }
  // Set once an entry did not decode: its index (0: never). The machine
  // refuses every later entry.
  raft::Index undecodable() const { return undecodable_; }
  // Replicated configuration (kConfig).
  std::uint64_t cluster_id() const { return cluster_id_; }
  const locks::Limits& caps() const { return caps_; }
  std::uint64_t token_floor() const { return token_floor_; }
  const locks::Limits& local_limits() const { return local_; }
  // The smallest token the next grant can carry: past base + applied, and
  // past every token already granted (one entry may grant several, §5b).
  std::uint64_t next_token_lower_bound() const {
    return std::max<std::uint64_t>(token_base_ + applied_ + 1, table_->next_token());
  }
  // The largest token granted by any entry applied so far, or that any
  // entry applied so far could have granted (0: no base yet, none granted).
  // What a backup's token floor is (backup_file.h).
  std::uint64_t largest_token_granted() const {
    return token_base_ == 0 ? 0 : next_token_lower_bound() - 1;
  }

 private:
  locks::Limits local_;                      // this node's flags: never applied
  locks::Limits caps_;                       // the cluster's (kConfig), what entries apply with
  std::uint64_t cluster_id_ = 0;             // 0: no LeaderStart yet
  std::uint64_t token_floor_ = 0;            // the latest kConfig's
  bool config_applied_ = false;              // a kConfig applied (or restored): snapshots use header 2
  bool rebase_pending_ = false;              // restored: the next LeaderStart raises the token base
  std::unique_ptr<locks::LockTable> table_;  // replaced whole by restore()
  raft::Index applied_ = 0;
  std::uint64_t token_base_ = 0;  // 0: no leader has started the cluster yet
  TimeNs offset_ns_ = 0;          // table time = leader clock + offset
  TimeNs floor_ns_ = 0;           // latest table time applied
  raft::Term clock_term_ = 0;     // term of the LeaderStart that set the offset
  raft::Index undecodable_ = 0;   // the entry that did not decode; 0: none
  EntryResult result_;
};

}  // namespace lockd::cluster
