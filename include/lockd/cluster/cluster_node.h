// ClusterNode: one Raft member on the daemon's libevent loop.
//
// Owns the node's storage, the Raft core, the peer transport and the
// replicated lock service, and drives them:
// - a timer ticks the core every heartbeat (--heartbeat-ms is one tick;
//   election_ticks = --election-timeout-ms / --heartbeat-ms);
// - peer messages are stepped in as they arrive;
// - once per loop turn, after_turn() runs the Ready cycle pipelined
//   (raft::start_ready: send, apply what earlier syncs made durable, write
//   the batch to the WAL; its one fdatasync runs on the sync thread while
//   the loop keeps reading; the turn after it ends, complete_ready
//   advances), lets the service notice leadership changes and propose what
//   it deferred, and flushes the transport (one write per peer).
// A failed write or sync stops the process at once (exit 1) without
// advance(): after a failed fsync nothing the node would say can be trusted.
//
// Storage is the file WAL in --data-dir (storage/file_storage.h). Every
// snapshot_entries applied entries, once the log written since the last
// snapshot is at least a quarter of that snapshot's size
// (kSnapshotLogPercent), a forked
// child writes a snapshot of the state machine (storage/snapshot_writer.h)
// and the log is compacted; a follower too far behind gets the snapshot
// from the leader.
//
// Runs on the loop thread, except the WAL's fdatasync (sync_thread.h). A
// Ready with a snapshot, a new segment and the node's own snapshots still
// sync on the loop: they are rare.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "lockd/cluster/backup_file.h"
#include "lockd/cluster/commit_latency.h"
#include "lockd/cluster/link_watch.h"
#include "lockd/cluster/node_identity.h"
#include "lockd/cluster/peer_handshake.h"
#include "lockd/cluster/peer_transport.h"
#include "lockd/cluster/replicated_lock_service.h"
#include "lockd/cluster/start_gate.h"
#include "lockd/common/deferred_free.h"
#include "lockd/common/time.h"
#include "lockd/net/precise_timer.h"
#include "lockd/net/timer.h"
#include "lockd/raft/driver.h"
#include "lockd/raft/raft.h"
#include "lockd/raft/storage.h"
#include "lockd/storage/file_storage.h"
#include "lockd/storage/snapshot_writer.h"
#include "lockd/storage/sync_thread.h"

struct event;
struct event_base;

