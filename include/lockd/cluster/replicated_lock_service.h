// ReplicatedLockService: the cluster-mode LockService (§8, §10).
//
// On the leader, every request becomes a LockCommand stamped with the
// leader's monotonic clock and proposed to Raft; the reply is sent when the
// entry at the proposal's (index, term) is applied. The leader also
// proposes, on its own clock: Expire(key, token) when a lease runs out (its
// min-heap of table deadlines), a CancelWaiter when a wait runs out (`T` is
// sent only if that cancel commits with the waiter still queued), a
// CancelWaiter without reply when a waiting client disconnects, a
// LeaderStart as the first entry of its term, and a Clock entry while idle
// with locks held (so the next leader's LeaderStart knows a recent reading).
//
// A follower answers `M <leader client addr> <echo>` or `E no_leader <echo>`.
// On losing leadership every request not yet answered — proposals and
// queued waiters — gets `E indeterminate <echo>`.
//
// Pure apart from the replies: no clock reads, no timers, no sockets. The
// driver (ClusterNode) calls apply()/sync() around Raft's Ready cycle and
// on_time() when next_deadline() passes; unit tests drive it with a
// one-node Raft and a fake ClientReplies.
//
// Runs on the node's loop thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <queue>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "lockd/cluster/lock_state_machine.h"
#include "lockd/raft/raft.h"
#include "lockd/server/lock_service.h"

namespace lockd::cluster {

// How often an idle leader with locks stamps its clock into the log. A
// leader change extends leases by up to this much plus the change itself.
constexpr TimeNs kDefaultClockIntervalNs = 250 * kNsPerMs;
// Proposals made by one on_time() call (expiries, wait cancels); the rest
// wait for the next turn so timers cannot starve client requests.
constexpr std::size_t kMaxTimedProposalsPerTurn = 512;
// After back-pressure (too many uncommitted entries) a timed proposal is
// retried this much later.
constexpr TimeNs kRetryDelayNs = 5 * kNsPerMs;

struct ReplicatedServiceOptions {
  locks::Limits limits;
  std::map<raft::NodeId, std::string> client_addrs;  // every member's client host:port
  TimeNs clock_interval_ns = kDefaultClockIntervalNs;
  // The wall clock in ns, read once per leadership for the token base
  // (injected so tests choose it).
  std::function<TimeNs()> wall_clock_ns;
  // Does every member apply log entry encoding `v`? (ClusterNode: from the
  // peer handshakes.) Unset: only this binary's range counts (tests).
  std::function<bool(std::uint16_t v)> cluster_supports;
  // --token-floor: every token granted is above it (0: none).
  std::uint64_t token_floor = 0;
};

// Counters for logs and metrics; only grow.
struct ReplicatedServiceStats {
  std::uint64_t proposals = 0;            // every accepted propose()
  std::uint64_t proposals_refused = 0;    // back-pressure or not leader
  std::uint64_t indeterminate = 0;        // `E indeterminate` replies
  std::uint64_t expiries_proposed = 0;
  std::uint64_t wait_timeouts_proposed = 0;
  std::uint64_t leaderships = 0;          // LeaderStart entries proposed
  std::uint64_t orphans_released = 0;     // grants to a client that had left, released
  std::uint64_t clock_retries = 0;        // clock entries refused by back-pressure
  std::uint16_t entry_version = 0;        // the encoding of this node's latest proposal (gauge)
};

class ReplicatedLockService final : public server::LockService {
 public:
  ReplicatedLockService(raft::Raft& raft, ReplicatedServiceOptions options);

  // --- server::LockService ---
  void attach(server::ClientReplies& replies) override { replies_ = &replies; }
  void attach_watches(server::WatchHub& hub, server::PushOutput& push) override;
  // `X` notices sent (v1.3, §5c).
  std::uint64_t lost_notices() const override { return lost_notices_; }
  bool handle(locks::ClientId client, const proto::Request& req, TimeNs now_ns, std::string& out,
              server::ServerStats& stats) override;
  void client_closed(locks::ClientId client) override;
  const locks::LockTable& table() const override { return sm_.table(); }

