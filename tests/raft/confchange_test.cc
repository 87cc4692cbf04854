// Configuration transitions (confchange.h) and the configuration encoding
// (membership.h), table-driven: a configuration, a change, the result.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "lockd/raft/confchange.h"
#include "lockd/raft/membership.h"

namespace lockd::raft {
namespace {

// "1 2 3 ~4 -5": voters 1 2 3, learner 4, removed 5 (addresses a:ID/r:ID).
Membership parse(const std::string& text) {
  Membership c;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find(' ', pos);
    if (end == std::string::npos) end = text.size();
    std::string w = text.substr(pos, end - pos);
    pos = end + 1;
    if (w.empty()) continue;
    if (w[0] == '-') {
      c.removed.push_back(std::stoull(w.substr(1)));
      continue;
    }
    bool voter = w[0] != '~';
    NodeId id = std::stoull(voter ? w : w.substr(1));
    c.members.push_back(Member{id, voter, "a:" + std::to_string(id), "r:" + std::to_string(id)});
  }
  return c;
}

std::string show(const Membership& c) {
  std::string s;
  for (const Member& m : c.members) s += (s.empty() ? "" : " ") + std::string(m.voter ? "" : "~") + std::to_string(m.id);
  for (NodeId id : c.removed) s += " -" + std::to_string(id);
  return s;
}

struct Row {
  std::string before;
  ConfChangeType type;
  NodeId id;
  ConfChangeError want_error;
  std::string after;  // when kOk
};

TEST(ConfChange, Table) {
  using T = ConfChangeType;
  using E = ConfChangeError;
  const std::vector<Row> rows = {
      {"1 2 3", T::kAddLearner, 4, E::kOk, "1 2 3 ~4"},
      {"1 2 3", T::kAddLearner, 0, E::kBadId, ""},
      {"1 2 3", T::kAddLearner, 2, E::kAlreadyMember, ""},
      {"1 2 3 ~4", T::kAddLearner, 4, E::kAlreadyMember, ""},
      {"1 2 -3", T::kAddLearner, 3, E::kRemovedId, ""},  // ids are never reused
      {"1 2 3 ~4", T::kPromote, 4, E::kOk, "1 2 3 4"},
      {"1 2 3", T::kPromote, 3, E::kNotLearner, ""},
      {"1 2 3", T::kPromote, 7, E::kUnknownMember, ""},
      {"1 2 3", T::kRemove, 2, E::kOk, "1 3 -2"},
      {"1 2 3 ~4", T::kRemove, 4, E::kOk, "1 2 3 -4"},
      {"1 -2", T::kRemove, 1, E::kLastVoter, ""},
      {"1 ~2", T::kRemove, 1, E::kLastVoter, ""},
      {"1 2", T::kRemove, 1, E::kOk, "2 -1"},
      {"1 2 -5", T::kRemove, 5, E::kUnknownMember, ""},
      {"1 2 3 4 5 6 7 8 9 ~10", T::kPromote, 10, E::kTooManyMembers, ""},
      {"1 2 3", T::kUpdateAddress, 2, E::kOk, "1 2 3"},
      {"1 2 3", T::kUpdateAddress, 4, E::kUnknownMember, ""},
  };
  for (const Row& r : rows) {
    ConfChange cc;
    cc.type = r.type;
    cc.member = Member{r.id, true, "c:" + std::to_string(r.id), "rr:" + std::to_string(r.id)};
    Membership out;
    ConfChangeError got = apply_change(parse(r.before), cc, out);
    EXPECT_EQ(got, r.want_error) << r.before << " " << to_string(r.type) << " " << r.id;
    if (got != E::kOk) continue;
    EXPECT_EQ(show(out), r.after) << r.before << " " << to_string(r.type) << " " << r.id;
    EXPECT_TRUE(single_voter_step(parse(r.before), out));
    if (r.type == T::kAddLearner || r.type == T::kUpdateAddress) {
      EXPECT_EQ(find_member(out, r.id)->client_addr, "c:" + std::to_string(r.id));
    }
  }
}

TEST(ConfChange, AddNeedsBothAddresses) {
  ConfChange cc{ConfChangeType::kAddLearner, Member{4, false, "h:1", ""}};
  Membership out;
  EXPECT_EQ(apply_change(parse("1 2 3"), cc, out), ConfChangeError::kBadAddress);
  cc.member.raft_addr = std::string(kMaxAddressBytes + 1, 'x');
  EXPECT_EQ(apply_change(parse("1 2 3"), cc, out), ConfChangeError::kBadAddress);
}

TEST(ConfChange, SingleVoterStep) {
  EXPECT_TRUE(single_voter_step(parse("1 2 3"), parse("1 2 3 ~4")));
  EXPECT_TRUE(single_voter_step(parse("1 2 3"), parse("1 2 3 4")));
  EXPECT_FALSE(single_voter_step(parse("1 2 3"), parse("1 2 3 4 5")));
  EXPECT_FALSE(single_voter_step(parse("1 2 3"), parse("1 4 5")));
}

TEST(MembershipCodec, RoundTripsAndRefusesGarbage) {
  Membership c = parse("1 2 3 ~4 -5 -9");
  std::string bytes = encode_membership(c);
  Membership back;
  std::string error;
  ASSERT_TRUE(decode_membership(bytes, back, error)) << error;
  EXPECT_EQ(back, c);
  // Every truncation and a trailing byte are refused, never a crash.
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(decode_membership(bytes.substr(0, n), back, error)) << n;
  }
  EXPECT_FALSE(decode_membership(bytes + "x", back, error));
  std::string v = bytes;
  v[0] = 9;
  EXPECT_FALSE(decode_membership(v, back, error));
  EXPECT_NE(error.find("version 9"), std::string::npos) << error;
  // No voter, a zero id, unsorted ids, a removed id that is a member.
  for (const char* bad : {"~1 ~2", "2 1", "1 -1"}) {
    EXPECT_FALSE(decode_membership(encode_membership(parse(bad)), back, error)) << bad;
  }
  Membership zero = parse("1");
  zero.members[0].id = 0;
  EXPECT_FALSE(decode_membership(encode_membership(zero), back, error));
  // Flip every bit: refused or decoded into a valid configuration.
  for (std::size_t i = 0; i < bytes.size() * 8; ++i) {
    std::string f = bytes;
    f[i / 8] = static_cast<char>(f[i / 8] ^ (1 << (i % 8)));
    if (decode_membership(f, back, error)) {
      EXPECT_FALSE(voter_ids(back).empty());
    }
  }
}

}  // namespace
}  // namespace lockd::raft
