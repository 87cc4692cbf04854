// lockd-sim's engine; see simulator.h.
#include "simulator.h"

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

#include "lockd/cluster/lock_command.h"
#include "lockd/cluster/lock_state_machine.h"
#include "lockd/cluster/peer_handshake.h"
#include "lockd/cluster/start_gate.h"
#include "lockd/common/check.h"
#include "lockd/locks/lock_table.h"
#include "lockd/raft/codec.h"
#include "lockd/raft/driver.h"
#include "lockd/raft/membership.h"
#include "lockd/raft/raft.h"
#include "lockd/raft/storage.h"
#include "lock_model.h"

namespace lockd::sim {

using raft::Entry;
using raft::EntryType;
using raft::Index;
using raft::Message;
using raft::NodeId;
using raft::Raft;
using raft::Ready;
using raft::Role;
using raft::Term;

namespace {

constexpr TimeNs kTickNs = 10 * kNsPerMs;         // virtual time per step
constexpr int kElectionTicks = 10;                // every node's election base
constexpr std::uint64_t kLivenessBudgetSteps = 400;
// A node whose --peer names only itself waits this long after its start
// before cluster init forms (ClusterNode's kInitAloneGraceNs, 3 s): at a
// handshake chance of 0.3 a step, a member that lists it has answered by
// then all but once in 10^6.
constexpr std::uint64_t kInitAloneGraceSteps = 40;  // after faults stop: leader + commit within this
constexpr std::size_t kMaxNetworkMessages = 20000;   // the network's buffer; beyond it, drop
constexpr std::size_t kMaxReadyRoundsPerVisit = 4;       // Ready/advance cycles per node visit
constexpr std::uint64_t kMaxStallSteps = 25;             // pipelined: longest disk stall (ticks)
constexpr std::size_t kMaxUncommittedInSim = 256; // leader back-pressure in the sim
constexpr int kKeys = 4;                          // lock keys clients fight over
constexpr int kOwners = 5;                        // distinct lock owners
// Steady fault phases (docs/raft.md §5): a fault that stays while progress
// is still required.
constexpr std::uint64_t kSteadyProgressSteps = 300;  // a marker must commit within this (+ snapshot time)
constexpr std::uint64_t kSteadySettleSteps = 40;     // then old traffic drains (2 election periods)
constexpr std::uint64_t kSteadyStableSteps = 100;    // then the leader must keep leading this long
constexpr std::uint64_t kSteadyMinSeedSteps = 1200;  // shorter seeds have no steady phases
// Time capsules: a copy of a message delivered this many steps late.
constexpr std::uint64_t kCapsuleMinSteps = 1000;
constexpr std::uint64_t kCapsuleMaxSteps = 2500;
constexpr std::size_t kMaxCapsules = 2000;
// --membership: node slots beyond the initial members, for learners to be
// added (ids are never reused, so a replacement takes a fresh slot).
constexpr int kSpareNodes = 4;
constexpr std::uint64_t kMaxStopDelaySteps = 200;  // a removed node runs on this long at most
// --lifecycle: a waiting node asks one peer again (a handshake) with this
// chance per step; a founder let in holds its campaigns this long (as
// ClusterNode::open_gate: 4 election timeouts, unless it hears a leader).
constexpr double kGateHandshakeChance = 0.3;
constexpr std::uint64_t kFounderHoldSteps = 4 * kElectionTicks;
constexpr std::size_t kMaxBackups = 6;  // snapshots kept as backup files to re-seed from

// xoshiro256** seeded by splitmix64: fast, good, and ours (no global RNG).
class Prng {
 public:
  explicit Prng(std::uint64_t seed) {
    for (auto& s : s_) {
      seed += 0x9E3779B97F4A7C15ull;
      std::uint64_t z = seed;
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      s = z ^ (z >> 31);
    }
  }
  std::uint64_t next() {
    std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
    std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  std::uint64_t below(std::uint64_t n) { return n == 0 ? 0 : next() % n; }
  std::uint64_t range(std::uint64_t lo, std::uint64_t hi) { return lo + below(hi - lo + 1); }
  double unit() { return static_cast<double>(next() >> 11) / 9007199254740992.0; }
  bool chance(double p) { return unit() < p; }

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  std::uint64_t s_[4];
};

// This seed's fault rates (swarm testing: every seed a different weather).
struct Weather {
  double loss = 0;           // per message
  double duplicate = 0;      // per message
  double bit_flip = 0;       // per message
  std::uint64_t max_delay_steps = 1;
  double partition = 0;      // per step: cut a random partition
  double heal = 0;           // per step: heal every partition
  double clog = 0;           // per step: clog one link for a while
  double crash = 0;          // per step: crash a random node
  double crash_in_io = 0;    // per Ready: crash half way through persisting it
  double quick_restart = 0;  // per crash: back within 1-3 steps (a fast reboot)
  double crash_leader = 0;   // per step: crash whoever leads (leader changes are where bugs live)
  double crash_new_leader = 0;  // per election: crash the winner within a few steps (Figure 8's recipe)
  double propose = 0;        // per step: a client sends a command
  double transfer = 0;       // per step: ask the leader to hand over
  double capsule = 0;        // per message sent: also deliver a copy 1000-2500 steps later
  std::uint64_t steady_phases = 0;  // how many steady fault phases this seed has
  std::uint64_t max_clock_skew_ms = 0;  // spread of the nodes' clock origins
  std::uint64_t compact_every = 20;  // applied entries between snapshots
};

// A message on the wire: encoded bytes, decoded on arrival.
struct InFlight {
  std::uint64_t due_step;
  NodeId from;
  NodeId to;
  std::string bytes;
  Term term = 0;             // capsules: the message's term
  bool ambush = false;       // capsules: wait until `to` leads a later term
  Index acked = 0;           // capsules: an append ack's index (0 for other messages)
  bool vote = false;         // capsules: a vote grant
};

// What every node must agree on about one log index.
struct HistoryEntry {
  Term term = 0;
  std::string data;
  Term commit_term = 0;       // lowest term of a node that saw it committed
  std::optional<std::string> outcome;  // what applying it did (lock level)
};

// One holder as the lock-level checks saw it granted ("one holder per
// key", "shared holders within the limit"): by token, per key.
struct Holding {
  TimeNs expires_ns = 0;
  bool shared = false;
};

// One simulated server: disk, Raft core, state machine.
struct Node {
  NodeId id = 0;
  bool up = true;
  bool joined = true;       // --membership: a spare slot is not started until it is added
  bool removed = false;     // its removal committed: stopped at stop_step, never restarted
  std::uint64_t stop_step = 0;
  // check_membership(): the leader's commit index and configuration as of
  // the last check, in term checked_term.
  Term checked_term = 0;
  Index checked_commit = 0;
  raft::Membership checked_conf;
  // check_membership(): leading (in removed_lead_term) since step
  // removed_lead_since with its own removal committed and removed_lead_last
  // as its last index then; it hands over within one election period.
  Term removed_lead_term = 0;
  std::uint64_t removed_lead_since = 0;
  Index removed_lead_last = 0;
  std::uint64_t restart_step = 0;
  raft::MemoryStorage disk;
  std::unique_ptr<Raft> raft;
  // The replicated state machine the daemon runs (cluster/lock_state_machine.h):
  // token base, leader clock offset, table. Its snapshot is the daemon's.
  std::unique_ptr<cluster::LockStateMachine> sm;
  Term leader_start_term = 0;  // the term this node last proposed its LeaderStart in
  Index applied = 0;
  // Pipelined: the Ready written and not yet synced (an owned copy: the
  // Ready's views do not outlive the next input), and whether the core
  // waits for complete_ready().
  struct PendingWrite {
    std::optional<raft::HardState> hard_state;
    std::vector<Entry> entries;
  };
  std::optional<PendingWrite> pending;
  bool awaiting_sync = false;
  std::uint64_t sync_due_step = 0;  // its sync ends in this step (or the next one)
  std::uint64_t sync_visit = 0;     // the process() visit that wrote it
  Index seen_commit = 0;    // commit indexes up to here were recorded in history
  Term running_term = 0;    // highest term seen since the last restart
  Term durable_term = 0;    // highest term ever persisted
  locks::Token max_token = 0;
  std::map<std::string, std::map<locks::Token, Holding>> holders;
  // --lifecycle. The data dir's files beside the log and snapshot:
  bool identity = false;                // IDENTITY (claimed at listen, with the --peer ids)
  std::uint64_t identity_cluster = 0;   // its cluster id, once the node applied one
  std::vector<NodeId> identity_members;
  bool heard_file = false;              // HEARD
  std::set<NodeId> heard_disk;          // what HEARD holds
  std::set<NodeId> heard;               // the running node's record (heard_disk + not yet written)
  bool restored = false;                // RESTORED
  bool storage_broken = false;          // the WAL names a snapshot file that is gone: exit 1
  // Its flags:
  std::vector<NodeId> flag_peers;       // --peer ids, self included, sorted
  bool flags_stale = false;             // flag_peers are not its group's (fixed after a refusal)
  std::optional<raft::Snapshot> restore_from;  // --restore-from FILE left in its unit
  bool bad_secret = false;              // a wrong peer secret: every handshake refused
  // The running node:
  bool gate_open = false;               // the start gate let it in (or it formed the group)
  std::map<NodeId, cluster::PeerAnswer> answers;  // what each peer said of it (waiting)
  std::uint64_t hold_until = 0;         // founder hold (steps)
  bool gone = false;                    // refused or unable to start, for good (exit 2 / 1)
  std::uint64_t init_script_until = 0;  // the deploy script runs cluster init on it until then
  std::uint64_t started_step = 0;       // its latest lifecycle start
  // Ground truth, kept by the simulator (never read by the node):
  bool took_part = false;               // some member counted a message of this id
  bool lost_data = false;               // lost data after it took part: never votes again (rule 2)
  bool disk_lost = false;               // lost part of its data dir (HEARD aside), took part or not
  bool cannot_join = false;             // empty when faults stopped, and a founder is gone: it waits for ever
};

class Simulation {
 public:
  Simulation(const SimOptions& opts, std::uint64_t seed)
      : opts_(opts), seed_(seed), rng_(seed), mrng_(seed ^ 0x6d656d6265727368ull),
        prng_(seed ^ 0x706970656c696e65ull) {
    draw_weather();
    // Three seeds in four run the daemon's pipelined cycle (driver.h
    // start_ready): a Ready's sync ends a random number of node visits
    // later, and the core takes messages, ticks and proposals meanwhile.
    pipelined_ = prng_.below(4) != 0;
    // --compact-keep: compaction keeps 1..2x compact_every entries behind
    // the snapshot (the daemon keeps some, raft.h compact). Drawn from its
    // own stream, so that the default runs stay draw for draw as before.
    if (opts_.compact_keep) {
      Prng krng(seed ^ 0x6b656570656e7472ull);
      compact_keep_ = 1 + krng.below(2 * w_.compact_every);
    }
    if (pipelined_) {
      sync_done_chance_ = 0.15 + prng_.unit() * 0.8;
      stall_chance_ = prng_.chance(0.3) ? 0.0 : prng_.unit() * 0.3;
      trace("pipelined sync: ends with chance %.2f per node visit, stalls %.2f", sync_done_chance_,
            stall_chance_);
    }
    if (opts_.membership) conf_rate_ = 0.005 + mrng_.unit() * 0.03;
    // --lifecycle: one node more, a stranger (started, waiting, never added).
    int n = opts_.nodes + (opts_.membership ? kSpareNodes : 0) + (opts_.lifecycle ? 1 : 0);
    // Steady phases ask for progress with a minority down; lost members
    // are down for good here, so those phases are off.
    if (opts_.lifecycle) w_.steady_phases = 0;
    // Every node's monotonic clock has its own origin: a fixed offset of
    // 0 to max_clock_skew_ms (whole ticks, so leases end exactly on steps).
    clock_offset_ns_.assign(static_cast<std::size_t>(n + 1), 0);
    for (int i = 1; i <= n; ++i) {
      clock_offset_ns_[static_cast<std::size_t>(i)] =
          static_cast<TimeNs>(rng_.below(w_.max_clock_skew_ms / 10 + 1)) * kTickNs;
    }
    for (int i = 1; i <= opts_.nodes; ++i) voters_.push_back(static_cast<NodeId>(i));
    nodes_.resize(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) {
      Node& x = nodes_[static_cast<std::size_t>(i)];
      x.id = static_cast<NodeId>(i + 1);
      if (opts_.lifecycle) {
        // Started by the lifecycle plan (run()), every one with its flags.
        x.up = false;
        x.joined = false;
        std::vector<NodeId> peers = voters_;
        if (i >= opts_.nodes) peers.push_back(x.id);  // the stranger lists the group and itself
        x.flag_peers = peers;
      } else if (i < opts_.nodes) {
        start_node(x);
      } else {
        x.up = false;  // a spare: started when it is added
        x.joined = false;
      }
    }
    blocked_.assign(static_cast<std::size_t>(n + 1), std::vector<bool>(static_cast<std::size_t>(n + 1), false));
    clogged_until_.assign(static_cast<std::size_t>(n + 1), std::vector<std::uint64_t>(static_cast<std::size_t>(n + 1), 0));
  }

  SeedResult run() {
    std::uint64_t quiet = std::min<std::uint64_t>(kLivenessBudgetSteps, opts_.steps / 2);
    faults_end_ = opts_.steps - quiet;
    if (w_.steady_phases > 0 && opts_.nodes >= 3 && opts_.steps >= kSteadyMinSeedSteps) {
      next_steady_step_ = rng_.range(100, faults_end_ / 2);
    }
    if (opts_.lifecycle) plan_lifecycle();
    for (step_ = 0; step_ < opts_.steps && result_.passed; ++step_) {
      if (step_ < faults_end_) {
        if (!steady_ && step_ == next_steady_step_) start_steady();
        if (!steady_) inject_faults();
      } else if (step_ == faults_end_) {
        if (steady_) end_steady();  // the liveness phase takes over
        calm_down();
        if (opts_.lifecycle && !quorum_left()) {
          // More founders refused than planned (one that answered a
          // heartbeat and crashed before its first durable write is
          // refused: HEARD records any message): nothing to ask of liveness.
          trace("no majority of the founders can vote any more: liveness not checked");
          break;
        }
      }
      if (opts_.lifecycle) lifecycle_step();
      restart_due_nodes();
      leader_entries();
      if (step_ < faults_end_) {
        if (rng_.chance(w_.propose)) client_propose();
        if (!steady_ && rng_.chance(w_.transfer)) transfer();
        if (!steady_ && opts_.membership && mrng_.chance(conf_rate_)) conf_change();
        if (steady_) steady_probe();
      } else {
        liveness_probe();
      }
      deliver_due();
      deliver_capsules();
      for (Node& n : nodes_) {
        if (!n.up) continue;
        if (!opts_.lifecycle || ticks_now(n)) n.raft->tick();
        process(n);
      }
      if (pipelined_) {
        // Syncs that did not stall end within their step (a tick is far
        // longer than an fdatasync).
        end_of_step_ = true;
        for (Node& n : nodes_) {
          if (n.up && n.pending) process(n);
        }
        end_of_step_ = false;
      }
      check_invariants();
      if (steady_ && result_.passed) check_steady();
      if (result_.passed && step_ >= faults_end_ && liveness_done_) {
        check_replicas_converged();
        if (converged_) check_pending_committed();
        if (converged_ || step_ >= liveness_deadline()) break;
      }
      if (step_ + 1 == opts_.steps && !liveness_done_ && step_ < liveness_deadline()) {
        ++opts_.steps;  // a snapshot is still streaming: its budget is not spent yet
      }
    }
    if (opts_.lifecycle && step_ >= faults_end_ && !quorum_left()) liveness_done_ = converged_ = true;
    if (result_.passed && liveness_done_ && !converged_) {
      fail("replicas converge", "replicas did not settle on one applied index after faults stopped" +
                                    cluster_summary());
    }
    if (result_.passed && !liveness_done_) {
      fail("liveness", "no leader committed a new proposal on every node within " +
                           std::to_string(liveness_deadline() - faults_end_) + " steps after faults stopped" +
                           cluster_summary());
    }
    for (const Node& n : nodes_) {
      if (n.raft) result_.snapshots_installed += n.raft->stats().snapshots_installed;
    }
    result_.committed = history_.empty() ? 0 : history_.rbegin()->first;
    result_.leaders = leaders_.size();
    result_.steps = std::min(step_ + 1, opts_.steps);
    return result_;
  }

