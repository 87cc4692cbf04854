// `W`/`U` and the pushes `V` and `X` (protocol.md §5c, v1.3) against a
// real single-mode lockd over real TCP: one test per row of the section.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <map>
#include <string>
#include <thread>

#include "eventually.h"
#include "http_get.h"
#include "lockd_process.h"
#include "metric.h"

namespace lockd::testing {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;

std::string token_of(const std::string& reply) {
  const auto f = fields(reply);
  EXPECT_EQ(f.size(), 4u) << reply;
  EXPECT_TRUE(!f.empty() && (f[0] == "A" || f[0] == "S")) << reply;
  return f.size() == 4 ? f[1] : "";
}

// A `W`/`V` line's rev.
std::uint64_t rev_of(const std::string& line) {
  const auto f = fields(line);
  EXPECT_GE(f.size(), 4u) << line;
  return f.size() >= 3 ? std::stoull(f[2]) : 0;
}

// The state part of a `W`/`V` line: everything after the rev.
std::string state_of(const std::string& line) {
  const auto f = fields(line);
  std::string s;
  for (std::size_t i = 3; i < f.size(); ++i) s += (i > 3 ? " " : "") + f[i];
  return s;
}

// Reads the next line, expected to be a push `V key rev state`.
std::string next_push(LineClient& c, const std::string& key, const std::string& state,
                      std::uint64_t& rev) {
  const auto line = c.read_line();
  EXPECT_TRUE(line.has_value());
  if (!line) return "";
  const auto f = fields(*line);
  EXPECT_TRUE(f.size() >= 4 && f[0] == "V" && f[1] == key) << *line;
  EXPECT_EQ(state_of(*line), state) << *line;
  const std::uint64_t r = rev_of(*line);
  EXPECT_GT(r, rev) << *line;
  rev = r;
  return *line;
}

// Nothing arrives on `c` before the answer to a probe it sends.
void expect_quiet(LineClient& c) {
  EXPECT_EQ(c.call("U probe"), "U probe");
}

TEST(WatchTest, WatchAnswersTheStateNowThenPushesEveryChange) {
  LockdProcess lockd({"--admin", "127.0.0.1:0"});
  LineClient w(lockd.port()), a(lockd.port()), b(lockd.port());
  const std::string first = w.call("W k");
  EXPECT_EQ(state_of(first), "free") << first;
  std::uint64_t rev = rev_of(first);
  EXPECT_GE(rev, 1u);
  // Grant.
  const std::string t1 = token_of(a.call("A alice k 60000"));
  next_push(w, "k", "held alice " + t1, rev);
  // K changes nothing: no push.
  EXPECT_EQ(a.call("K " + t1 + " k 60000"), "K " + t1 + " k");
  expect_quiet(w);
  // A waiter, then the release hands the key to it: one change (held by
  // bob), maybe pushed as the last state only.
  b.send("A bob k 60000 30000\nA probe k\n");
  EXPECT_EQ(b.read_line(), "T probe k");
  EXPECT_EQ(a.call("R " + t1 + " k"), "R " + t1 + " k");
  const std::string t2 = token_of(*b.read_line());
  next_push(w, "k", "held bob " + t2, rev);
  // Release with nobody waiting: free.
  EXPECT_EQ(b.call("R " + t2 + " k"), "R " + t2 + " k");
  next_push(w, "k", "free", rev);
  // A W of the same key again: the state now, still one watch.
  const std::string again = w.call("W k");
  EXPECT_EQ(state_of(again), "free");
  EXPECT_GE(rev_of(again), rev);
  const json s = json::parse(http(lockd.admin_port(), "/v1/status").body);
  EXPECT_EQ(s["watches"], 1);
  EXPECT_EQ(s["watchers"], 1);
  // U stops the pushes; U of an unwatched key answers U too.
  EXPECT_EQ(w.call("U k"), "U k");
  EXPECT_EQ(w.call("U never"), "U never");
  token_of(a.call("A alice k 60000"));
  expect_quiet(w);
}

TEST(WatchTest, SharedHoldersJoiningAndLeavingArePushed) {
  LockdProcess lockd({"--admin", "127.0.0.1:0"});
  LineClient w(lockd.port()), r(lockd.port());
  std::uint64_t rev = rev_of(w.call("W s"));
  const std::string t1 = token_of(r.call("S r1 s 3 60000"));
  next_push(w, "s", "shared 3 1", rev);
  const std::string t2 = token_of(r.call("S r2 s 3 60000"));
  next_push(w, "s", "shared 3 2", rev);
  EXPECT_EQ(r.call("R " + t1 + " s"), "R " + t1 + " s");
  next_push(w, "s", "shared 3 1", rev);
  EXPECT_EQ(r.call("R " + t2 + " s"), "R " + t2 + " s");
  next_push(w, "s", "free", rev);
}

TEST(WatchTest, ExpiryIsPushedWhenTheServerLearnsOfIt) {
  LockdProcess lockd({"--admin", "127.0.0.1:0", "--sweep-interval-ms", "100"});
  LineClient w(lockd.port()), a(lockd.port()), b(lockd.port());
  std::uint64_t rev = rev_of(w.call("W k"));
  const std::string t1 = token_of(a.call("A alice k 100"));
  next_push(w, "k", "held alice " + t1, rev);
  // Hand-off at lease end to a waiter.
  b.send("A bob k 200 30000\nA probe k\n");
  EXPECT_EQ(b.read_line(), "T probe k");
  const std::string t2 = token_of(*b.read_line());
  next_push(w, "k", "held bob " + t2, rev);
  // No waiter: the sweep frees it.
  next_push(w, "k", "free", rev);
}

TEST(WatchTest, LostNoticeOnExpiryNotOnRelease) {
  LockdProcess lockd({"--admin", "127.0.0.1:0", "--sweep-interval-ms", "60000"});
  LineClient a(lockd.port());
  const std::string t1 = token_of(a.call("A alice k1 100"));
  const auto x = a.read_line(5000ms);
  ASSERT_TRUE(x.has_value());
  EXPECT_EQ(*x, "X " + t1 + " k1");
  // The holding ended: K says N. The key stays registered until the sweep
  // (§8), so R still matches.
  EXPECT_EQ(a.call("K " + t1 + " k1 1000"), "N " + t1 + " k1");
  // Released before its end: no X.
  const std::string t2 = token_of(a.call("A alice k2 200"));
  EXPECT_EQ(a.call("R " + t2 + " k2"), "R " + t2 + " k2");
  std::this_thread::sleep_for(400ms);
  expect_quiet(a);
  // A K that moves the end: X at the new end, once. The old end (100 ms)
  // passes in the 300 ms of quiet; the new one (2 s) leaves a slow machine
  // 1.7 s of margin before X may come.
  const std::string t3 = token_of(a.call("A alice k3 100"));
  EXPECT_EQ(a.call("K " + t3 + " k3 2000"), "K " + t3 + " k3");
  std::this_thread::sleep_for(300ms);
  expect_quiet(a);
  EXPECT_EQ(a.read_line(5000ms), "X " + t3 + " k3");
  std::this_thread::sleep_for(200ms);
  expect_quiet(a);
  EXPECT_EQ(metric(http(lockd.admin_port(), "/metrics").body, "lockd_lost_notices_total"), 2);
}

// A `K` that moves a lease's end earlier: `X` at the new end, once, on
// the connection that was granted the lock even when another one (it has
// the token) sent the `K`. Moved earlier and then later again: `X` once,
// at the end in force; moved earlier twice: `X` once. The server keeps
// whom a holding was granted to in the lock table, not in a map of its own
// (issue 34's memory per lock).
TEST(WatchTest, LostNoticeAfterAKeepThatShortensTheLease) {
  LockdProcess lockd({"--admin", "127.0.0.1:0", "--sweep-interval-ms", "60000"});
  LineClient a(lockd.port());
  LineClient other(lockd.port());
  const std::string t1 = token_of(a.call("A alice k1 600000"));
  EXPECT_EQ(other.call("K " + t1 + " k1 100"), "K " + t1 + " k1");
  EXPECT_EQ(a.read_line(5000ms), "X " + t1 + " k1");
  EXPECT_EQ(a.call("K " + t1 + " k1 1000"), "N " + t1 + " k1");  // ended: no second X before it
  expect_quiet(other);
  const std::string t2 = token_of(a.call("A alice k2 600000"));
  EXPECT_EQ(a.call("K " + t2 + " k2 100"), "K " + t2 + " k2");
  EXPECT_EQ(a.call("K " + t2 + " k2 1500"), "K " + t2 + " k2");
  EXPECT_EQ(a.read_line(5000ms), "X " + t2 + " k2");
  EXPECT_EQ(a.call("K " + t2 + " k2 1000"), "N " + t2 + " k2");
  expect_quiet(a);
  // Moved earlier twice: the entries of both ends come up, `X` goes once.
  // A wait of 600 ms on a key `other` holds spans the second end (300 ms):
  // a second `X` would arrive before its `T`.
  token_of(other.call("A bob busy 600000"));
  const std::string t3 = token_of(a.call("A alice k3 600000"));
  EXPECT_EQ(a.call("K " + t3 + " k3 300"), "K " + t3 + " k3");
  EXPECT_EQ(a.call("K " + t3 + " k3 100"), "K " + t3 + " k3");
  EXPECT_EQ(a.read_line(5000ms), "X " + t3 + " k3");
  EXPECT_EQ(a.call("A alice busy 1000 600"), "T alice busy");
  EXPECT_EQ(metric(http(lockd.admin_port(), "/metrics").body, "lockd_lost_notices_total"), 3);
}

// Thousands of grants, some leases moved earlier, some later, then
// thousands more; every holding gets exactly one `X`, at its end now.
// Exclusive holdings: the lock table's lease-end wheel (keys moved between
// slots by the keeps). Shared ones: the server's heap of lease ends, rebuilt
// (at 4,096 entries) while entries of moved leases are in it.
void every_lease_end_is_told_once(bool shared) {
  LockdProcess lockd({"--admin", "127.0.0.1:0", "--sweep-interval-ms", "60000"});
  LineClient a(lockd.port());
  LineClient other(lockd.port());
  std::map<std::string, std::string> tokens;  // token -> key
  std::map<std::string, int> told;            // token -> `X`s
  // The next reply; `X` pushes that come first (a slow machine) are counted.
  auto next_reply = [&]() -> std::string {
    for (;;) {
      const auto line = a.read_line(20000ms);
      if (!line) return "";
      const auto f = fields(*line);
      if (f[0] != "X") return *line;
      const auto it = tokens.find(f[1]);
      EXPECT_TRUE(it != tokens.end() && it->second == f[2]) << *line;
      ++told[f[1]];
    }
  };
  auto grant_all = [&](int from, int to) {
    std::string batch;
    for (int i = from; i < to; ++i) {
      batch += (shared ? "S o k" : "A o k") + std::to_string(i) + (shared ? " 0 300\n" : " 300\n");
    }
    a.send(batch);
    for (int i = from; i < to; ++i) {
      const auto f = fields(next_reply());
      ASSERT_TRUE(f.size() == 4 && f[0] == (shared ? "S" : "A")) << (f.empty() ? "" : f[0]);
      tokens[f[1]] = f[3];
    }
  };
  grant_all(0, 2000);
  // 1,000 moved earlier (an entry each), 1,000 later (none: the old entry
  // is pushed again when it comes up, or rebuilt at the new end).
  std::string keeps;
  int n = 0;
  for (const auto& [t, k] : tokens) keeps += "K " + t + " " + k + (n++ < 1000 ? " 200\n" : " 1500\n");
  a.send(keeps);
  for (int i = 0; i < 2000; ++i) {
    const auto f = fields(next_reply());
    ASSERT_TRUE(!f.empty() && f[0] == "K");
  }
  grant_all(2000, 5000);  // the heap passes 4,096 entries: rebuilt
  while (told.size() < tokens.size()) {
    const auto line = a.read_line(20000ms);
    ASSERT_TRUE(line.has_value()) << told.size() << " of " << tokens.size() << " told";
    const auto f = fields(*line);
    ASSERT_EQ(f[0], "X") << *line;
    const auto it = tokens.find(f[1]);
    ASSERT_TRUE(it != tokens.end() && it->second == f[2]) << *line;
    ++told[f[1]];
  }
  EXPECT_EQ(told.size(), 5000u);
  for (const auto& [t, count] : told) EXPECT_EQ(count, 1) << t;
  // A second `X` for any of them would arrive before this wait's `T`.
  token_of(other.call("A bob busy 600000"));
  EXPECT_EQ(a.call("A alice busy 1000 600"), "T alice busy");
}

TEST(WatchTest, EveryExclusiveLeaseEndIsToldOnce) { every_lease_end_is_told_once(false); }
TEST(WatchTest, EverySharedLeaseEndIsToldOnceAcrossTheHeapsRebuild) { every_lease_end_is_told_once(true); }

TEST(WatchTest, LostNoticeGoesToTheHandedOffWaiterAndNotToAClosedConnection) {
  LockdProcess lockd({"--admin", "127.0.0.1:0", "--sweep-interval-ms", "60000"});
  auto gone = std::make_unique<LineClient>(lockd.port());
  LineClient w(lockd.port());
  token_of(gone->call("A gone k 300"));
  w.send("A next k 100 30000\nA probe k\n");
  EXPECT_EQ(w.read_line(), "T probe k");
  gone->close();
  gone.reset();
  // The hand-off at the first lease's end: no X to the closed connection,
  // the waiter is granted, and told X at its own lease's end.
  const std::string t = token_of(*w.read_line());
  EXPECT_EQ(w.read_line(5000ms), "X " + t + " k");
  EXPECT_EQ(metric(http(lockd.admin_port(), "/metrics").body, "lockd_lost_notices_total"), 1);
}

TEST(WatchTest, PushesArriveBetweenPipelinedRepliesInOrder) {
  LockdProcess lockd({"--admin", "127.0.0.1:0"});
  LineClient c(lockd.port());
  std::uint64_t rev = rev_of(c.call("W k"));
  // One read: grant, release, grant. The replies come in request order;
  // the pushes after them, the last state only or each, never older after
  // newer.
  c.send("A a k 60000\nA b k\nW other\n");
  const std::string t = token_of(*c.read_line());
  EXPECT_EQ(c.read_line(), "T b k");
  EXPECT_EQ(state_of(*c.read_line()), "free");  // W other
  next_push(c, "k", "held a " + t, rev);
  c.send("R " + t + " k\nA c k 60000\n");
  EXPECT_EQ(c.read_line(), "R " + t + " k");
  const std::string t2 = token_of(*c.read_line());
  // Either `V free` then `V held c`, or only the last.
  auto line = c.read_line();
  ASSERT_TRUE(line);
  if (state_of(*line) == "free") {
    EXPECT_GT(rev_of(*line), rev);
    rev = rev_of(*line);
    line = c.read_line();
    ASSERT_TRUE(line);
  }
  EXPECT_EQ(state_of(*line), "held c " + t2);
  EXPECT_GT(rev_of(*line), rev);
}

TEST(WatchTest, MalformedWatchesGetTheirErrors) {
  LockdProcess lockd({"--admin", "127.0.0.1:0"});
  LineClient c(lockd.port());
  EXPECT_EQ(c.call("W"), "E bad_arity");
  EXPECT_EQ(c.call("W a b"), "E bad_arity");
  EXPECT_EQ(c.call("U"), "E bad_arity");
  EXPECT_EQ(c.call("U " + std::string(251, 'k')), "E bad_key");
  EXPECT_EQ(c.call("w k"), "E unknown_command");
  EXPECT_EQ(state_of(c.call("W k")), "free");
}

TEST(WatchTest, CapsAnswerBusyAndWatchNothing) {
  LockdProcess lockd({"--admin", "127.0.0.1:0", "--max-watches-per-connection", "2", "--max-watches", "3"});
  LineClient c(lockd.port()), d(lockd.port());
  EXPECT_EQ(state_of(c.call("W k1")), "free");
  EXPECT_EQ(state_of(c.call("W k2")), "free");
  EXPECT_EQ(c.call("W k3"), "B k3");               // per connection
  EXPECT_EQ(state_of(c.call("W k2")), "free");     // already watched: no new watch
  EXPECT_EQ(state_of(d.call("W k1")), "free");
  EXPECT_EQ(d.call("W k4"), "B k4");               // per server
  // k3 and k4 are not watched.
  LineClient a(lockd.port());
  token_of(a.call("A a k3 60000"));
  token_of(a.call("A a k4 60000"));
  expect_quiet(c);
  expect_quiet(d);
  // Closing a connection ends its watches: room again.
  c.close();
  EXPECT_TRUE(eventually([&] {
    return json::parse(http(lockd.admin_port(), "/v1/status").body)["watches"] == 1;
  }));
  EXPECT_EQ(state_of(d.call("W k4")).rfind("held a ", 0), 0u);
}

TEST(WatchTest, AWatcherThatDoesNotReadIsDropped) {
  LockdProcess lockd({"--admin", "127.0.0.1:0", "--max-output-bytes", "1048576", "--sweep-interval-ms", "60000"});
  LineClient idle(lockd.port()), a(lockd.port());
  // A long key makes each push about 300 bytes.
  const std::string key(240, 'k');
  EXPECT_EQ(state_of(idle.call("W " + key)), "free");
  // Changes until the idle watcher is dropped (its unsent output over
  // 1 MiB plus what the sockets hold).
  bool dropped = false;
  for (int round = 0; round < 400 && !dropped; ++round) {
    for (int i = 0; i < 250; ++i) {
      const std::string t = token_of(a.call("A o " + key + " 60000"));
      ASSERT_EQ(a.call("R " + t + " " + key), "R " + t + " " + key);
    }
    dropped = metric(http(lockd.admin_port(), "/metrics").body, "lockd_watchers_dropped_total") == 1;
  }
  EXPECT_TRUE(dropped);
  const json s = json::parse(http(lockd.admin_port(), "/v1/status").body);
  EXPECT_EQ(s["watches"], 0);
  EXPECT_EQ(s["watchers"], 0);
}

// §5c: a client that reconnects drops states whose rev is below one it has
// seen, so a restarted single-mode lockd must not start rev again from 1
// (it starts, like tokens, from the wall clock in ns).
TEST(WatchTest, RevKeepsGrowingAcrossARestart) {
  std::uint64_t seen = 0;
  {
    LockdProcess lockd({"--admin", "127.0.0.1:0"});
    LineClient w(lockd.port()), a(lockd.port());
    seen = rev_of(w.call("W k"));
    for (int i = 0; i < 3; ++i) {
      const std::string t = token_of(a.call("A alice k 60000"));
      next_push(w, "k", "held alice " + t, seen);
      ASSERT_EQ(a.call("R " + t + " k"), "R " + t + " k");
      next_push(w, "k", "free", seen);
    }
  }
  LockdProcess again({"--admin", "127.0.0.1:0"});
  LineClient w(again.port()), a(again.port());
  const std::string first = w.call("W k");
  EXPECT_EQ(state_of(first), "free") << first;
  std::uint64_t rev = rev_of(first);
  EXPECT_GT(rev, seen) << first;
  // And it still grows by one per change.
  const std::string t = token_of(a.call("A alice k 60000"));
  const std::uint64_t before = rev;
  next_push(w, "k", "held alice " + t, rev);
  EXPECT_EQ(rev, before + 1);
}

}  // namespace
}  // namespace lockd::testing
