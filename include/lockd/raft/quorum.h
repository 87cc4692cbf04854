// Quorum math: what a majority of a set of voters has, in three questions.
//
// Pure functions over a list of voter ids and what each voter has told the
// leader (an acknowledged index, a vote, "heard from it lately"). Nothing
// else counts: an id that is not in `voters` (a learner, a removed member,
// a stranger) is never asked, so it can never tip a decision. Used by the
// core for commit, elections and CheckQuorum; tested alone in
// tests/raft/quorum_test.cc. (etcd-io/raft keeps the same room in quorum/.)
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <span>

#include "lockd/raft/types.h"

namespace lockd::raft::quorum {

// How many voters of `n` make a majority (n/2 + 1; 0 for an empty set).
std::size_t majority(std::size_t n);

// The highest index that a majority of `voters` acknowledged: the
// majority()-th largest of acked(v) over the voters. 0 when voters is empty.
Index committed_index(std::span<const NodeId> voters, const std::function<Index(NodeId)>& acked);

// Outcome of an election (or PreVote poll) so far.
enum class VoteResult : std::uint8_t {
  kPending = 0,  // neither side has a majority yet
  kWon = 1,      // a majority of voters granted
  kLost = 2,     // a majority of voters refused: no way to win
};

// Counts the answers of `voters` only; vote(v) is nullopt while v has not
// answered, else whether it granted.
VoteResult vote_result(std::span<const NodeId> voters,
                       const std::function<std::optional<bool>(NodeId)>& vote);

// Whether a majority of `voters` is `active` (CheckQuorum).
bool has_active_majority(std::span<const NodeId> voters, const std::function<bool(NodeId)>& active);

}  // namespace lockd::raft::quorum
