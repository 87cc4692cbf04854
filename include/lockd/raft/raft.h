// Raft: the consensus core, as a pure state machine.
//
// It owns no socket, file, clock, thread or global RNG. The driver feeds it
// inputs — tick(), step(message), propose(data), transfer_leadership(),
// compact() — and collects every output in one Ready batch:
//
//   Ready rd = raft.ready();
//   send(rd.messages);                      // safe to send right away
//   persist(rd.snapshot, rd.entries, rd.hard_state);   // durable, in this order
//   install(rd.snapshot); apply(rd.committed);
//   raft.advance();                          // "persisted up to here"
//
// raft::drive_ready() (driver.h) is that cycle, shared by every driver.
//
// The persistence rule lives in the core, not in the driver: a message that
// depends on state not yet durable (a vote grant, an append ack, any answer
// given while term/vote/entries are dirty) is held back and only appears in
// the Ready *after* the advance() that acknowledged that state. So a driver
// that sends rd.messages before persisting, or that crashes between the two,
// cannot make the node promise something it forgets. The leader also counts
// itself towards a commit quorum only for entries it has persisted, and a
// candidate counts its own vote only once that vote is persisted.
//
// One Ready is one group commit, and there is at most one outstanding:
// ready() and compact() are refused (checked) until advance().
//
// Pipelined (issue 23, driver.h start_ready): while a Ready's sync runs
// elsewhere, the driver may keep feeding the core — step(), tick(),
// propose(), transfer_leadership(), campaign() — so the next batch forms
// while the disk syncs. Nothing that input causes is promised early:
// entries appended meanwhile are not durable at this advance() (the leader
// does not count them towards a commit quorum), answers given from state
// the outstanding Ready does not cover wait for the next one, and a vote
// we cast for ourselves meanwhile counts only once the Ready that carries
// it is durable. A cut into the outstanding entries (a new leader's
// conflicting append) leaves only the prefix before the cut durable.
// The outstanding Ready's `entries` and `committed` views are invalid after
// the first such input: write and apply them first. take_messages() hands
// out meanwhile what may leave before the sync ends (the leader's appends
// of entries proposed meanwhile among them).
//
// Protocol (Raft paper + Ongaro's thesis): randomized election timeouts in
// [election_ticks, 2*election_ticks); PreVote; CheckQuorum with leader
// stickiness; a no-op at the start of each leader term; commit by counting
// only current-term entries (§5.4.2, Figure 8); batched, pipelined appends
// with a per-follower in-flight window; fast conflict back-off by term;
// snapshots, log compaction and chunked InstallSnapshot; leadership
// transfer with TimeoutNow; membership changes through the log, one voter
// at a time (thesis §4.1, confchange.h): a configuration is in force from
// the moment it is appended, a leader proposes a change only once an entry
// of its own term is committed and the previous change is committed, and
// learners receive the log but never vote, count or campaign. A leader that
// removed itself hands over (TimeoutNow) and steps down once that commits.
//
// Runs on the node's loop thread; not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "lockd/raft/confchange.h"
#include "lockd/raft/message.h"
#include "lockd/raft/snapshot_bytes.h"
#include "lockd/raft/storage.h"
#include "lockd/raft/tracker.h"
#include "lockd/raft/types.h"

