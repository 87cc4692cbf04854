// Configuration helpers and encoding; see membership.h.
#include "lockd/raft/membership.h"

#include <algorithm>

#include "lockd/common/byte_io.h"

namespace lockd::raft {
namespace {

enum class MembershipError { kOk = 0, kTruncated, kTooLong };

}  // namespace

const Member* find_member(const Membership& c, NodeId id) {
  auto it = std::lower_bound(c.members.begin(), c.members.end(), id,
                             [](const Member& m, NodeId v) { return m.id < v; });
  return it != c.members.end() && it->id == id ? &*it : nullptr;
}

bool is_voter(const Membership& c, NodeId id) {
  const Member* m = find_member(c, id);
  return m != nullptr && m->voter;
}

bool is_learner(const Membership& c, NodeId id) {
  const Member* m = find_member(c, id);
  return m != nullptr && !m->voter;
}

bool was_removed(const Membership& c, NodeId id) {
  return std::binary_search(c.removed.begin(), c.removed.end(), id);
}

std::vector<NodeId> voter_ids(const Membership& c) {
  std::vector<NodeId> out;
  for (const Member& m : c.members) {
    if (m.voter) out.push_back(m.id);
  }
  return out;
}

std::vector<NodeId> learner_ids(const Membership& c) {
  std::vector<NodeId> out;
  for (const Member& m : c.members) {
    if (!m.voter) out.push_back(m.id);
  }
  return out;
}

Membership voters_only(const std::vector<NodeId>& voters) {
  Membership c;
  for (NodeId v : voters) c.members.push_back(Member{v, true, "", ""});
  std::sort(c.members.begin(), c.members.end(), [](const Member& a, const Member& b) { return a.id < b.id; });
  return c;
}

std::string describe(const Membership& c) {
  auto list = [](const std::vector<NodeId>& ids) {
    std::string s = "{";
    for (std::size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
    return s + "}";
  };
  std::string s = "voters " + list(voter_ids(c));
  if (std::vector<NodeId> l = learner_ids(c); !l.empty()) s += " learners " + list(l);
  if (!c.removed.empty()) s += " removed " + list(c.removed);
  return s;
}

std::string encode_membership(const Membership& c) {
  std::string out;
  ByteWriter w(out);
  w.u8(kMembershipEncodingVersion);
  w.u32(static_cast<std::uint32_t>(c.members.size()));
  for (const Member& m : c.members) {
    w.u64(m.id);
    w.u8(m.voter ? 1 : 0);
    w.bytes(m.client_addr);
    w.bytes(m.raft_addr);
  }
  w.u32(static_cast<std::uint32_t>(c.removed.size()));
  for (NodeId id : c.removed) w.u64(id);
  return out;
}

bool decode_membership(std::string_view bytes, Membership& out, std::string& error) {
  ByteReader<MembershipError> r(bytes, MembershipError::kOk, MembershipError::kTruncated);
  const std::uint8_t version = r.u8();
  if (r.error() != MembershipError::kOk) {
    error = "empty configuration";
    return false;
  }
  if (version != kMembershipEncodingVersion) {
    error = "configuration encoding version " + std::to_string(version) + " is not " +
            std::to_string(kMembershipEncodingVersion);
    return false;
  }
  Membership c;
  const std::uint32_t n = r.u32();
  if (n == 0 || n > kMaxMembers) {
    error = r.error() != MembershipError::kOk ? "truncated" : "bad member count " + std::to_string(n);
    return false;
  }
  for (std::uint32_t i = 0; i < n; ++i) {
    Member m;
    m.id = r.u64();
    const std::uint8_t voter = r.u8();
    m.client_addr = r.bytes(kMaxAddressBytes, MembershipError::kTooLong);
    m.raft_addr = r.bytes(kMaxAddressBytes, MembershipError::kTooLong);
    if (r.error() != MembershipError::kOk) break;
    if (voter > 1 || m.id == kNoNode || (!c.members.empty() && c.members.back().id >= m.id)) {
      error = "bad member entry";
      return false;
    }
    m.voter = voter == 1;
    c.members.push_back(std::move(m));
  }
  const std::uint32_t k = r.error() == MembershipError::kOk ? r.u32() : 0;
  if (k > kMaxRemovedIds) {
    error = "too many removed ids";
    return false;
  }
  for (std::uint32_t i = 0; i < k && r.error() == MembershipError::kOk; ++i) {
    NodeId id = r.u64();
    if (id == kNoNode || (!c.removed.empty() && c.removed.back() >= id) || find_member(c, id) != nullptr) {
      error = "bad removed id";
      return false;
    }
    c.removed.push_back(id);
  }
  if (r.error() != MembershipError::kOk) {
    error = r.error() == MembershipError::kTooLong ? "address too long" : "truncated";
    return false;
  }
  if (r.remaining() != 0) {
    error = "trailing bytes";
    return false;
  }
  if (voter_ids(c).empty()) {
    error = "no voter";
    return false;
  }
  out = std::move(c);
  return true;
}

}  // namespace lockd::raft
