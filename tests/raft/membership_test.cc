// Membership changes in the Raft core (thesis §4.1): learners, promotion,
// removal (the leader's own included), one change at a time, configuration
// in force on append and undone with its entry, configuration in snapshots.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <memory>
#include <set>

#include "lockd/raft/membership.h"
#include "lockd/raft/raft.h"

namespace lockd::raft {
namespace {

// Nodes wired by hand: messages delivered unless a link is cut; a node can
// join with no configuration (voters empty) as a new member does.
struct Group {
  explicit Group(int n) {
    for (int i = 1; i <= n; ++i) bootstrap.push_back(static_cast<NodeId>(i));
    for (NodeId id : bootstrap) start(id, bootstrap);
  }
  void start(NodeId id, const std::vector<NodeId>& voters) {
    Config c;
    c.id = id;
    c.voters = voters;
    c.rng_seed = id;
    c.max_entries_per_append = max_entries_per_append;
    if (!disks.contains(id)) disks[id] = std::make_unique<MemoryStorage>();
    nodes[id] = std::make_unique<Raft>(c, *disks[id]);
  }
  void crash(NodeId id) { nodes.erase(id); }
  bool cut(NodeId a, NodeId b) const { return down.contains(a) || down.contains(b); }
  // Persist, apply and deliver until nothing moves.
  void settle() {
    for (int round = 0; round < 200; ++round) {
      std::vector<Message> out;
      for (auto& [id, r] : nodes) {
        while (r->has_ready()) {
          Ready rd = r->ready();
          for (Message& m : rd.messages) out.push_back(m);
          if (rd.snapshot) disks[id]->save_snapshot(*rd.snapshot);
          disks[id]->append(rd.entries);
          if (rd.hard_state) disks[id]->set_hard_state(*rd.hard_state);
          r->advance();
        }
      }
      if (out.empty()) return;
      for (const Message& m : out) {
        if (!nodes.contains(m.to) || cut(m.from, m.to) || (drop && drop(m))) continue;
        sent.push_back(m);
        EXPECT_EQ(nodes[m.to]->step(m), StepError::kOk);
      }
    }
    FAIL() << "did not settle";
  }
  void tick_all(int n) {
    for (int i = 0; i < n; ++i) {
      for (auto& [id, r] : nodes) r->tick();
      settle();
    }
  }
  NodeId leader() const {
    NodeId l = kNoNode;
    for (const auto& [id, r] : nodes) {
      if (r->role() == Role::kLeader && !down.contains(id)) {
        if (l == kNoNode || r->term() > nodes.at(l)->term()) l = id;
      }
    }
    return l;
  }
  Raft& lead() { return *nodes.at(leader()); }
  ProposeResult change(ConfChangeType t, NodeId id) {
    ConfChange cc{t, Member{id, false, "127.0.0.1:" + std::to_string(7000 + id),
                            "127.0.0.1:" + std::to_string(8000 + id)}};
    return lead().propose_conf_change(cc);
  }
  // Elects node 1 and commits its no-op.
  void elect(NodeId id = 1) {
    nodes.at(id)->campaign();
    settle();
    ASSERT_EQ(leader(), id);
  }
  std::vector<NodeId> bootstrap;
  std::map<NodeId, std::unique_ptr<MemoryStorage>> disks;
  std::map<NodeId, std::unique_ptr<Raft>> nodes;
  std::set<NodeId> down;  // every link of these nodes is cut
  std::function<bool(const Message&)> drop;  // set: messages it returns true for are lost
  std::vector<Message> sent;                 // every message delivered
  std::size_t max_entries_per_append = kDefaultMaxEntriesPerAppend;  // for nodes started later
};

TEST(Membership, LearnerCatchesUpNeverVotesThenIsPromoted) {
  Group g(3);
  g.elect();
  for (int i = 0; i < 5; ++i) g.lead().propose("x");
  g.settle();
  // A new node starts with no configuration: it waits, voting for nothing.
  g.start(4, {});
  g.tick_all(40);
  EXPECT_EQ(g.nodes[4]->role(), Role::kFollower);
  EXPECT_EQ(g.nodes[4]->stats().elections_started + g.nodes[4]->stats().pre_votes_started, 0u);
  // Promote before it is a member, or before it caught up, is refused.
  EXPECT_EQ(g.change(ConfChangeType::kPromote, 4).error, ProposeError::kBadChange);
  ProposeResult add = g.change(ConfChangeType::kAddLearner, 4);
  ASSERT_EQ(add.error, ProposeError::kOk);
  EXPECT_EQ(g.change(ConfChangeType::kPromote, 4).error, ProposeError::kChangeInProgress);
  g.settle();
  // The learner holds the whole log and knows the configuration.
  EXPECT_EQ(g.nodes[4]->last_index(), g.lead().last_index());
  EXPECT_TRUE(g.nodes[4]->status().learner);
  EXPECT_EQ(find_member(g.nodes[4]->conf(), 4)->raft_addr, "127.0.0.1:8004");
  // It never campaigns, even alone for a long time.
  g.down = {1, 2, 3};
  g.tick_all(60);
  EXPECT_EQ(g.nodes[4]->stats().pre_votes_started + g.nodes[4]->stats().elections_started, 0u);
  g.down.clear();
  g.tick_all(30);
  ASSERT_NE(g.leader(), kNoNode);
  ASSERT_NE(g.leader(), 4u);
  g.lead().propose("y");
  g.settle();
  ASSERT_EQ(g.change(ConfChangeType::kPromote, 4).error, ProposeError::kOk);
  g.settle();
  for (auto& [id, r] : g.nodes) EXPECT_EQ(voter_ids(r->conf()).size(), 4u) << id;
  EXPECT_TRUE(g.nodes[4]->status().voter);
  // Four voters: three must hold an entry before it commits.
  NodeId l = g.leader();
  std::vector<NodeId> others;
  for (NodeId id : {1, 2, 3, 4}) if (id != l) others.push_back(id);
  g.down = {others[0], others[1]};
  Index before = g.lead().commit();
  g.lead().propose("z");
  g.settle();
  EXPECT_EQ(g.lead().commit(), before) << "committed with 2 of 4 voters";
  g.down = {others[0]};
  g.settle();
  g.lead().propose("w");
  g.settle();
  EXPECT_GT(g.lead().commit(), before);
}

TEST(Membership, LearnerNeverCountsTowardQuorum) {
  Group g(3);
  g.elect();
  g.start(4, {});
  ASSERT_EQ(g.change(ConfChangeType::kAddLearner, 4).error, ProposeError::kOk);
  g.settle();
  // Leader plus learner: not a majority of {1,2,3}.
  g.down = {2, 3};
  Index before = g.lead().commit();
  g.lead().propose("x");
  g.settle();
  EXPECT_EQ(g.nodes[4]->last_index(), g.nodes[1]->last_index());
  EXPECT_EQ(g.nodes[1]->commit(), before);
  // Nor does CheckQuorum count it: the leader steps down.
  g.tick_all(25);
  EXPECT_NE(g.nodes[1]->role(), Role::kLeader);
}

TEST(Membership, ChangesWaitForTheTermsFirstCommitAndForEachOther) {
  Group g(3);
  g.nodes[1]->campaign();
  // Elected, no-op not yet replicated: no change yet.
  for (int i = 0; i < 3 && g.nodes[1]->role() != Role::kLeader; ++i) {
    Ready rd = g.nodes[1]->ready();
    g.disks[1]->append(rd.entries);
    if (rd.hard_state) g.disks[1]->set_hard_state(*rd.hard_state);
    g.nodes[1]->advance();
    for (const Message& m : rd.messages) g.nodes[m.to]->step(m);
    for (NodeId id : {2, 3}) {
      while (g.nodes[id]->has_ready()) {
        Ready r2 = g.nodes[id]->ready();
        if (r2.hard_state) g.disks[id]->set_hard_state(*r2.hard_state);
        g.nodes[id]->advance();
        for (const Message& m : r2.messages) g.nodes[m.to]->step(m);
      }
    }
  }
  ASSERT_EQ(g.nodes[1]->role(), Role::kLeader);
  EXPECT_EQ(g.change(ConfChangeType::kAddLearner, 4).error, ProposeError::kTermNotCommitted);
  g.settle();
  EXPECT_EQ(g.change(ConfChangeType::kAddLearner, 4).error, ProposeError::kOk);
  EXPECT_EQ(g.change(ConfChangeType::kAddLearner, 5).error, ProposeError::kChangeInProgress);
  g.settle();
  EXPECT_EQ(g.change(ConfChangeType::kAddLearner, 5).error, ProposeError::kOk);
  g.settle();
  ProposeResult bad = g.change(ConfChangeType::kRemove, 9);
  EXPECT_EQ(bad.error, ProposeError::kBadChange);
  EXPECT_EQ(bad.change_error, ConfChangeError::kUnknownMember);
}

TEST(Membership, ConfigurationInForceOnAppendAndUndoneWithItsEntry) {
  Group g(3);
  g.elect();
  // Only node 2 receives the change; it is in force there, uncommitted.
  g.down = {3};
  Index before = g.nodes[2]->conf_index();
  g.nodes.at(1)->propose_conf_change(ConfChange{ConfChangeType::kRemove, Member{3, true, "", ""}});
  // Deliver the append to 2 but cut 2's answer by taking 1 down after.
  {
    Ready rd = g.nodes[1]->ready();
    g.disks[1]->append(rd.entries);
    g.nodes[1]->advance();
    for (const Message& m : rd.messages) {
      if (m.to == 2) g.nodes[2]->step(m);
    }
  }
  EXPECT_GT(g.nodes[2]->conf_index(), before);
  EXPECT_FALSE(is_voter(g.nodes[2]->conf(), 3));
  EXPECT_LT(g.nodes[2]->commit(), g.nodes[2]->conf_index());
  // A leader of a later term (3, which never got the change) overwrites
  // that index: the configuration goes back with its entry.
  const Index k = g.nodes[2]->conf_index();
  Message a;
  a.type = MessageType::kAppend;
  a.from = 3;
  a.to = 2;
  a.term = g.nodes[2]->term() + 1;
  a.index = k - 1;
  a.log_term = *g.nodes[2]->term_at(k - 1);
  a.commit = g.nodes[2]->commit();
  a.entries = {Entry{a.term, k, EntryType::kNoop, ""}};
  ASSERT_EQ(g.nodes[2]->step(a), StepError::kOk);
  EXPECT_EQ(g.nodes[2]->conf_index(), before);
  EXPECT_TRUE(is_voter(g.nodes[2]->conf(), 3));
}

TEST(Membership, RemovedLeaderHandsOverAndStepsDown) {
  Group g(3);
  g.elect();
  ProposeResult r = g.lead().propose_conf_change(ConfChange{ConfChangeType::kRemove, Member{1, true, "", ""}});
  ASSERT_EQ(r.error, ProposeError::kOk);
  g.settle();
  // Committed: node 1 is no longer a voter and no longer leads; TimeoutNow
  // made the most caught-up voter campaign at once, no timeout needed.
  EXPECT_NE(g.nodes[1]->role(), Role::kLeader);
  EXPECT_FALSE(g.nodes[1]->status().voter);
  NodeId l = g.leader();
  ASSERT_TRUE(l == 2 || l == 3) << l;
  for (auto& [id, n] : g.nodes) EXPECT_FALSE(is_voter(n->conf(), 1)) << id;
  // The new leader commits with {2,3} alone; node 1 never campaigns again.
  g.crash(1);
  g.lead().propose("x");
  g.settle();
  EXPECT_EQ(g.nodes[2]->commit(), g.nodes[3]->commit());
  EXPECT_EQ(g.nodes[2]->commit(), g.lead().last_index());
  // A removed id can never come back.
  g.lead().propose("y");
  g.settle();
  EXPECT_EQ(g.change(ConfChangeType::kAddLearner, 1).change_error, ConfChangeError::kRemovedId);
}

// The removal of leader 1 commits at index `removal` while its log goes on
// to `removal + 1`, which no voter has (as under load): appends carrying
// that entry are lost until the test says otherwise.
struct LaggingRemoval {
  LaggingRemoval() : g(3) {}
  void start() {
    g.drop = nullptr;
    g.elect();
    removal = g.lead().propose_conf_change(ConfChange{ConfChangeType::kRemove, Member{1, true, "", ""}}).index;
    ASSERT_NE(removal, 0u);
    ASSERT_EQ(g.lead().propose("x").error, ProposeError::kOk);
    tail = removal + 1;
    g.drop = [this](const Message& m) {
      return m.type == MessageType::kAppend && !m.entries.empty() && m.entries.back().index >= tail;
    };
    g.settle();
    // Committed under {2,3}; node 1 leads on to hand over, refusing
    // proposals as a leader in transfer does.
    Raft& one = *g.nodes[1];
    ASSERT_EQ(one.commit(), removal);
    ASSERT_EQ(one.role(), Role::kLeader);
    ASSERT_FALSE(one.status().voter);
    target = one.status().transferee;
    ASSERT_TRUE(target == 2 || target == 3) << target;
    EXPECT_EQ(one.propose("refused").error, ProposeError::kTransferring);
    EXPECT_EQ(one.last_index(), tail);
  }
  std::size_t timeout_nows() const {
    std::size_t n = 0;
    for (const Message& m : g.sent) n += m.type == MessageType::kTimeoutNow ? 1 : 0;
    return n;
  }
  Group g;
  Index removal = 0;
  Index tail = 0;
  NodeId target = kNoNode;
};

TEST(Membership, RemovedLeaderBringsItsTargetUpToDateThenHandsOver) {
  LaggingRemoval t;
  t.g.max_entries_per_append = 1;
  for (NodeId id : t.g.bootstrap) t.g.start(id, t.g.bootstrap);
  t.start();
  EXPECT_EQ(t.timeout_nows(), 0u);  // the target lacks `tail`: not yet
  // The link heals: the next heartbeat brings the target up to date, it
  // gets TimeoutNow and wins at once, well inside one election period.
  t.g.drop = nullptr;
  t.g.tick_all(3);
  EXPECT_EQ(t.timeout_nows(), 1u);
  EXPECT_NE(t.g.nodes[1]->role(), Role::kLeader);
  EXPECT_EQ(t.g.leader(), t.target);
  // Removed, node 1 never hears of the winner, but it points clients at
  // the node it handed over to rather than answering "no leader".
  EXPECT_EQ(t.g.nodes[1]->leader(), kNoNode);
  EXPECT_EQ(t.g.nodes[1]->leader_hint(), t.target);
  // What node 1 had is kept: `x` commits under the new leader.
  Raft& l = t.g.lead();
  EXPECT_GE(l.commit(), t.tail);
  EXPECT_EQ(*l.term_at(t.tail), *t.g.nodes[1]->term_at(t.tail));
}

// The target holding the removed leader's last entry is not enough: that
// entry must also be committed (by the new voters) before TimeoutNow, so
// that every proposal it accepted is decided in its own log (the service
// answers them; removed, it never hears of them again).
TEST(Membership, RemovedLeaderHandsOverOnlyOnceItsLastEntryIsCommitted) {
  LaggingRemoval t;
  t.g.max_entries_per_append = 1;
  for (NodeId id : t.g.bootstrap) t.g.start(id, t.g.bootstrap);
  t.start();
  const NodeId other = t.target == 2 ? 3 : 2;
  // Only the target gets `tail`: it matches node 1's last index, but
  // {2,3} need both for a commit.
  t.g.drop = [&](const Message& m) {
    return m.to == other && m.type == MessageType::kAppend && !m.entries.empty() &&
           m.entries.back().index >= t.tail;
  };
  t.g.tick_all(3);
  Raft& one = *t.g.nodes[1];
  ASSERT_EQ(one.role(), Role::kLeader);
  EXPECT_LT(one.commit(), t.tail);
  EXPECT_EQ(t.timeout_nows(), 0u) << "TimeoutNow before node 1's last entry committed";
  // The other voter gets it too: committed, then TimeoutNow.
  t.g.drop = nullptr;
  t.g.tick_all(3);
  EXPECT_EQ(t.timeout_nows(), 1u);
  EXPECT_EQ(one.commit(), t.tail);
  EXPECT_NE(one.role(), Role::kLeader);
  EXPECT_EQ(t.g.leader(), t.target);
}

TEST(Membership, RemovedLeaderStepsDownAfterAnElectionPeriodIfItsTargetNeverCatchesUp) {
  LaggingRemoval t;
  t.g.max_entries_per_append = 1;
  for (NodeId id : t.g.bootstrap) t.g.start(id, t.g.bootstrap);
  t.start();
  // The target never gets `tail`: node 1 leads (refusing proposals and
  // appending nothing) for at most one election period, then steps down
  // without TimeoutNow, as before the hand-over existed.
  const Term term = t.g.nodes[1]->term();
  int ticks = 0;
  while (t.g.nodes[1]->role() == Role::kLeader && t.g.nodes[1]->term() == term) {
    ASSERT_LE(ticks, 10) << "still leading after an election period";
    EXPECT_EQ(t.g.nodes[1]->last_index(), t.tail);
    EXPECT_EQ(t.g.nodes[1]->propose("refused").error, ProposeError::kTransferring);
    for (auto& [id, r] : t.g.nodes) {
      if (id == 1) r->tick();
    }
    t.g.settle();
    ++ticks;
  }
  EXPECT_EQ(t.timeout_nows(), 0u);
  EXPECT_NE(t.g.nodes[1]->role(), Role::kLeader);
  EXPECT_EQ(t.g.nodes[1]->commit(), t.removal);  // it committed nothing more
}

// An admin transfer asked of a removed leader while it hands over is
// refused: it must neither retarget the hand-over nor restart its one
// election period (lockd-sim --membership seed 109 found the second).
TEST(Membership, TransferIsRefusedWhileARemovedLeaderHandsOver) {
  LaggingRemoval t;
  t.g.max_entries_per_append = 1;
  for (NodeId id : t.g.bootstrap) t.g.start(id, t.g.bootstrap);
  t.start();  // the target never gets `tail`: the hand-over runs its full period
  Raft& one = *t.g.nodes[1];
  ASSERT_EQ(one.role(), Role::kLeader);
  const NodeId other = t.target == 2 ? 3 : 2;
  const Term term = one.term();
  int ticks = 0;
  while (one.role() == Role::kLeader && one.term() == term) {
    ASSERT_LE(ticks, 10) << "still leading after an election period: a transfer restarted it";
    EXPECT_FALSE(one.transfer_leadership(other));
    EXPECT_EQ(one.status().transferee, t.target);
    for (auto& [id, r] : t.g.nodes) {
      if (id == 1) r->tick();
    }
    t.g.settle();
    ++ticks;
  }
  EXPECT_EQ(t.timeout_nows(), 0u);
}

TEST(Membership, SnapshotCarriesTheConfigurationToANewMemberAndAcrossRestart) {
  Group g(3);
  g.elect();
  g.start(4, {});
  ASSERT_EQ(g.change(ConfChangeType::kAddLearner, 4).error, ProposeError::kOk);
  g.settle();
  g.crash(4);
  for (int i = 0; i < 10; ++i) g.lead().propose("x");
  g.settle();
  // Compact the leader past the change: the configuration moves into the
  // snapshot meta.
  Raft& l = g.lead();
  Index at = l.status().applied;
  Snapshot s{SnapshotMeta{at, *l.term_at(at), l.conf_at(at)}, "state"};
  g.disks[g.leader()]->save_snapshot(s);
  l.compact(at, "state");
  EXPECT_EQ(l.snapshot_meta().conf, l.conf());
  EXPECT_TRUE(is_learner(l.snapshot_meta().conf, 4));
  // A fresh node 5 (the learner's disk was lost: a new id) gets the snapshot.
  ASSERT_EQ(g.change(ConfChangeType::kRemove, 4).error, ProposeError::kOk);
  g.settle();
  Index at2 = g.lead().status().applied;
  g.disks[g.leader()]->save_snapshot(
      Snapshot{SnapshotMeta{at2, *g.lead().term_at(at2), g.lead().conf_at(at2)}, "state2"});
  g.lead().compact(at2, "state2");
  g.start(5, {});
  ASSERT_EQ(g.change(ConfChangeType::kAddLearner, 5).error, ProposeError::kOk);
  g.settle();
  EXPECT_GE(g.nodes[5]->stats().snapshots_installed, 1u);
  EXPECT_TRUE(g.nodes[5]->status().learner);
  EXPECT_TRUE(was_removed(g.nodes[5]->conf(), 4));
  // Restart from its disk: the configuration is still known.
  g.crash(5);
  g.start(5, {});
  EXPECT_TRUE(g.nodes[5]->status().learner);
  EXPECT_EQ(g.nodes[5]->conf(), g.lead().conf());
}

}  // namespace
}  // namespace lockd::raft