namespace lockd::raft {

// Default bounds; each has a Config field so tests can shrink it.
constexpr std::size_t kDefaultMaxInflight = 8;                 // appends in flight per follower
constexpr std::size_t kDefaultMaxEntriesPerAppend = 64;        // entries in one kAppend
constexpr std::size_t kDefaultMaxBytesPerAppend = 1u << 20;    // payload bytes in one kAppend
constexpr std::size_t kDefaultSnapshotChunkBytes = 64u << 10;  // bytes in one kSnapshot
constexpr std::size_t kDefaultMaxSnapshotChunksInflight = 4;   // kSnapshot chunks unacked per follower
constexpr std::size_t kDefaultMaxSnapshotBytes = 1u << 30;     // refuse larger incoming snapshots
constexpr std::size_t kDefaultMaxUncommittedEntries = 4096;    // proposals beyond commit
constexpr std::size_t kDefaultMaxApplyEntries = 1024;          // committed entries per Ready
constexpr std::size_t kMaxVoters = 9;                          // cluster size cap
// The largest term a message may carry (and so the largest this node ever
// adopts). Real terms grow by one per election: 2^62 of them at a million
// a second is 146,000 years. A term beyond it is a forged or corrupt
// message, refused (kMalformed) before it can reach the node's term, where
// the next campaign's term + 1 would wrap to 0.
constexpr Term kMaxTerm = Term{1} << 62;
// A learner may be promoted once the leader streams to it (replicate
// state, heard this period) and its match index is within this many
// entries of the leader's commit index.
constexpr Index kDefaultPromoteMaxLag = 1000;

// The role a node plays in its current term.
enum class Role : std::uint8_t {
  kFollower = 0,      // follows `leader` (maybe unknown) and votes
  kPreCandidate = 1,  // polling peers (PreVote) before bumping its term
  kCandidate = 2,     // asked for votes at its (bumped) term
  kLeader = 3,        // accepts proposals and replicates them
};
std::string_view to_string(Role r);

// Deliberate bugs for proving the simulator can catch them. Tests and
// lockd-sim only; every field is false in production configs.
struct FaultInjection {
  bool commit_old_term_entries = false;  // count replicas of old-term entries (breaks Figure 8)
  bool vote_before_persist = false;      // send a vote grant before the vote is durable
  bool keep_vote_on_new_term = false;    // forget to clear the vote when the term grows
  bool skip_log_up_to_date_check = false;  // grant votes to candidates with stale logs
  bool heartbeat_full_commit = false;    // heartbeats carry the leader's commit, not min(match, commit)
  bool ack_before_persist = false;       // acknowledge appends before the entries are durable
  bool commit_needs_all_voters = false;  // commit only what every voter holds (no progress with one down)
  bool check_quorum_counts_sends = false;  // CheckQuorum counts heartbeats sent, not answers (never steps down)
  bool ignore_leader_lease = false;      // answer vote requests while a leader is heard (no stickiness)
  bool accept_stale_responses = false;   // act on append and vote answers from earlier terms
  bool accept_stale_append_responses = false;  // act on append answers from earlier terms
  bool assume_followers_committed = false;  // a new leader starts every follower's match at its commit
  // Membership (issue 20).
  bool conf_on_commit = false;           // a configuration takes effect when committed, not when appended
  bool quorum_from_old_config = false;   // the leader counts commit with the configuration it was elected in
  bool learner_counts_as_voter = false;  // learners count toward commit, election and CheckQuorum quorums
  bool removed_leader_keeps_leading = false;  // a leader that removed itself never steps down
  bool concurrent_changes = false;       // propose a change while another is uncommitted, or before the term's first commit
};

// Decides whether a fully received snapshot may be stored: the state
// machine decodes `data` and checks it against `meta` (limits, ids no
// later than meta.index). Must be pure (no I/O; it runs inside step()).
// false: the snapshot is dropped before anything is persisted, so a bad
// snapshot can never make the node unable to restart.
using SnapshotCheckFn = std::function<bool(const SnapshotMeta& meta, std::string_view data)>;

// Where to find randomness: returns a uniformly random 64-bit number.
// Replaceable so tests and the simulator decide every draw.
using RandomFn = std::function<std::uint64_t()>;

// What a node needs to know to run. See validate() for the rules.
struct Config {
  NodeId id = kNoNode;
  // The bootstrap configuration: the voters when no configuration is
  // recorded in the log or the snapshot (a group being formed, or one
  // that never changed membership). Empty for a node that joins a running
  // group: it votes for nothing and waits for a leader to send it the
  // configuration. A recorded configuration always wins.
  std::vector<NodeId> voters;
  // Optional addresses of the bootstrap voters (ids not in `voters` are
  // ignored), so the first recorded configuration carries them.
  std::vector<Member> bootstrap_members;
  Index promote_max_lag = kDefaultPromoteMaxLag;  // see kDefaultPromoteMaxLag
  int election_ticks = 10;     // follower timeout base; drawn from [N, 2N)
  int heartbeat_ticks = 1;     // leader heartbeat period; < election_ticks
  bool pre_vote = true;        // poll before campaigning (thesis §9.6)
  bool check_quorum = true;    // leader steps down without a quorum; voters honour leases
  std::size_t max_inflight = kDefaultMaxInflight;
  std::size_t max_entries_per_append = kDefaultMaxEntriesPerAppend;
  std::size_t max_bytes_per_append = kDefaultMaxBytesPerAppend;
  std::size_t snapshot_chunk_bytes = kDefaultSnapshotChunkBytes;
  std::size_t max_snapshot_chunks_inflight = kDefaultMaxSnapshotChunksInflight;
  std::size_t max_snapshot_bytes = kDefaultMaxSnapshotBytes;
  std::size_t max_uncommitted_entries = kDefaultMaxUncommittedEntries;
  std::size_t max_apply_entries = kDefaultMaxApplyEntries;
  std::uint64_t rng_seed = 1;  // seeds the built-in generator when `random` is empty
  RandomFn random;             // overrides the built-in generator
  SnapshotCheckFn check_snapshot;  // empty: every snapshot that arrives whole is accepted
  FaultInjection faults;       // test-only
};

// Why a Config was refused (an operator error, so a value).
enum class ConfigError {
  kOk = 0,            // usable
  kNoId,              // id is kNoNode
  kNotAVoter,         // voters is not empty and id is not among them
  kBadVoters,         // empty, duplicated, kNoNode or more than kMaxVoters
  kBadTicks,          // heartbeat_ticks < 1 or election_ticks <= heartbeat_ticks
  kZeroLimit,         // a bound is zero
};
ConfigError validate(const Config& cfg);
std::string_view to_string(ConfigError e);

// Everything the core wants done since the last Ready, in the order it must
// be done: persist snapshot, entries, then hard_state (last, so a torn write
// that kept the hard state also kept the entries its commit index covers);
// send messages (they never depend on anything in this batch); install the
// snapshot; apply committed. `committed` only holds entries that earlier
// Readies already made durable (up to min(commit, stable index)), so
// without a snapshot they may be applied before this Ready's persist.
//
// `entries` and `committed` are views into the core's own log, not copies
// (issue 23: the payloads were copied into every Ready): they stay valid
// until advance() or the next input (step, tick, propose, ...), whichever
// comes first. A driver that needs an entry later copies it.
struct Ready {
  std::optional<HardState> hard_state;  // write when set
  std::optional<Snapshot> snapshot;     // received from the leader: persist, then restore the state machine from it
  std::span<const Entry> entries;       // append; the first may overwrite a stored suffix
  std::vector<Message> messages;        // send, in any order, over any transport
  std::span<const Entry> committed;     // apply in order (after `snapshot`); all already durable