 private:
  // Faults stopped at faults_end_; by this step the cluster must have
  // committed a marker everywhere. A lagging node may need the whole
  // snapshot, so its size (in round trips of chunk windows) is added.
  std::uint64_t liveness_deadline() const {
    return faults_end_ + kLivenessBudgetSteps + snapshot_steps() + catchup_steps_;
  }

  // Steps to stream the largest snapshot, one chunk window per round trip.
  std::uint64_t snapshot_steps() const {
    std::size_t biggest = 0;
    for (const Node& n : nodes_) biggest = std::max(biggest, n.disk.snapshot().data.size());
    std::uint64_t windows = biggest / (chunk_bytes_ * raft::kDefaultMaxSnapshotChunksInflight) + 1;
    return windows * 2 * (w_.max_delay_steps + 1);
  }

  // Transient faults (loss, crashes, partitions that come and go) happen
  // now: before the liveness phase and outside steady phases.
  bool storming() const { return step_ < faults_end_ && !steady_; }

  // --- setup ---

  void draw_weather() {
    auto storm = [&](double max) { return rng_.chance(0.3) ? 0.0 : rng_.unit() * max; };
    w_.loss = storm(0.15);
    w_.duplicate = storm(0.05);
    w_.bit_flip = storm(0.01);
    w_.max_delay_steps = rng_.range(0, 4);
    w_.partition = storm(0.02);
    w_.heal = 0.01 + rng_.unit() * 0.05;
    w_.clog = storm(0.02);
    w_.crash = storm(0.02);
    w_.crash_in_io = storm(0.04);
    w_.quick_restart = rng_.unit();
    w_.crash_leader = storm(0.02);
    w_.crash_new_leader = storm(0.5);
    w_.propose = 0.05 + rng_.unit() * 0.35;
    w_.transfer = storm(0.005);
    w_.compact_every = rng_.range(3, 60);
    w_.capsule = storm(0.004);
    w_.max_clock_skew_ms = rng_.chance(0.3) ? 0 : rng_.range(10, 500);
    w_.steady_phases = rng_.chance(0.3) ? 0 : rng_.range(1, 3);
    pre_vote_ = rng_.chance(0.8);
    check_quorum_ = rng_.chance(0.8);
    heartbeat_ticks_ = static_cast<int>(rng_.range(1, 3));
    max_inflight_ = rng_.range(1, 8);
    max_entries_ = rng_.chance(0.4) ? 1 : rng_.range(2, 16);
    chunk_bytes_ = rng_.range(1024, 16384);
    trace("weather loss=%.3f dup=%.3f flip=%.4f delay<=%llu part=%.3f clog=%.3f crash=%.4f io_crash=%.4f "
          "prevote=%d checkquorum=%d",
          w_.loss, w_.duplicate, w_.bit_flip, static_cast<unsigned long long>(w_.max_delay_steps),
          w_.partition, w_.clog, w_.crash, w_.crash_in_io, pre_vote_ ? 1 : 0, check_quorum_ ? 1 : 0);
  }

  raft::Config node_config(NodeId id, const std::vector<NodeId>* voters = nullptr) {
    raft::Config c;
    c.id = id;
    // Spares join a running group: no bootstrap configuration. --lifecycle:
    // the --peer ids of a node the gate lets vote, none while it waits.
    if (voters != nullptr) {
      c.voters = *voters;
    } else if (!opts_.lifecycle && id <= static_cast<NodeId>(opts_.nodes)) {
      c.voters = voters_;
    }
    c.election_ticks = kElectionTicks;
    c.heartbeat_ticks = heartbeat_ticks_;
    c.pre_vote = pre_vote_;
    c.check_quorum = check_quorum_;
    c.max_inflight = max_inflight_;
    c.max_entries_per_append = max_entries_;
    c.snapshot_chunk_bytes = chunk_bytes_;
    c.max_uncommitted_entries = kMaxUncommittedInSim;
    c.rng_seed = rng_.next();
    switch (opts_.bug) {
      case PlantedBug::kNone: break;
      case PlantedBug::kCommitOldTerm: c.faults.commit_old_term_entries = true; break;
      case PlantedBug::kVoteBeforePersist: c.faults.vote_before_persist = true; break;
      case PlantedBug::kKeepVoteOnNewTerm: c.faults.keep_vote_on_new_term = true; break;
      case PlantedBug::kSkipLogUpToDate: c.faults.skip_log_up_to_date_check = true; break;
      case PlantedBug::kHeartbeatFullCommit: c.faults.heartbeat_full_commit = true; break;
      case PlantedBug::kAckBeforePersist: c.faults.ack_before_persist = true; break;
      case PlantedBug::kExpireIgnoresLease: break;  // planted in apply_command, not in the core
      case PlantedBug::kQuorumOfAll: c.faults.commit_needs_all_voters = true; break;
      case PlantedBug::kLeaderNeverStepsDown: c.faults.check_quorum_counts_sends = true; break;
      case PlantedBug::kNoLeaderStickiness: c.faults.ignore_leader_lease = true; break;
      case PlantedBug::kAcceptStaleResponses: c.faults.accept_stale_responses = true; break;
      case PlantedBug::kAcceptStaleAppendResponses: c.faults.accept_stale_append_responses = true; break;
      case PlantedBug::kAssumeFollowersCommitted: c.faults.assume_followers_committed = true; break;
      case PlantedBug::kConfOnCommit: c.faults.conf_on_commit = true; break;
      case PlantedBug::kQuorumFromOldConfig: c.faults.quorum_from_old_config = true; break;
      case PlantedBug::kLearnerCountsAsVoter: c.faults.learner_counts_as_voter = true; break;
      case PlantedBug::kRemovedLeaderKeepsLeading: c.faults.removed_leader_keeps_leading = true; break;
      case PlantedBug::kConcurrentChanges: c.faults.concurrent_changes = true; break;
      default: break;  // --lifecycle's: in the gate (gate_mutations) and the node model
    }
    return c;
  }

  // (Re)builds a node's volatile half from its disk: the state machine
  // from the snapshot, then the Raft core.
  void start_node(Node& n) {
    if (opts_.lifecycle) {
      lifecycle_start(n);
      return;
    }
    n.up = true;
    n.leader_start_term = 0;
    restore_sm(n, n.disk.snapshot());
    n.raft = std::make_unique<Raft>(node_config(n.id), n.disk);
    n.applied = n.disk.snapshot().meta.index;
    n.seen_commit = n.applied;
    n.running_term = n.raft->term();
  }

  // --- the state machine ---

  // A fresh state machine, or the one in `snap` (index 0: none). Rebuilds
  // the per-node holder view the lock-level checks use from its table.
  void restore_sm(Node& n, const raft::Snapshot& snap) {
    n.sm = std::make_unique<cluster::LockStateMachine>(locks::Limits{});
    n.max_token = 0;
    n.holders.clear();
    if (snap.meta.index == 0) return;
    std::string error;
    if (!n.sm->restore(snap.data, snap.meta.index, error)) {
      fail("snapshots restore", "n" + std::to_string(n.id) + ": " + error);
      return;
    }
    const locks::LockTable& t = n.sm->table();
    n.max_token = t.next_token() - 1;
    t.for_each([&](std::string_view key, const locks::KeyState& k) {
      k.for_each_holder([&](const locks::Holder& h) {
        n.holders[std::string(key)][h.token] = Holding{h.expires_at_ns, k.shared()};
      });
    });
  }

  // Applies one committed entry through the daemon's state machine, checking
  // the lock-level invariants; returns the canonical outcome (LockModel's
  // format).
  std::string apply_entry(Node& n, const Entry& entry) {
    const Entry* e = &entry;
    Entry planted;
    if (opts_.bug == PlantedBug::kExpireIgnoresLease && e->type == EntryType::kCommand) {
      // Planted: the expire path forgets the deadline (its time is moved
      // past the lease). Every replica does the same, so they agree; only
      // the oracle, fed the real command, knows better.
      cluster::LockCommand c;
      if (cluster::decode_lock_command(e->data, c) == cluster::LockCommandError::kOk &&
          c.type == cluster::LockCommandType::kExpire) {
        const locks::KeyState* ks = n.sm->table().find(c.key);
        const locks::Holder* h = ks ? ks->holder_with(c.token) : nullptr;
        if (h != nullptr) {
          c.now_ns = std::max(c.now_ns, n.sm->to_leader_ns(h->expires_at_ns));
          planted = *e;
          planted.data = cluster::encode_lock_command(c);
          e = &planted;
        }
      }
    }
    const cluster::EntryResult& r = n.sm->apply(*e);
    n.sm->table().check_invariants();
    if (!r.command) {
      if (e->type == EntryType::kConfChange) return "conf";
      return e->type == EntryType::kNoop ? "noop" : "undecodable";
    }
    const TimeNs now = r.table_now_ns;
    const cluster::LockCommand& c = r.cmd;
    // Every grant, checked against the holders this node granted before
    // (not against its table, which a bug may have emptied): an exclusive
    // grant only when no other holder's lease runs, a shared one only
    // beside shared holders and within the key's limit (§5b).
    auto grant = [&](const std::string& key, locks::Token token, bool shared) {
      if (token <= n.max_token) {
        fail("tokens strictly increase", "node " + std::to_string(n.id) + " granted token " +
                                             std::to_string(token) + " after " + std::to_string(n.max_token));
      }
      n.max_token = std::max(n.max_token, token);
      auto& held = n.holders[key];
      std::erase_if(held, [now](const auto& held_entry) { return held_entry.second.expires_ns <= now; });
      for (const auto& [t, h] : held) {
        if (!shared || !h.shared) {
          fail(shared ? "no shared holder beside an exclusive one" : "one holder per key",
               "node " + std::to_string(n.id) + " granted " + key + " to token " + std::to_string(token) +
                   (shared ? " (shared)" : "") + " while token " + std::to_string(t) +
                   (h.shared ? " (shared)" : "") + " still held it");
          break;
        }
      }
      const locks::KeyState* ks = n.sm->table().find(key);
      const locks::Holder* mine = ks ? ks->holder_with(token) : nullptr;
      held[token] = Holding{mine ? mine->expires_at_ns : now, shared};
      if (shared && ks && ks->limit() != 0 && held.size() > ks->limit()) {
        fail("shared holders within the limit", "node " + std::to_string(n.id) + " has " +
                                                     std::to_string(held.size()) + " live holders of " + key +
                                                     " under limit " + std::to_string(ks->limit()));
      }
    };
    std::string canonical;
    using T = cluster::LockCommandType;
    if (c.type == T::kLeaderStart) {
      canonical = "leader-start dropped " + std::to_string(r.waiters_dropped);
    } else if (c.type == T::kClock) {
      canonical = "clock";
    } else if (c.type == T::kConfig) {
      canonical = "config";  // the simulated leaders never propose one: caps stay the defaults
    } else if (r.skipped) {
      canonical = "skipped";
    } else {
      switch (c.type) {
        case T::kAcquire:
        case T::kAcquireShared:
          switch (r.acquire) {
            case locks::AcquireOutcome::kGranted: canonical = "granted " + std::to_string(r.granted); break;
            case locks::AcquireOutcome::kHeld: canonical = "held"; break;
            case locks::AcquireOutcome::kQueued: canonical = "queued"; break;
            case locks::AcquireOutcome::kBusy: canonical = "busy"; break;
            case locks::AcquireOutcome::kLimitMismatch: canonical = "limit-mismatch"; break;
          }
          break;
        case T::kRelease: canonical = r.changed ? "released" : "not-released"; break;
        case T::kExpire: canonical = r.changed ? "expired" : "not-expired"; break;
        case T::kKeep: canonical = r.changed ? "kept" : "not-kept"; break;
        case T::kCancelWaiter:
        case T::kCancelWaiters: canonical = r.changed ? "cancelled" : "not-waiting"; break;
        case T::kLeaderStart:
        case T::kClock:
        case T::kConfig: break;
      }
      // A release or expiry ends that one holding before any hand-off.
      if ((c.type == T::kRelease || c.type == T::kExpire) && r.changed) {
        auto it = n.holders.find(c.key);
        if (it != n.holders.end()) it->second.erase(c.token);
      }
      // A keep moves the holding's end, earlier or later (§6a).
      if (c.type == T::kKeep && r.changed) {
        const locks::KeyState* ks = n.sm->table().find(c.key);
        const locks::Holder* h = ks ? ks->holder_with(c.token) : nullptr;
        if (h != nullptr) n.holders[c.key][c.token].expires_ns = h->expires_at_ns;
      }
      if (r.granted != 0) grant(c.key, r.granted, c.type == T::kAcquireShared);
      for (const locks::Delivery& d : r.deliveries) {
        if (d.kind == locks::DeliveryKind::kGranted) grant(d.key, d.token, d.shared);
      }
    }
    // The reply, then every reply owed to a waiter, in full (who, token).
    for (const locks::Delivery& d : r.deliveries) {
      canonical += d.kind == locks::DeliveryKind::kGranted ? " +grant " : " +timeout ";
      canonical += std::to_string(d.token) + "/" + d.owner + "/" + d.key + "/" + std::to_string(d.waiter) + "/" +
                   std::to_string(d.client);
    }
    return canonical;
  }

  // The lock oracle (LockModel): fed each committed command once, in log
  // order, when the first replica applies it; that replica's reply and
  // whole table must be what the contract says.
  void check_oracle(const Node& n, const Entry& e, const std::string& outcome) {
    if (e.index <= oracle_index_ || !result_.passed) return;
    if (e.index != oracle_index_ + 1) {
      fail("lock oracle", "n" + std::to_string(n.id) + " applied " + std::to_string(e.index) +
                              " before any replica applied " + std::to_string(oracle_index_ + 1));
      return;
    }
    oracle_index_ = e.index;
    if (e.type != EntryType::kCommand) return;  // no-ops and configurations leave the table alone
    cluster::LockCommand c;
    std::string want = cluster::decode_lock_command(e.data, c) == cluster::LockCommandError::kOk
                           ? oracle_.apply(c, e.index, e.term)
                           : "undecodable";
    result_.shared_grants = oracle_.shared_grants();
    result_.shared_runs = oracle_.shared_runs();
    result_.limit_mismatches = oracle_.limit_mismatches();
    if (outcome != want) {
      fail("lock oracle", "entry " + std::to_string(e.index) + " on n" + std::to_string(n.id) + ": replica says '" +
                              outcome + "', the contract says '" + want + "'");
      return;
    }
    std::string diff = oracle_diff(n.sm->table());
    if (!diff.empty()) {
      fail("lock oracle", "after entry " + std::to_string(e.index) + " on n" + std::to_string(n.id) + ": " + diff);
    }
  }