namespace lockd::cluster {

struct PeerStats;           // peer_transport.h
struct PeerTransportStats;  // peer_transport.h

// Ready cycles per loop turn (each is one sync); more work waits a turn so
// clients and peers are read in between.
constexpr std::size_t kMaxReadyRoundsPerTurn = 8;
// Log entries a compaction dropped, destroyed per loop turn (DeferredFree):
// ~1-2 ms of free() and page faults, where all at once was 45-263 ms at
// 1 M locks.
constexpr std::size_t kDroppedEntriesFreedPerTurn = 2048;
// A snapshot waits until the WAL written since the last one is at least
// this percentage of that snapshot's size (storage::SnapshotPolicy::
// log_percent): a big table is snapshotted less often, so its O(table)
// cost stays O(1) per byte of log (at most 4 bytes of snapshot written per
// byte of log). The log since the snapshot is held in memory (~2x its WAL
// bytes): 25% keeps it near 30 bytes per held lock at most; 100% cost
// ~55 B per lock at 1 M locks (docs/benchmarks/membership.md, "Memory at 1 M locks").
constexpr std::uint64_t kSnapshotLogPercent = 25;
// A table of at most this many keys, holders and waiters in all is
// snapshotted without a fork (storage::SnapshotWriter::Where::kThread):
// serialized on the loop (well under a millisecond), its file written and
// synced by a thread. Bigger tables fork, so that their O(table) work
// stays off the loop. The fork is what costs a small table: fork() itself,
// then a copy-on-write fault for every page the loop writes afterwards.
// Under 64 clients churning fresh keys (a tiny table snapshotted every
// 10,000 entries) it was most of the leader's page faults and of its p99
// (docs/benchmarks/cluster.md "Snapshots of a small table").
constexpr std::size_t kNoForkSnapshotMaxItems = 4096;
// Entries a compaction keeps behind the snapshot (Raft::compact's
// keep_entries; etcd keeps 5,000): a follower that is only slower than the
// leader — not yet at the index the leader snapshotted — catches up from
// the log instead of being sent the whole snapshot. In a 1 M-lock fill a
// loaded follower was sent 60 MB snapshots over and over, each one
// making it slower. ~20,000 entries of ~120 bytes in memory: ~2.4 MB.
// Never more than half of --snapshot-entries (a small spacing, as in
// tests, keeps fewer).
constexpr std::uint64_t kCompactionKeepEntries = 20'000;
// A leader holds a due snapshot for a member catching up that it heard
// from within this long (storage::CatchUpHold): longer than a learner's
// loop is busy decoding a large snapshot, short enough that a dead one
// soon stops holding the log (which is bounded by size anyway).
constexpr TimeNs kCatchUpHoldSilenceNs = 10'000 * kNsPerMs;
// Proposals beyond the commit index before requests are refused (`B` for
// an `A`). Raft's default (4096) is a few loop turns of one pipelining
// client; 64 Ki entries (~100 bytes each: ~6 MiB) absorbs bursts of many
// clients while still bounding the leader's memory.
constexpr std::size_t kMaxUncommittedProposals = 64 * 1024;
// One warning per this interval for refused peer input decided here (a
// snapshot that does not decode); the rest are counted only.
constexpr TimeNs kRefusalWarnIntervalNs = 60'000 * kNsPerMs;

// --initial-cluster-state (interfaces.md): accepted for old unit files and
// ignored (v1.3): a node with an empty data dir always waits to be let in
// (start_gate.h); a group is formed only by POST /v1/cluster/init.
enum class InitialClusterState : std::uint8_t {
  kNone = 0,      // not given
  kNew = 1,       // given as `new`: one warning naming lockctl cluster init
  kExisting = 2,  // given as `existing`
};

// A membership change asked for through the admin API (issue 20).
enum class MemberChangeKind : std::uint8_t { kAdd, kPromote, kRemove, kTransfer, kInit };
struct MemberChange {
  MemberChangeKind kind = MemberChangeKind::kAdd;
  raft::NodeId id = raft::kNoNode;  // kTransfer: kNoNode = the most caught-up voter
  std::string client_addr;          // kAdd
  std::string raft_addr;            // kAdd
};
// How it ended: `status` 200 once committed (leader moved, for kTransfer);
// otherwise the HTTP status and error code of interfaces.md (409
// change_in_progress / not_caught_up, 503 not_leader with the leader's
// admin address) or one of docs/cluster.md's.
struct MemberChangeResult {
  int status = 200;
  std::string error;    // "" on success
  std::string message;  // "" = none (the contract's bodies have none)
  std::optional<std::string> leader_admin;  // 503 not_leader: the leader's admin host:port
};
using MemberChangeDone = std::function<void(const MemberChangeResult&)>;
// A waiting node asks a member again (a new handshake) at most this often
// when that member's messages say its configuration names us.
constexpr TimeNs kGateRefreshNs = 300 * kNsPerMs;
// While an empty voter's word does not count, a waiting node asks the
// members again at most this often (start_gate.h ask_again).
constexpr TimeNs kGateAskAgainNs = 2000 * kNsPerMs;
// Cluster init on a node whose --peer names only itself waits this long
// after the start for members that list it (start_gate.h decide_init);
// they redial at least every second.
constexpr TimeNs kInitAloneGraceNs = 3000 * kNsPerMs;
// Cluster init answers once every founder has joined (acknowledged the
// group's first entries), or this long after the group formed: a founder
// still at its start gate when the first leader dies may need that
// leader's word to join, so a caller that acts on the answer (kills a
// node, say) finds every founder able to vote.
constexpr TimeNs kInitJoinGraceNs = 10'000 * kNsPerMs;
// How long a change may take to commit (or a transfer to land) before its
// request is answered 504 timeout (it may still take effect); the default
// of --member-change-timeout-ms.
constexpr TimeNs kMemberChangeTimeoutNs = 30'000 * kNsPerMs;

struct ClusterNodeConfig {
  raft::NodeId self = raft::kNoNode;
  // Every member, self included, as --peer gives them: the bootstrap
  // configuration of a new group and where this node listens. Once the log
  // (or a snapshot) records a configuration, that one decides who the
  // members are and where they are (docs/cluster.md "Membership").
  std::vector<Member> members;
  InitialClusterState initial_state = InitialClusterState::kNone;
  std::string data_dir;
  TimeNs heartbeat_ns = 50 * kNsPerMs;
  int election_ticks = 6;
  locks::Limits limits;
  // A snapshot (and log compaction) once this many entries were applied
  // since the last one.
  std::uint64_t snapshot_entries = 10'000;
  TimeNs member_change_timeout_ns = kMemberChangeTimeoutNs;  // --member-change-timeout-ms
  // --wal-sync=thread: the WAL's fdatasync runs on a sync thread and the
  // Ready cycle is pipelined (raft::start_ready); false: on the loop
  // (raft::drive_ready's order, the sync blocking the loop).
  bool wal_sync_thread = false;
  // How members authenticate on the raft port (docs/security.md).
  PeerSecurity peer_security;
  // This node's admin address as peers learn it from the handshake; "" = off.
  std::string admin_addr;
  // A backup file to seed an empty data dir from (cluster/restore.h);
  // empty: none.
  std::string restore_from;
  // --token-floor: every token granted is above it (0: none).
  std::uint64_t token_floor = 0;
};

// What a member last said about itself in a handshake (peer_handshake.h).
struct PeerHello {
  EntryVersionRange entry_versions;  // the log entry encodings it applies
  std::string admin_addr;            // "" = admin off
  std::string client_addr;
  DataState data_state = DataState::kEmpty;
  std::uint64_t cluster_id = 0;
};

// One member as this node sees it, for /v1/status, /v1/cluster, metrics.
struct MemberView {
  raft::NodeId id = raft::kNoNode;
  std::string client_addr;
  std::string raft_addr;
  bool leader = false;
  bool voter = true;  // false: a learner
  std::optional<raft::Index> match;          // leader only
  std::optional<std::int64_t> last_contact_ms;  // leader only, from the transport
  // Every node, every other member: a handshaken connection either way,
  // and the time since the last byte from it (nullopt: self, or never).
  std::optional<bool> link_up;
  std::optional<std::int64_t> last_heard_ms;
};

// What the admin API reads instead of hard-coded role and term.
struct NodeStatusView {
  raft::NodeId id = raft::kNoNode;
  raft::Role role = raft::Role::kFollower;
  raft::Term term = 0;
  raft::NodeId leader_id = raft::kNoNode;
  std::string leader_addr;   // client host:port; empty when unknown
  raft::Index commit = 0;
  raft::Index applied = 0;
  bool serving = false;      // leader with its first entry applied
  bool learner = false;      // this node is a learner of the configuration in force
  raft::Index conf_index = 0;  // entry that set the configuration (0: the --peer bootstrap)
  std::vector<MemberView> members;
};

class ClusterNode final : private raft::ReadyHandler {
 public:
  ClusterNode(event_base* base, ClusterNodeConfig config);
  ~ClusterNode() override;
  ClusterNode(const ClusterNode&) = delete;
  ClusterNode& operator=(const ClusterNode&) = delete;

