// Quorum math; see quorum.h.
#include "lockd/raft/quorum.h"

#include <algorithm>
#include <vector>

namespace lockd::raft::quorum {

std::size_t majority(std::size_t n) { return n == 0 ? 0 : n / 2 + 1; }

Index committed_index(std::span<const NodeId> voters, const std::function<Index(NodeId)>& acked) {
  if (voters.empty()) return 0;
  std::vector<Index> acks;
  acks.reserve(voters.size());
  for (NodeId v : voters) acks.push_back(acked(v));
  std::sort(acks.begin(), acks.end(), std::greater<>());
  return acks[majority(voters.size()) - 1];
}

VoteResult vote_result(std::span<const NodeId> voters,
                       const std::function<std::optional<bool>(NodeId)>& vote) {
  std::size_t yes = 0;
  std::size_t no = 0;
  for (NodeId v : voters) {
    std::optional<bool> g = vote(v);
    if (g) (*g ? yes : no) += 1;
  }
  const std::size_t q = majority(voters.size());
  if (q == 0) return VoteResult::kPending;
  if (yes >= q) return VoteResult::kWon;
  if (no >= q) return VoteResult::kLost;
  return VoteResult::kPending;
}

bool has_active_majority(std::span<const NodeId> voters, const std::function<bool(NodeId)>& active) {
  std::size_t n = 0;
  for (NodeId v : voters) n += active(v) ? 1 : 0;
  return !voters.empty() && n >= majority(voters.size());
}

}  // namespace lockd::raft::quorum