  // Where `t` differs from the oracle's state ("" when it does not): keys,
  // holders, tokens, expiries, queues in order, the next token.
  std::string oracle_diff(const locks::LockTable& t) const {
    if (t.next_token() != oracle_.next_token()) {
      return "next token " + std::to_string(t.next_token()) + ", contract " + std::to_string(oracle_.next_token());
    }
    if (t.key_count() != oracle_.keys().size()) {
      return std::to_string(t.key_count()) + " keys, contract " + std::to_string(oracle_.keys().size());
    }
    for (const auto& [key, m] : oracle_.keys()) {
      const locks::KeyState* k = t.find(key);
      if (!k) return "key " + key + " missing";
      auto row = [](const std::string& owner, std::uint64_t token, TimeNs expires) {
        return " " + owner + " token " + std::to_string(token) + " expires " + std::to_string(expires);
      };
      auto waiter = [](std::uint64_t id, const std::string& owner, std::uint64_t client, std::uint64_t lease_ms,
                       TimeNs deadline, bool shared, std::uint16_t limit) {
        return " w" + std::to_string(id) + "/" + owner + "/" + std::to_string(client) + "/" +
               std::to_string(lease_ms) + "/" + std::to_string(deadline) +
               (shared ? "/S" + std::to_string(limit) : "/A");
      };
      // The limit only where it rules (§5b: live shared holders or queued
      // `S` waiters carry it); an ended holder's limit is history.
      const TimeNs now = oracle_.now();
      int table_limit = -1;
      bool live = false;
      k->for_each_holder([&](const locks::Holder& h) { live = live || h.expires_at_ns > now; });
      if (k->waiters() != nullptr &&
          std::any_of(k->waiters()->begin(), k->waiters()->end(), [](const locks::Waiter& w) { return w.shared; })) {
        table_limit = k->limit();
      } else if (k->shared() && live) {
        table_limit = k->limit();
      }
      std::string got = std::string(k->shared() ? "shared" : "exclusive") + " limit " + std::to_string(table_limit);
      k->for_each_holder([&](const locks::Holder& h) { got += row(std::string(h.owner.view()), h.token, h.expires_at_ns); });
      std::string want = std::string(m.shared ? "shared" : "exclusive") + " limit " +
                         std::to_string(LockModel::limit_in_force(m, now));
      for (const auto& [token, h] : m.holders) want += row(h.owner, token, h.expires_ns);
      if (const auto* waiters = k->waiters()) {
        for (const locks::Waiter& w : *waiters) {
          got += waiter(w.id, w.owner, w.client, w.lease_ms, w.wait_deadline_ns, w.shared, w.limit);
        }
      }
      for (const LockModel::Waiter& w : m.queue) {
        want += waiter(w.id, w.owner, w.client, w.lease_ms, w.wait_deadline_ns, w.shared, w.limit);
      }
      if (got != want) return "key " + key + " is '" + got + "', contract '" + want + "'";
    }
    return "";
  }

  // --- the node's driver loop: raft::drive_ready with a disk that can tear ---

  // The simulator's side of the Ready cycle for one node.
  class SimReadyHandler final : public raft::ReadyHandler {
   public:
    SimReadyHandler(Simulation& sim, Node& n) : sim_(sim), n_(n) {}
    bool crashed() const { return crashed_; }

    void send(std::vector<Message>& messages) override {
      for (const Message& m : messages) sim_.send(m);
    }
    raft::StorageStatus persist(const Ready& rd) override {
      if (sim_.storming() && sim_.rng_.chance(sim_.w_.crash_in_io)) {
        // The machine dies half way through writing this Ready: a random
        // prefix of (snapshot, entries..., hard state) reaches the disk.
        std::size_t ops = (rd.snapshot ? 1 : 0) + rd.entries.size() + (rd.hard_state ? 1 : 0);
        sim_.persist(n_, rd, sim_.rng_.below(ops + 1));
        crashed_ = true;
        return {raft::StorageError::kIo, "simulated crash during persist"};
      }
      sim_.persist(n_, rd, SIZE_MAX);
      return raft::StorageStatus::Ok();
    }
    // Pipelined: nothing reaches the disk until the sync ends (process()).
    raft::StorageStatus write(const Ready& rd, bool& sync_pending) override {
      sync_pending = !rd.entries.empty() || rd.hard_state.has_value();
      if (!sync_pending) return raft::StorageStatus::Ok();
      if (!n_.pending) {
        n_.pending = Node::PendingWrite{};
        n_.sync_due_step = sim_.step_ + sim_.stall_steps();
        n_.sync_visit = sim_.visits_;
      }
      // Another write before the last one synced (only a driver that did
      // not wait for it does that): the disk syncs both together.
      Node::PendingWrite& p = *n_.pending;
      if (!rd.entries.empty()) {
        const Index first = rd.entries.front().index;
        while (!p.entries.empty() && p.entries.back().index >= first) p.entries.pop_back();
        p.entries.insert(p.entries.end(), rd.entries.begin(), rd.entries.end());
      }
      if (rd.hard_state) p.hard_state = rd.hard_state;
      return raft::StorageStatus::Ok();
    }
    void install(const raft::Snapshot& snapshot) override {
      sim_.restore_sm(n_, snapshot);
      n_.applied = snapshot.meta.index;
      sim_.trace("n%llu installed snapshot @%llu", ull(n_.id), ull(n_.applied));
    }
    void apply(const Entry& e) override {
      if (e.index != n_.applied + 1) {
        sim_.fail("apply order", "node " + std::to_string(n_.id) + " applied " + std::to_string(e.index) +
                                     " after " + std::to_string(n_.applied));
        return;
      }
      std::string outcome = sim_.apply_entry(n_, e);
      n_.applied = e.index;
      sim_.record_applied(n_, e, outcome);
      sim_.check_oracle(n_, e, outcome);
    }

   private:
    Simulation& sim_;
    Node& n_;
    bool crashed_ = false;
  };

  void process(Node& n) {
    if (!n.up) return;
    ++visits_;
    SimReadyHandler handler(*this, n);
    if (pipelined_) {
      if (!process_pipelined(n, handler)) return;
    } else {
      raft::drive_ready(*n.raft, handler, kMaxReadyRoundsPerVisit);
    }
    if (handler.crashed()) {
      crash(n, "during persist");
      return;
    }
    // The daemon compacts between batches only (compact() waits for advance()).
    if (n.awaiting_sync) return;
    if (n.applied >= n.disk.snapshot().meta.index + w_.compact_every) {
      raft::Snapshot snap;
      snap.meta = raft::SnapshotMeta{n.applied, *n.raft->term_at(n.applied), n.raft->conf_at(n.applied)};
      snap.data = n.sm->snapshot();
      n.disk.save_snapshot(snap);
      if (opts_.lifecycle) {
        // An operator's backup file (lockctl backup) of this moment.
        backups_.push_back(snap);
        if (backups_.size() > kMaxBackups) backups_.erase(backups_.begin());
        if (opts_.bug == PlantedBug::kHeardNotDurable) {
          n.heard_disk = n.heard;  // written lazily (the planted bug): with the snapshot
        }
      }
      n.raft->compact(n.applied, std::move(snap.data), compact_keep_);
    }
  }

  // The pipelined cycle (driver.h start_ready / complete_ready): false if
  // the node crashed. A visit may end the sync in flight (then the next
  // Ready is written at once), or leave it running while the core takes
  // more input.
  bool process_pipelined(Node& n, SimReadyHandler& handler) {
    for (std::size_t round = 0; round < kMaxReadyRoundsPerVisit; ++round) {
      // The disk syncs on its own schedule, whatever the driver believes.
      if (n.pending && sync_ends_now(n)) {
        const Node::PendingWrite& p = *n.pending;
        if (storming() && prng_.chance(w_.crash_in_io)) {
          crash(n, "during sync");  // tears the pending write
          return false;
        }
        persist(n, nullptr, p.entries, p.hard_state, SIZE_MAX);
        n.pending.reset();
        if (n.awaiting_sync) {
          n.awaiting_sync = false;
          raft::complete_ready(*n.raft);
        }
      }
      if (n.awaiting_sync) {
        raft::send_while_syncing(*n.raft, handler);
        return true;
      }
      if (!n.raft->has_ready()) return true;
      bool syncing = false;
      if (!raft::start_ready(*n.raft, handler, syncing).ok()) return true;  // crashed() says so
      n.awaiting_sync = syncing;
    }
    return true;
  }

  // Pipelined: a sync normally ends within the step it began in, at a
  // random node visit or at the end of the step (a tick is far longer than
  // an fdatasync). In a
  // storm the disk may stall for up to kMaxStallSteps (the node's
  // heartbeats and answers wait, as they would behind a blocked loop),
  // which leaves time for acks, elections and crashes to land mid-sync.
  std::uint64_t stall_steps() {
    if (!storming() || !prng_.chance(stall_chance_)) return 0;
    return prng_.range(1, kMaxStallSteps);
  }
  bool sync_ends_now(const Node& n) {
    if (step_ < n.sync_due_step) return false;
    if (step_ > n.sync_due_step || end_of_step_) return true;
    if (visits_ == n.sync_visit) return false;  // some input lands in every window
    // Out of storms, at the next visit: replication then runs as fast as
    // with a synchronous disk, so the liveness bounds still hold.
    return !storming() || prng_.chance(sync_done_chance_);
  }

  // Writes the first `ops` operations of `rd` to disk, in the order the
  // contract asks for.
  void persist(Node& n, const Ready& rd, std::size_t ops) {
    persist(n, rd.snapshot ? &*rd.snapshot : nullptr, rd.entries, rd.hard_state, ops);
  }
  void persist(Node& n, const raft::Snapshot* snapshot, std::span<const Entry> entries,
               const std::optional<raft::HardState>& hard_state, std::size_t ops) {
    if (ops == 0) return;
    if (snapshot) {
      n.disk.save_snapshot(*snapshot);
      if (--ops == 0) return;
    }
    std::size_t k = std::min(ops, entries.size());
    n.disk.append(entries.first(k));
    ops -= k;
    if (ops == 0) return;
    if (hard_state) {
      if (hard_state->term < n.durable_term) {
        fail("terms never decrease", "node " + std::to_string(n.id) + " persisted term " +
                                         std::to_string(hard_state->term) + " after " +
                                         std::to_string(n.durable_term));
      }
      n.durable_term = std::max(n.durable_term, hard_state->term);
      if (opts_.lifecycle && hard_state->vote != raft::kNoNode) {
        // Across every incarnation of the id, whatever its disk lost.
        auto [it, fresh] = votes_.try_emplace({n.id, hard_state->term}, hard_state->vote);
        if (!fresh && it->second != hard_state->vote) {
          fail("one vote per term under one id",
               "n" + std::to_string(n.id) + " voted for n" + std::to_string(it->second) + " in term " +
                   std::to_string(hard_state->term) + " and now for n" + std::to_string(hard_state->vote) +
                   (n.lost_data ? " (after losing its data)" : ""));
        }
      }
      n.disk.set_hard_state(*hard_state);
    }
  }

  void crash(Node& n, const char* why) {
    trace("n%llu crashes (%s)", ull(n.id), why);
    if (n.pending) {
      // A write whose sync had not ended: any prefix of it may be on disk.
      const Node::PendingWrite& p = *n.pending;
      persist(n, nullptr, p.entries, p.hard_state, prng_.below(p.entries.size() + (p.hard_state ? 1 : 0) + 1));
      n.pending.reset();
    }
    n.awaiting_sync = false;
    n.up = false;
    n.raft.reset();
    n.sm.reset();
    n.restart_step = step_ + (rng_.chance(w_.quick_restart) ? rng_.range(1, 3) : rng_.range(5, 80));
    ++result_.crashes;
  }

  void restart_due_nodes() {
    for (Node& n : nodes_) {
      if (n.removed && n.up && (step_ >= n.stop_step || step_ >= faults_end_)) {
        trace("n%llu stops: removed", ull(n.id));
        n.pending.reset();
        n.awaiting_sync = false;
        n.up = false;
        n.raft.reset();
        n.sm.reset();
      }
      if (!n.joined || n.removed || n.gone) continue;
      if (!n.up && (step_ >= n.restart_step || step_ >= faults_end_)) {
        trace("n%llu restarts at term %llu", ull(n.id), ull(n.disk.hard_state().term));
        start_node(n);
      }
    }
  }

  // --- network ---

  void send(const Message& m) {
    if (network_.size() >= kMaxNetworkMessages) return;
    if (m.to == raft::kNoNode || m.to > nodes_.size()) return;  // stale --peer flags name ids nobody has
    std::string bytes;
    raft::encode_message(m, bytes);
    std::uint64_t due = step_ + rng_.range(0, w_.max_delay_steps);
    // Append acks and vote grants are the capsules that can mislead: more of them.
    bool ack = m.type == raft::MessageType::kAppendResp && !m.reject;
    bool vote = m.type == raft::MessageType::kVoteResp && !m.reject;
    double capsule = ack || vote ? w_.capsule * 10 : w_.capsule;
    if (storming() && capsules_.size() < kMaxCapsules && rng_.chance(capsule)) {
      // Half of them ambush: they wait (up to kCapsuleMaxSteps more) until
      // the recipient leads a later term, when an old answer does harm.
      capsules_.push_back(InFlight{step_ + rng_.range(kCapsuleMinSteps, kCapsuleMaxSteps), m.from, m.to, bytes,
                                   m.term, rng_.chance(0.5), ack ? m.index : 0, vote});
    }
    network_.push_back(InFlight{due, m.from, m.to, std::move(bytes)});
  }

  // An ambushing capsule's moment: its recipient campaigns (a vote grant)
  // or leads (anything else) in a later term, and an append ack no longer
  // tells the truth (the sender's log changed).
  bool worst_moment(const InFlight& f) const {
    const Node& to = nodes_[f.to - 1];
    if (!to.up || to.raft->term() <= f.term) return false;
    if (f.vote) return to.raft->role() == Role::kCandidate;
    if (to.raft->role() != Role::kLeader) return false;
    if (f.acked == 0) return true;
    const Node& from = nodes_[f.from - 1];
    return from.up && from.raft->log_base() < f.acked &&
           from.raft->term_at(f.acked) != to.raft->term_at(f.acked);
  }

  // Time capsules: a message from long ago (older terms, older logs)
  // arrives, whatever the partitions say. A capsule to a down node waits
  // for it; an ambushing one for its recipient to lead a later term. Held during steady phases, whose checks assume old traffic has
  // drained.
  void deliver_capsules() {
    if (steady_) return;
    for (std::size_t i = 0; i < capsules_.size();) {
      InFlight& f = capsules_[i];
      Node& to = nodes_[f.to - 1];
      bool ambushing = f.ambush && f.due_step + kCapsuleMaxSteps > step_ && !worst_moment(f);
      if (f.due_step > step_ || !to.up || ambushing) {
        ++i;
        continue;
      }
      InFlight c = std::move(f);
      capsules_.erase(capsules_.begin() + static_cast<std::ptrdiff_t>(i));
      Message m;
      if (raft::decode_message(c.bytes, m) != raft::DecodeError::kOk) continue;
      if (opts_.lifecycle && !lifecycle_admits(c.from, to, m.type)) continue;
      trace("time capsule %s n%llu->n%llu term %llu", std::string(raft::to_string(m.type)).c_str(), ull(c.from),
            ull(c.to), ull(m.term));
      to.raft->step(m);
      process(to);
    }
  }

