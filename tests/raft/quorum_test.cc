// Quorum math (quorum.h), table-driven: each row is a configuration and
// what its members told the leader, with the expected answer.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <optional>
#include <vector>

#include "lockd/raft/quorum.h"

namespace lockd::raft::quorum {
namespace {

TEST(Quorum, Majority) {
  const std::vector<std::pair<std::size_t, std::size_t>> rows = {
      {0, 0}, {1, 1}, {2, 2}, {3, 2}, {4, 3}, {5, 3}, {6, 4}, {7, 4}, {9, 5}};
  for (auto [n, want] : rows) EXPECT_EQ(majority(n), want) << n;
}

struct CommitRow {
  std::vector<NodeId> voters;
  std::map<NodeId, Index> acked;  // absent: 0
  Index want;
};

TEST(Quorum, CommittedIndex) {
  const std::vector<CommitRow> rows = {
      {{}, {}, 0},
      {{1}, {{1, 7}}, 7},
      {{1, 2}, {{1, 7}, {2, 5}}, 5},              // two voters: both needed
      {{1, 2, 3}, {{1, 7}, {2, 5}, {3, 1}}, 5},   // median
      {{1, 2, 3}, {{1, 7}}, 0},                   // one of three is no majority
      {{1, 2, 3, 4}, {{1, 9}, {2, 8}, {3, 2}, {4, 1}}, 2},
      {{1, 2, 3, 4, 5}, {{1, 9}, {2, 8}, {3, 7}, {4, 1}, {5, 0}}, 7},
      // Acks of non-voters (learners, removed members) never count.
      {{1, 2, 3}, {{1, 9}, {4, 9}, {5, 9}, {6, 9}}, 0},
      {{1, 2, 3}, {{1, 9}, {2, 3}, {4, 9}}, 3},
  };
  for (const CommitRow& r : rows) {
    Index got = committed_index(r.voters, [&](NodeId id) {
      auto it = r.acked.find(id);
      return it == r.acked.end() ? Index{0} : it->second;
    });
    EXPECT_EQ(got, r.want) << "voters " << r.voters.size();
  }
}

struct VoteRow {
  std::vector<NodeId> voters;
  std::map<NodeId, bool> votes;
  VoteResult want;
};

TEST(Quorum, VoteResult) {
  using enum VoteResult;
  const std::vector<VoteRow> rows = {
      {{1}, {}, kPending},
      {{1}, {{1, true}}, kWon},
      {{1}, {{1, false}}, kLost},
      {{1, 2, 3}, {{1, true}}, kPending},
      {{1, 2, 3}, {{1, true}, {2, true}}, kWon},
      {{1, 2, 3}, {{1, true}, {2, false}}, kPending},
      {{1, 2, 3}, {{2, false}, {3, false}}, kLost},
      {{1, 2, 3, 4}, {{1, true}, {2, true}}, kPending},
      {{1, 2, 3, 4}, {{1, true}, {2, true}, {3, true}}, kWon},
      {{1, 2, 3, 4}, {{1, false}, {2, false}}, kPending},
      // Grants from non-voters (a learner, 4 and 5 here) never win.
      {{1, 2, 3}, {{1, true}, {4, true}, {5, true}}, kPending},
      {{1, 2, 3}, {{1, true}, {4, false}, {5, false}}, kPending},
  };
  for (const VoteRow& r : rows) {
    VoteResult got = vote_result(r.voters, [&](NodeId id) -> std::optional<bool> {
      auto it = r.votes.find(id);
      if (it == r.votes.end()) return std::nullopt;
      return it->second;
    });
    EXPECT_EQ(got, r.want) << "voters " << r.voters.size() << " votes " << r.votes.size();
  }
}

TEST(Quorum, ActiveMajority) {
  struct Row {
    std::vector<NodeId> voters;
    std::vector<NodeId> active;
    bool want;
  };
  const std::vector<Row> rows = {
      {{}, {}, false},
      {{1}, {1}, true},
      {{1, 2, 3}, {1}, false},
      {{1, 2, 3}, {1, 3}, true},
      {{1, 2, 3, 4}, {1, 3}, false},
      {{1, 2, 3}, {1, 4, 5}, false},  // learners 4 and 5 heard: not a quorum
  };
  for (const Row& r : rows) {
    bool got = has_active_majority(r.voters, [&](NodeId id) {
      return std::find(r.active.begin(), r.active.end(), id) != r.active.end();
    });
    EXPECT_EQ(got, r.want);
  }
}

}  // namespace
}  // namespace lockd::raft::quorum
