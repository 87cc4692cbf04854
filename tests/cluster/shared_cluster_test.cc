// `S` (protocol.md §5b, v1.2) on a real 3-node cluster: replicated shared
// grants, E limit_mismatch, the FIFO hand-off of a run of readers through
// the log (one entry, several tokens), per-holder expiry proposed by the
// leader's heap, a leader kill that keeps every shared holder, and a
// follower that catches up through a snapshot carrying shared holders.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "eventually.h"
#include "http_get.h"
#include "lockd_cluster.h"
#include "metric.h"

namespace lockd::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;
using json = nlohmann::json;

// The token of an `S`/`A` reply with verb `verb`, or 0.
std::uint64_t token_of(const std::string& reply, const char* verb = "S") {
  const auto f = fields(reply);
  return f.size() == 4 && f[0] == verb ? std::stoull(f[1]) : 0;
}

// Waits until node `id`'s status shows `n` waiters.
bool waiters_are(LockdCluster& c, int id, int n) {
  return eventually([&] {
    return c.status_json(id).find("\"waiters\":" + std::to_string(n) + ",") != std::string::npos;
  });
}

TEST(SharedCluster, ReplicatedReadersWritersSemaphoresAcrossALeaderKill) {
  LockdCluster c(3, {"--snapshot-entries", "20"});
  const int leader = c.wait_leader();
  ASSERT_NE(leader, 0);
  const std::uint16_t port = c.client_port(leader);
  // Two permits of a semaphore, a mismatching limit, a writer and a reader
  // queued behind it in that order.
  LineClient a(port), b(port), w(port), r(port);
  const std::uint64_t ta = token_of(a.call("S a k 2 60000"));
  const std::uint64_t tb = token_of(b.call("S b k 2 60000"));
  ASSERT_NE(ta, 0u);
  ASSERT_GT(tb, ta);
  EXPECT_EQ(a.call("S x k 3"), "E limit_mismatch x k");
  EXPECT_EQ(a.call("S x k 2"), "T x k");
  w.send("A w k 60000 20000\n");
  ASSERT_TRUE(waiters_are(c, leader, 1)) << c.status_json(leader);
  r.send("S r k 2 60000 20000\n");
  ASSERT_TRUE(waiters_are(c, leader, 2)) << c.status_json(leader);
  // One permit back: the writer at the front still waits for the other.
  EXPECT_EQ(a.call("R " + std::to_string(ta) + " k"), "R " + std::to_string(ta) + " k");
  EXPECT_FALSE(w.read_line(milliseconds(300)).has_value());
  EXPECT_EQ(b.call("R " + std::to_string(tb) + " k"), "R " + std::to_string(tb) + " k");
  const std::uint64_t tw = token_of(w.read_line().value_or(""), "A");
  ASSERT_GT(tw, tb);
  EXPECT_FALSE(r.read_line(milliseconds(100)).has_value());
  EXPECT_EQ(w.call("R " + std::to_string(tw) + " k"), "R " + std::to_string(tw) + " k");
  const std::uint64_t tr = token_of(r.read_line().value_or(""));
  ASSERT_GT(tr, tw);

  // A writer's release hands a run of three readers in one entry: three
  // tokens from one index, and the next entry's token above all of them.
  const std::uint64_t th = token_of(a.call("A h run 60000"), "A");
  ASSERT_NE(th, 0u);
  LineClient q1(port), q2(port), q3(port);
  LineClient* q[3] = {&q1, &q2, &q3};
  for (int i = 0; i < 3; ++i) {
    q[i]->send("S q" + std::to_string(i) + " run 0 60000 20000\n");
    ASSERT_TRUE(waiters_are(c, leader, i + 1)) << c.status_json(leader);
  }
  EXPECT_EQ(a.call("R " + std::to_string(th) + " run"), "R " + std::to_string(th) + " run");
  std::uint64_t last = th;
  for (int i = 0; i < 3; ++i) {
    const std::uint64_t t = token_of(q[i]->read_line().value_or(""));
    ASSERT_GT(t, last) << i;
    last = t;
  }
  const std::uint64_t after = token_of(a.call("S z other 0 60000"));
  EXPECT_GT(after, last);

  // Per-holder expiry through the leader's heap: a short permit ends and
  // its waiter gets it; the long one is untouched.
  const std::uint64_t shorty = token_of(a.call("S s sem 1 300"));
  ASSERT_NE(shorty, 0u);
  LineClient sw(port);
  const std::uint64_t handed = token_of(sw.call("S sw sem 1 60000 20000"));
  EXPECT_GT(handed, shorty);

  // Enough entries for a snapshot (v2: shared holders) on every node.
  for (int i = 0; i < 25; ++i) ASSERT_EQ(call_leader(c, "R 1 filler"), "N 1 filler");

  // Kill the leader: every shared holder survives with its token.
  c.kill9(leader);
  const int next = c.wait_leader();
  ASSERT_NE(next, 0);
  ASSERT_NE(next, leader);
  EXPECT_EQ(call_leader(c, "A y run"), "T y run");                 // the readers still hold it
  const std::uint64_t t4 = token_of(call_leader(c, "S q3 run 0 60000"));  // still shared, limit 0
  EXPECT_GT(t4, after);
  EXPECT_EQ(call_leader(c, "S y sem 1"), "T y sem");  // sw's permit survived
  EXPECT_EQ(call_leader(c, "R " + std::to_string(tr) + " k"), "R " + std::to_string(tr) + " k");
  const auto view = http(c.admin_port(next), "/v1/locks/run");
  ASSERT_EQ(view.status, 200) << view.body;
  const json j = json::parse(view.body);
  EXPECT_EQ(j["mode"], "shared");
  EXPECT_EQ(j["holders"].size(), 4u);
  // The killed node comes back, catches up, and shows the same holders.
  c.start(leader);
  EXPECT_TRUE(eventually([&] {
    const auto v = http(c.admin_port(leader), "/v1/locks/run");
    return v.status == 200 && json::parse(v.body)["holders"].size() == 4u;
  })) << http(c.admin_port(leader), "/v1/locks/run").body;
}