  bool empty() const {
    return !hard_state && !snapshot && entries.empty() && messages.empty() && committed.empty();
  }
};

// Why a proposal was refused.
enum class ProposeError {
  kOk = 0,               // appended at (index, term); not yet committed
  kNotLeader,            // ask the leader (status().leader), or retry later
  kTransferring,         // a leadership transfer is in progress
  kTooManyUncommitted,   // back-pressure: max_uncommitted_entries reached
  kTooLarge,             // one entry larger than max_bytes_per_append
  kChangeInProgress,     // conf change: the previous change is not committed yet
  kTermNotCommitted,     // conf change: no entry of this leader's term committed yet (retry shortly)
  kBadChange,            // conf change: refused, see ProposeResult::change_error
  kNotCaughtUp,          // conf change: promote of a learner that is too far behind
};
std::string_view to_string(ProposeError e);

struct ProposeResult {
  ProposeError error = ProposeError::kOk;
  Index index = 0;  // when kOk: where the entry sits; committed if and when
  Term term = 0;    // an entry at `index` with this `term` is applied
  ConfChangeError change_error = ConfChangeError::kOk;  // when kBadChange
};


// Why a peer message was refused (peer input, so a value, never a crash).
enum class StepError {
  kOk = 0,          // processed (possibly ignored as stale)
  kWrongRecipient,  // `to` is not this node
  kUnknownPeer,     // `from` is kNoNode or this node
  kMalformed,       // fields inconsistent (gaps in entries, chunk past total, ...)
};
std::string_view to_string(StepError e);

// The leader's view of one follower, for /v1/cluster and tests.
struct PeerProgress {
  NodeId id = kNoNode;
  Index match = 0;   // highest index known replicated (and persisted) there
  Index next = 0;    // next index to send
  ProgressState state = ProgressState::kProbe;
  bool recent_active = false;        // heard from it in this election period
  std::uint64_t ticks_since_contact = 0;
  std::size_t inflight = 0;          // appends sent, not acked
  std::uint64_t snapshot_offset = 0; // kSnapshot: bytes acked so far
  bool voter = true;                 // false: a learner
};

// A node's volatile summary.
struct Status {
  NodeId id = kNoNode;
  Role role = Role::kFollower;
  Term term = 0;
  NodeId vote = kNoNode;
  NodeId leader = kNoNode;     // kNoNode when unknown
  Index commit = 0;
  Index applied = 0;
  Index first_index = 1;       // first entry still in the log (after the snapshot)
  Index last_index = 0;
  Index snapshot_index = 0;
  NodeId transferee = kNoNode; // leadership transfer in progress to
  bool voter = false;          // this node votes in the configuration in force
  bool learner = false;        // this node is a learner in it
  Index conf_index = 0;        // index of the entry that set it (0: bootstrap)
};

// Counters for metrics and the simulator; only grow.
struct RaftStats {
  std::uint64_t elections_started = 0;   // real campaigns (term bumped)
  std::uint64_t pre_votes_started = 0;
  std::uint64_t leaderships = 0;         // times this node became leader
  std::uint64_t step_downs_check_quorum = 0;
  std::uint64_t snapshots_sent = 0;      // complete snapshots acked by followers
  std::uint64_t snapshots_installed = 0;
  std::uint64_t snapshots_refused = 0;   // arrived whole, failed check_snapshot, dropped unstored
  std::uint64_t rejected_messages = 0;   // StepError != kOk
  std::uint64_t committed_conflicts = 0; // appends that would rewrite committed entries (a peer bug)
};

class Raft {
 public:
  // Restarts from whatever `storage` holds (nothing, on a fresh node). The
  // caller has already restored its state machine from storage.snapshot().
  // Checks validate(cfg) == kOk (building with a bad config is our bug).
  Raft(Config cfg, const Storage& storage);

