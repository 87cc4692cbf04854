// Unit tests of the Raft core's contract: the persistence rule, election
// timing, vote rules, input validation and back-pressure. Protocol stories
// (Figure 7, Figure 8, partitions, snapshots, transfer) live in
// testdata/*.txt, run by scenario_test.cc.
#include <gtest/gtest.h>

#include <limits>
#include <map>
#include <memory>
#include <set>

#include "lockd/common/deferred_free.h"
#include "lockd/raft/driver.h"
#include "lockd/raft/raft.h"

namespace lockd::raft {
namespace {

Config make_config(NodeId id, std::vector<NodeId> voters) {
  Config c;
  c.id = id;
  c.voters = std::move(voters);
  c.rng_seed = id;
  return c;
}

// A handful of nodes wired together by hand, everything delivered.
struct MiniCluster {
  explicit MiniCluster(int n) {
    std::vector<NodeId> voters;
    for (int i = 1; i <= n; ++i) voters.push_back(static_cast<NodeId>(i));
    for (NodeId id : voters) {
      disks[id] = std::make_unique<MemoryStorage>();
      nodes[id] = std::make_unique<Raft>(make_config(id, voters), *disks[id]);
    }
  }
  // Persist, apply and deliver until nothing moves.
  void settle() {
    for (int round = 0; round < 100; ++round) {
      std::vector<Message> out;
      for (auto& [id, r] : nodes) {
        while (r->has_ready()) {
          Ready rd = r->ready();
          for (Message& m : rd.messages) out.push_back(m);
          if (rd.snapshot) disks[id]->save_snapshot(*rd.snapshot);
          disks[id]->append(rd.entries);
          if (rd.hard_state) disks[id]->set_hard_state(*rd.hard_state);
          for (const Entry& e : rd.committed) applied[id].push_back(e);
          r->advance();
        }
      }
      if (out.empty()) return;
      for (const Message& m : out) {
        if (down.contains(m.to) || down.contains(m.from)) continue;
        EXPECT_EQ(nodes[m.to]->step(m), StepError::kOk);
      }
    }
    FAIL() << "did not settle";
  }
  std::map<NodeId, std::unique_ptr<MemoryStorage>> disks;
  std::map<NodeId, std::unique_ptr<Raft>> nodes;
  std::map<NodeId, std::vector<Entry>> applied;
  std::set<NodeId> down;  // cut off: what they send and what is sent to them is lost
};

bool has_type(const std::vector<Message>& ms, MessageType t) {
  for (const Message& m : ms) {
    if (m.type == t) return true;
  }
  return false;
}

TEST(RaftConfig, ValidateNamesEachProblem) {
  EXPECT_EQ(validate(make_config(1, {1, 2, 3})), ConfigError::kOk);
  EXPECT_EQ(validate(make_config(0, {1})), ConfigError::kNoId);
  EXPECT_EQ(validate(make_config(4, {1, 2, 3})), ConfigError::kNotAVoter);
  EXPECT_EQ(validate(make_config(1, {1, 1})), ConfigError::kBadVoters);
  EXPECT_EQ(validate(make_config(1, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10})), ConfigError::kBadVoters);
  Config c = make_config(1, {1});
  c.heartbeat_ticks = 10;
  EXPECT_EQ(validate(c), ConfigError::kBadTicks);
  c = make_config(1, {1});
  c.max_inflight = 0;
  EXPECT_EQ(validate(c), ConfigError::kZeroLimit);
}

TEST(RaftElection, TimeoutIsDrawnFromNTo2N) {
  // With the random source pinned to 7, the timeout is 10 + 7 % 10 = 17.
  for (std::uint64_t draw : {0ull, 7ull, 9ull, 19ull}) {
    MemoryStorage disk;
    Config c = make_config(1, {1, 2, 3});
    c.random = [draw] { return draw; };
    Raft r(c, disk);
    int expected = 10 + static_cast<int>(draw % 10);
    for (int t = 1; t < expected; ++t) {
      r.tick();
      ASSERT_EQ(r.role(), Role::kFollower) << "tick " << t;
    }
    r.tick();
    EXPECT_EQ(r.role(), Role::kPreCandidate);
  }
}

TEST(RaftElection, SingleNodeLeadsOnlyAfterItsVoteIsPersisted) {
  MemoryStorage disk;
  Raft r(make_config(1, {1}), disk);
  r.campaign();
  EXPECT_EQ(r.role(), Role::kCandidate);  // PreVote passed on its own vote
  Ready rd = r.ready();
  ASSERT_TRUE(rd.hard_state);
  EXPECT_EQ(rd.hard_state->vote, 1u);
  EXPECT_EQ(r.role(), Role::kCandidate);
  disk.set_hard_state(*rd.hard_state);
  r.advance();
  EXPECT_EQ(r.role(), Role::kLeader);
  // Its no-op commits once persisted, since it is its own majority.
  rd = r.ready();
  ASSERT_EQ(rd.entries.size(), 1u);
  EXPECT_EQ(rd.entries[0].type, EntryType::kNoop);
  EXPECT_TRUE(rd.committed.empty());
  disk.append(rd.entries);
  r.advance();
  rd = r.ready();
  ASSERT_EQ(rd.committed.size(), 1u);
  r.advance();
  EXPECT_EQ(r.commit(), 1u);
}

TEST(RaftPersistence, VoteGrantIsReleasedOnlyAfterAdvance) {
  MemoryStorage disk;
  Config c = make_config(2, {1, 2, 3});
  Raft r(c, disk);
  Message v;
  v.type = MessageType::kVote;
  v.from = 1;
  v.to = 2;
  v.term = 1;
  ASSERT_EQ(r.step(v), StepError::kOk);
  Ready rd = r.ready();
  ASSERT_TRUE(rd.hard_state);
  EXPECT_EQ(rd.hard_state->term, 1u);
  EXPECT_EQ(rd.hard_state->vote, 1u);
  EXPECT_FALSE(has_type(rd.messages, MessageType::kVoteResp)) << "vote sent before it was durable";
  r.advance();
  rd = r.ready();
  ASSERT_EQ(rd.messages.size(), 1u);
  EXPECT_EQ(rd.messages[0].type, MessageType::kVoteResp);
  EXPECT_FALSE(rd.messages[0].reject);
  r.advance();
}

TEST(RaftPersistence, PlantedVoteBeforePersistSendsEarly) {
  // The test-only fault really changes the behaviour the simulator hunts.
  MemoryStorage disk;
  Config c = make_config(2, {1, 2, 3});
  c.faults.vote_before_persist = true;
  Raft r(c, disk);
  Message v;
  v.type = MessageType::kVote;
  v.from = 1;
  v.to = 2;
  v.term = 1;
  r.step(v);
  Ready rd = r.ready();
  EXPECT_TRUE(has_type(rd.messages, MessageType::kVoteResp));
  r.advance();
}

// A peer message with its header filled in.
Message message(MessageType type, NodeId from, NodeId to, Term term) {
  Message m;
  m.type = type;
  m.from = from;
  m.to = to;
  m.term = term;
  return m;
}

TEST(RaftPersistence, AppendAckWaitsForTheEntries) {
  MemoryStorage disk;
  Raft r(make_config(2, {1, 2, 3}), disk);
  Message a = message(MessageType::kAppend, 1, 2, 1);
  a.entries.push_back(Entry{1, 1, EntryType::kNoop, ""});
  ASSERT_EQ(r.step(a), StepError::kOk);
  Ready rd = r.ready();
  EXPECT_EQ(rd.entries.size(), 1u);
  EXPECT_FALSE(has_type(rd.messages, MessageType::kAppendResp));
  r.advance();
  rd = r.ready();
  ASSERT_TRUE(has_type(rd.messages, MessageType::kAppendResp));
  EXPECT_EQ(rd.messages[0].index, 1u);
  r.advance();
}

TEST(RaftVote, RefusesCandidateWithStaleLog) {
  MemoryStorage disk;
  disk.append(std::vector<Entry>{{1, 1, EntryType::kNoop, ""}, {2, 2, EntryType::kNoop, ""}});
  disk.set_hard_state(HardState{2, kNoNode, 0});
  Raft r(make_config(2, {1, 2, 3}), disk);
  Message v;
  v.type = MessageType::kVote;
  v.from = 1;
  v.to = 2;
  v.term = 3;
  v.index = 5;
  v.log_term = 1;  // longer, but an older last term: not up to date
  r.step(v);
  Ready rd = r.ready();
  r.advance();
  rd = r.ready();
  ASSERT_EQ(rd.messages.size(), 1u);
  EXPECT_TRUE(rd.messages[0].reject);
  r.advance();
  EXPECT_EQ(r.status().vote, kNoNode);
}

TEST(RaftVote, ThreeNodesElectOneLeaderAndReplicate) {
  MiniCluster c(3);
  c.nodes[1]->campaign();
  c.settle();
  EXPECT_EQ(c.nodes[1]->role(), Role::kLeader);
  EXPECT_EQ(c.nodes[2]->leader(), 1u);
  ProposeResult p = c.nodes[1]->propose("x");
  ASSERT_EQ(p.error, ProposeError::kOk);
  c.settle();
  for (NodeId id : {1, 2, 3}) {
    ASSERT_FALSE(c.applied[id].empty());
    EXPECT_EQ(c.applied[id].back().data, "x");
  }
  // Followers learn the commit from the next append or heartbeat.
  EXPECT_EQ(c.nodes[1]->commit(), p.index);
}

TEST(RaftPropose, RefusedOffLeaderAndWhenTooLargeOrTooMany) {
  MiniCluster c(3);
  EXPECT_EQ(c.nodes[2]->propose("x").error, ProposeError::kNotLeader);
  c.nodes[1]->campaign();
  c.settle();
  std::string big(kDefaultMaxBytesPerAppend + 1, 'x');
  EXPECT_EQ(c.nodes[1]->propose(big).error, ProposeError::kTooLarge);
  // Cut the followers off: proposals pile up until back-pressure.
  std::size_t ok = 0;
  for (std::size_t i = 0; i < kDefaultMaxUncommittedEntries + 10; ++i) {
    if (c.nodes[1]->propose("y").error == ProposeError::kOk) ++ok;
  }
  EXPECT_EQ(ok, kDefaultMaxUncommittedEntries);
  EXPECT_EQ(c.nodes[1]->propose("z").error, ProposeError::kTooManyUncommitted);
}

TEST(RaftStep, PeerGarbageIsAnErrorValue) {
  MemoryStorage disk;
  Raft r(make_config(2, {1, 2, 3}), disk);
  Message m = message(MessageType::kAppend, 1, 3, 1);
  EXPECT_EQ(r.step(m), StepError::kWrongRecipient);
  m.to = 2;
  m.from = kNoNode;
  EXPECT_EQ(r.step(m), StepError::kUnknownPeer);
  m.from = 2;
  EXPECT_EQ(r.step(m), StepError::kUnknownPeer);
  m.from = 1;
  m.entries.push_back(Entry{1, 5, EntryType::kNoop, ""});  // a gap after prev 0
  EXPECT_EQ(r.step(m), StepError::kMalformed);
  m.entries = {Entry{2, 1, EntryType::kNoop, ""}};  // entry from a future term
  EXPECT_EQ(r.step(m), StepError::kMalformed);
  m.entries = {Entry{1, 1, EntryType::kConfChange, "\x01junk"}};  // a configuration that does not decode
  EXPECT_EQ(r.step(m), StepError::kMalformed);
  m.entries = {Entry{1, 1, static_cast<EntryType>(7), ""}};  // a newer version's entry type
  EXPECT_EQ(r.step(m), StepError::kMalformed);
  Message s;
  s.type = MessageType::kSnapshot;
  s.from = 1;
  s.to = 2;
  s.term = 1;
  s.snapshot = SnapshotMeta{10, 1};
  s.total_bytes = 4;
  s.offset = 2;
  s.chunk = "abc";  // runs past total
  EXPECT_EQ(r.step(s), StepError::kMalformed);
  EXPECT_EQ(r.stats().rejected_messages, 8u);
  EXPECT_EQ(r.term(), 0u);  // none of it changed any state
}

// issue 21: a term near 2^64 from a peer would be adopted, and the next
// campaign's term + 1 would wrap to 0. Past kMaxTerm every message type is
// refused before it touches term, vote or leader.
TEST(RaftStep, TermsBeyondTheCapAreRefusedAndChangeNothing) {
  MemoryStorage disk;
  Config cfg = make_config(2, {1, 2, 3});
  cfg.pre_vote = false;  // so campaign() below bumps the term at once
  Raft r(cfg, disk);
  const Term huge = std::numeric_limits<Term>::max();
  for (MessageType t : {MessageType::kAppend, MessageType::kHeartbeat, MessageType::kVote,
                        MessageType::kPreVote, MessageType::kAppendResp, MessageType::kVoteResp,
                        MessageType::kTimeoutNow}) {
    for (Term term : {huge, kMaxTerm + 1}) {
      Message m = message(t, 1, 2, term);
      m.log_term = 0;
      EXPECT_EQ(r.step(m), StepError::kMalformed) << to_string(t) << " at " << term;
    }
  }
  // A vote request whose last log term is beyond its own term is forged.
  Message v = message(MessageType::kVote, 1, 2, 5);
  v.log_term = 6;
  EXPECT_EQ(r.step(v), StepError::kMalformed);
  EXPECT_EQ(r.term(), 0u);
  EXPECT_EQ(r.status().vote, kNoNode);
  EXPECT_EQ(r.leader(), kNoNode);
  EXPECT_FALSE(r.has_ready());  // nothing to store, nothing to send
  // The cap itself is still a term (a hostile member can push us there,
  // never past it), and the campaign after it does not wrap.
  Message at_cap = message(MessageType::kHeartbeat, 1, 2, kMaxTerm);
  EXPECT_EQ(r.step(at_cap), StepError::kOk);
  EXPECT_EQ(r.term(), kMaxTerm);
  while (r.has_ready()) {
    Ready rd = r.ready();
    if (rd.hard_state) disk.set_hard_state(*rd.hard_state);
    r.advance();
  }
  r.campaign();
  EXPECT_EQ(r.term(), kMaxTerm + 1);
}

TEST(RaftContract, OnlyReadyAndCompactWaitForAdvance) {
  MemoryStorage disk;
  Raft r(make_config(1, {1, 2, 3}), disk);
  r.campaign();
  Ready rd = r.ready();
  // The pipelined driver feeds the core while a Ready syncs (raft.h).
  r.tick();
  EXPECT_EQ(r.step(message(MessageType::kHeartbeat, 2, 1, 5)), StepError::kOk);
  EXPECT_DEATH(r.ready(), "internal check failed");
  EXPECT_DEATH(r.compact(0, ""), "internal check failed");
  r.advance();
  EXPECT_TRUE(r.has_ready());
}

// A leader that handed over points clients at its TimeoutNow target while
// it knows no leader (raft.h leader_hint): the target campaigns at once.
TEST(RaftTransfer, LeaderHintIsTheTargetUntilALeaderIsHeardOf) {
  MiniCluster c(3);
  c.nodes[1]->campaign();
  c.settle();
  Raft& one = *c.nodes[1];
  ASSERT_EQ(one.role(), Role::kLeader);
  ASSERT_TRUE(one.transfer_leadership(2));
  // Node 1's TimeoutNow reaches node 2, whose vote request reaches node 1.
  auto drain = [](Raft& r) {
    std::vector<Message> out;
    while (r.has_ready()) {
      Ready rd = r.ready();
      out.insert(out.end(), rd.messages.begin(), rd.messages.end());
      r.advance();
    }
    return out;
  };
  for (const Message& m : drain(one)) {
    if (m.to == 2 && m.type == MessageType::kTimeoutNow) {
      ASSERT_EQ(c.nodes[2]->step(m), StepError::kOk);
    }
  }
  for (const Message& m : drain(*c.nodes[2])) {
    if (m.to == 1 && m.type == MessageType::kVote) {
      ASSERT_EQ(one.step(m), StepError::kOk);
    }
  }
  EXPECT_NE(one.role(), Role::kLeader);
  EXPECT_EQ(one.leader(), kNoNode);
  EXPECT_EQ(one.leader_hint(), 2u);
  // Once it hears of a leader, that is the hint.
  c.settle();
  EXPECT_EQ(one.leader(), 2u);
  EXPECT_EQ(one.leader_hint(), 2u);
}

// --- pipelined: input while a Ready's sync runs (raft.h "Pipelined") ---

// A single-node leader with its no-op committed and applied.
void lead_alone(Raft& r, MemoryStorage& disk) {
  r.campaign();
  while (r.has_ready()) {
    Ready rd = r.ready();
    disk.append(rd.entries);
    if (rd.hard_state) disk.set_hard_state(*rd.hard_state);
    r.advance();
  }
  ASSERT_EQ(r.role(), Role::kLeader);
  ASSERT_EQ(r.commit(), 1u);
}

TEST(RaftPipelined, EntriesProposedWhileTheSyncRunsAreNotCountedAtItsAdvance) {
  MemoryStorage disk;
  Raft r(make_config(1, {1}), disk);
  lead_alone(r, disk);
  ASSERT_EQ(r.propose("x").index, 2u);
  Ready rd = r.ready();
  ASSERT_EQ(rd.entries.size(), 1u);
  disk.append(rd.entries);  // written; its sync runs
  ASSERT_EQ(r.propose("y").index, 3u);
  r.advance();  // the sync of "x" ended: "y" was never written
  EXPECT_EQ(r.commit(), 2u) << "counted an entry appended while the sync ran as durable";
  rd = r.ready();
  ASSERT_EQ(rd.entries.size(), 1u);
  EXPECT_EQ(rd.entries[0].index, 3u);
  disk.append(rd.entries);
  r.advance();
  EXPECT_EQ(r.commit(), 3u);
}

TEST(RaftPipelined, AVoteCastWhileTheSyncRunsCountsOnceItsOwnReadyIsDurable) {
  MemoryStorage disk;
  Config c = make_config(1, {1, 2, 3});
  c.pre_vote = false;
  Raft r(c, disk);
  // A Ready in flight (term 1 from a leader's heartbeat) ...
  ASSERT_EQ(r.step(message(MessageType::kHeartbeat, 2, 1, 1)), StepError::kOk);
  Ready rd = r.ready();
  ASSERT_TRUE(rd.hard_state);
  // ... while it syncs, this node campaigns in term 2 and node 3 grants.
  r.campaign();
  ASSERT_EQ(r.role(), Role::kCandidate);
  ASSERT_EQ(r.term(), 2u);
  ASSERT_EQ(r.step(message(MessageType::kVoteResp, 3, 1, 2)), StepError::kOk);
  r.advance();  // term 1 is durable; our vote in term 2 is not
  EXPECT_EQ(r.role(), Role::kCandidate) << "led on a vote for itself that a crash would forget";
  rd = r.ready();
  ASSERT_TRUE(rd.hard_state);
  EXPECT_EQ(rd.hard_state->term, 2u);
  EXPECT_EQ(rd.hard_state->vote, 1u);
  r.advance();
  EXPECT_EQ(r.role(), Role::kLeader);
}

// Leader 1's append of entries 1..3 (term 1) to node 2.
Message three_entries_from_leader_1() {
  Message a = message(MessageType::kAppend, 1, 2, 1);
  for (Index i = 1; i <= 3; ++i) a.entries.push_back(Entry{1, i, EntryType::kNoop, ""});
  return a;
}

TEST(RaftPipelined, ACutIntoTheSyncingEntriesLeavesOnlyItsPrefixDurable) {
  MemoryStorage disk;
  Raft r(make_config(2, {1, 2, 3}), disk);
  // Leader 1 (term 1) sends entries 1..3; their write is in flight ...
  ASSERT_EQ(r.step(three_entries_from_leader_1()), StepError::kOk);
  Ready rd = r.ready();
  ASSERT_EQ(rd.entries.size(), 3u);
  // ... when leader 3 (term 2) replaces 2..3 with its own 2..4, all committed.
  Message b = message(MessageType::kAppend, 3, 2, 2);
  b.index = 1;
  b.log_term = 1;
  b.commit = 4;
  for (Index i = 2; i <= 4; ++i) b.entries.push_back(Entry{2, i, EntryType::kNoop, ""});
  ASSERT_EQ(r.step(b), StepError::kOk);
  r.advance();  // entries 1..3 of term 1 are on disk; 2..4 of term 2 are not
  rd = r.ready();
  ASSERT_EQ(rd.committed.size(), 1u) << "applies entries that were never written";
  EXPECT_EQ(rd.committed[0].index, 1u);
  ASSERT_EQ(rd.entries.size(), 3u);
  EXPECT_EQ(rd.entries[0].index, 2u);
  EXPECT_EQ(rd.entries[0].term, 2u);
  for (const Message& m : rd.messages) {
    EXPECT_FALSE(m.type == MessageType::kAppendResp && m.to == 3) << "acked term 2's entries before writing them";
  }
  r.advance();
  rd = r.ready();
  bool acked = false;
  for (const Message& m : rd.messages) {
    if (m.type == MessageType::kAppendResp && m.to == 3 && !m.reject && m.index == 4) acked = true;
  }
  EXPECT_TRUE(acked);
  ASSERT_EQ(rd.committed.size(), 3u);
  EXPECT_EQ(rd.committed[2].index, 4u);
  r.advance();
}

TEST(RaftProgress, LeaderReportsFollowers) {
  MiniCluster c(3);
  c.nodes[1]->campaign();
  c.settle();
  std::vector<PeerProgress> p = c.nodes[1]->progress();
  ASSERT_EQ(p.size(), 3u);
  for (const PeerProgress& pp : p) {
    EXPECT_EQ(pp.match, c.nodes[1]->last_index()) << pp.id;
    EXPECT_EQ(pp.state, ProgressState::kReplicate);
  }
  EXPECT_TRUE(c.nodes[2]->progress().empty());
}

// Steps `r` with `m`, persists the Ready and returns the messages of the
// following Ready (where held-back answers appear).
std::vector<Message> step_and_settle(Raft& r, MemoryStorage& disk, const Message& m) {
  EXPECT_EQ(r.step(m), StepError::kOk);
  std::vector<Message> out;
  for (int i = 0; i < 3 && r.has_ready(); ++i) {
    Ready rd = r.ready();
    out.insert(out.end(), rd.messages.begin(), rd.messages.end());
    if (rd.snapshot) disk.save_snapshot(*rd.snapshot);
    disk.append(rd.entries);
    if (rd.hard_state) disk.set_hard_state(*rd.hard_state);
    r.advance();
  }
  return out;
}

Message chunk(std::uint64_t offset, std::string data, std::uint64_t total) {
  Message m = message(MessageType::kSnapshot, 1, 2, 1);
  m.snapshot = SnapshotMeta{10, 1};
  m.offset = offset;
  m.total_bytes = total;
  m.done = offset + data.size() == total;
  m.chunk = std::move(data);
  return m;
}

TEST(RaftSnapshot, ChunksDuplicatesAndGaps) {
  MemoryStorage disk;
  Raft r(make_config(2, {1, 2, 3}), disk);
  auto out = step_and_settle(r, disk, chunk(0, "abcd", 10));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].type, MessageType::kSnapshotResp);
  EXPECT_EQ(out[0].offset, 4u);
  EXPECT_FALSE(out[0].reject);
  // A duplicate is acknowledged with what we hold, not appended twice.
  out = step_and_settle(r, disk, chunk(0, "abcd", 10));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].offset, 4u);
  // A gap (chunk at 8 while we hold 4) is refused with our offset.
  out = step_and_settle(r, disk, chunk(8, "ij", 10));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].reject);
  EXPECT_EQ(out[0].offset, 4u);
  // In order again: the last chunk installs it, handed out in a Ready.
  step_and_settle(r, disk, chunk(4, "efgh", 10));
  out = step_and_settle(r, disk, chunk(8, "ij", 10));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].done);
  EXPECT_EQ(out[0].index, 10u);
  EXPECT_EQ(disk.snapshot().data, "abcdefghij");
  EXPECT_EQ(disk.snapshot().meta, (SnapshotMeta{10, 1}));
  EXPECT_EQ(r.commit(), 10u);
  EXPECT_EQ(r.status().applied, 10u);
  EXPECT_EQ(r.last_index(), 10u);
  // A snapshot we already cover is answered "done" with our commit.
  out = step_and_settle(r, disk, chunk(0, "abcd", 10));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].done);
  EXPECT_EQ(out[0].index, 10u);
}