namespace lockd::raft {
namespace {

// Issue 20, "Why": a follower whose disk was wiped and that restarted under
// the same id never caught up — the leader still believed its old match
// index and took every rejection at or below it for a stale answer.
TEST(Membership, WipedFollowerUnderTheSameIdCatchesUp) {
  Group g(3);
  g.elect();
  for (int i = 0; i < 20; ++i) g.lead().propose("x" + std::to_string(i));
  g.settle();
  ASSERT_EQ(g.nodes[3]->last_index(), g.lead().last_index());
  g.crash(3);
  g.disks[3] = std::make_unique<MemoryStorage>();  // the disk is replaced
  g.start(3, g.bootstrap);
  for (int i = 0; i < 5; ++i) g.lead().propose("y" + std::to_string(i));
  g.tick_all(10);
  EXPECT_EQ(g.nodes[3]->last_index(), g.lead().last_index());
  EXPECT_EQ(g.nodes[3]->commit(), g.lead().commit());
}

// Issue 37 case 6: a learner wiped and rejoined (an empty log under its
// id) must not pass promotion's caught-up check on what it acknowledged
// before. An idle leader never learns it by itself: heartbeats do not
// compare logs. The cluster node calls forget_progress when the member's
// handshake says its data dir is empty.
TEST(Membership, WipedLearnerIsNotCaughtUpUntilItAcknowledgesAgain) {
  Group g(3);
  g.elect();
  for (int i = 0; i < 5; ++i) g.lead().propose("x");
  g.settle();
  g.start(4, {});
  ASSERT_EQ(g.change(ConfChangeType::kAddLearner, 4).error, ProposeError::kOk);
  g.settle();
  g.tick_all(10);
  ASSERT_EQ(g.nodes[4]->last_index(), g.lead().last_index());
  // Wiped: a new core on an empty disk, under the same id.
  g.crash(4);
  g.disks.erase(4);
  g.start(4, {});
  g.tick_all(10);
  const auto match_of_4 = [&] {
    for (const PeerProgress& p : g.lead().progress()) {
      if (p.id == 4) return p.match;
    }
    return Index{0};
  };
  EXPECT_EQ(g.nodes[4]->last_index(), 0u);
  EXPECT_EQ(match_of_4(), g.lead().last_index()) << "the idle leader still counts the old log";
  ASSERT_TRUE(g.lead().forget_progress(4));
  EXPECT_EQ(match_of_4(), 0u);
  EXPECT_EQ(g.change(ConfChangeType::kPromote, 4).error, ProposeError::kNotCaughtUp);
  // It catches up again, and only then may be promoted.
  g.tick_all(10);
  EXPECT_EQ(g.nodes[4]->last_index(), g.lead().last_index());
  EXPECT_EQ(match_of_4(), g.lead().last_index());
  EXPECT_FALSE(g.lead().forget_progress(g.leader()));
  EXPECT_EQ(g.change(ConfChangeType::kPromote, 4).error, ProposeError::kOk);
  g.settle();
  EXPECT_TRUE(g.nodes[4]->status().voter);
}

}  // namespace
}  // namespace lockd::raft