  Raft(const Raft&) = delete;
  Raft& operator=(const Raft&) = delete;

  // --- inputs ---
  // One unit of logical time; the driver calls it at a fixed period.
  void tick();
  // Handles one message from a peer.
  StepError step(const Message& m);
  // The same, taking the entries of an append instead of copying them (the
  // transport's decoded message; issue 23). `m` is left valid but unspecified.
  StepError step(Message&& m);
  // Appends a command if this node is the leader.
  ProposeResult propose(std::string data);
  // Leader: appends a configuration change (confchange.h). Refused while a
  // change is uncommitted, before an entry of this term is committed, for a
  // change confchange refuses, or a promote of a learner not caught up.
  ProposeResult propose_conf_change(const ConfChange& cc);
  // Starts an election now (as on an election timeout). Tests and operators.
  void campaign();
  // While held, this node never campaigns (timeouts pass as for a learner;
  // a TimeoutNow is ignored). The cluster node holds campaigns while an
  // unauthenticated peer's claim about this node's membership is not yet
  // confirmed or refuted by its own log (protocol.md §10 rule 4, §11a).
  void hold_campaigns(bool hold) { campaigns_held_ = hold; }
  bool campaigns_held() const { return campaigns_held_; }

  // A node that started with no voters (it waited to be let in) learns
  // the group's bootstrap configuration: the first configuration it forms
  // (cluster init), or the one a founding member joins (protocol.md §10
  // rule 3). Only while nothing is recorded (no configuration in the log
  // or snapshot); returns false otherwise, or if `voters` is empty.
  bool set_bootstrap(std::vector<NodeId> voters, const std::vector<Member>& members);
  // Leader: forget what `id` was known to hold (match 0, probe from the
  // start): it said its data dir is empty (a learner wiped and rejoined,
  // issue 37 case 6), so what it acknowledged before is gone, and an idle
  // leader's promotion check must not pass on it. Returns whether there
  // was anything to forget.
  bool forget_progress(NodeId id);
  // Leader: hand leadership to `target` once it is caught up. Returns false
  // if not the leader, `target` is not another voter (learners never lead),
  // or this leader was removed and is already handing over.
  bool transfer_leadership(NodeId target);
  // The state machine took a snapshot covering [1, index] (index <=
  // applied). The core drops those entries but the last `keep_entries` of
  // them, and sends `data` to followers that fall behind what it kept. The
  // caller persists the snapshot itself. Returns the dropped entries (no
  // payload is freed here, and only the kept ones are moved), so that a
  // caller holding a large log can destroy them a slice at a time instead
  // of in one stall.
  //
  // Why keep some (etcd's SnapshotCatchUpEntries): the leader snapshots at
  // its applied index, which a follower that is merely a little slower has
  // not reached; compacting right up to it sends that follower the whole
  // snapshot (at 1 M locks, 60 MB, again and again while it stays behind).
  std::vector<Entry> compact(Index index, std::shared_ptr<const SnapshotBytes> data, Index keep_entries = 0);
  // Gives back a buffer compact() returned, once its entries are gone
  // (empty): the next compact() moves the kept log into it instead of into
  // a fresh allocation, whose pages would all fault in again. The larger
  // of the offered and the held buffer is kept.
  void recycle_log_buffer(std::vector<Entry> buffer);
  std::vector<Entry> compact(Index index, std::string data, Index keep_entries = 0) {
    return compact(index, in_memory_snapshot_bytes(std::move(data)), keep_entries);
  }
  // The latest snapshot's bytes now live in `bytes` (the same bytes,
  // elsewhere: the daemon's snapshot file once it is durable, instead of
  // memory). Ignored unless `index` is still the latest snapshot's. A
  // transfer under way keeps the bytes it started with.
  void rehome_snapshot_bytes(Index index, std::shared_ptr<const SnapshotBytes> bytes);

