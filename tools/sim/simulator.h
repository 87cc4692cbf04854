// The deterministic cluster simulator behind lockd-sim.
//
// A whole cluster in one process: N Raft cores, each with a MemoryStorage
// ("the disk") and a LockTable ("the state machine"), joined by a simulated
// network, all driven by one seeded PRNG and a virtual clock (one step =
// one tick = kTickNs of virtual time). Nothing reads a real clock, so a
// seed replays bit for bit.
//
// Faults (swarm-style: each seed draws its own fault rates, so some seeds
// are calm and some are storms): message loss, delay, duplication,
// reordering, bit flips (caught by the codec's CRC), symmetric and one-way
// partitions, clogged links (held, then released), crashes at any point —
// including in the middle of persisting a Ready, losing its unpersisted
// tail — and restarts from what was persisted; time capsules (a message
// delivered 1000+ steps late, some waiting for the worst moment); steady
// phases where one fault stays (a minority down, a cut link, one-way cuts)
// while progress is still required; per-node clock origins. Clients
// propose lock commands; leaders are asked to transfer leadership now and
// then.
//
// After every step it checks the invariants listed in docs/raft.md — Raft
// safety, progress soundness whatever the follower's term, and the lock
// oracle (LockModel, lock_model.h) against every first apply; after the
// faults stop it checks that the cluster elects a leader and commits a new
// proposal on every node within kLivenessBudgetSteps.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace lockd::sim {

// Deliberate bugs switched on in the Raft core, to prove the checks bite.
enum class PlantedBug {
  kNone,                // the real protocol
  kCommitOldTerm,       // commit old-term entries by counting replicas (Figure 8)
  kVoteBeforePersist,   // send a vote grant before it is durable
  kKeepVoteOnNewTerm,   // do not clear the vote when the term grows
  kSkipLogUpToDate,     // grant votes to candidates with stale logs
  kHeartbeatFullCommit, // heartbeats tell followers the leader's whole commit index
  kAckBeforePersist,    // acknowledge appended entries before they are durable
  // Caught only by the checks of issue 8 (docs/raft.md §5):
  kExpireIgnoresLease,  // the lock layer's Expire ends a lease before its deadline (every replica alike)
  kQuorumOfAll,         // the leader commits only what every voter holds
  kLeaderNeverStepsDown,  // CheckQuorum counts heartbeats sent, so a deaf leader keeps leading
  kNoLeaderStickiness,  // voters answer vote requests while they hear a leader
  kAcceptStaleResponses,  // a node acts on append and vote answers from its earlier terms
  kAcceptStaleAppendResponses,  // a leader acts on append answers from its earlier terms
  kAssumeFollowersCommitted,  // a new leader starts every follower's match at its own commit
  // Membership (issue 20; run with --membership):
  kConfOnCommit,              // a configuration takes effect when committed, not when appended
  kQuorumFromOldConfig,       // the leader counts commit with the voters it was elected by
  kLearnerCountsAsVoter,      // learners count toward commit, election and CheckQuorum
  kRemovedLeaderKeepsLeading, // a leader whose removal committed keeps leading
  kConcurrentChanges,         // changes proposed before the previous one (and the term's first entry) commit
  // A node's lifecycle (issue 37; run with --lifecycle): one rule of the
  // real start gate broken (cluster::GateMutations), or the HEARD record
  // of the simulated node not made durable before a message counts.
  kGateAdmitCalledVoter,      // an empty node a member calls a voter joins at once
  kGateIdentityIsData,        // IDENTITY with a cluster id, the log gone: votes
  kGateLearnersConfirm,       // any answering node (not only voters) confirms "never heard"
  kGateSkipConfirmations,     // a founder joins without every voter's confirmation
  kGatePeerCountOnly,         // --peer checked against IDENTITY by size only
  kGateRestoreVotes,          // a member re-seeded from a backup (staged restore) votes
  kGateEmptyConfirms,         // an empty voter's "never heard" confirms though a member heard from it
  kInitAtOnce,                // cluster init forms before every --peer member answered (a wiped node re-forms)
  kHeardNotDurable,           // HEARD is written lazily: a crash forgets ids already counted
  kHeardCountsPreVotes,       // HEARD records PreVote messages too (lockd before 2026-12-06): a
                              // founder that answered one and crashed before its first write is locked out
};

// Parses a --bug name; false when unknown.
bool parse_planted_bug(std::string_view name, PlantedBug& out);
std::string_view to_string(PlantedBug b);

struct SimOptions {
  int nodes = 3;             // cluster size, 1..kMaxVoters (CI runs every size)
  std::uint64_t steps = 3000;  // steps per seed, liveness phase included
  PlantedBug bug = PlantedBug::kNone;
  bool verbose = false;      // print a trace of every event
  bool trace_messages = false;  // also print every delivered message
  // Membership changes under the faults: learners added (from spare node
  // slots, ids never reused), promoted, members removed (the leader too),
  // so replacements happen; removed nodes are stopped a while after their
  // removal commits. Off: the simulation is exactly the one before issue 20.
  bool membership = false;
  // Clients issue only A (the mix before issue 22, draw for draw), for
  // seed windows found before the clients issued S.
  bool exclusive_only = false;
  // Compactions keep a seed-drawn number of entries behind the snapshot
  // (Raft::compact's keep_entries), so that followers a little behind are
  // caught up from the log rather than sent the snapshot.
  bool compact_keep = false;
  // A node's lifecycle (protocol.md §10 rules 1-4, docs/raft.md): every
  // node has a data dir (IDENTITY, HEARD, RESTORED beside the log and
  // snapshot) and flags, starts through the real start gate
  // (cluster::decide_start) with handshake answers from the simulated
  // peers, and the group forms only by a cluster-init event; lifecycle
  // faults: disk loss (whole, log, snapshot, all but IDENTITY, HEARD),
  // re-seeding from a backup, stale flags, late start, a wrong then right
  // peer secret.
  bool lifecycle = false;
};

// What one seed did.
struct SeedResult {
  bool passed = true;
  std::uint64_t failed_step = 0;
  std::string failure;              // invariant name and details
  std::uint64_t steps = 0;          // steps simulated (a seed stops early once it converged)
  std::uint64_t committed = 0;      // highest committed index observed
  std::uint64_t leaders = 0;        // distinct (term, leader) pairs observed
  std::uint64_t crashes = 0;
  std::uint64_t snapshots_installed = 0;
  std::uint64_t conf_changes = 0;   // configuration changes that committed
  // Lock outcomes the oracle checked (each committed command once):
  std::uint64_t shared_grants = 0;     // `S` holders granted, at once or by hand-off
  std::uint64_t shared_runs = 0;       // hand-offs that granted two or more `S` in one entry
  std::uint64_t limit_mismatches = 0;  // `S` refused for another limit
};

SeedResult run_seed(const SimOptions& opts, std::uint64_t seed);

// The one-line command that replays `seed` with `opts`.
std::string replay_command(const SimOptions& opts, std::uint64_t seed);

}  // namespace lockd::sim