  // Opens storage, restores the state machine and builds the core and the
  // service. False with `error` set on failure.
  bool open(std::string& error);
  // The admin address peers learn from our handshakes (after open(), before
  // listen(): the admin server binds between them).
  void set_admin_addr(const std::string& addr);
  // Listens on the raft address, writes the data dir's IDENTITY if it has
  // none (node_identity.h), dials peers and starts ticking. The daemon calls
  // it after binding every other address.
  bool listen(std::string& error);
  // End-of-turn work (see the file comment).
  void after_turn();
  // Called right before every blocking save(): the daemon flushes the
  // client replies applied so far, so they leave while the disk syncs.
  void set_before_sync(std::function<void()> f) { before_sync_ = std::move(f); }
  // Set once a member's handshake said this running node's removal is
  // committed (docs/cluster.md "A removed node stops"): the line saying so.
  // The daemon then stops with exit status 2.
  const std::optional<std::string>& removed_reason() const { return removed_reason_; }

  server::LockService& service() { return *service_; }
  const ReplicatedLockService& replicated() const { return *service_; }
  NodeStatusView status(TimeNs now_ns) const;
  // The lock table's time (cluster/lock_state_machine.h) at this node's
  // monotonic `now_ns`, for the admin views' leases and waits. The serving
  // leader maps its own clock exactly. Any other node estimates: the latest
  // table time it applied, plus the time since it applied it. It lags the
  // leader by about the replication delay, so leases look slightly longer
  // there, never shorter: the estimate restarts at each LeaderStart and
  // runs at most kEstimateRunMaxNs past the latest entry (the table's clock
  // stands still while there is no leader).
  TimeNs table_now_ns(TimeNs now_ns) const;
  static constexpr TimeNs kEstimateRunMaxNs = 2 * kDefaultClockIntervalNs;
  raft::Role role() const { return raft_->role(); }
  raft::NodeId leader() const { return raft_->leader(); }

