// Progress tracking; see tracker.h.
#include "lockd/raft/tracker.h"

#include <algorithm>

#include "lockd/common/check.h"

namespace lockd::raft {

std::string_view to_string(ProgressState s) {
  switch (s) {
    case ProgressState::kProbe: return "probe";
    case ProgressState::kReplicate: return "replicate";
    case ProgressState::kSnapshot: return "snapshot";
  }
  return "?";
}

void Progress::become_probe() {
  state = ProgressState::kProbe;
  probe_sent = false;
  inflight.clear();
  snapshot_data.reset();  // a transfer that ended pins nothing
  next = std::max(next, match + 1);
}

void Progress::become_replicate() {
  state = ProgressState::kReplicate;
  probe_sent = false;
  inflight.clear();
  snapshot_data.reset();
  next = match + 1;
}

bool Progress::maybe_update(Index index) {
  if (index <= match) return false;
  match = index;
  next = std::max(next, index + 1);
  while (!inflight.empty() && inflight.front() <= index) inflight.pop_front();
  return true;
}

void ProgressTracker::set_config(std::vector<NodeId> voters, std::vector<NodeId> learners, NodeId self,
                                 bool track, Index next, std::uint64_t now_tick) {
  std::sort(voters.begin(), voters.end());
  std::sort(learners.begin(), learners.end());
  for (NodeId l : learners) LOCKD_CHECK(!std::binary_search(voters.begin(), voters.end(), l));
  voters_ = std::move(voters);
  learners_ = std::move(learners);
  for (auto it = progress_.begin(); it != progress_.end();) {
    it = is_member(it->first) ? std::next(it) : progress_.erase(it);
  }
  if (!track) return;
  auto add = [&](NodeId id) {
    if (id == self || progress_.contains(id)) return;
    Progress pr;
    pr.next = next;
    pr.recent_active = true;  // a newcomer gets a full period to answer
    pr.last_contact_tick = now_tick;
    progress_.emplace(id, pr);
  };
  for (NodeId v : voters_) add(v);
  for (NodeId l : learners_) add(l);
}

bool ProgressTracker::is_voter(NodeId id) const {
  return std::binary_search(voters_.begin(), voters_.end(), id);
}

bool ProgressTracker::is_learner(NodeId id) const {
  return std::binary_search(learners_.begin(), learners_.end(), id);
}

void ProgressTracker::start_tracking(NodeId self, Index next, Index match, std::uint64_t now_tick) {
  progress_.clear();
  auto add = [&](NodeId id) {
    if (id == self) return;
    Progress pr;
    pr.next = next;
    pr.match = match;
    pr.recent_active = true;  // a fresh leader gets a full period to hear back
    pr.last_contact_tick = now_tick;
    progress_.emplace(id, pr);
  };
  for (NodeId v : voters_) add(v);
  for (NodeId l : learners_) add(l);
}

Progress* ProgressTracker::find(NodeId id) {
  auto it = progress_.find(id);
  return it == progress_.end() ? nullptr : &it->second;
}

Index ProgressTracker::committed(NodeId self, Index self_match, bool all_voters) const {
  auto acked = [&](NodeId v) -> Index {
    if (v == self) return self_match;
    auto it = progress_.find(v);
    return it == progress_.end() ? 0 : it->second.match;
  };
  if (all_voters) {
    Index lowest = ~Index{0};
    for (NodeId v : voters_) lowest = std::min(lowest, acked(v));
    return voters_.empty() ? 0 : lowest;
  }
  return quorum::committed_index(voters_, acked);
}

bool ProgressTracker::quorum_active(NodeId self, bool count_all) const {
  return quorum::has_active_majority(voters_, [&](NodeId v) {
    if (v == self || count_all) return true;
    auto it = progress_.find(v);
    return it != progress_.end() && it->second.recent_active;
  });
}

void ProgressTracker::reset_recent_active() {
  for (auto& [id, pr] : progress_) pr.recent_active = false;
}

quorum::VoteResult ProgressTracker::tally() const {
  return quorum::vote_result(voters_, [&](NodeId v) -> std::optional<bool> {
    auto it = votes_.find(v);
    if (it == votes_.end()) return std::nullopt;
    return it->second;
  });
}

}  // namespace lockd::raft