// Found by lockd-sim once it ran the daemon's state machine: a new leader's
// snapshot at the same (index, term) as the one half received from the old
// leader is the same state in other bytes (hash-map order). Its chunks must
// not continue the old one's: the follower starts over from offset 0.
TEST(RaftSnapshot, ChunksOfAnotherLeaderNeverContinueAnIncomingSnapshot) {
  MemoryStorage disk;
  Raft r(make_config(2, {1, 2, 3}), disk);
  step_and_settle(r, disk, chunk(0, "abcd", 8));  // from node 1, term 1
  Message from3 = chunk(4, "WXYZ", 8);
  from3.from = 3;
  from3.term = 2;
  auto out = step_and_settle(r, disk, from3);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].reject);
  EXPECT_EQ(out[0].offset, 0u);
  EXPECT_EQ(disk.snapshot().meta.index, 0u);  // nothing installed from mixed bytes
  Message first = chunk(0, "STUV", 8);
  first.from = 3;
  first.term = 2;
  step_and_settle(r, disk, first);
  out = step_and_settle(r, disk, from3);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].done);
  EXPECT_EQ(disk.snapshot().data, "STUVWXYZ");
}

// issue 21: a snapshot was stored before anything decoded it, so garbage
// from a peer made the node exit, and exit again on every restart. With a
// check_snapshot that refuses, the whole snapshot arrives and nothing is
// stored, installed or committed; the leader is told to start over.
TEST(RaftSnapshot, RefusedByTheCheckIsNeverStored) {
  MemoryStorage disk;
  Config cfg = make_config(2, {1, 2, 3});
  std::vector<std::string> seen;
  cfg.check_snapshot = [&](const SnapshotMeta& meta, std::string_view data) {
    EXPECT_EQ(meta, (SnapshotMeta{10, 1}));
    seen.emplace_back(data);
    return data != "garbage!!!";
  };
  Raft r(cfg, disk);
  step_and_settle(r, disk, chunk(0, "garba", 10));
  auto out = step_and_settle(r, disk, chunk(5, "ge!!!", 10));
  ASSERT_EQ(seen, std::vector<std::string>{"garbage!!!"});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].type, MessageType::kSnapshotResp);
  EXPECT_TRUE(out[0].reject);
  EXPECT_FALSE(out[0].done);
  EXPECT_EQ(out[0].offset, 0u);
  EXPECT_EQ(disk.snapshot().meta.index, 0u);
  EXPECT_TRUE(disk.snapshot().data.empty());
  EXPECT_EQ(r.commit(), 0u);
  EXPECT_EQ(r.snapshot_meta().index, 0u);
  EXPECT_EQ(r.stats().snapshots_refused, 1u);
  EXPECT_EQ(r.stats().snapshots_installed, 0u);
  // A good one afterwards goes through the same check and is installed.
  step_and_settle(r, disk, chunk(0, "abcde", 10));
  out = step_and_settle(r, disk, chunk(5, "fghij", 10));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].done);
  EXPECT_EQ(disk.snapshot().data, "abcdefghij");
  EXPECT_EQ(r.stats().snapshots_installed, 1u);
}