  // GET /v1/snapshot: the backup header (cluster/backup_file.h) of the
  // state applied now, when this node is the serving leader; nullopt
  // otherwise (a follower's state may lag what the leader acknowledged).
  // The data is replicated().snapshot(), taken in a forked child.
  std::optional<BackupMeta> backup_meta(std::uint64_t taken_unix_ms) const;

  // Graceful stop on the leader: hands leadership to the voter with the
  // highest match index. Returns false if not the leader (or no voter).
  bool transfer_leadership();
  // The admin API's membership changes and leader transfer: `done` is
  // called once (maybe before this returns) with how it ended; at most one
  // is in flight (a second: 409 change_in_progress).
  void change_members(const MemberChange& change, MemberChangeDone done);
  // POST /v1/cluster/init (protocol.md §10 rule 1): forms the group once,
  // this node its first leader and its --peer voters the configuration.
  // 200 once the first leader's entries committed; 409 already_formed when
  // this node or a listed voter belongs to a formed group; 504 on timeout.
  void init_group(MemberChangeDone done);
  // Stops taking requests (they get `E no_leader`).
  void stop_accepting() { service_->stop_accepting(); }

  // Counters for /metrics (admin reads them at scrape time).
  const raft::RaftStats& raft_stats() const { return raft_->stats(); }
  const storage::StorageStats& storage_stats() const { return storage_->stats(); }
  const ReplicatedServiceStats& service_stats() const { return service_->stats(); }
  std::vector<PeerStats> peer_stats() const;
  const LatencyHistogram& commit_latency() const { return commit_latency_.histogram(); }
  // Does this binary and every member (as its last handshake said, at any
  // time: VERSIONS) apply log entry encoding `v`? A voter never heard from
  // counts as no, a learner never heard from does not count.
  bool cluster_supports(std::uint16_t v) const;
  // What member `id` said in its last handshake; nullptr if none yet.
  const PeerHello* peer_hello(raft::NodeId id) const;
  const PeerTransportStats& transport_stats() const;
  // Times the leader this node knows changed (to another node or to none).
  std::uint64_t leader_changes() const { return leader_changes_; }

 private:
  // raft::ReadyHandler
  void send(std::vector<raft::Message>& messages) override;
  raft::StorageStatus persist(const raft::Ready& rd) override;
  raft::StorageStatus write(const raft::Ready& rd, bool& sync_pending) override;
  // A Ready's batch is on the sync thread (--wal-sync=thread): the core is
  // mid-Ready until it is durable. Never true with --wal-sync=loop.
  bool syncing() const { return storage_->sync_pending(); }
  // Commit latency: the leader's entries were written now.
  void note_written(const raft::Ready& rd);
  void install(const raft::Snapshot& snapshot) override;
  void apply(const raft::Entry& entry) override;

  // The IDENTITY this node claims its data dir with.
  NodeIdentity identity() const;
  void on_tick();
  void on_service_timer();
  void rearm_service_timer(TimeNs now);
  // Starts a snapshot when enough was applied; finishes one in progress.
  void maybe_snapshot();
  [[noreturn]] void fail_storage(const std::string& message);
  // The snapshot file of `meta` as Raft's snapshot bytes: read from disk
  // when a follower needs them, instead of ~60 MB held in memory at 1 M
  // locks (raft/snapshot_bytes.h). An unreadable file stops the node.
  std::shared_ptr<const raft::SnapshotBytes> snapshot_file_bytes(const raft::SnapshotMeta& meta);
  // Hands Raft the file for the snapshot it holds in memory (at startup,
  // and after a leader's snapshot is installed and persisted).
  void rehome_snapshot_bytes(const raft::SnapshotMeta& meta);
  // Notes when the applied table time moved (for table_now_ns()).
  void note_table_floor(TimeNs now_ns);
  // Records a cluster id the log set (IDENTITY, handshakes) and says when
  // the cluster's caps are not this node's flags.
  void note_config();
  // An entry did not decode: one line, exit (never skipped).
  [[noreturn]] void fail_undecodable(raft::Index index, std::uint16_t version);