  // --- outputs ---
  bool has_ready() const;
  Ready ready();
  // Everything in the last Ready is durable, sent and applied.
  void advance();
  // Pipelined: the messages that may leave now, without a Ready — requests
  // (the leader's appends of what was proposed since the last Ready, so
  // followers write them while the leader's own sync runs, thesis
  // §10.2.1; heartbeats; vote requests) and answers that depend on nothing
  // unsynced. Every answer that does waits for its Ready's advance(), as
  // always. Callable any time; the next ready() carries the rest.
  std::vector<Message> take_messages();

  // --- views ---
  Status status() const;
  std::vector<PeerProgress> progress() const;  // leader only; empty otherwise
  const RaftStats& stats() const { return stats_; }
  NodeId id() const { return cfg_.id; }
  Term term() const { return term_; }
  Role role() const { return role_; }
  NodeId leader() const { return leader_; }
  // Where to send a client: the leader if known; otherwise the node this
  // one sent TimeoutNow to, in that term or the next (it campaigns at once
  // and normally wins). A leader that handed over — above all a removed
  // one, which never hears of the winner — then points clients at the
  // winner instead of answering "no leader". kNoNode if neither.
  NodeId leader_hint() const;
  Index commit() const { return commit_; }
  Index last_index() const;
  // Term of the entry at `i`: nullopt when compacted away or beyond the log.
  std::optional<Term> term_at(Index i) const;
  const SnapshotMeta& snapshot_meta() const { return snapshot_meta_; }
  // The log the core holds: log_base() + 1 onwards. The base is at or
  // below the snapshot's index (compact's keep_entries).
  std::span<const Entry> log() const { return entries_; }
  Index log_base() const { return log_base_; }
  // The configuration in force: the latest one in the log, appended or
  // committed (or the snapshot's, or the bootstrap one).
  const Membership& conf() const;
  // Index of the entry that set conf() (the snapshot index for a snapshot's
  // configuration; 0 for the bootstrap one).
  Index conf_index() const;
  // The configuration in force at index `i` (i >= the snapshot index).
  Membership conf_at(Index i) const;
  // Whether this node is a voter in conf().
  bool is_voter() const { return is_voter(cfg_.id); }