// compact() hands the dropped entries back (the daemon frees them a slice
// per loop turn) and keeps the suffix, readable and appendable.
TEST(RaftSnapshot, CompactHandsBackTheDroppedEntriesAndKeepsTheRest) {
  MemoryStorage disk;
  Raft r(make_config(1, {1}), disk);
  lead_alone(r, disk);
  for (const char* p : {"a", "b", "c", "d"}) ASSERT_NE(r.propose(p).index, 0u);
  Ready rd = r.ready();
  disk.append(rd.entries);
  r.advance();
  rd = r.ready();  // the four are committed: apply them
  r.advance();
  ASSERT_EQ(r.last_index(), 5u);
  std::vector<Entry> dropped = r.compact(3, "state");
  ASSERT_EQ(dropped.size(), 3u);
  EXPECT_EQ(dropped.front().index, 1u);
  EXPECT_EQ(dropped.back().index, 3u);
  EXPECT_EQ(dropped.back().data, "b");
  EXPECT_EQ(r.snapshot_meta().index, 3u);
  ASSERT_EQ(r.log().size(), 2u);
  EXPECT_EQ(r.log().front().data, "c");
  EXPECT_EQ(r.log().back().data, "d");
  EXPECT_EQ(r.term_at(3), r.term());
  EXPECT_EQ(r.propose("e").index, 6u);
  EXPECT_TRUE(r.compact(2, "older").empty());  // already covered: nothing dropped
}