  // --- membership (issue 20) ---
  // Where this node is before it may vote (--initial-cluster-state).
  enum class Gate : std::uint8_t {
    kOpen = 0,  // a member with data, or let in (start_gate.h)
    kWaiting,   // empty: voting for nothing until let in, or cluster init
  };
  // The members the transport dials and accepts: the configuration in
  // force, or the --peer list while none is recorded; self always with its
  // --peer addresses (where it listens).
  std::vector<Member> current_members() const;
  // What the peer transport dials and accepts: current_members() plus the
  // --peer entries the configuration neither lists nor removed. A node
  // whose log is behind holds an old configuration, which may lack the
  // member that now leads (added after it): without the --peer entry it
  // would refuse that leader's connections and never catch up.
  std::vector<Member> transport_members() const;
  // After the configuration changed: the transport, `M` redirects, logs.
  void note_membership();
  // What our configuration says of `id` (peer handshake tag 11).
  MemberStatus status_of(raft::NodeId id) const;
  // A member's handshake said what it knows of the cluster and of us.
  void on_peer_handshake(const Handshake& h);
  // Gate::kWaiting: asks the start gate again with the answers so far.
  void run_gate();
  // Opens the gate as the start gate decided (join as a voter or learner).
  void open_gate(const StartDecision& d);
  // Records, durably, that a member was heard from (rule 3): before its
  // first message reaches Raft.
  void record_heard(raft::NodeId id);
  HeardReceiver heard_of(raft::NodeId id) const;
  // Handshake tag 15: the voters of our configuration we ever heard from
  // (nullopt while the gate is closed: we have no record to give).
  std::optional<std::vector<raft::NodeId>> heard_voters() const;
  std::vector<raft::NodeId> conf_voters() const;
  // Gate::kWaiting: new handshakes with the members in refresh_wanted_.
  void refresh_answers(TimeNs now);
  // Refuses to go on: one line on stderr (the last), exit 2.
  [[noreturn]] void refuse_start(const std::string& line);
  // Sets removed_reason_ once this node's own committed configuration
  // removed it (every tick; see the .cc).
  void check_own_removal(TimeNs now);
  // Moves the admin request in flight along (propose, committed, timed out).
  void progress_change(TimeNs now);
  // The pending init while the gate waits (start_gate.h decide_init): 409
  // when a member says it belongs to a formed group, forms once every
  // --peer member answered, else keeps waiting (progress_change: 504).
  void try_init();
  void finish_change(MemberChangeResult r);
  // Leader only: the voters whose match is below `index` (cluster init).
  std::vector<raft::NodeId> founders_not_joined(raft::Index index) const;
  MemberChangeResult not_leader_result() const;