  void deliver_due() {
    std::vector<InFlight> due;
    std::vector<InFlight> later;
    for (InFlight& f : network_) (f.due_step <= step_ ? due : later).push_back(std::move(f));
    network_ = std::move(later);
    // Reordering: messages due in the same step arrive in any order.
    for (std::size_t i = due.size(); i > 1; --i) std::swap(due[i - 1], due[rng_.below(i)]);
    for (InFlight& f : due) {
      Node& to = nodes_[f.to - 1];
      if (!to.up || blocked_[f.from][f.to]) continue;
      if (clogged_until_[f.from][f.to] > step_) {
        f.due_step = clogged_until_[f.from][f.to];
        network_.push_back(std::move(f));
        continue;
      }
      if (storming()) {
        if (rng_.chance(w_.loss)) continue;
        if (rng_.chance(w_.duplicate)) {
          network_.push_back(InFlight{step_ + rng_.range(1, 5), f.from, f.to, f.bytes});
        }
        if (rng_.chance(w_.bit_flip) && !f.bytes.empty()) {
          std::size_t bit = rng_.below(f.bytes.size() * 8);
          f.bytes[bit / 8] = static_cast<char>(f.bytes[bit / 8] ^ (1 << (bit % 8)));
        }
      }
      Message m;
      if (raft::decode_message(f.bytes, m) != raft::DecodeError::kOk) {
        ++decode_errors_;
        continue;
      }
      if (opts_.lifecycle && !lifecycle_admits(f.from, to, m.type)) continue;
      if (opts_.trace_messages) {
        trace("deliver %s n%llu->n%llu term %llu idx %llu logterm %llu commit %llu rej %d hint %llu n=%zu snap %llu off %llu done %d",
              std::string(raft::to_string(m.type)).c_str(), ull(m.from), ull(m.to), ull(m.term), ull(m.index),
              ull(m.log_term), ull(m.commit), m.reject ? 1 : 0, ull(m.reject_hint), m.entries.size(),
              ull(m.snapshot.index), ull(m.offset), m.done ? 1 : 0);
      }
      to.raft->step(m);
      process(to);
    }
  }

  // --- faults ---

  void inject_faults() {
    std::size_t n = nodes_.size();
    if (rng_.chance(w_.partition)) {
      // Cut a random group off; sometimes only one way.
      std::vector<bool> side(n + 1, false);
      for (std::size_t i = 1; i <= n; ++i) side[i] = rng_.chance(0.5);
      bool one_way = rng_.chance(0.3);
      for (std::size_t a = 1; a <= n; ++a) {
        for (std::size_t b = 1; b <= n; ++b) {
          if (side[a] && !side[b]) {
            blocked_[a][b] = true;
            if (!one_way) blocked_[b][a] = true;
          }
        }
      }
      trace("partition%s", one_way ? " (one-way)" : "");
    }
    if (rng_.chance(w_.heal)) {
      for (auto& row : blocked_) std::fill(row.begin(), row.end(), false);
    }
    if (rng_.chance(w_.clog)) {
      std::size_t a = rng_.range(1, n);
      std::size_t b = rng_.range(1, n);
      clogged_until_[a][b] = step_ + rng_.range(5, 60);
    }
    for (std::size_t i = 0; i < doomed_.size();) {
      Doomed d = doomed_[i];
      if (d.step > step_) {
        ++i;
        continue;
      }
      doomed_.erase(doomed_.begin() + static_cast<std::ptrdiff_t>(i));
      Node& v = nodes_[d.node - 1];
      if (v.up && v.raft->term() == d.term) crash(v, "new leader");
    }
    if (rng_.chance(w_.crash_leader)) {
      if (Node* l = find_leader()) crash(*l, "leader");
    }
    if (rng_.chance(w_.crash)) {
      Node& v = nodes_[rng_.below(n)];
      if (v.up) crash(v, "random");
    }
  }

  // --- steady fault phases ---

  // Which fault stays for the whole phase.
  enum class SteadyKind {
    kMinorityDown,   // (n-1)/2 nodes crashed (the leader among them half the time)
    kIsolateLeader,  // the leader cut off both ways
    kLinkCut,        // one link leader<->follower cut both ways
    kDeafLeader,     // one-way: nobody reaches the leader, it reaches everybody
    kMuteLink,       // one-way: the leader cannot reach one follower, which reaches it
  };
  static const char* steady_name(SteadyKind k) {
    switch (k) {
      case SteadyKind::kMinorityDown: return "minority down";
      case SteadyKind::kIsolateLeader: return "leader isolated";
      case SteadyKind::kLinkCut: return "link cut";
      case SteadyKind::kDeafLeader: return "one-way cut to the leader";
      case SteadyKind::kMuteLink: return "one-way cut from the leader";
    }
    return "?";
  }
  struct Steady {
    SteadyKind kind = SteadyKind::kMinorityDown;
    std::uint64_t start = 0;
    std::vector<NodeId> down;      // kept down for the whole phase
    Index marker_index = 0;        // the probe proposed during the phase
    Term marker_term = 0;
    std::uint64_t committed_step = 0;  // when the probe committed (0: not yet)
    bool check_stable = false;     // leader stability is required (CheckQuorum on)
    NodeId stable_leader = raft::kNoNode;
    Term stable_term = 0;
  };

  // Heals every transient fault, then sets one that stays: from now on
  // the cluster must still commit within kSteadyProgressSteps.
  void start_steady() {
    calm_down();
    for (auto& row : blocked_) std::fill(row.begin(), row.end(), false);
    Steady st;
    st.start = step_;
    // Liveness under a cut link needs CheckQuorum: voters that hear a
    // leader ignore a node that does not (thesis §9.6). A deaf node also
    // needs PreVote, or its campaigns at ever higher terms (which it never
    // hears answered) keep unseating everyone else. A minority down or a
    // leader cut off both ways needs neither.
    std::vector<SteadyKind> kinds{SteadyKind::kMinorityDown, SteadyKind::kIsolateLeader};
    if (check_quorum_) kinds.insert(kinds.end(), {SteadyKind::kLinkCut, SteadyKind::kMuteLink});
    if (check_quorum_ && pre_vote_) kinds.push_back(SteadyKind::kDeafLeader);
    st.kind = kinds[rng_.below(kinds.size())];
    st.check_stable = check_quorum_;
    std::size_t n = nodes_.size();
    Node* l = find_leader();
    NodeId leader = l ? l->id : static_cast<NodeId>(rng_.range(1, n));
    NodeId other = static_cast<NodeId>(rng_.range(1, n - 1));
    if (other >= leader) ++other;
    doomed_.clear();
    for (Node& x : nodes_) {
      if (!x.up) x.restart_step = step_;  // everyone else is back
    }
    switch (st.kind) {
      case SteadyKind::kMinorityDown: {
        std::vector<NodeId> ids = opts_.membership ? current_voters() : voters_;
        std::size_t smallest = ids.size();
        if (opts_.membership) {
          // A change may be in flight: the minority must be one of every
          // configuration some node uses, taken from the voters they share.
          for (const Node& x : nodes_) {
            if (!x.up) continue;
            std::vector<NodeId> pending = raft::voter_ids(x.raft->conf());
            if (pending.empty()) continue;
            std::vector<NodeId> both;
            std::set_intersection(ids.begin(), ids.end(), pending.begin(), pending.end(), std::back_inserter(both));
            smallest = std::min(smallest, pending.size());
            ids = both;
          }
        }
        for (std::size_t i = ids.size(); i > 1; --i) std::swap(ids[i - 1], ids[rng_.below(i)]);
        if (rng_.chance(0.5) && std::find(ids.begin(), ids.end(), leader) != ids.end()) {
          std::iter_swap(ids.begin(), std::find(ids.begin(), ids.end(), leader));
        }
        const std::size_t k = opts_.membership ? std::min(ids.size(), (smallest - 1) / 2) : (n - 1) / 2;
        st.down.assign(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k));
        for (NodeId id : st.down) {
          Node& v = nodes_[id - 1];
          if (v.up) crash(v, "steady phase");
          v.restart_step = UINT64_MAX;
        }
        break;
      }
      case SteadyKind::kIsolateLeader:
        for (std::size_t x = 1; x <= n; ++x) {
          if (x != leader) blocked_[x][leader] = blocked_[leader][x] = true;
        }
        break;
      case SteadyKind::kLinkCut: blocked_[leader][other] = blocked_[other][leader] = true; break;
      case SteadyKind::kDeafLeader:
        for (std::size_t x = 1; x <= n; ++x) {
          if (x != leader) blocked_[x][leader] = true;
        }
        break;
      case SteadyKind::kMuteLink: blocked_[leader][other] = true; break;
    }
    trace("steady phase: %s (leader n%llu, other n%llu)", steady_name(st.kind), ull(leader), ull(other));
    steady_ = st;
  }

  // The progress bound of a steady phase. Without PreVote every timed-out
  // node bumps the term, and with a bare majority up the one electable node
  // must win a round before anyone else times out (with 5 of 9 up, ~1 in 5
  // rounds): the same liveness, more rounds, so three times the budget.
  std::uint64_t steady_budget_steps() const {
    return kSteadyProgressSteps * (pre_vote_ ? 1 : 3) + snapshot_steps();
  }

  void end_steady() {
    trace("steady phase ends");
    for (auto& row : blocked_) std::fill(row.begin(), row.end(), false);
    for (NodeId id : steady_->down) nodes_[id - 1].restart_step = step_;
    steady_.reset();
    if (--w_.steady_phases > 0) {
      std::uint64_t next = step_ + rng_.range(100, 600);
      if (next + steady_budget_steps() + kSteadySettleSteps + kSteadyStableSteps + 200 < faults_end_) {
        next_steady_step_ = next;
      }
    }
  }

  // Proposes a marker to the newest leader until one commits.
  void steady_probe() {
    Steady& st = *steady_;
    if (st.committed_step != 0) return;
    Node* l = find_leader();
    if (l && (st.marker_index == 0 || l->raft->term() > st.marker_term)) {
      cluster::LockCommand c;
      c.type = cluster::LockCommandType::kCancelWaiter;  // harmless
      c.now_ns = clock_ns(*l);
      auto r = l->raft->propose(cluster::encode_lock_command(c));
      if (r.error == raft::ProposeError::kOk) {
        accepted_.emplace_back(r.index, r.term);
        st.marker_index = r.index;
        st.marker_term = r.term;
        process(*l);
      }
    }
  }

  // While the fault stays: the marker commits within the bound; then
  // (with PreVote + CheckQuorum) the leader keeps leading; then the phase
  // ends and the fault heals.
  void check_steady() {
    Steady& st = *steady_;
    std::string what = steady_name(st.kind);
    if (st.committed_step == 0) {
      auto it = history_.find(st.marker_index);
      if (st.marker_index != 0 && it != history_.end() && it->second.term == st.marker_term) {
        st.committed_step = step_;
        trace("steady phase: marker %llu committed after %llu steps", ull(st.marker_index), ull(step_ - st.start));
      } else if (step_ > st.start + steady_budget_steps()) {
        fail("progress with " + what, "no proposal committed within " + std::to_string(step_ - st.start) +
                                          " steps while the fault stayed (phase marker " +
                                          std::to_string(st.marker_index) + "@" + std::to_string(st.marker_term) +
                                          ")" + cluster_summary());
      }
      return;
    }
    std::uint64_t since = step_ - st.committed_step;
    if (!st.check_stable) {
      if (since >= kSteadySettleSteps) end_steady();
      return;
    }
    if (since == kSteadySettleSteps) {
      Node* l = find_leader();
      if (!l) {
        fail("leader stable under " + what, "no leader " + std::to_string(since) + " steps after a commit" +
                                                cluster_summary());
        return;
      }
      st.stable_leader = l->id;
      st.stable_term = l->raft->term();
    } else if (since > kSteadySettleSteps) {
      const Node& l = nodes_[st.stable_leader - 1];
      if (!l.up || l.raft->role() != Role::kLeader || l.raft->term() != st.stable_term) {
        fail("leader stable under " + what, "n" + std::to_string(st.stable_leader) + " led term " +
                                                std::to_string(st.stable_term) + " and lost it with nothing else failing" +
                                                cluster_summary());
        return;
      }
      if (since >= kSteadySettleSteps + kSteadyStableSteps) end_steady();
    }
  }

  void calm_down() {
    trace("faults stop");
    // Steps for the member furthest behind to take the log it lacks, one
    // append window per round trip at worst: with one entry an append
    // (40% of seeds) and reordering, every out-of-order append is refused
    // and the leader probes again. Found by the lifecycle soak (seed
    // 1002079, 5 nodes: two members gone for good, so the leader needed
    // the one 147 entries behind, which took ~700 steps).
    Index most = 0;
    Index least = std::numeric_limits<Index>::max();
    for (const Node& n : nodes_) {
      if (n.gone || !n.joined) continue;
      most = std::max(most, n.disk.last_index());
      least = std::min(least, n.disk.last_index());
    }
    const Index behind = most > least ? most - least : 0;
    catchup_steps_ = (behind + max_entries_ - 1) / max_entries_ * 2 * (w_.max_delay_steps + 1);
    if (opts_.lifecycle) lifecycle_calm();
    for (auto& row : blocked_) std::fill(row.begin(), row.end(), false);
    for (auto& row : clogged_until_) std::fill(row.begin(), row.end(), 0);
  }

  // What `n`'s monotonic clock reads now (a leader stamps commands with it).
  TimeNs clock_ns(const Node& n) const {
    return static_cast<TimeNs>(step_) * kTickNs + clock_offset_ns_[n.id];
  }

  Node* find_leader() {
    Node* best = nullptr;
    for (Node& n : nodes_) {
      if (n.up && n.raft->role() == Role::kLeader && (!best || n.raft->term() > best->raft->term())) best = &n;
    }
    return best;
  }

  void transfer() {
    Node* l = find_leader();
    if (!l) return;
    std::vector<NodeId> targets = opts_.membership ? raft::voter_ids(l->raft->conf()) : voters_;
    NodeId target = targets[rng_.below(targets.size())];
    if (l->raft->transfer_leadership(target)) trace("n%llu transfers to n%llu", ull(l->id), ull(target));
  }

  // --- membership (--membership) ---

  // The voters of the newest leader's configuration (the bootstrap ones
  // when there is no leader).
  std::vector<NodeId> current_voters() const {
    return committed_conf_.empty() ? voters_ : raft::voter_ids(committed_conf_);
  }

  // Liveness and convergence are asked of the members of the newest
  // committed configuration; a removed node or a spare whose addition was lost with
  // an uncommitted entry owes nothing.
  bool counts_for_liveness(const Node& n) const {
    if (opts_.lifecycle) {
      // Every founder that did not lose its data: the honest ones started
      // late or with a wrong secret included (rule 3: they join).
      return n.id <= static_cast<NodeId>(opts_.nodes) && !n.gone && !n.lost_data && !n.storage_broken &&
             !n.cannot_join;
    }
    if (!opts_.membership) return true;
    if (!n.joined || n.removed) return false;
    if (committed_conf_.empty()) return n.id <= static_cast<NodeId>(opts_.nodes);
    return raft::find_member(committed_conf_, n.id) != nullptr;
  }