// A buffer given back after its dropped entries are freed is where the
// next compaction moves the kept log: no fresh allocation whose pages all
// fault in again (~25 µs a page on this project's VMs).
TEST(RaftSnapshot, CompactMovesTheLogIntoARecycledBuffer) {
  MemoryStorage disk;
  Raft r(make_config(1, {1}), disk);
  lead_alone(r, disk);
  const auto commit = [&](std::initializer_list<const char*> payloads) {
    for (const char* p : payloads) ASSERT_NE(r.propose(p).index, 0u);
    Ready rd = r.ready();
    disk.append(rd.entries);
    r.advance();
    r.ready();  // committed: applied
    r.advance();
  };
  commit({"a", "b", "c", "d"});
  std::vector<Entry> dropped = r.compact(3, "state");
  ASSERT_EQ(dropped.size(), 3u);
  dropped.clear();  // what DeferredFree does, a slice per turn
  const Entry* recycled = dropped.data();
  ASSERT_GT(dropped.capacity(), 0u);
  r.recycle_log_buffer(std::move(dropped));
  commit({"e", "f"});
  std::vector<Entry> again = r.compact(6, "state 2", 1);
  ASSERT_EQ(again.size(), 2u);  // 4 and 5; 6 and 7 are kept
  EXPECT_EQ(r.log().data(), recycled);
  ASSERT_EQ(r.log().size(), 2u);
  EXPECT_EQ(r.log().front().data, "e");
  EXPECT_EQ(r.log().back().index, 7u);
  EXPECT_EQ(r.propose("g").index, 8u);
}

