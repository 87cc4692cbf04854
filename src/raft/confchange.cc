// Configuration transitions; see confchange.h.
#include "lockd/raft/confchange.h"

#include <algorithm>

#include "lockd/raft/membership.h"
#include "lockd/raft/raft.h"

namespace lockd::raft {

std::string_view to_string(ConfChangeType t) {
  switch (t) {
    case ConfChangeType::kAddLearner: return "add_learner";
    case ConfChangeType::kPromote: return "promote";
    case ConfChangeType::kRemove: return "remove";
    case ConfChangeType::kUpdateAddress: return "update_address";
  }
  return "?";
}

std::string_view to_string(ConfChangeError e) {
  switch (e) {
    case ConfChangeError::kOk: return "ok";
    case ConfChangeError::kBadId: return "bad_id";
    case ConfChangeError::kAlreadyMember: return "already_member";
    case ConfChangeError::kRemovedId: return "removed_id";
    case ConfChangeError::kUnknownMember: return "unknown_member";
    case ConfChangeError::kNotLearner: return "not_learner";
    case ConfChangeError::kLastVoter: return "last_voter";
    case ConfChangeError::kTooManyMembers: return "too_many_members";
    case ConfChangeError::kBadAddress: return "bad_address";
    case ConfChangeError::kTooManyRemoved: return "too_many_removed";
  }
  return "?";
}

namespace {

bool address_ok(const std::string& a) { return !a.empty() && a.size() <= kMaxAddressBytes; }

}  // namespace

ConfChangeError apply_change(const Membership& cur, const ConfChange& cc, Membership& out) {
  const NodeId id = cc.member.id;
  if (id == kNoNode) return ConfChangeError::kBadId;
  const Member* m = find_member(cur, id);
  Membership next = cur;
  auto at = std::find_if(next.members.begin(), next.members.end(), [&](const Member& x) { return x.id == id; });
  switch (cc.type) {
    case ConfChangeType::kAddLearner: {
      if (m != nullptr) return ConfChangeError::kAlreadyMember;
      if (was_removed(cur, id)) return ConfChangeError::kRemovedId;
      if (!address_ok(cc.member.client_addr) || !address_ok(cc.member.raft_addr)) {
        return ConfChangeError::kBadAddress;
      }
      if (cur.members.size() >= kMaxMembers) return ConfChangeError::kTooManyMembers;
      Member n = cc.member;
      n.voter = false;
      next.members.insert(std::upper_bound(next.members.begin(), next.members.end(), id,
                                           [](NodeId v, const Member& x) { return v < x.id; }),
                          std::move(n));
      break;
    }
    case ConfChangeType::kPromote:
      if (m == nullptr) return ConfChangeError::kUnknownMember;
      if (m->voter) return ConfChangeError::kNotLearner;
      if (voter_ids(cur).size() >= kMaxVoters) return ConfChangeError::kTooManyMembers;
      at->voter = true;
      break;
    case ConfChangeType::kRemove:
      if (m == nullptr) return ConfChangeError::kUnknownMember;
      if (m->voter && voter_ids(cur).size() == 1) return ConfChangeError::kLastVoter;
      if (cur.removed.size() >= kMaxRemovedIds) return ConfChangeError::kTooManyRemoved;
      next.members.erase(at);
      next.removed.insert(std::upper_bound(next.removed.begin(), next.removed.end(), id), id);
      break;
    case ConfChangeType::kUpdateAddress:
      if (m == nullptr) return ConfChangeError::kUnknownMember;
      if (!address_ok(cc.member.client_addr) || !address_ok(cc.member.raft_addr)) {
        return ConfChangeError::kBadAddress;
      }
      at->client_addr = cc.member.client_addr;
      at->raft_addr = cc.member.raft_addr;
      break;
  }
  out = std::move(next);
  return ConfChangeError::kOk;
}

bool single_voter_step(const Membership& prev, const Membership& next) {
  std::vector<NodeId> a = voter_ids(prev);
  std::vector<NodeId> b = voter_ids(next);
  std::vector<NodeId> diff;
  std::set_symmetric_difference(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(diff));
  return diff.size() <= 1;
}

}  // namespace lockd::raft