  // One random change through the newest leader: add a learner (a fresh
  // id, started at once, as an operator would), promote a learner, or
  // remove any member, the leader included. A remove followed later by an
  // add is a replacement.
  void conf_change() {
    Node* l = find_leader();
    if (!l) return;
    const raft::Membership conf = l->raft->conf();
    raft::ConfChange cc;
    std::uint64_t dice = mrng_.below(3);
    std::vector<NodeId> learners = raft::learner_ids(conf);
    if (dice == 1 && learners.empty()) dice = 0;
    if (dice == 0) {
      Node* spare = nullptr;
      for (Node& x : nodes_) {
        if (x.removed || raft::find_member(conf, x.id) != nullptr || raft::was_removed(conf, x.id)) continue;
        spare = &x;
        break;
      }
      if (!spare) dice = 2;
      else {
        cc.type = raft::ConfChangeType::kAddLearner;
        cc.member = raft::Member{spare->id, false, "c" + std::to_string(spare->id), "r" + std::to_string(spare->id)};
      }
    }
    if (dice == 1) {
      cc.type = raft::ConfChangeType::kPromote;
      cc.member.id = learners[mrng_.below(learners.size())];
    } else if (dice == 2) {
      cc.type = raft::ConfChangeType::kRemove;
      cc.member.id = conf.members[mrng_.below(conf.members.size())].id;
      // Keep as many voters as the group started with (3 at most), so the
      // steady phases' faults stay ones the group can survive.
      const std::size_t min_voters = std::min(opts_.nodes, 3);
      if (raft::is_voter(conf, cc.member.id) && raft::voter_ids(conf).size() <= min_voters) return;
    }
    raft::ProposeResult r = l->raft->propose_conf_change(cc);
    trace("n%llu proposes %s n%llu: %s", ull(l->id), std::string(raft::to_string(cc.type)).c_str(),
          ull(cc.member.id), std::string(raft::to_string(r.error)).c_str());
    if (r.error != raft::ProposeError::kOk) return;
    accepted_.emplace_back(r.index, r.term);
    if (cc.type == raft::ConfChangeType::kAddLearner) {
      Node& x = nodes_[cc.member.id - 1];
      if (!x.joined) {
        x.joined = true;
        start_node(x);
      }
    }
    process(*l);
  }

  // A configuration committed: nodes it removed are stopped a while later
  // (an operator shutting them down), never restarted.
  void conf_committed(Index i, const Entry& e) {
    last_conf_seen_ = i;
    ++result_.conf_changes;
    raft::Membership c;
    std::string error;
    if (!raft::decode_membership(e.data, c, error)) {
      fail("configuration decodes", "committed entry " + std::to_string(i) + ": " + error);
      return;
    }
    trace("configuration at %llu committed: %s", ull(i), raft::describe(c).c_str());
    note_committed_conf(i, c);
  }

  // The newest committed configuration seen (from a committed entry, or a
  // leader whose configuration is committed: an entry compacted away on
  // every node before this check saw it committed is seen that way).
  void note_committed_conf(Index at, const raft::Membership& c) {
    if (at < committed_conf_index_) return;
    committed_conf_index_ = at;
    committed_conf_ = c;
    for (NodeId id : c.removed) {
      if (id > nodes_.size()) continue;
      Node& x = nodes_[id - 1];
      if (x.removed) continue;
      x.removed = true;
      x.stop_step = step_ + mrng_.range(0, kMaxStopDelaySteps);
    }
  }

  // The configuration a node must be using: the newest in its log (in
  // force from the moment it is appended), else its snapshot's, else its
  // bootstrap one.
  raft::Membership expected_conf(const Node& n) const {
    const Raft& r = *n.raft;
    for (auto it = r.log().rbegin(); it != r.log().rend(); ++it) {
      if (it->type != EntryType::kConfChange) continue;
      raft::Membership c;
      std::string error;
      if (raft::decode_membership(it->data, c, error)) return c;
    }
    if (!r.snapshot_meta().conf.empty()) return r.snapshot_meta().conf;
    // --lifecycle: a waiting node has none; one let in has the group's.
    if (opts_.lifecycle) return n.gate_open ? raft::voters_only(voters_) : raft::Membership{};
    return n.id <= static_cast<NodeId>(opts_.nodes) ? raft::voters_only(voters_) : raft::Membership{};
  }

  // Whether node `id`'s disk durably holds entry (index, term); a snapshot
  // covering it counts (only committed entries are snapshotted).
  bool disk_holds(NodeId id, Index index, Term term) const {
    if (id == 0 || id > nodes_.size()) return false;
    const raft::MemoryStorage& d = nodes_[id - 1].disk;
    if (d.snapshot().meta.index >= index) return true;
    std::span<const Entry> es = d.entries();
    Index off = index - d.snapshot().meta.index - 1;
    return off < es.size() && es[off].term == term;
  }

  // Membership invariants, after every step:
  // - the configuration in force is the newest appended one;
  // - a node that is not a voter never campaigns; a leader whose own
  //   removal committed has stepped down;
  // - a leader's commit index (of its term) is durable on a majority of the
  //   voters of its configuration: learners and removed nodes never count.
  void check_membership() {
    for (Node& n : nodes_) {
      if (!n.up || !result_.passed) continue;
      const Raft& r = *n.raft;
      raft::Membership want = expected_conf(n);
      if (raft::voter_ids(want) != raft::voter_ids(r.conf()) ||
          raft::learner_ids(want) != raft::learner_ids(r.conf())) {
        fail("configuration in force on append", "n" + std::to_string(n.id) + " uses " + raft::describe(r.conf()) +
                                                     ", its log says " + raft::describe(want));
        return;
      }
      const bool voter = raft::is_voter(r.conf(), n.id);
      const bool removal_pending = r.conf_index() > r.commit() && raft::was_removed(r.conf(), n.id);
      if (!voter && !removal_pending && (r.role() == Role::kCandidate || r.role() == Role::kPreCandidate)) {
        fail("a learner never campaigns", "n" + std::to_string(n.id) + " is a " +
                                              std::string(raft::to_string(r.role())) + " in " + raft::describe(r.conf()));
        return;
      }
      if (r.role() != Role::kLeader) {
        n.checked_commit = 0;
        continue;
      }
      if (r.conf_index() != 0 && r.conf_index() <= r.commit()) note_committed_conf(r.conf_index(), r.conf());
      if (!voter && r.conf_index() <= r.commit()) {
        // It may lead on for one election period to hand over (raft.md,
        // "Removing the leader"), refusing proposals and appending nothing.
        if (n.removed_lead_term != r.term()) {
          n.removed_lead_term = r.term();
          n.removed_lead_since = step_;
          n.removed_lead_last = r.last_index();
        }
        std::string why;
        if (step_ - n.removed_lead_since > static_cast<std::uint64_t>(kElectionTicks)) {
          why = " for " + std::to_string(step_ - n.removed_lead_since) + " steps";
        } else if (r.status().transferee == raft::kNoNode) {
          why = " without handing over";
        } else if (r.last_index() != n.removed_lead_last) {
          why = " and appended up to " + std::to_string(r.last_index()) + " (had " +
                std::to_string(n.removed_lead_last) + ")";
        }
        if (!why.empty()) {
          fail("a removed leader steps down", "n" + std::to_string(n.id) + " leads term " + std::to_string(r.term()) +
                                                  " after its removal committed at " + std::to_string(r.conf_index()) +
                                                  why);
          return;
        }
      }
      // The commit index moved during this step, under the configuration
      // in force at the end of the last step or the one in force now.
      const Index c = r.commit();
      const raft::Membership before = n.checked_term == r.term() ? n.checked_conf : r.conf();
      const bool moved = n.checked_term != r.term() || c > n.checked_commit;
      n.checked_term = r.term();
      n.checked_commit = c;
      n.checked_conf = r.conf();
      if (!moved || c == 0 || c <= r.snapshot_meta().index || r.term_at(c) != r.term()) continue;
      auto held = [&](const raft::Membership& conf, std::size_t& holders) {
        std::vector<NodeId> voters = raft::voter_ids(conf);
        holders = 0;
        for (NodeId v : voters) {
          // --lifecycle: a voter whose disk was lost may have held it (its
          // acknowledgement can still be on the way); it never counts again.
          const bool lost = opts_.lifecycle && v <= nodes_.size() && nodes_[v - 1].disk_lost;
          holders += lost || disk_holds(v, c, r.term()) ? 1 : 0;
        }
        return holders >= voters.size() / 2 + 1;
      };
      std::size_t holders = 0;
      std::size_t holders_before = 0;
      if (!held(r.conf(), holders) && !held(before, holders_before)) {
        fail("a learner never counts toward a quorum",
             "leader n" + std::to_string(n.id) + " of term " + std::to_string(r.term()) + " committed " +
                 std::to_string(c) + " held by " + std::to_string(holders) + " of its voters in " +
                 raft::describe(r.conf()));
        return;
      }
    }
  }

  // --- clients ---

  void client_propose() {
    Node& n = nodes_[rng_.below(nodes_.size())];
    if (!n.up) return;
    Node* target = &n;
    if (n.raft->role() != Role::kLeader) {
      // Redirected once, as a real client following `M <leader>`.
      NodeId l = n.raft->leader();
      if (l == raft::kNoNode || !nodes_[l - 1].up) return;
      target = &nodes_[l - 1];
    }
    cluster::LockCommand c;
    c.now_ns = clock_ns(*target);
    std::string key = "k" + std::to_string(rng_.below(kKeys));
    const locks::KeyState* ks = target->sm->table().find(key);
    // One of the key's holders (a shared key has several), at random.
    locks::Token held = 0;
    if (ks) {
      std::size_t i = 0;
      const std::size_t pick =
          opts_.exclusive_only ? 0 : rng_.below(std::max<std::size_t>(1, ks->holder_count()));
      ks->for_each_holder([&](const locks::Holder& h) {
        if (i++ == pick) held = h.token;
      });
    }
    // --exclusive-only: the pre-S mix, draw for draw (old seed windows).
    const bool s_too = !opts_.exclusive_only;
    std::uint64_t dice = rng_.below(s_too ? 15 : 12);
    if (!s_too) dice = dice < 5 ? 0 : dice < 8 ? 7 : dice < 9 ? 10 : dice < 11 ? 11 : 13;
    if (dice < 7 || !ks) {
      // `A`, or `S` (§5b): each key has its usual limit (k0 a reader-writer
      // lock, the others semaphores of 1..3 permits), now and then another
      // (E limit_mismatch).
      const bool shared = s_too && rng_.chance(0.45);
      c.type = shared ? cluster::LockCommandType::kAcquireShared : cluster::LockCommandType::kAcquire;
      c.owner = "c" + std::to_string(rng_.below(kOwners));
      c.key = key;
      c.lease_ms = rng_.range(50, 3000);
      c.wait_ms = rng_.chance(0.4) ? rng_.range(10, 2000) : 0;
      c.client = rng_.range(1, kOwners);
      c.waiter = ++next_waiter_;
      if (shared) {
        const std::uint16_t usual = static_cast<std::uint16_t>(key.back() - '0');
        c.limit = rng_.chance(0.9) ? usual : static_cast<std::uint16_t>(rng_.below(4));
      }
    } else if (dice < 10) {
      c.type = cluster::LockCommandType::kRelease;
      c.key = key;
      c.token = rng_.chance(0.9) ? held : held + rng_.range(1, 3);
    } else if (dice < 11) {
      c.type = cluster::LockCommandType::kExpire;
      c.key = key;
      c.token = held;
    } else if (dice < 13) {
      // A holder extends (or shortens) its lease, sometimes with a stale
      // token, sometimes after its lease ended.
      c.type = cluster::LockCommandType::kKeep;
      c.key = key;
      c.token = rng_.chance(0.9) ? held : rng_.range(1, held);
      c.lease_ms = rng_.range(50, 3000);
    } else {
      // Waiter ids are the indexes of the entries that queued them: mostly
      // one still queued, sometimes any index (gone, or never a waiter).
      c.type = cluster::LockCommandType::kCancelWaiter;
      c.waiter = rng_.range(1, std::max<Index>(1, target->raft->last_index()));
      if (ks->waiters() != nullptr && rng_.chance(0.8)) {
        auto w = ks->waiters()->begin();
        std::advance(w, static_cast<std::ptrdiff_t>(rng_.below(ks->waiters()->size())));
        c.waiter = w->id;
      }
    }
    // As the daemon: `S` needs entry version 4 (every simulated node applies it).
    const std::uint16_t version = c.type == cluster::LockCommandType::kAcquireShared
                                      ? cluster::kEntryVersionShared
                                      : cluster::kEntryVersionMin;
    auto r = target->raft->propose(cluster::encode_lock_command(c, version));
    if (r.error == raft::ProposeError::kOk) {
      accepted_.emplace_back(r.index, r.term);
      process(*target);
    }
  }

  // What the daemon's replicated service proposes on its own: a LeaderStart
  // as each leader's first command of its term (token base, its clock
  // reading; every waiter queued through an earlier leader is dropped), and
  // now and then a Clock entry. Each leader offers a different token base:
  // only the first one ever applied counts.
  void leader_entries() {
    for (Node& n : nodes_) {
      if (!n.up || n.raft->role() != Role::kLeader) continue;
      cluster::LockCommand c;
      c.now_ns = clock_ns(n);
      if (n.leader_start_term != n.raft->term()) {
        // Sometimes late, so that client commands of the new term can come
        // before it in the log (they must apply at the old time, §8).
        if (step_ < faults_end_ && rng_.chance(0.5)) continue;
        c.type = cluster::LockCommandType::kLeaderStart;
        c.token_base = cluster::kMinTokenBase + seed_ % 1000 * 1'000'000 + n.id * 1000 +
                       static_cast<std::uint64_t>(c.now_ns) % 1000;
      } else if (step_ < faults_end_ && rng_.chance(w_.propose / 32)) {
        c.type = cluster::LockCommandType::kClock;  // not in the liveness phase: it ends on a quiet log
      } else {
        continue;
      }
      auto r = n.raft->propose(cluster::encode_lock_command(c));
      if (r.error != raft::ProposeError::kOk) continue;
      if (c.type == cluster::LockCommandType::kLeaderStart) n.leader_start_term = r.term;
      accepted_.emplace_back(r.index, r.term);
      process(n);
    }
  }

  // After the faults: keep proposing a marker until one commits everywhere.
  void liveness_probe() {
    Node* l = find_leader();
    if (l && (marker_index_ == 0 || l->raft->term() > marker_term_)) {
      cluster::LockCommand c;
      c.type = cluster::LockCommandType::kCancelWaiter;  // harmless
      c.now_ns = clock_ns(*l);
      c.waiter = 0;
      auto r = l->raft->propose(cluster::encode_lock_command(c));
      if (r.error == raft::ProposeError::kOk) {
        accepted_.emplace_back(r.index, r.term);
        marker_index_ = r.index;
        marker_term_ = r.term;
        process(*l);
      }
    }
    if (marker_index_ == 0) return;
    auto it = history_.find(marker_index_);
    if (it == history_.end() || it->second.term != marker_term_) return;
    for (const Node& n : nodes_) {
      if (!counts_for_liveness(n)) continue;
      if (!n.up || n.applied < marker_index_) return;
    }
    liveness_done_ = true;
    trace("liveness ok: marker %llu committed everywhere", ull(marker_index_));
  }

  // --- a node's lifecycle (--lifecycle; protocol.md §10, docs/raft.md) ---

