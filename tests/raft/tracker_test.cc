// Progress tracking (tracker.h): the per-member replication state machine
// and the tracker's configuration, table-driven where the rules are.
#include <gtest/gtest.h>

#include "lockd/raft/tracker.h"

namespace lockd::raft {
namespace {

TEST(Progress, Transitions) {
  Progress pr;
  pr.match = 4;
  pr.next = 9;
  pr.become_probe();
  EXPECT_EQ(pr.state, ProgressState::kProbe);
  EXPECT_EQ(pr.next, 9u);  // probing keeps an optimistic next above match
  pr.become_replicate();
  EXPECT_EQ(pr.state, ProgressState::kReplicate);
  EXPECT_EQ(pr.next, 5u);  // streaming restarts right after match
  pr.inflight = {6, 8, 10};
  EXPECT_TRUE(pr.maybe_update(8));
  EXPECT_EQ(pr.match, 8u);
  EXPECT_EQ(pr.inflight.size(), 1u);  // acks free the window up to 8
  EXPECT_FALSE(pr.maybe_update(7));   // a stale ack moves nothing
  EXPECT_FALSE(pr.maybe_update(8));   // nor does a duplicate
  EXPECT_EQ(pr.match, 8u);
}

TEST(Tracker, ConfigKeepsProgressOfRemainingMembers) {
  ProgressTracker t;
  t.set_config({1, 2, 3}, {}, 1, false, 1, 0);
  t.start_tracking(1, 11, 0, 0);
  ASSERT_EQ(t.progress().size(), 2u);
  t.find(2)->match = 10;
  // 3 leaves, 4 joins as a learner: 2 keeps its match, 4 starts at next.
  t.set_config({1, 2}, {4}, 1, true, 12, 5);
  EXPECT_EQ(t.progress().size(), 2u);
  EXPECT_EQ(t.find(2)->match, 10u);
  EXPECT_EQ(t.find(3), nullptr);
  ASSERT_NE(t.find(4), nullptr);
  EXPECT_EQ(t.find(4)->next, 12u);
  EXPECT_TRUE(t.is_learner(4));
  EXPECT_FALSE(t.is_voter(4));
}

TEST(Tracker, LearnersNeverCount) {
  ProgressTracker t;
  t.set_config({1, 2, 3}, {4, 5}, 1, false, 1, 0);
  t.start_tracking(1, 1, 0, 0);
  // Learners hold everything, voter 2 and 3 nothing: the commit index is
  // what a majority of *voters* holds.
  t.find(4)->match = 50;
  t.find(5)->match = 50;
  EXPECT_EQ(t.committed(1, 50), 0u);
  t.find(2)->match = 20;
  EXPECT_EQ(t.committed(1, 50), 20u);
  // Votes from learners never elect.
  t.record_vote(1, true);
  t.record_vote(4, true);
  t.record_vote(5, true);
  EXPECT_EQ(t.tally(), quorum::VoteResult::kPending);
  t.record_vote(3, true);
  EXPECT_EQ(t.tally(), quorum::VoteResult::kWon);
  // CheckQuorum: only voters heard count.
  t.reset_recent_active();
  t.find(4)->recent_active = true;
  t.find(5)->recent_active = true;
  EXPECT_FALSE(t.quorum_active(1));
  t.find(2)->recent_active = true;
  EXPECT_TRUE(t.quorum_active(1));
}

TEST(Tracker, CommittedAllVotersBug) {
  ProgressTracker t;
  t.set_config({1, 2, 3}, {}, 1, false, 1, 0);
  t.start_tracking(1, 1, 0, 0);
  t.find(2)->match = 9;
  EXPECT_EQ(t.committed(1, 9), 9u);
  EXPECT_EQ(t.committed(1, 9, true), 0u);
}

}  // namespace
}  // namespace lockd::raft