  event_base* base_;
  ClusterNodeConfig config_;
  std::unique_ptr<storage::FileStorage> storage_;
  std::unique_ptr<storage::SnapshotWriter> snapshots_;
  DeferredFree<raft::Entry> dropped_entries_;  // compacted away, freed a slice per turn
  raft::NodeId snapshot_held_for_ = raft::kNoNode;  // storage::CatchUpHold: logged once per hold
  // The last snapshot from the leader that passed check_snapshot, decoded:
  // install() adopts it when the bytes it is given are the same.
  struct CheckedSnapshot {
    raft::Index index = 0;
    raft::Term term = 0;
    std::size_t bytes = 0;
    std::uint32_t crc = 0;
    std::unique_ptr<LockStateMachine> decoded;
  };
  std::optional<CheckedSnapshot> checked_snapshot_;
  std::unique_ptr<storage::SyncThread> sync_thread_;
  struct event* sync_event_ = nullptr;  // the sync thread's notify_fd: wakes the loop
  raft::Index last_snapshot_index_ = 0;
  std::uint64_t last_snapshot_bytes_ = 0;  // its data's size: the log must outgrow it first
  TimeNs last_snapshot_refusal_warn_ns_ = 0;  // monotonic; 0: never warned
  std::unique_ptr<raft::Raft> raft_;
  std::unique_ptr<class PeerTransport> transport_;
  std::unique_ptr<ReplicatedLockService> service_;
  net::Timer tick_timer_;
  // The service's next expiry / wait / clock deadline: to the microsecond
  // (net::PreciseTimer says why a libevent timer is not).
  net::PreciseTimer service_timer_;
  net::Timer kick_timer_;     // another Ready cycle next turn when one is left over
  std::function<void()> before_sync_;  // see set_before_sync()
  std::optional<TimeNs> armed_service_ns_;
  CommitLatency commit_latency_;  // the leader's entries: WAL write -> applied
  std::map<raft::NodeId, PeerHello> peer_hellos_;
  // Each member's latest incarnation (handshake tag 14): case 6.
  PeerIncarnations incarnations_;
  NodeIdentity identity_;           // as IDENTITY has it (cluster id included)
  locks::Limits caps_noted_;        // the cluster caps last compared with our flags
  bool caps_noted_once_ = false;
  // Each peer's link as the operator's log tells it (link_watch.h); runs
  // every tick.
  void watch_peers(TimeNs now);
  std::map<raft::NodeId, LinkWatch> link_watch_;
  raft::NodeId last_leader_ = raft::kNoNode;
  std::uint64_t leader_changes_ = 0;
  TimeNs floor_seen_ns_ = 0;     // the state machine's floor at the last note
  TimeNs floor_seen_at_ns_ = 0;  // our monotonic clock then
  raft::Term clock_term_seen_ = 0;  // the state machine's clock term then
  // Membership.
  Gate gate_ = Gate::kOpen;
  std::map<raft::NodeId, PeerAnswer> answers_;  // kWaiting: each member's latest answer
  std::string wait_reason_;                       // kWaiting: the gate's last reason (logged on change)
  std::set<raft::NodeId> heard_;                  // HEARD: every id this node counted a message of
  std::map<raft::NodeId, TimeNs> refresh_wanted_;  // kWaiting: members to handshake again (when asked)
  std::map<raft::NodeId, TimeNs> refreshed_at_;    // kWaiting: last new handshake per member
  std::vector<raft::NodeId> ask_again_;            // kWaiting: the gate's last ask_again
  raft::Index init_base_index_ = 0;               // kInit: applied index when init began
  bool init_formed_here_ = false;                 // kInit: this node's init formed the group
  TimeNs init_formed_ns_ = 0;                     // kInit: when the group formed (0: not yet)
  raft::Index init_formed_index_ = 0;             // kInit: the commit index then
  TimeNs opened_ns_ = 0;                          // when open() ran (kInitAloneGraceNs)
  std::string init_wait_reason_;                  // kInit: the wait last logged (logged on change)
  TimeNs founder_hold_until_ns_ = 0;  // a founder let in: no campaign before then (no leader yet)
  bool heard_missing_ = false;                    // HEARD to be written in listen() (data from before v1.3)
  // VERSIONS: the entry encodings each member last said it applies.
  std::map<raft::NodeId, std::pair<std::uint16_t, std::uint16_t>> versions_;
  raft::Membership conf_noted_;     // the configuration the transport was last given
  raft::NodeId leader_noted_ = raft::kNoNode;  // the leader the transport was last given
  // Every member's addresses as last seen in a configuration: a removed
  // leader keeps its links while this node follows it (transport_members).
  std::map<raft::NodeId, Member> known_members_;
  bool conf_noted_once_ = false;
  bool heard_leader_ = false;       // a leader was known once since start
  bool removed_noted_ = false;      // "this node was removed" logged
  std::optional<std::string> removed_reason_;  // see removed_reason()
  TimeNs own_removal_seen_ns_ = 0;  // check_own_removal(): when the committed removal was seen
  std::uint64_t gated_messages_ = 0;  // peer messages dropped before the gate opened
  // Rule 4 (protocol.md §10, §11a): an unauthenticated peer said this
  // running node was removed. It does not stop; it holds its campaigns
  // (Raft::hold_campaigns) until a leader's message shows it is still
  // followed, or its own log commits the removal (check_own_removal()).
  bool removal_claim_held_ = false;
  TimeNs removal_claim_logged_ns_ = 0;   // rate limit: one line a minute
  std::uint64_t removal_claims_ = 0;     // claims ignored (for the log line's count)
  struct PendingChange {
    MemberChange change;
    MemberChangeDone done;
    TimeNs deadline_ns = 0;
    bool proposed = false;          // change: in the log at (index, term); transfer: started
    raft::Index index = 0;
    raft::Term term = 0;
    raft::NodeId target = raft::kNoNode;  // kTransfer
    bool commit_logged = false;           // a removed leader waits for its hand-over
  };
  std::optional<PendingChange> pending_change_;
};

}  // namespace lockd::cluster