  enum Loss { kLossWhole, kLossLog, kLossSnapshot, kLossAllButIdentity, kLossReseed, kLossHeard, kLossKinds };
  static const char* loss_name(int l) {
    switch (l) {
      case kLossWhole: return "whole data dir";
      case kLossLog: return "log (WAL) only";
      case kLossSnapshot: return "snapshot file only";
      case kLossAllButIdentity: return "all but IDENTITY";
      case kLossReseed: return "whole, re-seeded from a backup (--restore-from left in its unit)";
      case kLossHeard: return "HEARD only";
    }
    return "?";
  }

  // The gate-rule mutation planted (none unless --bug names one).
  cluster::GateMutations gate_mutations() const {
    cluster::GateMutations m;
    m.admit_called_voter = opts_.bug == PlantedBug::kGateAdmitCalledVoter;
    m.identity_is_data = opts_.bug == PlantedBug::kGateIdentityIsData;
    m.learners_confirm = opts_.bug == PlantedBug::kGateLearnersConfirm;
    m.skip_confirmations = opts_.bug == PlantedBug::kGateSkipConfirmations;
    m.peer_count_only = opts_.bug == PlantedBug::kGatePeerCountOnly;
    m.restore_votes = opts_.bug == PlantedBug::kGateRestoreVotes;
    m.empty_confirms = opts_.bug == PlantedBug::kGateEmptyConfirms;
    m.init_at_once = opts_.bug == PlantedBug::kInitAtOnce;
    return m;
  }

  // This seed's story: who runs cluster init and when, and which nodes
  // meet which lifecycle fault. Troubles that keep a founder out for good
  // (a lost member) or for a while (started late, wrong secret) take at
  // most a minority, and a seed has one kind or the other: a founder can
  // join only once every voter confirms, a lost one never answers.
  void plan_lifecycle() {
    // One seed in three, a deploy script runs `lockctl cluster init` after
    // every start of every node, for a while (409s and 504s ignored): on a
    // wiped member too, before its members' answers arrive.
    init_script_ = irng_.chance(0.35);
    const int n = opts_.nodes;
    const std::uint64_t end = faults_end_;
    init_step_ = lrng_.range(2, std::max<std::uint64_t>(3, std::min<std::uint64_t>(60, end / 4)));
    init_node_ = static_cast<NodeId>(lrng_.range(1, static_cast<std::uint64_t>(n)));
    std::vector<NodeId> others;
    for (NodeId id = 1; id <= static_cast<NodeId>(n); ++id) {
      if (id != init_node_) others.push_back(id);
    }
    for (std::size_t i = others.size(); i > 1; --i) std::swap(others[i - 1], others[lrng_.below(i)]);
    const std::uint64_t troubled = lrng_.range(0, static_cast<std::uint64_t>((n - 1) / 2));
    const bool formation = lrng_.chance(0.4);
    const std::uint64_t late_end = std::max(init_step_ + 2, end * 3 / 4);
    std::set<NodeId> late;
    for (std::uint64_t k = 0; k < troubled && formation; ++k) {
      const NodeId id = others[k];
      if (lrng_.chance(0.5)) {
        late.insert(id);
        life_events_.push_back({LifeEvent::kStart, lrng_.range(init_step_ + 1, late_end), id});
        trace("plan: n%llu starts late", ull(id));
      } else {
        nodes_[id - 1].bad_secret = true;
        life_events_.push_back({LifeEvent::kFixSecret, lrng_.range(init_step_ + 1, late_end), id});
        trace("plan: n%llu starts with a wrong peer secret", ull(id));
      }
    }
    for (NodeId id = 1; id <= static_cast<NodeId>(n); ++id) {
      if (!late.contains(id)) life_events_.push_back({LifeEvent::kStart, lrng_.below(init_step_), id});
    }
    // The stranger: started before anyone adds it (nobody ever does).
    const std::uint64_t stranger_at = lrng_.chance(0.7) ? lrng_.below(init_step_ + 1) : lrng_.below(end / 2 + 1);
    life_events_.push_back({LifeEvent::kStart, stranger_at, static_cast<NodeId>(n + 1)});
    const std::uint64_t lo = init_step_ + 30;
    if (lo + 100 >= end) return;
    if (!formation) {
      // Any founder, the one that ran init included.
      std::vector<NodeId> all = others;
      all.push_back(init_node_);
      for (std::size_t i = all.size(); i > 1; --i) std::swap(all[i - 1], all[lrng_.below(i)]);
      for (std::uint64_t k = 0; k < troubled; ++k) {
        // Half of them while the group is young: only its first leader
        // may have heard from the node, the others must say "never".
        const int loss = static_cast<int>(lrng_.below(kLossHeard));
        const std::uint64_t at = lrng_.chance(0.5) ? lrng_.range(lo, std::min(lo + 120, end - 100))
                                                   : lrng_.range(lo, end - 100);
        life_events_.push_back({LifeEvent::kLoss, at, all[k], loss});
        trace("plan: n%llu loses its %s", ull(all[k]), loss_name(loss));
      }
    }
    // Faults an honest member recovers from: HEARD lost, stale flags (half
    // of them while the group is young: no snapshot records it yet).
    for (std::uint64_t k = lrng_.below(3); k > 0; --k) {
      const NodeId id = static_cast<NodeId>(lrng_.range(1, static_cast<std::uint64_t>(n)));
      life_events_.push_back({LifeEvent::kLoss, lrng_.range(lo, end - 100), id, kLossHeard});
    }
    for (std::uint64_t k = lrng_.below(3); k > 0; --k) {
      const NodeId id = static_cast<NodeId>(lrng_.range(1, static_cast<std::uint64_t>(n)));
      const std::uint64_t at = lrng_.chance(0.5) ? lrng_.range(init_step_ + 5, init_step_ + 60) : lrng_.range(lo, end - 100);
      life_events_.push_back({LifeEvent::kStaleFlags, at, id});
    }
  }

  // Once per step: the plan's events, cluster init, handshakes of waiting
  // nodes, IDENTITY's cluster id.
  void lifecycle_step() {
    for (std::size_t i = 0; i < life_events_.size();) {
      if (life_events_[i].step > step_) {
        ++i;
        continue;
      }
      const LifeEvent e = life_events_[i];
      life_events_.erase(life_events_.begin() + static_cast<std::ptrdiff_t>(i));
      Node& n = nodes_[e.node - 1];
      switch (e.kind) {
        case LifeEvent::kStart:
          if (!n.joined) {
            n.joined = true;
            trace("n%llu starts for the first time (--peer %s)", ull(n.id), ids_text(n.flag_peers).c_str());
            start_node(n);
          }
          break;
        case LifeEvent::kFixSecret:
          n.bad_secret = false;
          trace("n%llu: the peer secret is fixed", ull(n.id));
          if (n.up) crash(n, "restarted with the right peer secret");
          break;
        case LifeEvent::kLoss: lose(n, e.loss); break;
        case LifeEvent::kStaleFlags: stale_flags(n); break;
      }
    }
    // The operator retries init until the group's first entry commits
    // (a 504: the node crashed before anything it did was durable).
    if (step_ >= init_step_ && history_.empty()) cluster_init();
    for (Node& n : nodes_) {
      if (n.up && !n.gate_open && step_ < n.init_script_until) try_init(n, "the deploy script");
    }
    for (Node& w : nodes_) {
      if (w.up && !w.gate_open && lrng_.chance(kGateHandshakeChance)) handshake(w);
    }
    for (Node& n : nodes_) {
      if (n.up && n.gate_open && n.identity_cluster == 0 && n.sm->cluster_id() != 0) {
        n.identity_cluster = n.sm->cluster_id();
      }
    }
  }

  // POST /v1/cluster/init on one waiting founder (ClusterNode::init_group):
  // it forms the group with its --peer ids and campaigns. 200 once that
  // commits; until then the operator tries again.
  void cluster_init() {
    Node& n = nodes_[init_node_ - 1];
    if (!n.up || n.gate_open || n.bad_secret) return;  // tried again next step
    try_init(n, "the operator");
  }

  // POST /v1/cluster/init to waiting node `n` (ClusterNode::try_init): the
  // real rule (cluster::decide_init) on the answers it has. A 409 or a
  // wait changes nothing; the caller asks again later.
  void try_init(Node& n, const char* who) {
    if (n.bad_secret) return;
    cluster::GateFlags flags{n.id, n.flag_peers, gate_mutations()};
    // ClusterNode's kInitAloneGraceNs, in steps: members that list a node
    // whose --peer names only itself have had time to answer it.
    flags.alone_grace_over = step_ >= n.started_step + kInitAloneGraceSteps;
    const cluster::InitDecision d = cluster::decide_init(flags, n.answers);
    if (d.verdict != cluster::InitVerdict::kForm) return;
    if (!n.raft->set_bootstrap(n.flag_peers, members_of(n.flag_peers))) return;
    n.heard_file = true;  // an empty record
    n.gate_open = true;
    formed_ = true;
    trace("cluster init on n%llu (%s): voters %s", ull(n.id), who, ids_text(n.flag_peers).c_str());
    if (n.lost_data) {
      fail("a member that lost its data never votes (rule 2)",
           "n" + std::to_string(n.id) + " took part, lost its data, and cluster init formed a group on it");
      return;
    }
    n.raft->campaign();
    process(n);
  }

  static std::vector<raft::Member> members_of(const std::vector<NodeId>& ids) {
    std::vector<raft::Member> out;
    for (NodeId id : ids) out.push_back(raft::Member{id, true, "c" + std::to_string(id), "r" + std::to_string(id)});
    return out;
  }
  static std::string ids_text(const std::vector<NodeId>& ids) {
    std::string out;
    for (NodeId id : ids) out += (out.empty() ? "{" : ",") + std::to_string(id);
    return out + "}";
  }

  // The daemon's open(): --restore-from stages the file into an empty
  // data dir, the gate decides from the disk alone, listen() claims
  // IDENTITY; a waiting node then asks its peers (handshake()).
  void lifecycle_start(Node& n) {
    n.started_step = step_;
    n.leader_start_term = 0;
    n.answers.clear();
    n.gate_open = false;
    n.hold_until = 0;
    if (n.storage_broken) {
      trace("n%llu cannot open its WAL (its snapshot file is gone): exit 1", ull(n.id));
      n.gone = true;
      return;
    }
    const raft::HardState hs0 = n.disk.hard_state();
    if (n.restore_from && n.disk.snapshot().meta.index == 0 && n.disk.entries().empty() &&
        hs0 == raft::HardState{}) {
      const raft::Snapshot& b = *n.restore_from;
      n.restored = true;
      n.disk.save_snapshot(raft::Snapshot{raft::SnapshotMeta{b.meta.index, b.meta.term, {}}, b.data});
      n.disk.set_hard_state(raft::HardState{b.meta.term, raft::kNoNode, b.meta.index});
      n.durable_term = b.meta.term;
      trace("n%llu stages --restore-from (snapshot @%llu term %llu)", ull(n.id), ull(b.meta.index), ull(b.meta.term));
    }
    cluster::DataDirState d;
    d.identity = n.identity;
    d.identity_cluster_id = n.identity_cluster;
    d.identity_members = n.identity_members;
    const raft::HardState hs = n.disk.hard_state();
    const raft::SnapshotMeta& sm = n.disk.snapshot().meta;
    d.log = hs.term != 0 || !n.disk.entries().empty();
    d.snapshot = sm.index != 0;
    d.restored = n.restored;
    d.heard = n.heard_file && !n.heard_disk.empty();
    d.recorded_conf = !sm.conf.empty() || std::any_of(n.disk.entries().begin(), n.disk.entries().end(),
                                                      [](const Entry& e) { return e.type == EntryType::kConfChange; });
    d.staged_restore = d.restored && d.snapshot && hs.vote == raft::kNoNode && hs.term == sm.term &&
                       n.disk.entries().empty();
    const cluster::GateFlags flags{n.id, n.flag_peers, gate_mutations()};
    const cluster::StartDecision dec = cluster::decide_start(d, flags, {});
    if (dec.verdict == cluster::StartVerdict::kRefuse) {
      refuse(n, dec.reason, true);
      return;
    }
    n.up = true;
    if (!n.identity) {
      n.identity = true;
      n.identity_members = n.flag_peers;
    }
    const bool vote = dec.verdict == cluster::StartVerdict::kVote;
    if (vote && !n.heard_file) {
      // ClusterNode::open: no record (older data, or the file was lost):
      // every --peer member may have been heard from (written in listen()).
      for (NodeId id : n.flag_peers) {
        if (id == n.id) continue;
        n.heard_disk.insert(id);
        heard_assumed_.insert(id);
      }
      n.heard_file = true;
    }
    n.heard = n.heard_disk;
    restore_sm(n, n.disk.snapshot());
    static const std::vector<NodeId> kNone;
    n.raft = std::make_unique<Raft>(node_config(n.id, vote ? &n.flag_peers : &kNone), n.disk);
    n.applied = n.disk.snapshot().meta.index;
    n.seen_commit = n.applied;
    n.running_term = n.raft->term();
    trace("n%llu starts: %s", ull(n.id), dec.reason.c_str());
    if (vote) open_gate(n, dec);
    // The deploy script asks this node to init for a while after each
    // start once the group was formed (before, the operator's init story).
    // Only on the group's own nodes with the group's --peer list: init on
    // a node whose list differs (the stranger, stale flags) forms a group
    // of that list, an operator's error the handshake cannot see (the
    // --peer lists are not in it; docs/cluster.md).
    if (!vote && init_script_ && formed_ && n.id <= static_cast<NodeId>(opts_.nodes) && n.flag_peers == voters_) {
      n.init_script_until = step_ + irng_.range(5, 80);
    }
  }

  void open_gate(Node& n, const cluster::StartDecision& d) {
    const bool votes = d.verdict == cluster::StartVerdict::kVote || d.verdict == cluster::StartVerdict::kJoinVoter;
    if (votes && n.lost_data) {
      fail("a member that lost its data never votes (rule 2)",
           "n" + std::to_string(n.id) + " took part, lost its data, and the gate says " +
               std::string(cluster::to_string(d.verdict)) + ": " + d.reason);
      return;
    }
    if (d.verdict == cluster::StartVerdict::kJoinVoter) {
      if (!n.raft->set_bootstrap(d.voters, members_of(d.voters))) {
        refuse(n, "cannot take the group's configuration", false);
        return;
      }
      n.hold_until = step_ + kFounderHoldSteps;
    }
    if (d.verdict != cluster::StartVerdict::kVote) n.heard_file = true;  // an empty record, written
    n.gate_open = true;
    trace("n%llu let in: %s", ull(n.id), d.reason.c_str());
  }

  // Exit 2 with the gate's line. A refusal on the members' word (the disk
  // empty) of a founder that never took part locks an honest member out
  // (rule 3), unless a member's lost HEARD was replaced by "heard from
  // every --peer member" (the conservative answer).
  void refuse(Node& n, const std::string& why, bool from_disk) {
    trace("n%llu refused: %s", ull(n.id), why.c_str());
    if (!from_disk && !n.took_part && !n.flags_stale && !heard_assumed_.contains(n.id) &&
        n.id <= static_cast<NodeId>(opts_.nodes)) {
      fail("an honest member is never locked out (rule 3)",
           "n" + std::to_string(n.id) + " never took part and was refused: " + why);
    }
    n.up = false;
    n.pending.reset();
    n.awaiting_sync = false;
    n.raft.reset();
    n.sm.reset();
    if (n.flags_stale) {
      // The operator reads the line and fixes the unit file.
      n.flags_stale = false;
      n.flag_peers = voters_;
      n.restart_step = step_ + lrng_.range(5, 50);
      trace("n%llu: its --peer flags are fixed", ull(n.id));
    } else {
      n.gone = true;
    }
  }

