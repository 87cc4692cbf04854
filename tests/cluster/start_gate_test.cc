// The start gate (start_gate.h), table-driven: every rule of protocol.md
// §10 "A node's lifecycle" and the eight numbered cases of issue 37, and
// the planted bugs of the "Tests missing today" (each row names
// the case or mutation it pins).
#include "lockd/cluster/start_gate.h"

#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace lockd::cluster {
namespace {

using Answers = std::map<raft::NodeId, PeerAnswer>;

DataDirState empty_disk() { return {}; }

DataDirState with_data(std::vector<raft::NodeId> members, std::uint64_t cluster = 0x1234) {
  DataDirState d;
  d.identity = true;
  d.identity_cluster_id = cluster;
  d.identity_members = std::move(members);
  d.log = true;
  return d;
}

// A member with its data (gate open), which heard from the voters
// `heard_voters` (tag 15): by default from every other voter but the one
// asking, as in a group that has run a while.
PeerAnswer voter_answer(HeardReceiver heard, std::vector<raft::NodeId> voters = {1, 2, 3},
                        std::optional<std::vector<raft::NodeId>> heard_voters = std::vector<raft::NodeId>{1, 2, 3, 4, 5}) {
  return PeerAnswer{0x1234, MemberStatus::kVoter, heard, std::move(voters), DataState::kHasData,
                    std::move(heard_voters)};
}

// The node cluster init was asked of, before it heard from anyone.
PeerAnswer init_answer(std::vector<raft::NodeId> voters = {1, 2, 3}) {
  return voter_answer(HeardReceiver::kNever, std::move(voters), std::vector<raft::NodeId>{});
}

PeerAnswer waiting_answer() {  // an empty node waiting to be let in
  return PeerAnswer{0, MemberStatus::kUnknown, HeardReceiver::kNever, {}};
}

struct Row {
  const char* name;
  DataDirState disk;
  GateFlags flags;
  Answers answers;
  StartVerdict want;
  const char* reason_has = "";
};

const GateFlags kNode3{3, {1, 2, 3}};
const GateFlags kNode1Alone{1, {1}};

std::vector<Row> rows() {
  std::vector<Row> r;
  // --- from the disk alone ---
  r.push_back({"restart with its data votes", with_data({1, 2, 3}), kNode3, {}, StartVerdict::kVote});
  r.push_back({"legacy data dir (a WAL, no IDENTITY) votes",
               [] { DataDirState d; d.log = true; return d; }(), kNode3, {}, StartVerdict::kVote});
  r.push_back({"empty data dir waits (rule 1: a restart never forms a group)", empty_disk(), kNode3, {},
               StartVerdict::kWait});
  r.push_back({"case 1: grown-from-one node wiped, --peer lists only itself: waits, never forms",
               empty_disk(), kNode1Alone, {}, StartVerdict::kWait});
  r.push_back({"case 4: IDENTITY with a cluster id but log and snapshot gone: refused",
               [] { DataDirState d = with_data({1, 2, 3}); d.log = false; return d; }(), kNode3, {},
               StartVerdict::kRefuse, "partly deleted"});
  r.push_back({"snapshot without the log (term and vote gone): refused",
               [] { DataDirState d; d.snapshot = true; return d; }(), kNode3, {}, StartVerdict::kRefuse,
               "partly deleted"});
  r.push_back({"RESTORED without the log: refused",
               [] { DataDirState d; d.restored = true; return d; }(), kNode3, {}, StartVerdict::kRefuse,
               "partly deleted"});
  r.push_back({"IDENTITY without a cluster id and no log (never let in): waits",
               [] { DataDirState d; d.identity = true; d.identity_members = {1, 2, 3}; return d; }(), kNode3,
               {}, StartVerdict::kWait});
  r.push_back({"--peer of another group of the same size (ids differ): refused",
               with_data({1, 2, 3}), GateFlags{3, {3, 4, 5}}, {}, StartVerdict::kRefuse, "--peer names {3,4,5}"});
  r.push_back({"--peer differs but the log records a configuration: votes",
               [] { DataDirState d = with_data({1, 2, 3}); d.recorded_conf = true; return d; }(),
               GateFlags{3, {3, 4, 5}}, {}, StartVerdict::kVote});
  // --- an empty node and what the members say ---
  r.push_back({"case 7: founding member started late, every voter never heard from it: joins as a voter",
               empty_disk(), kNode3,
               Answers{{1, voter_answer(HeardReceiver::kNever)}, {2, voter_answer(HeardReceiver::kNever)}},
               StartVerdict::kJoinVoter});
  r.push_back({"case 8: first started with a wrong secret (never heard from), fixed: joins as a voter",
               empty_disk(), kNode3,
               Answers{{1, voter_answer(HeardReceiver::kNever)}, {2, voter_answer(HeardReceiver::kNever)}},
               StartVerdict::kJoinVoter});
  r.push_back({"formation: the init leader and a waiting founder confirm: joins as a voter", empty_disk(),
               kNode3, Answers{{1, init_answer()}, {2, waiting_answer()}}, StartVerdict::kJoinVoter});
  r.push_back({"formation, 5 nodes: founders started late together take each other's word", empty_disk(),
               GateFlags{5, {1, 2, 3, 4, 5}},
               Answers{{1, init_answer({1, 2, 3, 4, 5})}, {2, waiting_answer()}, {3, waiting_answer()},
                       {4, waiting_answer()}},
               StartVerdict::kJoinVoter});
  r.push_back({"two founders late after three formed and ran: nobody heard from either: joins", empty_disk(),
               GateFlags{5, {1, 2, 3, 4, 5}},
               Answers{{1, voter_answer(HeardReceiver::kNever, {1, 2, 3, 4, 5}, std::vector<raft::NodeId>{1, 2, 3})},
                       {2, voter_answer(HeardReceiver::kNever, {1, 2, 3, 4, 5}, std::vector<raft::NodeId>{1, 3})},
                       {3, voter_answer(HeardReceiver::kNever, {1, 2, 3, 4, 5}, std::vector<raft::NodeId>{1, 2})},
                       {4, waiting_answer()}},
               StartVerdict::kJoinVoter});
  r.push_back({"an empty voter a member heard from: its \"never\" is no confirmation (it lost its record)",
               empty_disk(), kNode3, Answers{{1, voter_answer(HeardReceiver::kNever)}, {2, waiting_answer()}},
               StartVerdict::kWait, "still to answer: 2; node 2 has an empty data dir but a member heard from it"});
  r.push_back({"one member of several heard from the empty voter: it does not count", empty_disk(),
               GateFlags{5, {1, 2, 3, 4, 5}},
               Answers{{1, voter_answer(HeardReceiver::kNever, {1, 2, 3, 4, 5}, std::vector<raft::NodeId>{})},
                       {2, voter_answer(HeardReceiver::kNever, {1, 2, 3, 4, 5}, std::vector<raft::NodeId>{4})},
                       {3, waiting_answer()},
                       {4, waiting_answer()}},
               StartVerdict::kWait, "still to answer: 4;"});
  r.push_back({"an older member (tag 15 absent) may have heard from the empty voter: no confirmation",
               empty_disk(), kNode3,
               Answers{{1, voter_answer(HeardReceiver::kNever, {1, 2, 3}, std::nullopt)}, {2, waiting_answer()}},
               StartVerdict::kWait, "still to answer: 2"});
  r.push_back({"every voter answers with its data: joins as a voter", empty_disk(), GateFlags{5, {1, 2, 3, 4, 5}},
               Answers{{1, voter_answer(HeardReceiver::kNever, {1, 2, 3, 4, 5})},
                       {2, voter_answer(HeardReceiver::kNever, {1, 2, 3, 4, 5})},
                       {3, voter_answer(HeardReceiver::kNever, {1, 2, 3, 4, 5})},
                       {4, voter_answer(HeardReceiver::kNever, {1, 2, 3, 4, 5})}},
               StartVerdict::kJoinVoter});
  r.push_back({"a voter is down: waits for its confirmation", empty_disk(), kNode3,
               Answers{{1, voter_answer(HeardReceiver::kNever)}}, StartVerdict::kWait, "still to answer: 2"});
  r.push_back({"case 1 (peers reach it): a voter heard from before: refused", empty_disk(), kNode1Alone,
               Answers{{2, voter_answer(HeardReceiver::kHeard)}}, StartVerdict::kRefuse, "heard from it"});
  r.push_back({"wiped voter: one member heard from it, the other did not: refused", empty_disk(), kNode3,
               Answers{{1, voter_answer(HeardReceiver::kHeard)}, {2, voter_answer(HeardReceiver::kNever)}},
               StartVerdict::kRefuse, "lost the votes"});
  r.push_back({"an older member that does not say (tag 12 absent) is no confirmation", empty_disk(), kNode3,
               Answers{{1, voter_answer(HeardReceiver::kUnknown)}, {2, voter_answer(HeardReceiver::kNever)}},
               StartVerdict::kWait});
  r.push_back({"case 2: wiped member re-seeded from a stale --restore-from: staged, and refused like any",
               [] { DataDirState d; d.staged_restore = true; d.restored = true; d.snapshot = true; d.log = true;
                    return d; }(),
               kNode3, Answers{{1, voter_answer(HeardReceiver::kHeard)}}, StartVerdict::kRefuse});
  r.push_back({"staged restore waits for init", [] { DataDirState d; d.staged_restore = true; d.restored = true;
                                                      d.snapshot = true; d.log = true; return d; }(),
               kNode3, {}, StartVerdict::kWait});
  r.push_back({"case 3: a lagging member calls it a learner, the leader a voter it heard: refused",
               empty_disk(), kNode3,
               Answers{{2, PeerAnswer{0x1234, MemberStatus::kLearner, HeardReceiver::kNever, {1, 2}}},
                       {1, voter_answer(HeardReceiver::kHeard)}},
               StartVerdict::kRefuse});
  r.push_back({"case 3 (mutation: `existing` letting an empty node in when a peer reports it as a voter)",
               empty_disk(), kNode3,
               Answers{{2, PeerAnswer{0x1234, MemberStatus::kLearner, HeardReceiver::kNever, {1, 2}}},
                       {1, PeerAnswer{0x1234, MemberStatus::kVoter, HeardReceiver::kHeard, {1, 2, 3}}}},
               StartVerdict::kRefuse});
  r.push_back({"case 3, the learner answer first and the voter's not yet: waits (a majority must answer)",
               empty_disk(), GateFlags{4, {1, 2, 3, 4}},
               Answers{{2, PeerAnswer{0x1234, MemberStatus::kLearner, HeardReceiver::kNever, {1, 2, 3}}}},
               StartVerdict::kWait});
  r.push_back({"added as a learner, a majority of the voters answered: joins as a learner", empty_disk(),
               GateFlags{4, {1, 2, 3, 4}},
               Answers{{1, PeerAnswer{0x1234, MemberStatus::kLearner, HeardReceiver::kNever, {1, 2, 3}}},
                       {2, PeerAnswer{0x1234, MemberStatus::kNotMember, HeardReceiver::kNever, {1, 2, 3}}}},
               StartVerdict::kJoinLearner});
  r.push_back({"not added yet: waits", empty_disk(), GateFlags{4, {1, 2, 3, 4}},
               Answers{{1, PeerAnswer{0x1234, MemberStatus::kNotMember, HeardReceiver::kNever, {1, 2, 3}}}},
               StartVerdict::kWait});
  r.push_back({"removed id: refused", empty_disk(), kNode3,
               Answers{{1, PeerAnswer{0x1234, MemberStatus::kRemoved, HeardReceiver::kHeard, {1, 2}}}},
               StartVerdict::kRefuse, "removed"});
  r.push_back({"case 5: learners (cluster id 0 while catching up) count for nothing: waits",
               empty_disk(), kNode3,
               Answers{{1, voter_answer(HeardReceiver::kNever, {1, 2, 3})},
                       {4, PeerAnswer{0, MemberStatus::kUnknown, HeardReceiver::kNever, {}}}},
               StartVerdict::kWait, "still to answer: 2"});
  r.push_back({"only waiting nodes answered (nobody formed a group): waits", empty_disk(), kNode3,
               Answers{{1, waiting_answer()}, {2, waiting_answer()}}, StartVerdict::kWait});
  return r;
}

TEST(StartGate, EveryRule) {
  for (const Row& row : rows()) {
    const StartDecision d = decide_start(row.disk, row.flags, row.answers);
    EXPECT_EQ(to_string(d.verdict), to_string(row.want)) << row.name << ": " << d.reason;
    EXPECT_NE(d.reason.find(row.reason_has), std::string::npos) << row.name << ": " << d.reason;
    if (d.verdict == StartVerdict::kRefuse) {
      EXPECT_EQ(d.reason.find('\n'), std::string::npos) << row.name;
    }
  }
}

TEST(StartGate, FoundingVoterJoinsTheConfigurationTheVotersGave) {
  const StartDecision d = decide_start(
      empty_disk(), kNode3,
      Answers{{1, voter_answer(HeardReceiver::kNever)}, {2, voter_answer(HeardReceiver::kNever)}});
  ASSERT_EQ(d.verdict, StartVerdict::kJoinVoter);
  EXPECT_EQ(d.voters, (std::vector<raft::NodeId>{1, 2, 3}));
}

// The test-only mutations the simulator plants (GateMutations,
// tools/sim --lifecycle): each one changes the verdict of a row above, so
// a lifecycle run that catches it is catching that rule.
TEST(StartGate, EachMutationBreaksItsRule) {
  struct Case {
    const char* name;
    void (*plant)(GateMutations&);
    DataDirState disk;
    GateFlags flags;
    Answers answers;
    StartVerdict real;
    StartVerdict mutated;
  };
  const Answers heard_by_one{{1, voter_answer(HeardReceiver::kHeard)}, {2, voter_answer(HeardReceiver::kNever)}};
  const std::vector<Case> cases = {
      {"admit_called_voter", [](GateMutations& m) { m.admit_called_voter = true; }, empty_disk(), kNode3,
       heard_by_one, StartVerdict::kRefuse, StartVerdict::kJoinVoter},
      {"identity_is_data", [](GateMutations& m) { m.identity_is_data = true; },
       [] { DataDirState d = with_data({1, 2, 3}); d.log = false; return d; }(), kNode3, {}, StartVerdict::kRefuse,
       StartVerdict::kVote},
      {"learners_confirm", [](GateMutations& m) { m.learners_confirm = true; }, empty_disk(), kNode3,
       Answers{{2, voter_answer(HeardReceiver::kNever)}, {4, waiting_answer()}}, StartVerdict::kWait,
       StartVerdict::kJoinVoter},
      {"skip_confirmations", [](GateMutations& m) { m.skip_confirmations = true; }, empty_disk(), kNode3,
       Answers{{2, voter_answer(HeardReceiver::kNever)}}, StartVerdict::kWait, StartVerdict::kJoinVoter},
      {"peer_count_only", [](GateMutations& m) { m.peer_count_only = true; }, with_data({1, 2, 3}),
       GateFlags{3, {3, 4, 5}}, {}, StartVerdict::kRefuse, StartVerdict::kVote},
      {"restore_votes", [](GateMutations& m) { m.restore_votes = true; },
       [] { DataDirState d; d.staged_restore = true; d.restored = true; d.snapshot = true; d.log = true;
            return d; }(),
       kNode3, {}, StartVerdict::kWait, StartVerdict::kVote},
      {"empty_confirms", [](GateMutations& m) { m.empty_confirms = true; }, empty_disk(), kNode3,
       Answers{{1, voter_answer(HeardReceiver::kNever)}, {2, waiting_answer()}}, StartVerdict::kWait,
       StartVerdict::kJoinVoter},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(to_string(decide_start(c.disk, c.flags, c.answers).verdict), to_string(c.real)) << c.name;
    GateFlags f = c.flags;
    c.plant(f.mutations);
    EXPECT_EQ(to_string(decide_start(c.disk, f, c.answers).verdict), to_string(c.mutated)) << c.name;
  }
}

// Cluster init (decide_init): forms only once every --peer member has
// answered and none belongs to a formed group (a wiped member asked to
// init before its members' answers arrive must not form a second group).
TEST(StartGate, InitFormsOnlyOnceEveryPeerAnsweredAndNoneIsFormed) {
  const GateFlags five{1, {1, 2, 3, 4, 5}};
  const auto verdict = [&](const Answers& a, const GateFlags& f) { return decide_init(f, a).verdict; };
  EXPECT_EQ(verdict({}, five), InitVerdict::kWait);
  const Answers majority{{2, waiting_answer()}, {3, waiting_answer()}};
  EXPECT_EQ(verdict(majority, five), InitVerdict::kWait) << "a majority's word is not enough";
  EXPECT_NE(decide_init(five, majority).reason.find("no answer yet from 4,5"), std::string::npos)
      << decide_init(five, majority).reason;
  const Answers all{{2, waiting_answer()}, {3, waiting_answer()}, {4, waiting_answer()}, {5, waiting_answer()}};
  EXPECT_EQ(verdict(all, five), InitVerdict::kForm);
  Answers one_formed = all;
  one_formed[4] = voter_answer(HeardReceiver::kHeard, {1, 2, 3, 4, 5});
  EXPECT_EQ(verdict(one_formed, five), InitVerdict::kAlreadyFormed);
  EXPECT_EQ(verdict(Answers{{4, voter_answer(HeardReceiver::kHeard, {1, 2, 3, 4, 5})}}, five),
            InitVerdict::kAlreadyFormed)
      << "one formed member is enough to refuse, whoever else has not answered";
  EXPECT_EQ(verdict(Answers{{7, voter_answer(HeardReceiver::kHeard, {1, 6, 7})}}, five), InitVerdict::kAlreadyFormed)
      << "an authenticated stranger's word counts too (a group grown past the unit file)";
  EXPECT_EQ(verdict(Answers{{2, PeerAnswer{0x1234, MemberStatus::kRemoved, HeardReceiver::kHeard, {}}}}, five),
            InitVerdict::kAlreadyFormed);
  EXPECT_EQ(verdict({}, GateFlags{1, {1}}), InitVerdict::kForm) << "a one-node start answers for itself";
  GateFlags alone{1, {1}};
  alone.alone_grace_over = false;
  EXPECT_EQ(verdict({}, alone), InitVerdict::kWait) << "members that list it may still speak up";
  EXPECT_EQ(verdict(Answers{{2, voter_answer(HeardReceiver::kHeard, {1, 2, 3})}}, alone),
            InitVerdict::kAlreadyFormed)
      << "a grown group's first member, wiped, its unit never updated (case 1)";
  GateFlags at_once = five;
  at_once.mutations.init_at_once = true;
  EXPECT_EQ(verdict(majority, at_once), InitVerdict::kForm) << "the planted bug";
}

// Found by lockd-sim --lifecycle (soak seed 1001077 at 5 nodes:
// `lockd-sim --nodes 5 --seeds 1 --steps 5000 --seed 1001077 --lifecycle`).
// Node 5 voted and acknowledged only to leader 3; both lose their data
// dirs (two of five). Node 3, restarted empty, answers node 5 "never heard"
// with no configuration, like a founder that never started; before tag 15
// that counted as its confirmation and node 5 joined as a voter with an
// empty log (rule 2 broken; committed entries then lived on one node of
// the three). Now the members with data say they heard from node 3 (it
// led them), so its word counts for nothing and node 5 waits (mutation
// empty_confirms above).
TEST(StartGate, AWipedVotersNeverIsNoConfirmationWhenAMemberHeardFromIt) {
  const StartDecision d = decide_start(
      empty_disk(), GateFlags{5, {1, 2, 3, 4, 5}},
      Answers{{1, voter_answer(HeardReceiver::kNever, {1, 2, 3, 4, 5})},
              {2, voter_answer(HeardReceiver::kNever, {1, 2, 3, 4, 5})},
              {3, waiting_answer()},  // node 3, wiped: it heard from node 5 before
              {4, voter_answer(HeardReceiver::kNever, {1, 2, 3, 4, 5})}});
  EXPECT_EQ(to_string(d.verdict), to_string(StartVerdict::kWait)) << d.reason;
  EXPECT_NE(d.reason.find("still to answer: 3"), std::string::npos) << d.reason;
  // Everyone is asked again later: node 3 may be let in (it answers with
  // its data) or removed (the others' configurations say so).
  EXPECT_EQ(d.ask_again, (std::vector<raft::NodeId>{1, 2, 3, 4}));
}

}  // namespace
}  // namespace lockd::cluster