// After a failover the new leader learns every lease from its table (the
// lease scan): every shared holder of a key, not only the oldest, must be
// watched, or the other permits never end (issue 36, "Tests missing today").
TEST(SharedCluster, EveryPermitsLeaseEndsOnTheNewLeader) {
  LockdCluster c(3);
  const int leader = c.wait_leader();
  ASSERT_NE(leader, 0);
  // Four permits of one semaphore and two readers of a read lock, each its
  // own short lease; the writer's probe below fails while any of them holds.
  std::vector<std::uint64_t> tokens;
  for (int i = 0; i < 4; ++i) {
    tokens.push_back(token_of(call_leader(c, "S p" + std::to_string(i) + " sem 4 2000")));
    ASSERT_NE(tokens.back(), 0u);
  }
  for (int i = 0; i < 2; ++i) {
    tokens.push_back(token_of(call_leader(c, "S r" + std::to_string(i) + " books 0 2500")));
    ASSERT_NE(tokens.back(), 0u);
  }
  // The leader dies before any lease ends (they were granted just now).
  c.kill9(leader);
  const int next = c.wait_leader();
  ASSERT_NE(next, 0);
  ASSERT_NE(next, leader);
  // Every holder's lease ends on the new leader: both keys come free.
  for (const char* key : {"sem", "books"}) {
    EXPECT_TRUE(eventually(
        [&] {
          const auto v = http(c.admin_port(next), std::string("/v1/locks/") + key);
          return v.status == 404;
        },
        milliseconds(30000)))
        << key << ": " << http(c.admin_port(next), std::string("/v1/locks/") + key).body;
  }
  const std::uint64_t w = token_of(call_leader(c, "A w sem 1000"), "A");
  EXPECT_GT(w, tokens.back());
  EXPECT_NE(token_of(call_leader(c, "A w books 1000"), "A"), 0u);
}

// issue 36 item 7: a departing client's waiters are cancelled in one entry,
// as single mode does. Readers hold each key; the client's writer waits at
// the front, its reader behind it. Cancelled one entry at a time, a
// writer's cancel that comes before its reader's hands the key to the
// departed client's reader (granted, then released as an orphan), so fewer
// waiters count as cancelled. Ten keys: which of the client's waiters a
// per-waiter leader cancels first follows a hash set's order, and over ten
// pairs some writer always comes before its reader.
TEST(SharedCluster, DepartingClientsWaitersLeaveTogether) {
  constexpr int kKeys = 10;
  LockdCluster c(3);
  const int leader = c.wait_leader();
  ASSERT_NE(leader, 0);
  const std::uint16_t port = c.client_port(leader);
  LineClient alice(port);
  std::vector<std::uint64_t> held;
  for (int i = 0; i < kKeys; ++i) {
    held.push_back(token_of(alice.call("S alice k" + std::to_string(i) + " 0 60000")));
    ASSERT_NE(held.back(), 0u);
  }
  {
    LineClient bob(port);
    for (int i = 0; i < kKeys; ++i) {
      const std::string key = "k" + std::to_string(i);
      bob.send("A bob-w " + key + " 60000 30000\n");
      ASSERT_TRUE(waiters_are(c, leader, 2 * i + 1)) << c.status_json(leader);
      bob.send("S bob-r " + key + " 0 60000 30000\n");
      ASSERT_TRUE(waiters_are(c, leader, 2 * i + 2)) << c.status_json(leader);
    }
  }  // bob's connection closes
  ASSERT_TRUE(waiters_are(c, leader, 0)) << c.status_json(leader);
  const auto cancelled = [&](int id) {
    return metric(http(c.admin_port(id), "/metrics").body, "lockd_waiters_cancelled_total");
  };
  // Every member applied it: every waiter cancelled, none granted (each
  // key still has alice alone).
  for (int id = 1; id <= 3; ++id) {
    EXPECT_TRUE(eventually([&] { return cancelled(id) == 2 * kKeys; })) << id << ": " << cancelled(id);
  }
  for (int i = 0; i < kKeys; ++i) {
    const std::string key = "k" + std::to_string(i);
    const json j = json::parse(http(c.admin_port(leader), "/v1/locks/" + key).body);
    EXPECT_EQ(j["holders"].size(), 1u) << j.dump();
    EXPECT_EQ(alice.call("R " + std::to_string(held[i]) + " " + key), "R " + std::to_string(held[i]) + " " + key);
  }
}

}  // namespace
}  // namespace lockd::testing