  // One handshake between waiting node `w` and a peer that lists it, or
  // that it lists (PeerTransport dials --peer and the configuration's
  // members; an authenticated stranger's hello reaches a waiting node).
  void handshake(Node& w) {
    if (w.bad_secret) return;  // every hello refused, both ways
    std::vector<Node*> peers;
    for (Node& x : nodes_) {
      if (&x == &w || !x.up || x.bad_secret || blocked_[x.id][w.id] || blocked_[w.id][x.id]) continue;
      const bool lists = std::binary_search(w.flag_peers.begin(), w.flag_peers.end(), x.id) ||
                         std::binary_search(x.flag_peers.begin(), x.flag_peers.end(), w.id) ||
                         raft::find_member(x.raft->conf(), w.id) != nullptr;
      if (lists) peers.push_back(&x);
    }
    if (peers.empty()) return;
    Node& x = *peers[lrng_.below(peers.size())];
    w.answers[x.id] = answer_of(x, w.id);
    // What `x` makes of w's hello: w says its data dir is empty (case 6),
    // and a waiting x records w's answer too.
    if (x.gate_open && x.raft->role() == Role::kLeader) x.raft->forget_progress(w.id);
    if (!x.gate_open) {
      x.answers[w.id] = answer_of(w, x.id);
      run_gate(x);
    }
    if (w.up) run_gate(w);
  }

  // Tags 11-13 of a handshake from `x` to `about` (ClusterNode::status_of,
  // heard_of, conf_voters) and its cluster id.
  cluster::PeerAnswer answer_of(const Node& x, NodeId about) const {
    cluster::PeerAnswer a;
    a.cluster_id = x.identity_cluster;
    a.status = cluster::member_status(x.raft->conf(), x.raft->conf(), about);
    a.heard = x.heard.contains(about) ? cluster::HeardReceiver::kHeard : cluster::HeardReceiver::kNever;
    a.voters = raft::voter_ids(x.raft->conf());
    // Tags 8 and 15 (ClusterNode::heard_voters): a member with its gate
    // open says which voters of its configuration it ever heard from.
    if (x.gate_open) {
      a.data_state = cluster::DataState::kHasData;
      a.heard_voters.emplace();
      for (NodeId v : a.voters) {
        if (x.heard.contains(v)) a.heard_voters->push_back(v);
      }
    }
    return a;
  }

  // ClusterNode::run_gate: a waiting node's disk is empty or a staged restore.
  void run_gate(Node& n) {
    if (!n.up || n.gate_open) return;
    cluster::DataDirState d;
    d.staged_restore = true;
    const cluster::StartDecision dec = cluster::decide_start(d, {n.id, n.flag_peers, gate_mutations()}, n.answers);
    switch (dec.verdict) {
      case cluster::StartVerdict::kRefuse: refuse(n, dec.reason, false); return;
      case cluster::StartVerdict::kJoinVoter:
      case cluster::StartVerdict::kJoinLearner: open_gate(n, dec); return;
      case cluster::StartVerdict::kVote:
      case cluster::StartVerdict::kWait: return;
    }
  }

  // A message reaches `to`'s core only through an open gate, from a peer
  // whose secret is right; the sender is recorded in HEARD (durably, before
  // it counts) and, in the simulator's ground truth, took part. Not for a
  // PreVote or its answer: they are sent with nothing durable behind them
  // (a founder that answered one and crashed before its first write never
  // voted or acknowledged anything, and must still join: rule 3).
  bool lifecycle_admits(NodeId from, Node& to, raft::MessageType type) {
    Node& s = nodes_[from - 1];
    if (s.bad_secret || to.bad_secret || !to.gate_open) return false;
    const bool prevote = type == raft::MessageType::kPreVote || type == raft::MessageType::kPreVoteResp;
    if (prevote && opts_.bug != PlantedBug::kHeardCountsPreVotes) return true;
    if (prevote) {
      // The planted bug records it, as any message; the ground truth does not.
      if (to.heard.insert(from).second) to.heard_disk.insert(from);
      return true;
    }
    if (!to.heard.contains(from)) {
      to.heard.insert(from);
      if (opts_.bug != PlantedBug::kHeardNotDurable) to.heard_disk.insert(from);
    }
    s.took_part = true;
    return true;
  }

  // A majority of the founders kept their data and were not refused.
  bool quorum_left() const {
    std::size_t ok = 0;
    for (const Node& n : nodes_) ok += counts_for_liveness(n) ? 1 : 0;
    return ok * 2 > static_cast<std::size_t>(opts_.nodes);
  }

  // A founder let in holds its campaigns a while; a waiting node does not tick.
  bool ticks_now(Node& n) {
    if (!n.gate_open) return false;
    if (n.hold_until != 0) {
      if (step_ < n.hold_until && n.raft->leader() == raft::kNoNode) return false;
      n.hold_until = 0;
    }
    return true;
  }

  // A lifecycle fault: the machine stops and comes back with part of its
  // data dir gone (or re-seeded from a backup by its unit's stale flag).
  void lose(Node& n, int loss) {
    // Before the group's first commit the operator's init retries are the
    // story (cluster_init); losses come after.
    if (n.gone || !n.joined || history_.empty()) return;
    if (n.up) crash(n, "disk loss");
    trace("n%llu loses its %s%s", ull(n.id), loss_name(loss), n.took_part ? " (it took part)" : "");
    auto wipe = [&](bool keep_identity) {
      n.disk = raft::MemoryStorage{};
      n.durable_term = 0;
      if (!keep_identity) {
        n.identity = false;
        n.identity_cluster = 0;
        n.identity_members.clear();
      }
      n.heard_file = false;
      n.heard_disk.clear();
      n.restored = false;
    };
    switch (loss) {
      case kLossWhole: wipe(false); break;
      case kLossAllButIdentity: wipe(true); break;
      case kLossReseed:
        wipe(false);
        if (!backups_.empty()) n.restore_from = backups_[lrng_.below(backups_.size())];
        break;
      case kLossLog: {
        const raft::Snapshot snap = n.disk.snapshot();
        n.disk = raft::MemoryStorage{};
        n.durable_term = 0;
        if (snap.meta.index != 0) n.disk.save_snapshot(snap);
        break;
      }
      case kLossSnapshot:
        if (n.disk.snapshot().meta.index == 0) return;  // there was none: nothing lost
        n.storage_broken = true;
        break;
      case kLossHeard:
        n.heard_file = false;
        n.heard_disk.clear();
        return;  // its votes and log are intact
    }
    n.lost_data = n.lost_data || n.took_part;
    n.disk_lost = true;
    // The machine went down with its disk: its connections die with it,
    // and nothing the old incarnation sent arrives after (an acknowledgement
    // it no longer backs would reach a leader as the new one's word).
    // Plain crashes keep theirs: the disk still backs what they said.
    auto from_it = [&](const InFlight& f) { return f.from == n.id; };
    std::erase_if(network_, from_it);
    std::erase_if(capsules_, from_it);
  }

  // Restarted with another --peer list: its own id only (the "start one,
  // grow" unit), one id more, or another group's of the same size.
  void stale_flags(Node& n) {
    // A running member with a log (stale flags before its first durable
    // write would be an operator's wrong init, not the gate's business).
    if (n.gone || !n.joined || !n.up || !n.gate_open || n.flags_stale || n.disk.hard_state().term == 0) return;
    std::vector<NodeId> peers;
    switch (lrng_.below(3)) {
      case 0: peers = {n.id}; break;
      case 1:
        peers = voters_;
        peers.push_back(static_cast<NodeId>(nodes_.size() + 1));
        break;
      default:
        // Same size, one other id replaced by one this group does not have.
        peers = voters_;
        for (NodeId& id : peers) {
          if (id != n.id) {
            id = static_cast<NodeId>(nodes_.size() + 1 + id);
            break;
          }
        }
        std::sort(peers.begin(), peers.end());
        if (peers == voters_) return;  // a one-node group has no other id
    }
    n.flag_peers = peers;
    n.flags_stale = true;
    crash(n, ("restarted with --peer " + ids_text(peers)).c_str());
  }

  // Faults stop: secrets and flags fixed, late founders started. A founder
  // with nothing durable waits for every voter's word (rule 3): with one
  // gone for good it waits for ever (the operator removes the gone one
  // first), so liveness is not asked of it.
  void lifecycle_calm() {
    bool one_gone = false;
    for (const Node& n : nodes_) {
      one_gone = one_gone || (n.id <= static_cast<NodeId>(opts_.nodes) && (n.gone || n.lost_data || n.storage_broken));
    }
    for (Node& n : nodes_) {
      const raft::HardState hs = n.disk.hard_state();
      const raft::SnapshotMeta& sm = n.disk.snapshot().meta;
      // A staged restore (re-seeded from a backup, untouched since) waits
      // for every voter's word like an empty data dir (lifecycle soak seed
      // 3000007 at 5 nodes).
      const bool staged = n.restored && sm.index != 0 && hs.vote == raft::kNoNode && hs.term == sm.term &&
                          n.disk.entries().empty();
      const bool durable = (hs.term != 0 || !n.disk.entries().empty() || sm.index != 0) && !staged;
      n.cannot_join = one_gone && !durable && !n.gate_open;
    }
    for (Node& n : nodes_) {
      if (n.bad_secret) {
        n.bad_secret = false;
        if (n.up) crash(n, "restarted with the right peer secret");
      }
      if (n.flags_stale) {
        n.flags_stale = false;
        n.flag_peers = voters_;  // read at the next start
      }
      if (!n.joined && n.id <= static_cast<NodeId>(opts_.nodes)) {
        n.joined = true;
        start_node(n);
      }
    }
    std::erase_if(life_events_, [](const LifeEvent& e) { return e.kind != LifeEvent::kStart; });
  }

  // --- invariants ---

  void record_applied(Node& n, const Entry& e, const std::string& outcome) {
    HistoryEntry& h = history_entry(n, e.index, e.term, e.data);
    if (!result_.passed) return;
    if (!h.outcome) {
      h.outcome = outcome;
    } else if (*h.outcome != outcome) {
      fail("state machine safety", "node " + std::to_string(n.id) + " applying " + std::to_string(e.index) +
                                       " got '" + outcome + "', others got '" + *h.outcome + "'");
    }
  }

  // Looks up (or creates) the history entry at `index`, failing when the
  // node disagrees with what another node committed there.
  HistoryEntry& history_entry(Node& n, Index index, Term term, const std::string& data) {
    auto [it, fresh] = history_.try_emplace(index);
    HistoryEntry& h = it->second;
    if (fresh) {
      h.term = term;
      h.data = data;
      h.commit_term = n.raft ? n.raft->term() : term;
    } else if (h.term != term || h.data != data) {
      fail("state machine safety", "node " + std::to_string(n.id) + " committed (" + std::to_string(index) +
                                       ", term " + std::to_string(term) + ") but history has term " +
                                       std::to_string(h.term));
    }
    return h;
  }

  void check_invariants() {
    for (Node& n : nodes_) {
      if (!n.up || !result_.passed) continue;
      Raft& r = *n.raft;
      if (opts_.lifecycle && !formed_ && r.role() != Role::kFollower) {
        fail("a group forms only by cluster init", "n" + std::to_string(n.id) + " is a " +
                                                       std::string(raft::to_string(r.role())) + " before init");
        return;
      }
      // Election Safety: at most one leader per term.
      if (r.role() == Role::kLeader) {
        auto [it, fresh] = leaders_.try_emplace(r.term(), n.id);
        if (fresh) {
          trace("n%llu leads term %llu (last %llu commit %llu)", ull(n.id), ull(r.term()),
                ull(r.last_index()), ull(r.commit()));
          if (storming() && rng_.chance(w_.crash_new_leader)) {
            doomed_.push_back({step_ + rng_.range(0, 3), n.id, r.term()});
          }
        }
        if (!fresh && it->second != n.id) {
          fail("election safety", "term " + std::to_string(r.term()) + " has leaders n" +
                                      std::to_string(it->second) + " and n" + std::to_string(n.id));
          return;
        }
      }
      // Terms never decrease while a node runs.
      if (r.term() < n.running_term) {
        fail("terms never decrease", "node " + std::to_string(n.id) + " went from term " +
                                         std::to_string(n.running_term) + " to " + std::to_string(r.term()));
        return;
      }
      n.running_term = r.term();
      // Record newly committed entries; they must agree with history.
      for (Index i = std::max(n.seen_commit, r.log_base()) + 1; i <= r.commit(); ++i) {
        const Entry& e = r.log()[i - r.log_base() - 1];
        HistoryEntry& h = history_entry(n, i, e.term, e.data);
        h.commit_term = std::min(h.commit_term, r.term());
        if (!result_.passed) return;
        if (e.type == EntryType::kConfChange && i > last_conf_seen_) conf_committed(i, e);
      }
      n.seen_commit = std::max(n.seen_commit, r.commit());
    }
    check_log_matching();
    check_leader_completeness();
    check_progress_sound();
    check_membership();
  }

  // What a leader believes about a follower must be true: the follower
  // holds (durably, since acks wait for persistence) every entry up to
  // `match`, with the leader's terms. Whatever the follower's term: one
  // still behind the leader's term cannot have acked this term, so it must
  // hold all of it too; one already ahead may have had an uncommitted
  // suffix replaced by a newer leader, but never an entry committed by the
  // leader's term or earlier, so there the claim is checked up to those.
  void check_progress_sound() {
    for (const Node& l : nodes_) {
      if (!l.up || !result_.passed || l.raft->role() != Role::kLeader) continue;
      Index committed = 0;  // highest index committed in a term <= the leader's
      for (auto it = history_.rbegin(); it != history_.rend(); ++it) {
        if (it->second.commit_term <= l.raft->term()) {
          committed = it->first;
          break;
        }
      }
      for (const raft::PeerProgress& p : l.raft->progress()) {
        const Node& f = nodes_[p.id - 1];
        if (p.id == l.id || !f.up) continue;
        // --lifecycle: a disk loss makes a leader's belief about that
        // follower untrue; what keeps it harmless is that the node never
        // votes or acknowledges again under its id (the rule-2 checks).
        if (opts_.lifecycle && (f.lost_data || !f.gate_open)) continue;
        bool ahead = f.raft->term() > l.raft->term();
        Index claim = ahead ? std::min(p.match, committed) : p.match;
        bool ok = claim <= f.raft->last_index();
        if (ok && claim > std::max(f.raft->log_base(), l.raft->log_base())) {
          ok = f.raft->term_at(claim) == l.raft->term_at(claim);
        }
        if (!ok) {
          auto t = f.raft->term_at(claim);
          std::string name = f.raft->term() == l.raft->term() ? "progress soundness" : "progress soundness (any term)";
          fail(name, "leader n" + std::to_string(l.id) + " of term " + std::to_string(l.raft->term()) +
                         " believes n" + std::to_string(f.id) + " (term " + std::to_string(f.raft->term()) +
                         ") matches through " + std::to_string(claim) + " but it has last " +
                         std::to_string(f.raft->last_index()) + ", term there " +
                         (t ? std::to_string(*t) : std::string("none")));
          return;
        }
      }
    }
  }