TEST(DeferredFree, KeepsTheLargestEmptiedBufferForReuse) {
  DeferredFree<int> garbage;
  std::vector<int> big(100, 1);
  const int* big_data = big.data();
  garbage.add(std::move(big));
  garbage.add(std::vector<int>(10, 2));
  EXPECT_EQ(garbage.take_spare().capacity(), 0u);  // nothing emptied yet
  EXPECT_FALSE(garbage.free_some(1000));
  std::vector<int> spare = garbage.take_spare();
  EXPECT_TRUE(spare.empty());
  EXPECT_EQ(spare.data(), big_data);
  EXPECT_GE(spare.capacity(), 100u);
  EXPECT_EQ(garbage.take_spare().capacity(), 0u);  // handed out once
}

TEST(DeferredFree, DestroysAtMostTheAskedNumberPerCallFromTheBack) {
  DeferredFree<std::shared_ptr<int>> garbage;
  auto probe = std::make_shared<int>(7);
  std::vector<std::shared_ptr<int>> batch(5, probe);
  garbage.add(std::move(batch));
  garbage.add({});  // an empty batch is nothing to do
  garbage.add(std::vector<std::shared_ptr<int>>(2, probe));
  EXPECT_EQ(garbage.pending(), 7u);
  EXPECT_EQ(probe.use_count(), 8);
  EXPECT_TRUE(garbage.free_some(3));
  EXPECT_EQ(garbage.pending(), 4u);
  EXPECT_EQ(probe.use_count(), 5);
  EXPECT_TRUE(garbage.free_some(3));
  EXPECT_EQ(probe.use_count(), 2);
  EXPECT_FALSE(garbage.free_some(3));
  EXPECT_TRUE(garbage.empty());
  EXPECT_EQ(garbage.pending(), 0u);
  EXPECT_EQ(probe.use_count(), 1);
}

