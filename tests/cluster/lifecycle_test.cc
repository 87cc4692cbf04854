// A node's lifecycle (protocol.md §10 v1.3, issue 37) with real processes:
// a group is formed only by POST /v1/cluster/init, once; a founding member
// started late joins under its id; a wiped or partly deleted member never
// votes again under its id.
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <atomic>
#include <future>
#include <mutex>
#include <thread>
#include <string>
#include <vector>

#include "eventually.h"
#include "lockd/raft/types.h"
#include "lockd/storage/file_storage.h"
#include "temp_dir.h"
#include "http_get.h"
#include "lockd_cluster.h"
#include "lockd_process.h"
#include "run_program.h"

namespace lockd::testing {
namespace {

using namespace std::chrono_literals;

HttpReply post(std::uint16_t port, const std::string& target, const std::string& body) {
  return http_raw(port, "POST " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                        "Content-Type: application/json\r\nContent-Length: " +
                            std::to_string(body.size()) + "\r\n\r\n" + body);
}

std::vector<std::string> lockctl(std::uint16_t admin_port, std::vector<std::string> args) {
  std::vector<std::string> argv{LOCKCTL_BINARY, "--admin", "127.0.0.1:" + std::to_string(admin_port)};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

// Adds node `id` as a learner through node `via`'s admin API and starts
// it with --peer `peers` (it waits until a member lets it in).
void add_learner(LockdCluster& c, int via, int id, std::vector<int> peers) {
  const std::string body = "{\"id\":" + std::to_string(id) + ",\"client_addr\":\"" + c.client_addr(id) +
                           "\",\"raft_addr\":\"" + c.raft_addr(id) + "\"}";
  ASSERT_EQ(post(c.admin_port(via), "/v1/cluster/members", body).status, 200);
  c.set_peers(id, std::move(peers));
  c.start(id);
}

// Promotes learner `id` through node `via` once it has caught up.
void promote(LockdCluster& c, int via, int id) {
  ASSERT_TRUE(eventually([&] {
    return post(c.admin_port(via), "/v1/cluster/members/" + std::to_string(id) + "/promote", "").status == 200;
  }, 20000ms, 100ms));
}

// Case 1's group: formed by node 1 alone (its --peer lists only itself),
// grown to the voters {1, 2, 3}; alice holds `held`.
void grow_from_one_node(LockdCluster& c) {
  ASSERT_EQ(c.wait_leader(), 1);
  for (int id : {2, 3}) {
    ASSERT_NO_FATAL_FAILURE(add_learner(c, 1, id, {1, 2, 3}));
    ASSERT_NO_FATAL_FAILURE(promote(c, 1, id));
  }
  ASSERT_EQ(call_leader(c, "A alice held 600000").rfind("A ", 0), 0u);
}

// Rule 1: nodes started with `new` (or nothing) form nothing; init on one
// forms the group (200, the member table from lockctl), once (409).
TEST(Lifecycle, InitFormsTheGroupOnceAndNothingElseDoes) {
  LockdCluster c(3, {"--initial-cluster-state", "new"}, {}, 0, /*init=*/false);
  EXPECT_EQ(c.wait_leader(2000ms), 0) << "a group formed without cluster init";
  EXPECT_NE(c.process(1).stderr_text().find("lockctl cluster init"), std::string::npos)
      << c.process(1).stderr_text();
  const RunResult formed = run_program(lockctl(c.admin_port(2), {"cluster", "init"}));
  EXPECT_EQ(formed.status, 0) << formed.err;
  EXPECT_NE(formed.out.find("leader"), std::string::npos) << formed.out;
  EXPECT_EQ(c.wait_leader(), 2) << "the node asked is the first leader";
  EXPECT_EQ(call_leader(c, "A alice k 60000").rfind("A ", 0), 0u);
  // Once: on the leader, on a follower.
  const HttpReply again = post(c.admin_port(1), "/v1/cluster/init", "{}");
  EXPECT_EQ(again.status, 409) << again.body;
  EXPECT_NE(again.body.find("\"error\":\"already_formed\""), std::string::npos) << again.body;
  const RunResult twice = run_program(lockctl(c.admin_port(3), {"cluster", "init"}));
  EXPECT_EQ(twice.status, 1) << twice.out << twice.err;
  EXPECT_NE(twice.err.find("already_formed"), std::string::npos) << twice.err;
  const RunResult nobody = run_program(lockctl(free_port(), {"cluster", "init"}));
  EXPECT_EQ(nobody.status, 3) << nobody.err;
  // A restart of every node forms nothing new: the same group, its lock.
  for (int i = 1; i <= 3; ++i) c.kill9(i);
  for (int i = 1; i <= 3; ++i) c.start(i);
  EXPECT_EQ(call_leader(c, "A bob k 1000"), "T bob k");
}

// Init answers once every founder has joined, so the first leader may die
// the moment it answers: the other two still form a quorum. (Before, init
// answered once a majority committed; the third founder, still at its
// start gate, could need the dead leader's fresh word to join — no leader
// until it came back.) Init is asked before node 3 is up, so the group
// forms the moment node 3 first answers, as when a script starts every
// node and inits at once (the shape that lost the race most). Three
// groups: it had to be lost only once.
TEST(Lifecycle, InitAnswersOnceEveryFounderJoinedSoTheFirstLeaderMayDieAtOnce) {
  for (int round = 0; round < 3; ++round) {
    LockdCluster c(3, {}, {}, 0, /*init=*/false);
    c.kill9(3);  // still empty: it waited, voting for nothing
    auto init = std::async(std::launch::async, [&] { return c.init_group(1); });
    ASSERT_TRUE(c.process(1).wait_for_line("no answer yet from 3", 10s)) << c.process(1).stderr_text();
    c.start(3);
    const HttpReply formed = init.get();
    ASSERT_EQ(formed.status, 200) << formed.body;
    c.kill9(1);
    ASSERT_NE(c.wait_leader(20000ms), 0) << "round " << round << ": no leader among nodes 2 and 3";
    EXPECT_EQ(call_leader(c, "A alice k 60000").rfind("A ", 0), 0u) << "round " << round;
  }
}

// ...and a founder that answered, then cannot join (paused here), holds
// init up 10 s after the group formed, not to the request's deadline
// (30 s, a 504): 200 and one warning naming it; it joins once it runs.
TEST(Lifecycle, InitAnswersWithinItsGraceWhenAFounderDoesNotJoin) {
  LockdCluster c(3, {}, {}, 0, /*init=*/false);
  ASSERT_TRUE(c.process(1).wait_for_line("peer transport: connected to node 3", 10s))
      << c.process(1).stderr_text();  // node 1 asked it: it has its answer
  c.signal(3, SIGSTOP);
  const auto start = std::chrono::steady_clock::now();
  const HttpReply formed = c.init_group(1);
  const auto took = std::chrono::steady_clock::now() - start;
  c.signal(3, SIGCONT);
  ASSERT_EQ(formed.status, 200) << formed.body;
  EXPECT_GE(took, 9s);   // held for node 3
  EXPECT_LT(took, 25s);  // not to the deadline
  EXPECT_TRUE(c.process(1).wait_for_line("founder(s) 3 did not join within", 5s)) << c.process(1).stderr_text();
  EXPECT_TRUE(eventually([&] {
    return c.status_json(3).find("\"leader\":\"") != std::string::npos &&
           c.status_number(3, "applied_index") >= c.status_number(1, "commit_index");
  }, 20s)) << c.process(3).stderr_text();
}

// Init asked of a wiped member before the others answered it (a deploy
// script that runs `lockctl cluster init` on every node, every time): it
// must not form a second group under the same ids. Nodes 2 and 3 are
// paused, so node 1's hellos get no answer: init waits for every --peer
// member, then their word ("formed, heard from you") gets 409
// already_formed (or the node is already gone), and node 1 is refused.
TEST(Lifecycle, InitWaitsForEveryMemberBeforeFormingSoAWipedMemberNeverFormsAgain) {
  LockdCluster c(3);
  ASSERT_EQ(call_leader(c, "A alice held 600000").rfind("A ", 0), 0u);
  c.kill9(1);
  c.wipe(1);
  c.signal(2, SIGSTOP);
  c.signal(3, SIGSTOP);
  c.start(1);
  auto init = std::async(std::launch::async, [&] { return post(c.admin_port(1), "/v1/cluster/init", "{}"); });
  EXPECT_TRUE(c.process(1).wait_for_line("cluster init: waiting to hear from every --peer member", 10s))
      << c.process(1).stderr_text();
  // Asked again meanwhile (a script that gave up on the first request):
  // it waits with the first and gets the same answer, not "in progress".
  auto again = std::async(std::launch::async, [&] { return post(c.admin_port(1), "/v1/cluster/init", "{}"); });
  EXPECT_TRUE(eventually([&] {
    return node_metric(c, 1, "lockd_admin_connections") >= 3;  // both inits and this scrape
  }, 5s)) << "second init not seen";
  c.signal(2, SIGCONT);
  c.signal(3, SIGCONT);
  for (auto* f : {&init, &again}) {
    const HttpReply r = f->get();
    EXPECT_TRUE(r.status == 409 || r.status == 0) << r.status << " " << r.body;
    if (r.status == 409) {
      EXPECT_NE(r.body.find("already_formed"), std::string::npos) << r.body;
    }
  }
  EXPECT_EQ(c.process(1).wait_exit(20000ms), 2) << c.process(1).stderr_text();
  EXPECT_EQ(c.process(1).stderr_text().find("forming the group"), std::string::npos)
      << c.process(1).stderr_text();
  EXPECT_EQ(call_leader(c, "A bob held 1000", /*except=*/1), "T bob held");
}

// Case 7: nodes 1 and 2 start, init is asked of node 1, node 3 starts late
// (an empty data dir, the unit's flags): init waits for node 3's word (a
// formed group must never be formed again), then the group forms and node
// 3 joins under its own id with no operator action.
TEST(Lifecycle, FoundingMemberStartedLateJoinsUnderItsId) {
  LockdCluster c(3, {}, {}, 0, /*init=*/false);
  c.kill9(3);
  c.wipe(3);
  // Node 1 restarted after node 3 went down holds no answer of node 3's
  // (one from before the kill would still be true: node 3 formed nothing).
  c.kill9(1);
  c.wipe(1);
  c.start(1);
  auto init = std::async(std::launch::async, [&] { return c.init_group(1, 60000ms); });
  EXPECT_TRUE(c.process(1).wait_for_line("no answer yet from 3", 10s)) << c.process(1).stderr_text();
  c.start(3);
  const HttpReply r = init.get();
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_TRUE(c.process(3).wait_for_line("founding voter", 10s)) << c.process(3).stderr_text();
  EXPECT_EQ(call_leader(c, "A alice k 60000").rfind("A ", 0), 0u);
  // It votes: with node 2 down, {1, 3} is a majority that grants.
  c.kill9(2);
  EXPECT_EQ(call_leader(c, "A carol other 60000").rfind("A ", 0), 0u);
}

// Case 8: node 3 first starts with a wrong peer secret (every handshake
// refused: it never joins, nobody hears from it); init on node 1 waits for
// its word. The secret is fixed and node 3 restarted with its unit's
// flags: the group forms and node 3 joins under its own id, no operator
// action beyond the fix.
TEST(Lifecycle, FounderFirstStartedWithAWrongSecretJoinsOnceItIsFixed) {
  LockdCluster c(3, {}, {}, 0, /*init=*/false);
  c.kill9(3);
  c.wipe(3);
  c.kill9(1);
  c.wipe(1);
  c.start(1);  // holds no answer of node 3's from before
  const TempDir tmp("lockd-wrong-secret");
  const std::string wrong = tmp.sub("secret");
  {
    std::ofstream out(wrong);
    out << "fedcba9876543210fedcba9876543210-another-secret\n";
  }
  std::filesystem::permissions(wrong, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  ChildProcess bad;
  std::vector<std::string> argv{lockd_binary(), "--mode", "cluster", "--node-id", "3",
                                "--data-dir", c.data_dir(3), "--admin", "off",
                                "--election-timeout-ms", "150", "--heartbeat-ms", "30",
                                "--peer-secret-file", wrong};
  for (int i = 1; i <= 3; ++i) {
    argv.push_back("--peer");
    argv.push_back(std::to_string(i) + "=" + c.client_addr(i) + "/" + c.raft_addr(i));
  }
  ASSERT_TRUE(bad.start(argv));
  ASSERT_TRUE(bad.wait_for_line("listening on", 10s)) << bad.stderr_text();
  auto init = std::async(std::launch::async, [&] { return c.init_group(1, 60000ms); });
  EXPECT_TRUE(c.process(1).wait_for_line("no answer yet from 3", 10s)) << c.process(1).stderr_text();
  EXPECT_TRUE(bad.wait_for_line("did not prove it knows the peer secret", 10s)) << bad.stderr_text();
  bad.signal(SIGKILL);
  bad.wait_exit(5000ms);
  c.start(3);  // the unit's flags, the right secret, the same (empty) data dir
  const HttpReply r = init.get();
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_TRUE(c.process(3).wait_for_line("founding voter", 20s)) << c.process(3).stderr_text();
  EXPECT_EQ(call_leader(c, "A alice k 60000").rfind("A ", 0), 0u);
  c.kill9(2);  // node 3 votes: {1, 3} is a majority that grants
  EXPECT_EQ(call_leader(c, "A carol other 60000").rfind("A ", 0), 0u);
}

// Two of five lose their disks, and one of them was the only member that
// heard from the other (issue 37, found by lockd-sim --lifecycle, seed
// 1001077): node 1 led from cluster init, node 2 only ever answered it.
// Both are wiped. Node 1 comes back with stale flags (--peer 1,2: with
// --insecure-peers the others' hellos are "not a member", so it waits
// for ever instead of being refused) and answers node 2 "never heard"
// like a founder that never started. Nodes 3-5 heard from node 1, so its
// word is no confirmation: node 2 waits (before handshake tag 15 it joined
// as a voter with an empty log). Once node 1 is removed — committed on
// 3, 4 and 5, which then all hold every committed entry — node 2 joins
// under its id, and with node 3 down, {2, 4, 5} still knows alice holds.
TEST(Lifecycle, AWipedMembersWordIsNoConfirmationWhenOthersHeardFromIt) {
  LockdCluster c(5, {"--insecure-peers"});
  ASSERT_EQ(c.wait_leader(), 1);
  ASSERT_EQ(call_leader(c, "A alice held 600000").rfind("A ", 0), 0u);
  c.kill9(1);
  c.kill9(2);
  c.wipe(1);
  c.wipe(2);
  c.set_peers(1, {1, 2});
  c.start(1);
  c.start(2);
  EXPECT_TRUE(c.process(2).wait_for_line("node 1 has an empty data dir but a member heard from it", 20s))
      << c.process(2).stderr_text();
  EXPECT_EQ(c.process(2).stderr_text().find("founding voter"), std::string::npos) << c.process(2).stderr_text();
  EXPECT_EQ(call_leader(c, "A bob held 1000", /*except=*/1), "T bob held");
  // While it waits, node 2 asks the members again now and then with a new
  // handshake (a link closed and redialled at once): no warnings about it
  // on either side (it once said "lost the link" three times a second).
  EXPECT_FALSE(c.process(3).wait_for_line("lost the link to node 2", 5s)) << c.process(3).stderr_text();
  EXPECT_EQ(c.process(2).stderr_now().find("lost the link to node 3"), std::string::npos)
      << c.process(2).stderr_text();
  // The way back for node 1: remove it. Node 2 is then confirmed by 3-5.
  c.kill9(1);
  const int leader = c.wait_leader(20000ms);
  ASSERT_GE(leader, 3);
  ASSERT_TRUE(eventually([&] {
    return run_program(lockctl(c.admin_port(leader), {"member", "remove", "1"})).status == 0;
  }, 20000ms, 200ms));
  EXPECT_TRUE(c.process(2).wait_for_line("founding voter", 20s)) << c.process(2).stderr_text();
  c.kill9(3);
  EXPECT_EQ(call_leader(c, "A bob held 1000", /*except=*/3), "T bob held");
}

// HEARD lost (or a data dir from before v1.3): the node assumes it heard
// from every member — of the configuration its log records too, not only
// of its --peer list. Node 4 was added and promoted (no unit file but its
// own names it); the leader, the only member that heard from it, loses
// just HEARD and restarts; node 4 loses its disk: the leader must still
// say "heard from it", so node 4 is refused, never a voter with an empty log.
TEST(Lifecycle, ALostHeardRecordCoversMembersAddedSinceTheUnitFile) {
  LockdCluster c(4, {}, {}, /*formed=*/3);
  const int leader = c.wait_leader();
  ASSERT_NE(leader, 0);
  ASSERT_NO_FATAL_FAILURE(add_learner(c, leader, 4, {1, 2, 3, 4}));
  ASSERT_NO_FATAL_FAILURE(promote(c, leader, 4));
  ASSERT_EQ(call_leader(c, "A alice held 600000").rfind("A ", 0), 0u);
  c.kill9(4);
  c.wipe(4);
  c.kill9(leader);
  ASSERT_TRUE(std::filesystem::remove(c.data_dir(leader) + "/HEARD"));
  c.start(leader);
  try {
    c.start(4);
  } catch (const std::runtime_error&) {
    // It may refuse itself before it answers as started.
  }
  EXPECT_EQ(c.process(4).wait_exit(20000ms), 2) << c.process(4).stderr_text();
  EXPECT_NE(c.process(4).stderr_text().find("heard from it before"), std::string::npos)
      << c.process(4).stderr_text();
  EXPECT_EQ(call_leader(c, "A bob held 1000", /*except=*/4), "T bob held");
}

// Case 2: --restore-from left in a member's unit after a restore. The
// restored group runs and grants; node 2's disk is lost and its unit
// restarts it with the same flags: it re-seeds itself from the file
// (staged, waiting) and the members, which heard from it, refuse it
// (exit 2) — it never votes with the group's id and forgotten votes.
TEST(Lifecycle, AWipedMemberReseededByAStaleRestoreFlagIsRefused) {
  const TempDir tmp("lockd-stale-restore");
  const std::string file = tmp.sub("group.snap");
  LockdCluster c(3);
  int leader = c.wait_leader();
  ASSERT_NE(leader, 0);
  ASSERT_EQ(call_leader(c, "A alice before 600000").rfind("A ", 0), 0u);
  const RunResult saved = run_program(lockctl(c.admin_port(leader), {"snapshot", "save", file}));
  ASSERT_EQ(saved.status, 0) << saved.err;
  for (int i = 1; i <= 3; ++i) c.kill9(i);
  for (int i = 1; i <= 3; ++i) {
    c.wipe(i);
    c.set_node_flags(i, {"--restore-from", file});
    c.start(i);
  }
  ASSERT_EQ(c.init_group(1).status, 200);
  ASSERT_EQ(c.wait_leader(), 1);
  ASSERT_EQ(call_leader(c, "A bob held 600000").rfind("A ", 0), 0u);
  // Every founder has joined before node 3 goes: a founder still waiting
  // may need node 3's word again (docs/cluster.md "The start gate").
  for (int id : {2, 3}) {
    ASSERT_TRUE(c.process(id).wait_for_line("founding voter", 20s)) << c.process(id).stderr_text();
  }
  // Node 3 takes part (holds entries after the restored snapshot) before it
  // goes: a founder killed before it took part waits at its restart for
  // every voter's word, and node 2's is lost below.
  const std::uint64_t granted = c.status_number(1, "commit_index");
  ASSERT_TRUE(eventually([&] { return c.status_number(3, "applied_index") >= granted; }))
      << c.status_json(3);
  // Node 2 takes part for sure: with node 3 down, a grant needs its ack.
  c.kill9(3);
  ASSERT_EQ(call_leader(c, "A dave acked 600000").rfind("A ", 0), 0u);
  c.start(3);
  c.kill9(2);
  c.wipe(2);
  try {
    c.start(2);  // the same flags: --restore-from is still there
  } catch (const std::runtime_error&) {
    // It may refuse itself before it answers as started.
  }
  EXPECT_EQ(c.process(2).wait_exit(20000ms), 2) << c.process(2).stderr_text();
  EXPECT_NE(c.process(2).stderr_text().find("heard from it before"), std::string::npos)
      << c.process(2).stderr_text();
  EXPECT_EQ(call_leader(c, "A carol held 1000", /*except=*/2), "T carol held")
      << "node 1:\n" << c.process(1).stderr_now() << "node 3:\n" << c.process(3).stderr_now();
  EXPECT_EQ(call_leader(c, "A carol before 1000", /*except=*/2), "T carol before");
}

// Case 1: the group grew from one node (its --peer lists only itself);
// node 1's disk is lost and its unit restarts it with the same flags. The
// members it no longer lists tell it (authenticated) it is a voter they
// heard from: it refuses itself (exit 2, rule 2's line); the others hold on.
TEST(Lifecycle, GrownFromOneNodeWipedIsRefused) {
  LockdCluster c(3, {}, {}, /*formed=*/1);
  ASSERT_NO_FATAL_FAILURE(grow_from_one_node(c));
  c.kill9(1);
  c.wipe(1);
  // Its --peer still names only itself: the members' authenticated hellos
  // (the cluster has a peer secret) tell it it is a voter they heard from.
  try {
    c.start(1);
  } catch (const std::runtime_error&) {
    // It may refuse itself before it answers as started.
  }
  EXPECT_EQ(c.process(1).wait_exit(20000ms), 2) << c.process(1).stderr_text();
  const std::string err = c.process(1).stderr_text();
  EXPECT_NE(err.find("heard from it before, but its data dir is empty"), std::string::npos) << err;
  EXPECT_NE(err.find("lockctl member remove 1"), std::string::npos) << err;
  // Nodes 2 and 3 are a majority of {1, 2, 3}: they go on, alice holds.
  EXPECT_EQ(call_leader(c, "A bob held 1000", /*except=*/1), "T bob held");
}

// Case 1 with --insecure-peers (rule 4): an unauthenticated hello from an
// id outside its --peer list is refused as "not a member", never believed:
// the wiped node keeps waiting and never grants.
TEST(Lifecycle, GrownFromOneNodeWipedWithInsecurePeersKeepsWaiting) {
  LockdCluster c(3, {"--insecure-peers"}, {}, /*formed=*/1);
  ASSERT_NO_FATAL_FAILURE(grow_from_one_node(c));
  c.kill9(1);
  c.wipe(1);
  c.start(1);
  // The members dial it and are refused: heard, not believed.
  EXPECT_TRUE(c.process(1).wait_for_line("is not a member", 10000ms)) << c.process(1).stderr_text();
  EXPECT_EQ(call_leader(c, "A bob held 1000", /*except=*/1), "T bob held");
  const std::string reply = call_once(c.client_port(1), "A bob held 1000");
  EXPECT_EQ(reply.rfind("A ", 0), std::string::npos) << reply;
  // Still waiting (no exit), not refused on an unauthenticated word.
  EXPECT_FALSE(c.process(1).wait_exit(1000ms).has_value()) << c.process(1).stderr_text();
  EXPECT_EQ(c.process(1).stderr_text().find("heard from it before"), std::string::npos);
}

// Case 3: `existing` must not let a wiped voter in because a lagging
// member, answering first, still calls it a learner. Node 4 was added as a
// learner and promoted while node X was down (X's log: 4 is a learner);
// node 4's disk is lost. X alone is up when node 4 restarts: node 4 waits
// for a majority of the voters; then the others answer "voter, heard
// from": refused with rule 2's line (exit 2), never admitted as a learner.
TEST(Lifecycle, WipedVoterIsNotAdmittedWhenALaggingMemberCallsItALearnerFirst) {
  LockdCluster c(4, {}, {}, /*formed=*/3);
  const int leader = c.wait_leader();
  ASSERT_NE(leader, 0);
  const int lagging = leader == 3 ? 2 : 3;
  const int other = 6 - leader - lagging;
  ASSERT_NO_FATAL_FAILURE(add_learner(c, leader, 4, {1, 2, 3, 4}));
  ASSERT_TRUE(eventually([&] { return node_metric(c, lagging, "lockd_raft_learners") == 1; }));
  c.kill9(lagging);
  ASSERT_NO_FATAL_FAILURE(promote(c, leader, 4));
  ASSERT_EQ(call_leader(c, "A alice held 600000").rfind("A ", 0), 0u);
  for (int id : {4, leader, other}) c.kill9(id);
  c.wipe(4);
  c.start(lagging);
  c.set_node_flags(4, {"--initial-cluster-state", "existing"});
  c.start(4);
  EXPECT_TRUE(c.process(4).wait_for_line("is called a learner: waiting for a majority", 10000ms))
      << c.process(4).stderr_text();
  c.start(leader);
  try {
    c.start(other);
  } catch (const std::runtime_error&) {
    // Not expected; the exit code below says what happened to node 4.
  }
  EXPECT_EQ(c.process(4).wait_exit(20000ms), 2) << c.process(4).stderr_text();
  const std::string err = c.process(4).stderr_text();
  EXPECT_NE(err.find("node 4 is a voter of the group and node"), std::string::npos) << err;
  EXPECT_EQ(err.find("was added as a learner: joining the group"), std::string::npos) << err;
  // The voters {1, 2, 3} (a majority of the four) go on; alice holds.
  EXPECT_EQ(call_leader(c, "A bob held 1000", /*except=*/4), "T bob held");
}

// Entry versions (protocol.md §10): a stored entry this binary cannot
// apply — here a membership change in an encoding it does not know —
// stops the node at start with one line naming the entry, never an abort.
TEST(Lifecycle, UndecodableMembershipEntryStopsWithOneLine) {
  TempDir dir("lockd-undecodable");
  {
    storage::FileStorageOptions o{dir.path()};
    o.sync = false;
    storage::FileStorage st(o);
    ASSERT_TRUE(st.open().ok());
    std::vector<raft::Entry> entries(2);
    entries[0] = raft::Entry{1, 1, raft::EntryType::kNoop, ""};
    entries[1] = raft::Entry{1, 2, raft::EntryType::kConfChange, std::string("\xfe\x01future", 8)};
    bool sync_pending = false;
    ASSERT_TRUE(st.write(raft::HardState{1, 1, 1}, entries, sync_pending).ok());
    if (sync_pending) {
      ASSERT_TRUE(st.synced(0).ok());
    }
  }
  ChildProcess p;
  ASSERT_TRUE(p.start({lockd_binary(), "--mode", "cluster", "--node-id", "1", "--data-dir", dir.path(),
                       "--admin", "off", "--insecure-peers", "--peer",
                       "1=127.0.0.1:1/127.0.0.1:2"}));
  const std::optional<int> code = p.wait_exit(20000ms);
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 2) << p.stderr_text();
  const std::string err = p.stderr_text();
  EXPECT_NE(err.find("log entry 2 is a membership change this binary cannot decode"),
            std::string::npos)
      << err;
}

// Case 6: a learner wiped and rejoined says in its handshake that its data
// dir is empty; the leader forgets what it had acknowledged, so an idle
// leader's promotion check does not pass on the old log.
TEST(Lifecycle, WipedLearnerIsReplicatedFromTheStart) {
  LockdCluster c(4, {}, {}, /*formed=*/3);
  const int leader = c.wait_leader();
  ASSERT_NE(leader, 0);
  ASSERT_EQ(call_leader(c, "A alice held 600000").rfind("A ", 0), 0u);
  ASSERT_NO_FATAL_FAILURE(add_learner(c, leader, 4, {1, 2, 3, 4}));
  ASSERT_TRUE(eventually([&] {
    const std::string st = c.status_json(4);
    const auto at = st.find("\"applied_index\":");
    return at != std::string::npos && std::stoull(st.substr(at + 16)) >= 3;
  })) << c.status_json(4);
  c.kill9(4);
  c.wipe(4);
  c.start(4);
  EXPECT_TRUE(c.process(leader).wait_for_line("node 4 says its data dir is empty", 10000ms))
      << c.process(leader).stderr_text();
  // It catches up again from the start, and then may be promoted.
  EXPECT_TRUE(eventually([&] {
    return post(c.admin_port(leader), "/v1/cluster/members/4/promote", "").status == 200;
  }, 20000ms, 100ms));
  EXPECT_EQ(call_leader(c, "A bob held 1000"), "T bob held");
}

// Case 4: IDENTITY says the node belongs to a formed group, but the log
// and snapshot files are gone: refused at start with one line (exit 2).
TEST(Lifecycle, PartlyDeletedDataDirIsRefused) {
  LockdCluster c(3);
  ASSERT_NE(c.wait_leader(), 0);
  ASSERT_EQ(call_leader(c, "A alice held 600000").rfind("A ", 0), 0u);
  const int victim = c.wait_leader() == 3 ? 2 : 3;
  ASSERT_TRUE(eventually([&] {
    std::ifstream in(c.data_dir(victim) + "/IDENTITY");
    const std::string line((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return line.find(" cluster ") != std::string::npos;
  }));
  c.kill9(victim);
  for (const auto& e : std::filesystem::directory_iterator(c.data_dir(victim))) {
    if (e.path().filename() != "IDENTITY") std::filesystem::remove_all(e.path());
  }
  EXPECT_THROW(c.start(victim), std::runtime_error);
  EXPECT_EQ(c.process(victim).wait_exit(10000ms), 2);
  const std::string err = c.process(victim).stderr_text();
  EXPECT_NE(err.find("partly deleted"), std::string::npos) << err;
}

// Entry versions (protocol.md §10): decided from what the voters said at
// any time (VERSIONS), not from who was heard since the leader started.
// Every node restarts with node 3 kept down: the new leader never heard
// from it since it started, and `S` (a newer entry version) still works.
TEST(Lifecycle, SharedLocksWorkWhileAVoterIsUnheardSinceTheLeaderStarted) {
  LockdCluster c(3);
  ASSERT_NE(c.wait_leader(), 0);
  ASSERT_EQ(call_leader(c, "S a sem 2 60000").rfind("S ", 0), 0u);
  // Every node has had its handshakes with every other.
  for (int i = 1; i <= 3; ++i) {
    ASSERT_TRUE(eventually([&] {
      std::ifstream in(c.data_dir(i) + "/VERSIONS");
      const std::string line((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      int members = 0;
      for (char ch : line) members += ch == '=' ? 1 : 0;
      return members == 2;
    })) << i;
  }
  // Every node holds the log so far (on a loaded machine a follower can
  // still be catching up, its data dir empty: it would wait at restart).
  const std::string s = "S c other 2 60000";
  ASSERT_EQ(call_leader(c, s).rfind("S ", 0), 0u);
  for (int i = 1; i <= 3; ++i) {
    ASSERT_TRUE(eventually([&] {
      const std::string st = c.status_json(i);
      const auto at = st.find("\"applied_index\":");
      return at != std::string::npos && std::stoull(st.substr(at + 16)) >= 3;
    })) << c.status_json(i);
  }
  for (int i = 1; i <= 3; ++i) c.kill9(i);
  c.start(1);
  c.start(2);
  const std::string reply = call_leader(c, "S b sem 2 60000");
  EXPECT_EQ(reply.rfind("S ", 0), 0u) << "a down voter switched S off: " << reply << "\n" << c.process(1).stderr_text()
                                     << c.process(2).stderr_text();
}

// --token-floor raised on a running cluster (issue 37): every node
// restarts with a floor far above the tokens granted so far, while
// clients keep asking every node. Every token granted after the restart is
// above the floor: the leader proposes the Config entry carrying it right
// after its LeaderStart, before any request (before, requests that reached
// a new leader before its LeaderStart applied were granted below it).
TEST(Lifecycle, TokensAfterARaisedTokenFloorAreAboveIt) {
  LockdCluster c(3);
  ASSERT_NE(c.wait_leader(), 0);
  const std::string first = call_leader(c, "A alice before 60000");
  ASSERT_EQ(first.rfind("A ", 0), 0u) << first;
  const std::uint64_t before = std::stoull(first.substr(2));
  const std::uint64_t floor = before + 1'000'000'000;
  for (int i = 1; i <= 3; ++i) c.kill9(i);
  for (int i = 1; i <= 3; ++i) c.set_node_flags(i, {"--token-floor", std::to_string(floor)});
  // Clients on every node from before the restart: the first requests a
  // new leader takes are the ones that could slip in before the Config.
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::vector<std::uint64_t> granted;
  std::vector<std::thread> clients;
  for (int t = 0; t < 6; ++t) {
    clients.emplace_back([&, t] {
      for (int n = 0; !stop.load(); ++n) {
        const int id = 1 + (n + t) % 3;
        const std::string r = call_once(c.client_port(id), "A w" + std::to_string(t) + " k" +
                                                              std::to_string(t) + "-" + std::to_string(n) + " 60000",
                                        200ms);
        if (r.rfind("A ", 0) == 0) {
          std::lock_guard<std::mutex> lock(mu);
          granted.push_back(std::stoull(r.substr(2)));
        }
      }
    });
  }
  for (int i = 1; i <= 3; ++i) c.start(i);
  const bool enough = eventually([&] {
    std::lock_guard<std::mutex> lock(mu);
    return granted.size() >= 50;
  });
  stop = true;
  for (std::thread& t : clients) t.join();
  ASSERT_TRUE(enough);
  for (std::uint64_t t : granted) EXPECT_GT(t, floor) << "granted at or below --token-floor";
  EXPECT_GT(std::stoull(call_leader(c, "A bob after 60000").substr(2)), floor);
}

}  // namespace
}  // namespace lockd::testing