  // Every proposal the final leader accepted in its own term has committed
  // by now (proposals of earlier leaders may be lost, and clients retry).
  void check_pending_committed() {
    Node* l = find_leader();
    if (!l) return;
    Term t = l->raft->term();
    std::size_t checked = 0;
    for (const auto& [index, term] : accepted_) {
      if (term != t) continue;
      ++checked;
      auto it = history_.find(index);
      if (it == history_.end() || it->second.term != term) {
        fail("liveness", "proposal at (" + std::to_string(index) + ", term " + std::to_string(term) +
                             ") accepted by the current leader never committed");
        return;
      }
    }
    trace("all %zu proposals of the final term %llu committed", checked, ull(t));
  }

  // Once every replica applied the same prefix, their lock tables must be
  // identical (keys, holders, tokens, deadlines, queues).
  static std::string table_digest(const locks::LockTable& t) {
    std::vector<std::string> rows;
    t.for_each([&](std::string_view key, const locks::KeyState& k) {
      std::string row = std::string(key) + (k.shared() ? " shared " + std::to_string(k.limit()) : "");
      k.for_each_holder([&](const locks::Holder& h) {
        row += " " + std::string(h.owner.view()) + " " + std::to_string(h.token) + " " + std::to_string(h.expires_at_ns) + " " +
               std::to_string(h.lease_ms);
      });
      if (const auto* waiters = k.waiters()) {
        for (const locks::Waiter& w : *waiters) {
          row += " w" + std::to_string(w.id) + "/" + w.owner + "/" + std::to_string(w.wait_deadline_ns) +
                 (w.shared ? "/S" + std::to_string(w.limit) : "");
        }
      }
      rows.push_back(std::move(row));
    });
    std::sort(rows.begin(), rows.end());
    std::string out = "next " + std::to_string(t.next_token());
    for (const std::string& r : rows) out += "\n" + r;
    return out;
  }

  void check_replicas_converged() {
    const Node* ref = nullptr;
    for (const Node& n : nodes_) {
      if (!counts_for_liveness(n)) continue;
      if (!n.up) return;
      if (ref && n.applied != ref->applied) return;  // not settled yet
      if (!ref) ref = &n;
    }
    converged_ = true;
    trace("replicas converged at applied %llu", ull(ref->applied));
    std::string want = table_digest(ref->sm->table());
    for (const Node& n : nodes_) {
      if (!n.up || !counts_for_liveness(n)) continue;
      if (table_digest(n.sm->table()) != want) {
        fail("replicas converge", "n" + std::to_string(n.id) + " and n" + std::to_string(ref->id) +
                                      " applied through " + std::to_string(ref->applied) +
                                      " but hold different lock tables");
        return;
      }
    }
  }

  // Log Matching: two logs with the same term at an index agree on every
  // entry up to it.
  void check_log_matching() {
    for (std::size_t a = 0; a < nodes_.size() && result_.passed; ++a) {
      for (std::size_t b = a + 1; b < nodes_.size() && result_.passed; ++b) {
        const Node& x = nodes_[a];
        const Node& y = nodes_[b];
        if (!x.up || !y.up) continue;
        Index lo = std::max(x.raft->log_base(), y.raft->log_base()) + 1;
        Index hi = std::min(x.raft->last_index(), y.raft->last_index());
        Index top = 0;
        for (Index i = hi; i >= lo && i > 0; --i) {
          if (x.raft->term_at(i) == y.raft->term_at(i)) {
            top = i;
            break;
          }
        }
        for (Index i = lo; i <= top; ++i) {
          const Entry& ex = x.raft->log()[i - x.raft->log_base() - 1];
          const Entry& ey = y.raft->log()[i - y.raft->log_base() - 1];
          if (ex.term != ey.term || ex.data != ey.data) {
            fail("log matching", "n" + std::to_string(x.id) + " and n" + std::to_string(y.id) +
                                     " agree on term at " + std::to_string(top) + " but differ at " +
                                     std::to_string(i));
            return;
          }
        }
      }
    }
  }

  // Leader Completeness: a leader holds every entry committed in an
  // earlier (or its own) term.
  void check_leader_completeness() {
    for (const Node& n : nodes_) {
      if (!n.up || !result_.passed || n.raft->role() != Role::kLeader) continue;
      const Raft& r = *n.raft;
      for (auto it = history_.upper_bound(r.log_base()); it != history_.end(); ++it) {
        if (it->second.commit_term > r.term()) continue;
        if (r.term_at(it->first) != it->second.term) {
          fail("leader completeness", "leader n" + std::to_string(n.id) + " of term " + std::to_string(r.term()) +
                                          " lacks entry " + std::to_string(it->first) + " committed by term " +
                                          std::to_string(it->second.commit_term));
          return;
        }
      }
    }
  }

  // --- reporting ---

  // One line per node, for failure reports.
  std::string cluster_summary() const {
    std::ostringstream o;
    o << " (marker " << marker_index_ << "@" << marker_term_ << ")";
    for (const Node& n : nodes_) {
      o << "\n    n" << n.id;
      if (opts_.lifecycle) {
        o << (n.gone ? " gone" : n.up && !n.gate_open ? " waiting" : "") << (n.lost_data ? " lost-data" : "")
          << (n.took_part ? "" : " never-took-part");
      }
      if (!n.up) {
        o << " down";
        continue;
      }
      raft::Status st = n.raft->status();
      o << " " << raft::to_string(st.role) << " term " << st.term << " leader " << st.leader << " commit "
        << st.commit << " applied " << st.applied << " last " << st.last_index << " snap " << st.snapshot_index;
      for (const raft::PeerProgress& p : n.raft->progress()) {
        o << " [n" << p.id << " match " << p.match << " next " << p.next << " " << raft::to_string(p.state)
          << " inflight " << p.inflight << " snapoff " << p.snapshot_offset << "]";
      }
    }
    return o.str();
  }

  void fail(const std::string& invariant, const std::string& details) {
    if (!result_.passed) return;
    result_.passed = false;
    result_.failed_step = step_;
    result_.failure = invariant + ": " + details;
    trace("FAIL %s", result_.failure.c_str());
  }

  static unsigned long long ull(std::uint64_t v) { return static_cast<unsigned long long>(v); }

  template <typename... Args>
  void trace(const char* fmt, Args... args) {
    if (!opts_.verbose && !opts_.trace_messages) return;
    std::printf("[seed %llu step %llu] ", ull(seed_), ull(step_));
    if constexpr (sizeof...(Args) == 0) {
      std::fputs(fmt, stdout);
    } else {
      std::printf(fmt, args...);
    }
    std::printf("\n");
  }

  SimOptions opts_;
  std::uint64_t seed_;
  Prng rng_;
  Weather w_;
  bool pre_vote_ = true;
  bool check_quorum_ = true;
  int heartbeat_ticks_ = 1;
  std::size_t max_inflight_ = 4;
  std::size_t max_entries_ = 8;
  std::uint64_t catchup_steps_ = 0;  // liveness_deadline(): log catch-up allowance, set when faults stop
  std::size_t chunk_bytes_ = 256;
  std::vector<NodeId> voters_;  // the bootstrap configuration (nodes 1..--nodes)
  Prng mrng_;                   // --membership draws: a stream of its own, so runs without it are unchanged
  Prng prng_;                   // pipelined-sync draws: their own stream too
  bool pipelined_ = false;      // this seed drives its nodes with start_ready / complete_ready
  Index compact_keep_ = 0;      // entries a compaction keeps behind the snapshot (--compact-keep)
  double sync_done_chance_ = 1;  // per node visit: the Ready's sync ends
  double stall_chance_ = 0;      // per sync, in storms: the disk stalls for a few steps
  bool end_of_step_ = false;     // the sweep that ends this step's syncs
  std::uint64_t visits_ = 0;     // process() calls so far
  double conf_rate_ = 0;        // per step: try a configuration change
  Index last_conf_seen_ = 0;    // highest committed kConfChange handled by conf_committed()
  raft::Membership committed_conf_;  // the newest committed configuration (empty: the bootstrap one)
  Index committed_conf_index_ = 0;   // where it was appended
  std::vector<TimeNs> clock_offset_ns_;  // [id]: origin of that node's clock
  std::vector<Node> nodes_;
  std::vector<InFlight> network_;
  std::vector<std::vector<bool>> blocked_;               // blocked_[from][to]
  std::vector<std::vector<std::uint64_t>> clogged_until_;  // [from][to] step
  std::uint64_t step_ = 0;
  std::uint64_t faults_end_ = 0;
  std::optional<Steady> steady_;           // the steady fault phase under way
  std::uint64_t next_steady_step_ = UINT64_MAX;
  std::vector<InFlight> capsules_;         // messages that arrive very late
  std::uint64_t next_waiter_ = 0;
  std::uint64_t decode_errors_ = 0;
  std::map<Index, HistoryEntry> history_;
  LockModel oracle_;         // the lock contract, fed every committed command once
  Index oracle_index_ = 0;   // last index fed to oracle_
  std::map<Term, NodeId> leaders_;
  // A leader of `term` to crash at `step` (if it still runs in that term).
  struct Doomed {
    std::uint64_t step;
    NodeId node;
    Term term;
  };
  std::vector<Doomed> doomed_;
  Index marker_index_ = 0;
  Term marker_term_ = 0;
  bool liveness_done_ = false;
  bool converged_ = false;
  // --lifecycle (plan_lifecycle):
  struct LifeEvent {
    enum Kind { kStart, kFixSecret, kLoss, kStaleFlags } kind;
    std::uint64_t step;
    NodeId node;
    int loss = 0;  // kLoss: a Loss
  };
  std::vector<LifeEvent> life_events_;
  Prng lrng_{seed_ ^ 0x6c6966656379636cull};  // lifecycle draws: a stream of their own
  // The init-on-every-start script (init_script_): its draws, apart, so
  // that the lifecycle stories of earlier seeds stay as they were.
  Prng irng_{seed_ ^ 0x696e697473637270ull};
  bool init_script_ = false;  // this seed's deploy script runs cluster init on every start
  std::uint64_t init_step_ = 0;
  NodeId init_node_ = raft::kNoNode;
  bool formed_ = false;                       // cluster init was called
  std::vector<raft::Snapshot> backups_;       // backup files to re-seed from
  std::set<NodeId> heard_assumed_;            // ids a lost HEARD was replaced by "heard" for
  std::map<std::pair<NodeId, Term>, NodeId> votes_;  // (id, term) -> the vote it persisted
  std::vector<std::pair<Index, Term>> accepted_;  // every proposal a leader accepted  // all replicas applied the same prefix and hold equal tables
  SeedResult result_;
};

}  // namespace

bool parse_planted_bug(std::string_view name, PlantedBug& out) {
  for (PlantedBug b : {PlantedBug::kNone, PlantedBug::kCommitOldTerm, PlantedBug::kVoteBeforePersist,
                       PlantedBug::kKeepVoteOnNewTerm, PlantedBug::kSkipLogUpToDate,
                       PlantedBug::kHeartbeatFullCommit, PlantedBug::kAckBeforePersist,
                       PlantedBug::kExpireIgnoresLease, PlantedBug::kQuorumOfAll, PlantedBug::kLeaderNeverStepsDown,
                       PlantedBug::kNoLeaderStickiness, PlantedBug::kAcceptStaleResponses,
                       PlantedBug::kAcceptStaleAppendResponses,
                       PlantedBug::kAssumeFollowersCommitted, PlantedBug::kConfOnCommit,
                       PlantedBug::kQuorumFromOldConfig, PlantedBug::kLearnerCountsAsVoter,
                       PlantedBug::kRemovedLeaderKeepsLeading, PlantedBug::kConcurrentChanges,
                       PlantedBug::kGateAdmitCalledVoter, PlantedBug::kGateIdentityIsData,
                       PlantedBug::kGateLearnersConfirm, PlantedBug::kGateSkipConfirmations,
                       PlantedBug::kGatePeerCountOnly, PlantedBug::kGateRestoreVotes,
                       PlantedBug::kGateEmptyConfirms, PlantedBug::kInitAtOnce, PlantedBug::kHeardNotDurable, PlantedBug::kHeardCountsPreVotes}) {
    if (to_string(b) == name) {
      out = b;
      return true;
    }
  }
  return false;
}

std::string_view to_string(PlantedBug b) {
  switch (b) {
    case PlantedBug::kNone: return "none";
    case PlantedBug::kCommitOldTerm: return "commit-old-term";
    case PlantedBug::kVoteBeforePersist: return "vote-before-persist";
    case PlantedBug::kKeepVoteOnNewTerm: return "keep-vote-on-new-term";
    case PlantedBug::kSkipLogUpToDate: return "skip-log-up-to-date";
    case PlantedBug::kHeartbeatFullCommit: return "heartbeat-full-commit";
    case PlantedBug::kAckBeforePersist: return "ack-before-persist";
    case PlantedBug::kExpireIgnoresLease: return "expire-ignores-lease";
    case PlantedBug::kQuorumOfAll: return "quorum-of-all";
    case PlantedBug::kLeaderNeverStepsDown: return "leader-never-steps-down";
    case PlantedBug::kNoLeaderStickiness: return "no-leader-stickiness";
    case PlantedBug::kAcceptStaleResponses: return "accept-stale-responses";
    case PlantedBug::kAcceptStaleAppendResponses: return "accept-stale-append-responses";
    case PlantedBug::kAssumeFollowersCommitted: return "assume-followers-committed";
    case PlantedBug::kConfOnCommit: return "conf-on-commit";
    case PlantedBug::kQuorumFromOldConfig: return "quorum-from-old-config";
    case PlantedBug::kLearnerCountsAsVoter: return "learner-counts-as-voter";
    case PlantedBug::kRemovedLeaderKeepsLeading: return "removed-leader-keeps-leading";
    case PlantedBug::kConcurrentChanges: return "concurrent-changes";
    case PlantedBug::kGateAdmitCalledVoter: return "gate-admit-called-voter";
    case PlantedBug::kGateIdentityIsData: return "gate-identity-is-data";
    case PlantedBug::kGateLearnersConfirm: return "gate-learners-confirm";
    case PlantedBug::kGateSkipConfirmations: return "gate-skip-confirmations";
    case PlantedBug::kGatePeerCountOnly: return "gate-peer-count-only";
    case PlantedBug::kGateRestoreVotes: return "gate-restore-votes";
    case PlantedBug::kGateEmptyConfirms: return "gate-empty-confirms";
    case PlantedBug::kInitAtOnce: return "init-at-once";
    case PlantedBug::kHeardNotDurable: return "heard-not-durable";
    case PlantedBug::kHeardCountsPreVotes: return "heard-counts-prevotes";
  }
  return "?";
}

SeedResult run_seed(const SimOptions& opts, std::uint64_t seed) {
  Simulation sim(opts, seed);
  return sim.run();
}

std::string replay_command(const SimOptions& opts, std::uint64_t seed) {
  std::ostringstream s;
  s << "lockd-sim --nodes " << opts.nodes << " --seeds 1 --steps " << opts.steps << " --seed " << seed;
  if (opts.bug != PlantedBug::kNone) s << " --bug " << to_string(opts.bug);
  if (opts.membership) s << " --membership";
  if (opts.exclusive_only) s << " --exclusive-only";
  if (opts.compact_keep) s << " --compact-keep";
  if (opts.lifecycle) s << " --lifecycle";
  return s.str();
}

}  // namespace lockd::sim