// A transfer pins the snapshot's bytes while it runs and lets go of them
// once it ends. Pinned for good, they were a second copy of the snapshot
// per follower ever sent one (60 MB at 1 M locks), or in the daemon a
// descriptor keeping an unlinked snapshot file's blocks.
TEST(RaftSnapshot, ATransferLetsGoOfTheSnapshotOnceItEnds) {
  MiniCluster c(3);
  c.nodes[1]->campaign();
  c.settle();
  c.down = {3};
  for (const char* p : {"a", "b", "c"}) ASSERT_NE(c.nodes[1]->propose(p).index, 0u);
  c.settle();
  Raft& leader = *c.nodes[1];
  const auto bytes = in_memory_snapshot_bytes("the table");
  leader.compact(leader.status().applied, bytes);
  EXPECT_EQ(bytes.use_count(), 2);  // ours and the core's latest snapshot
  c.down.clear();
  for (int i = 0; i < 3 && c.disks[3]->snapshot().meta.index == 0; ++i) {
    leader.tick();  // a heartbeat finds node 3 behind the compacted log
    c.settle();
  }
  ASSERT_EQ(c.disks[3]->snapshot().meta.index, leader.snapshot_meta().index);
  EXPECT_EQ(c.disks[3]->snapshot().data, "the table");
  EXPECT_EQ(bytes.use_count(), 2) << "the finished transfer still holds the snapshot";
}