 private:
  // A snapshot being received chunk by chunk from the leader.
  // A snapshot is identified by who sends it in which term, not only by
  // its meta: two leaders' snapshots at the same (index, term) hold the
  // same state but need not be the same bytes (hash-map order), so chunks
  // of one must never continue the other.
  struct IncomingSnapshot {
    SnapshotMeta meta;
    std::uint64_t total_bytes = 0;
    NodeId from = kNoNode;
    Term term = 0;
    std::string data;
  };

  std::uint64_t random();
  void reset_randomized_timeout();
  bool is_voter(NodeId id) const;
  // Voters campaign; so does a node whose own removal is not yet committed.
  bool may_campaign() const;
  // Recomputes the tracker's voters/learners from conf() (after an append,
  // a truncation, a snapshot, a restart).
  void refresh_conf();
  // Leader: after its own removal committed, hand over and step down.
  bool removal_committed() const;  // leader: its own removal is committed
  void maybe_step_down_removed();
  // Indexes the kConfChange entries of `entries_` from position `from`.
  void index_confs(std::size_t from);
  Term last_term() const;
  bool log_up_to_date(Term log_term, Index index) const;

  void become_follower(Term term, NodeId leader);
  void become_pre_candidate();
  void become_candidate();
  void become_leader();
  void reset(Term term);
  void start_election(bool pre_vote, bool transfer);
  // Records a (pre)vote; returns +1 won, -1 lost, 0 pending.
  int poll(NodeId from, bool granted);

  void tick_election();
  void tick_heartbeat();

  void step_leader(const Message& m);
  void step_candidate(const Message& m);
  void step_follower(const Message& m);
  void handle_vote_request(const Message& m);
  void handle_append(const Message& m);
  void handle_heartbeat(const Message& m);
  void handle_snapshot_chunk(const Message& m);
  void handle_append_resp(const Message& m);
  void handle_snapshot_resp(const Message& m);
  StepError validate_message(const Message& m) const;

