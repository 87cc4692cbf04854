// `W`/`U`, `V` and `X` (protocol.md §5c, v1.3) on a real 3-node cluster:
// every member serves watches from its own applied state, rev is the log
// index of the entry that made the change, X comes from the member that
// answered the grant once its Expire is applied.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "eventually.h"
#include "http_get.h"
#include "lockd_cluster.h"

namespace lockd::testing {
namespace {

using std::chrono::milliseconds;

std::uint64_t rev_of(const std::vector<std::string>& f) { return f.size() >= 4 ? std::stoull(f[2]) : 0; }

// The next push on `c`, split; fails the test unless it is `V key ...`.
std::vector<std::string> next_push(LineClient& c, const std::string& key) {
  const auto line = c.read_line(milliseconds(20'000));
  EXPECT_TRUE(line.has_value());
  const auto f = fields(line.value_or(""));
  EXPECT_TRUE(f.size() >= 4 && f[0] == "V" && f[1] == key) << line.value_or("(none)");
  return f;
}

TEST(WatchCluster, EveryMemberServesWatchesWithTheLogIndexAsRev) {
  LockdCluster c(3);
  const int leader = c.wait_leader();
  ASSERT_NE(leader, 0);
  const int follower = leader % 3 + 1;
  LineClient on_leader(c.client_port(leader)), on_follower(c.client_port(follower));
  LineClient holder(c.client_port(leader));
  // The follower may not have applied an entry yet (E no_leader): retry.
  std::vector<std::string> wf;
  ASSERT_TRUE(eventually([&] {
    wf = fields(on_follower.call("W k"));
    return wf.size() == 4;
  })) << "no W answer from the follower";
  EXPECT_EQ(wf[3], "free");
  const auto wl = fields(on_leader.call("W k"));
  ASSERT_EQ(wl.size(), 4u);
  EXPECT_GE(rev_of(wl), 1u);
  EXPECT_GE(rev_of(wf), 1u);

  // A grant: both members push it with one rev, the grant's log index.
  const auto g = fields(holder.call("A alice k 800"));
  ASSERT_EQ(g.size(), 4u);
  ASSERT_EQ(g[0], "A");
  const auto vl = next_push(on_leader, "k");
  const auto vf = next_push(on_follower, "k");
  ASSERT_EQ(vl.size(), 6u);
  EXPECT_EQ(vl[3], "held");
  EXPECT_EQ(vl[4], "alice");
  EXPECT_EQ(vl[5], g[1]);
  EXPECT_EQ(vl, vf);  // same state, same rev
  EXPECT_GT(rev_of(vl), rev_of(wl));
  EXPECT_GT(rev_of(vf), rev_of(wf));

  // The lease runs out: the leader commits Expire; the holder's connection
  // gets X (from the member that answered the grant), the watchers `free`
  // at a larger rev.
  EXPECT_EQ(holder.read_line(milliseconds(20'000)), "X " + g[1] + " k");
  const auto el = next_push(on_leader, "k");
  const auto ef = next_push(on_follower, "k");
  EXPECT_EQ(el.size(), 4u);
  EXPECT_EQ(el.back(), "free");
  EXPECT_EQ(el, ef);
  EXPECT_GT(rev_of(el), rev_of(vl));

  // U stops pushes; a release sends no X.
  EXPECT_EQ(on_follower.call("U k"), "U k");
  const auto g2 = fields(holder.call("A bob k 60000"));
  ASSERT_EQ(g2.size(), 4u);
  EXPECT_EQ(holder.call("R " + g2[1] + " k"), "R " + g2[1] + " k");
  const auto h1 = next_push(on_leader, "k");
  std::uint64_t last = rev_of(h1);
  if (h1.size() == 6) last = rev_of(next_push(on_leader, "k"));  // held then free, or only free

  // The leader stops: a watcher re-watches on a survivor and sees a rev
  // no lower than the last it saw; pushes continue there.
  c.kill9(leader);
  const int next_leader = c.wait_leader();
  ASSERT_NE(next_leader, 0);
  const int survivor = next_leader;
  LineClient again(c.client_port(survivor));
  std::vector<std::string> wa;
  ASSERT_TRUE(eventually([&] {
    wa = fields(again.call("W k"));
    return wa.size() == 4;
  }));
  EXPECT_EQ(wa[3], "free");
  EXPECT_GE(rev_of(wa), last);
  LineClient h(c.client_port(next_leader));
  std::vector<std::string> g3;
  ASSERT_TRUE(eventually([&] {
    g3 = fields(h.call("A carol k 60000"));
    return g3.size() == 4 && g3[0] == "A";
  }));
  const auto after = next_push(again, "k");
  ASSERT_EQ(after.size(), 6u);
  EXPECT_EQ(after[5], g3[1]);
  EXPECT_GT(rev_of(after), rev_of(wa));
}

TEST(WatchCluster, AWatchOnAMemberThatAppliedNothingWaitsForItsFirstEntry) {
  // Nodes 1-3 form the group; node 4 starts as a spare nobody added yet,
  // so it applies nothing (rev would be 0).
  LockdCluster c(4, {}, {}, 3);
  ASSERT_NE(c.wait_leader(), 0);
  c.set_peers(4, {1, 2, 3, 4});
  c.set_node_flags(4, {"--initial-cluster-state", "existing"});
  c.start(4);
  LineClient w(c.client_port(4));
  // One election timeout (150 ms in LockdCluster), then E no_leader.
  const auto sent = std::chrono::steady_clock::now();
  EXPECT_EQ(w.call("W k"), "E no_leader k");
  EXPECT_GE(std::chrono::steady_clock::now() - sent, milliseconds(140));
  // Held again; added to the group meanwhile, it applies entries and
  // answers the held W with the state and a rev above 0.
  w.send("W k\n");
  const std::string body = "{\"id\":4,\"client_addr\":\"" + c.client_addr(4) + "\",\"raft_addr\":\"" +
                           c.raft_addr(4) + "\"}";
  const int leader = c.wait_leader();
  const HttpReply r = http_raw(
      c.admin_port(leader),
      "POST /v1/cluster/members HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
      "Content-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body);
  EXPECT_EQ(r.status, 200) << r.body;
  // Either the held W was answered in time (its state), or it timed out
  // first and a retry gets it.
  std::vector<std::string> f = fields(w.read_line().value_or(""));
  if (f.size() == 3 && f[0] == "E") {
    ASSERT_TRUE(eventually([&] {
      f = fields(w.call("W k"));
      return f.size() == 4;
    }));
  }
  ASSERT_EQ(f.size(), 4u);
  EXPECT_EQ(f[0], "W");
  EXPECT_EQ(f[3], "free");
  EXPECT_GE(rev_of(f), 1u);
}

}  // namespace
}  // namespace lockd::testing