TEST(RaftSnapshot, RestartsFromStoredSnapshotAndLog) {
  MemoryStorage disk;
  disk.append(std::vector<Entry>{{1, 1, EntryType::kNoop, ""}, {1, 2, EntryType::kCommand, "a"},
                                 {2, 3, EntryType::kCommand, "b"}});
  disk.save_snapshot(Snapshot{SnapshotMeta{2, 1}, "state"});
  disk.set_hard_state(HardState{2, 1, 3});
  Raft r(make_config(1, {1, 2, 3}), disk);
  EXPECT_EQ(r.term(), 2u);
  EXPECT_EQ(r.status().vote, 1u);
  EXPECT_EQ(r.snapshot_meta().index, 2u);
  EXPECT_EQ(r.last_index(), 3u);
  EXPECT_EQ(r.term_at(1), std::nullopt);  // compacted
  EXPECT_EQ(r.term_at(2), 1u);
  // Applied starts at the snapshot: entry 3 is applied again from the log.
  Ready rd = r.ready();
  ASSERT_EQ(rd.committed.size(), 1u);
  EXPECT_EQ(rd.committed[0].data, "b");
  r.advance();
}

TEST(MemoryStorage, AppendOverwritesSuffixAndSnapshotKeepsMatchingTail) {
  MemoryStorage disk;
  disk.append(std::vector<Entry>{{1, 1, EntryType::kNoop, ""}, {1, 2, EntryType::kNoop, ""},
                                 {1, 3, EntryType::kNoop, ""}});
  disk.append(std::vector<Entry>{{2, 2, EntryType::kNoop, ""}});
  ASSERT_EQ(disk.entries().size(), 2u);
  EXPECT_EQ(disk.entries()[1].term, 2u);
  disk.save_snapshot(Snapshot{SnapshotMeta{1, 1}, "s"});
  ASSERT_EQ(disk.entries().size(), 1u);  // entry 2 kept: entry 1 matched
  disk.save_snapshot(Snapshot{SnapshotMeta{5, 3}, "t"});
  EXPECT_TRUE(disk.entries().empty());  // no entry 5 of term 3: log dropped
  EXPECT_EQ(disk.last_index(), 5u);
}

}  // namespace
}  // namespace lockd::raft

namespace lockd::raft {
namespace {

// A handler whose disk fails after `ok_saves` successful saves.
class FailingDiskHandler final : public ReadyHandler {
 public:
  explicit FailingDiskHandler(int ok_saves) : ok_saves_(ok_saves) {}
  void send(std::vector<Message>& messages) override { sent += messages.size(); }
  StorageStatus persist(const Ready& rd) override {
    applied_at_persist.push_back(applied.size());
    if (ok_saves_-- <= 0) return {StorageError::kIo, "wal: fdatasync: Input/output error"};
    return persist_ready(disk, rd);
  }
  void install(const Snapshot&) override {}
  void apply(const Entry& e) override { applied.push_back(e.index); }
  void fail_from_now() { ok_saves_ = 0; }

  MemoryStorage disk;
  std::size_t sent = 0;
  std::vector<Index> applied;
  std::vector<std::size_t> applied_at_persist;  // applied.size() when each persist began