  // --- the driver's side ---
  // Applies one committed entry (Ready cycle) and answers whoever waits for it.
  // Never proposes: Raft is between ready() and advance().
  void apply(const raft::Entry& e);
  // Replaces the state machine with a snapshot (a follower behind the
  // leader's log, or a restart). False with `error` when the bytes are bad.
  // `decoded`, when given, is these bytes already decoded (and checked) by
  // LockStateMachine::decode_snapshot: adopted instead of decoding again.
  bool install(const raft::Snapshot& snapshot, std::string& error,
               std::unique_ptr<LockStateMachine> decoded = nullptr);
  // The state machine's snapshot bytes (run in SnapshotWriter's child).
  std::string snapshot() const { return sm_.snapshot(); }
  // Outside the Ready cycle, after it: notices leadership gained or lost,
  // proposes what apply() or client_closed() deferred.
  void sync(TimeNs now_ns);
  // Proposes expiries, wait cancels and clock entries due at `now_ns`.
  void on_time(TimeNs now_ns);
  // Every member's client host:port, for `M` redirects: set again when the
  // replicated configuration changes (membership, issue 20).
  void set_client_addrs(std::map<raft::NodeId, std::string> addrs) {
    options_.client_addrs = std::move(addrs);
  }
  // When on_time() next has work (leader only), on the local monotonic clock.
  std::optional<TimeNs> next_deadline(TimeNs now_ns) const;
  // May the leader propose an entry of encoding version `v`: does this
  // binary and every member (its last handshake) apply it? New entry kinds
  // and encodings are proposed only when this says yes.
  bool cluster_supports(std::uint16_t v) const;
  // Stops taking requests (graceful stop): new ones get `E no_leader`.
  void stop_accepting() { accepting_ = false; }

  // --- views ---
  const LockStateMachine& state_machine() const { return sm_; }
  // Leader of the current term, with its LeaderStart applied.
  bool serving() const { return leader_ready_; }
  std::size_t pending_count() const { return pending_.size(); }
  const ReplicatedServiceStats& stats() const { return stats_; }
  // The leader's lease heap (entries, stale ones included) and whether a
  // walk of the table still adds to it (start_lease_scan()).
  std::size_t leases_watched() const { return lease_heap_.size(); }
  bool lease_scan_active() const { return lease_scan_active_; }

 private:
  // What an accepted proposal is waiting for.
  enum class PendingKind : std::uint8_t {
    kAcquire,        // a client's `A` or `S` (`shared`)
    kRelease,        // a client's `R`
    kKeep,           // a client's `K`
    kTimeoutCancel,  // a waiter's wait ran out: `T` if the cancel takes effect
    kInternal,       // no reply: LeaderStart, Clock, Expire, disconnect cancel
  };
  struct Pending {
    raft::Term term = 0;
    PendingKind kind = PendingKind::kInternal;
    locks::ClientId client = 0;
    std::string owner;  // kAcquire
    std::string key;    // kAcquire, kRelease, kKeep
    locks::Token token = 0;  // kRelease, kKeep
    TimeNs wait_deadline_ns = 0;  // kAcquire: local clock
    bool client_gone = false;     // kAcquire: cancel it if it queues
    bool shared = false;          // kAcquire: an `S`
  };
  // A queued acquire proposed by this leader.
  struct Waiter {
    locks::ClientId client = 0;
    std::string owner;
    std::string key;
    TimeNs wait_deadline_ns = 0;  // local clock
    bool cancel_proposed = false;
    bool shared = false;          // an `S`: its `T` is counted as such
  };
  struct TimedWaiter {
    TimeNs at_ns;  // local clock
    locks::WaiterId waiter;
    bool operator>(const TimedWaiter& o) const { return at_ns > o.at_ns; }
  };
  // 56 bytes, one per holder: the key as the table stores it (a
  // std::string here cost 32 bytes plus a 32-byte heap block for any key
  // over 15 bytes, most real keys; docs/benchmarks/membership.md "Memory at 1 M locks").
  struct TimedLease {
    TimeNs at_table_ns;
    locks::Token token;
    locks::KeyString key;
    bool operator>(const TimedLease& o) const { return at_table_ns > o.at_table_ns; }
  };