  // Leader: send entries (or a snapshot) to `to` if its window allows.
  bool send_append(NodeId to, bool send_if_empty);
  // Leader: starts sending the current snapshot to a follower.
  void start_snapshot(NodeId to, Progress& pr);
  // Leader: sends chunks of the pinned snapshot while the window allows.
  void send_snapshot_chunks(NodeId to, Progress& pr);
  void send_heartbeat(NodeId to);
  void broadcast_append(bool send_if_empty);
  bool maybe_commit();
  bool quorum_active() const;
  void append_entry(EntryType type, std::string data);
  // Appends `entries` (moving them out of the message when `take`).
  void truncate_and_append(std::span<const Entry> entries, bool take = false);
  void install_snapshot(const SnapshotMeta& meta, std::string data);
  void commit_to(Index index);
  // Leader: its own durable match index.
  Index self_match() const { return stable_index_; }

  // Queues `m`; held back until advance() if it answers from dirty state.
  void send(Message m);
  bool state_dirty() const;

  Config cfg_;
  std::uint64_t rng_state_;  // built-in splitmix64 state

  // Persistent state (mirrors storage once acknowledged).
  Term term_ = 0;
  NodeId vote_ = kNoNode;
  SnapshotMeta snapshot_meta_;  // latest snapshot (ours or the leader's)
  std::shared_ptr<const SnapshotBytes> snapshot_data_;  // its bytes, shared with transfers
  std::vector<Entry> entries_; // entries_[i].index == log_base_ + 1 + i
  std::vector<Entry> spare_log_;  // empty; recycle_log_buffer(), taken by compact()
  Index log_base_ = 0;         // <= snapshot_meta_.index: compact() may keep entries behind it
  Term log_base_term_ = 0;     // the term of the entry at log_base_
  Membership bootstrap_conf_;  // from Config::voters; used while nothing is recorded
  // The configurations in entries_ (kConfChange), in index order.
  std::vector<std::pair<Index, Membership>> log_confs_;
  Index term_start_index_ = 0;  // leader: index of this term's no-op
  std::vector<NodeId> elected_voters_;  // leader: voters at election (FaultInjection only)

  // Volatile state.
  Role role_ = Role::kFollower;
  NodeId leader_ = kNoNode;
  Index commit_ = 0;
  Index applied_ = 0;
  int election_elapsed_ticks_ = 0;
  int heartbeat_elapsed_ticks_ = 0;
  int randomized_timeout_ticks_ = 0;
  std::uint64_t ticks_ = 0;  // ticks since this object was built
  bool self_vote_pending_ = false;  // candidate: own vote counts once persisted
  ProgressTracker trk_;  // configuration, votes; leader: every member's progress
  NodeId lead_transferee_ = kNoNode;
  // Leader whose removal committed: handing over to lead_transferee_ for at
  // most one election period, then stepping down either way.
  bool removed_handover_ = false;
  bool campaigns_held_ = false;  // hold_campaigns()
  NodeId handed_to_ = kNoNode;  // our last TimeoutNow went there, in handed_to_term_
  Term handed_to_term_ = 0;
  void note_handed_to(NodeId target);
  std::optional<IncomingSnapshot> incoming_;
  bool pending_broadcast_ = false;        // leader: new entries to stream
  bool pending_commit_broadcast_ = false; // leader: commit moved, tell everyone

  // Persistence bookkeeping.
  Index stable_index_ = 0;   // every entry up to here is durable
  Index unstable_from_ = 1;  // first entry not yet handed out in a Ready
  HardState handed_hs_;      // last hard state handed out
  bool snapshot_to_install_ = false;  // snapshot_meta_/data_ came from the leader, not handed out
  bool ready_outstanding_ = false;    // between ready() and advance()
  HardState ready_hs_;                // the hard state durable once the outstanding Ready is
  Index ready_applied_to_ = 0;        // what advance() makes `applied_`

  const Message* movable_msg_ = nullptr;    // step(Message&&): its entries may be moved out
  std::vector<Message> msgs_;               // sendable now
  std::vector<Message> msgs_after_persist_; // waiting for the next Ready's persistence
  std::vector<Message> msgs_in_ready_;      // waiting for advance() of the current Ready

  RaftStats stats_;
};

}  // namespace lockd::raft