 private:
  int ok_saves_;
};

TEST(Driver, RunsTheCycleAndAppliesCommittedEntries) {
  FailingDiskHandler h(1000);
  Raft r(make_config(1, {1}), h.disk);
  r.campaign();
  ASSERT_TRUE(drive_ready(r, h, 16).ok());
  ASSERT_EQ(r.role(), Role::kLeader);
  ASSERT_EQ(r.propose("x").error, ProposeError::kOk);
  ASSERT_TRUE(drive_ready(r, h, 16).ok());
  EXPECT_EQ(h.applied, (std::vector<Index>{1, 2}));  // the leader's no-op, then "x"
  EXPECT_EQ(h.disk.last_index(), 2u);
  EXPECT_EQ(h.disk.hard_state().commit, 2u);
  EXPECT_FALSE(r.has_ready());
}

TEST(Driver, FailedPersistStopsBeforeAdvanceAndAppliesNothing) {
  FailingDiskHandler h(0);
  Raft r(make_config(1, {1}), h.disk);
  r.campaign();
  StorageStatus st = drive_ready(r, h, 16);
  EXPECT_EQ(st.error, StorageError::kIo);
  EXPECT_EQ(st.message, "wal: fdatasync: Input/output error");
  EXPECT_TRUE(h.applied.empty());
  EXPECT_EQ(h.disk.hard_state(), HardState{});  // nothing reached the disk
  // advance() was not called: the core still waits for it, so asking for
  // another Ready is a caller bug the core refuses (checked).
  EXPECT_DEATH(r.ready(), "internal check failed");
}

// Committed entries are durable from earlier Readies, so the cycle applies
// them before it persists the Ready's new entries (their answers need not
// wait for that sync); the new entries stay unapplied when the sync fails.
TEST(Driver, AppliesEarlierDurableEntriesBeforeTheSyncOfNewOnes) {
  FailingDiskHandler h(1000);
  Raft r(make_config(1, {1}), h.disk);
  r.campaign();
  ASSERT_TRUE(drive_ready(r, h, 16).ok());
  ASSERT_EQ(r.propose("x").error, ProposeError::kOk);  // index 2
  ASSERT_TRUE(drive_ready(r, h, 1).ok());               // persisted and committed, not applied
  ASSERT_EQ(h.applied, (std::vector<Index>{1}));
  ASSERT_EQ(r.propose("y").error, ProposeError::kOk);  // index 3
  h.fail_from_now();
  h.applied_at_persist.clear();
  EXPECT_EQ(drive_ready(r, h, 1).error, StorageError::kIo);
  EXPECT_EQ(h.applied, (std::vector<Index>{1, 2}));          // "x" went out, "y" did not
  EXPECT_EQ(h.applied_at_persist, (std::vector<std::size_t>{2}));  // before the failed sync
  EXPECT_EQ(h.disk.last_index(), 2u);
}

TEST(RaftPipelined, TheLeaderStreamsNewEntriesWhileItsOwnSyncRuns) {
  MiniCluster c(3);
  c.nodes[1]->campaign();
  c.settle();
  Raft& r = *c.nodes[1];
  ASSERT_EQ(r.role(), Role::kLeader);
  ASSERT_EQ(r.propose("x").error, ProposeError::kOk);
  Ready rd = r.ready();
  ASSERT_EQ(rd.entries.size(), 1u);
  c.disks[1]->append(rd.entries);  // "x" syncs ...
  const ProposeResult y = r.propose("y");
  ASSERT_EQ(y.error, ProposeError::kOk);
  // ... and "y" is on its way to both followers already.
  std::vector<Message> out = r.take_messages();
  int appends = 0;
  for (const Message& m : out) {
    if (m.type != MessageType::kAppend) continue;
    for (const Entry& e : m.entries) appends += e.index == y.index ? 1 : 0;
  }
  EXPECT_EQ(appends, 2);
  r.advance();
  EXPECT_LT(r.commit(), y.index);  // not durable here yet
}

TEST(RaftPipelined, AnAnswerGivenWhileTheSyncRunsWaitsForIt) {
  MemoryStorage disk;
  Raft r(make_config(2, {1, 2, 3}), disk);
  const Message a = three_entries_from_leader_1();
  ASSERT_EQ(r.step(a), StepError::kOk);
  Ready rd = r.ready();
  ASSERT_EQ(rd.entries.size(), 3u);
  // The leader repeats the append while our write syncs: nothing is new,
  // but the ack ("I have 1..3") is only true once the sync ends.
  ASSERT_EQ(r.step(a), StepError::kOk);
  EXPECT_FALSE(has_type(r.take_messages(), MessageType::kAppendResp)) << "acked entries before their sync ended";
  r.advance();
  rd = r.ready();
  bool acked = false;
  for (const Message& m : rd.messages) acked = acked || (m.type == MessageType::kAppendResp && m.index == 3);
  EXPECT_TRUE(acked);
  r.advance();
}

// start_ready: apply, write, and leave the sync pending; the core takes
// input meanwhile, and only complete_ready() lets what the write carried
// count.
class PipelinedHandler final : public ReadyHandler {
 public:
  void send(std::vector<Message>&) override {}
  StorageStatus persist(const Ready& rd) override { return persist_ready(disk, rd); }
  StorageStatus write(const Ready& rd, bool& sync_pending) override {
    applied_at_write.push_back(applied.size());
    sync_pending = !rd.entries.empty() || rd.hard_state.has_value();
    return persist_ready(disk, rd);
  }
  void install(const Snapshot&) override {}
  void apply(const Entry& e) override { applied.push_back(e.index); }

  MemoryStorage disk;
  std::vector<Index> applied;
  std::vector<std::size_t> applied_at_write;
};

TEST(Driver, StartReadyLeavesTheSyncToTheCallerAndCompleteReadyAdvances) {
  PipelinedHandler h;
  Raft r(make_config(1, {1}), h.disk);
  r.campaign();
  bool syncing = false;
  ASSERT_TRUE(start_ready(r, h, syncing).ok());
  EXPECT_TRUE(syncing);  // the vote is written, not yet synced
  EXPECT_EQ(r.role(), Role::kCandidate);
  EXPECT_DEATH(r.ready(), "internal check failed");
  complete_ready(r);
  EXPECT_EQ(r.role(), Role::kLeader);
  ASSERT_TRUE(start_ready(r, h, syncing).ok());  // the no-op
  ASSERT_TRUE(syncing);
  ASSERT_EQ(r.propose("x").error, ProposeError::kOk);  // taken while the no-op syncs
  complete_ready(r);
  EXPECT_EQ(r.commit(), 1u);
  ASSERT_TRUE(start_ready(r, h, syncing).ok());  // applies the no-op, writes "x"
  EXPECT_EQ(h.applied, (std::vector<Index>{1}));
  EXPECT_EQ(h.applied_at_write.back(), 1u);  // applied before the write
  ASSERT_TRUE(syncing);
  complete_ready(r);
  while (r.has_ready()) {
    ASSERT_TRUE(start_ready(r, h, syncing).ok());
    if (syncing) complete_ready(r);
  }
  EXPECT_EQ(h.applied, (std::vector<Index>{1, 2}));
  EXPECT_EQ(h.disk.hard_state().commit, 2u);
}

TEST(MemoryStorage, SaveWritesSnapshotThenEntriesThenHardState) {
  MemoryStorage disk;
  ASSERT_TRUE(disk.open().ok());
  std::vector<Entry> es{{1, 1, EntryType::kNoop, ""}, {1, 2, EntryType::kCommand, "a"}};
  ASSERT_TRUE(disk.save(HardState{1, 1, 2}, es, nullptr).ok());
  EXPECT_EQ(disk.last_index(), 2u);
  Snapshot snap{SnapshotMeta{5, 2}, "s"};
  std::vector<Entry> after{{2, 6, EntryType::kCommand, "b"}};
  ASSERT_TRUE(disk.save(HardState{2, 1, 6}, after, &snap).ok());
  EXPECT_EQ(disk.snapshot().meta, (SnapshotMeta{5, 2}));
  ASSERT_EQ(disk.entries().size(), 1u);
  EXPECT_EQ(disk.entries()[0].index, 6u);
  EXPECT_EQ(disk.hard_state(), (HardState{2, 1, 6}));
}

}  // namespace
}  // namespace lockd::raft