  bool is_leader() const;
  raft::ProposeResult propose(LockCommand c, Pending p);
  // Proposes the cancels of to_cancel_ (sync()): together in one
  // kCancelWaiters entry when every member applies version 5.
  void propose_cancels(TimeNs now_ns);
  void lose_leadership();
  // Pushes `X token key` to the connection this node granted `token` to.
  void send_lost_notice(locks::Token token, std::string_view key);
  void answer_pending(const Pending& p, const EntryResult& r, raft::Index index);
  void deliver(const locks::Delivery& d);
  // A grant nobody will hear of (its client left): queue its release.
  void release_orphan(locks::Token token, std::string_view key);
  // Watches the lease of the holder of `key` carrying `token` (one heap
  // entry per holder: shared holders expire one by one).
  void watch_lease(std::string_view key, locks::Token token);
  // Whether the kAcquireShared entry kind may be proposed (every member
  // can apply it); `S` is refused before any proposal otherwise.
  bool shared_entries_allowed() const;
  // The lease heap from the table, in bounded slices: start_lease_scan()
  // empties it and starts a walk of the table's buckets; lease_scan_step()
  // (on the service timer, due at once while a walk is under way)
  // adds the holders of at most kLeaseScanBucketsPerStep buckets. A new
  // leader of a 1 M-lock table rebuilt it in one go and stalled its loop
  // past the election timeout, so the group kept changing leaders. A lease
  // not yet reached expires late (never early); one seen twice (a rehash
  // restarts the walk, a grant watched meanwhile) is proposed once and its
  // duplicate skipped, as for any stale entry.
  void start_lease_scan();
  void lease_scan_step();
  void compact_heaps();
  void reply_indeterminate(locks::ClientId client, const proto::Request& echo);
  // Proposes a kConfig when the cluster's configuration (caps, token
  // floor) is not this leader's and every member applies entry version 3.
  void maybe_propose_config(TimeNs now_ns);
  // Proposes a Config entry with our caps and floor; false: not proposed.
  bool propose_config(TimeNs now_ns, bool floor_above);
  // Whether our --token-floor is above the log's: see floor_pending_.
  bool floor_config_due() const;
  // The encoding proposals use: the newest every member applies.
  std::uint16_t entry_version() const;

  raft::Raft& raft_;
  ReplicatedServiceOptions options_;
  bool shared_refusal_logged_ = false;  // "S refused: a member is older" said once
  LockStateMachine sm_;
  server::ClientReplies* replies_ = nullptr;
  server::WatchHub* watches_ = nullptr;  // v1.3: told of changed keys and revs
  server::PushOutput* push_ = nullptr;
  // `X` (§5c): the connection each grant this node answered went to, by
  // token; erased on release, on expiry (after its notice) and cleared
  // when leadership is lost (the client's keeper learns it from `N`).
  std::unordered_map<locks::Token, locks::ClientId> granted_by_;
  std::uint64_t lost_notices_ = 0;
  bool accepting_ = true;
  raft::Term leader_term_ = 0;      // term we lead and have noticed; 0: not leading
  bool leader_start_proposed_ = false;
  raft::Index leader_start_index_ = 0;
  bool leader_ready_ = false;       // our LeaderStart is applied: offset is ours
  bool floor_pending_ = false;      // our --token-floor's Config still to propose (nothing else first)
  raft::Index config_index_ = 0;    // our kConfig in flight; 0: none
  TimeNs last_proposal_ns_ = 0;     // for the idle clock entry
  TimeNs clock_retry_at_ns_ = 0;    // a refused clock entry is retried no sooner
  std::map<raft::Index, Pending> pending_;  // bounded by Raft's max_uncommitted_entries
  std::unordered_map<locks::WaiterId, Waiter> waiters_;  // bounded by the table's waiter caps
  std::unordered_map<locks::ClientId, std::unordered_set<locks::WaiterId>> client_waiters_;
  std::vector<locks::WaiterId> to_cancel_;  // disconnects and gone clients, proposed in sync()
  // Grants whose client left before it heard of them (a hand-off to a
  // waiter, or an acquire still committing): released through the log in
  // sync(), so that the key does not sit idle for the whole lease.
  struct Orphan {
    locks::Token token;
    std::string key;
  };
  std::vector<Orphan> to_release_;
  std::priority_queue<TimedWaiter, std::vector<TimedWaiter>, std::greater<>> wait_heap_;
  std::priority_queue<TimedLease, std::vector<TimedLease>, std::greater<>> lease_heap_;
  bool lease_scan_active_ = false;
  std::size_t lease_scan_bucket_ = 0;   // the next bucket to walk
  std::size_t lease_scan_buckets_ = 0;  // the table's bucket count when the walk (re)started
  ReplicatedServiceStats stats_;
};

}  // namespace lockd::cluster
