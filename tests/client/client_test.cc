// The C++ client against a real lockd over TCP (acquire, release, keep,
// waits, pipelining, the guard, the keeper through leases and a restart,
// a fencing resource) and against FakeServer for what one lockd cannot
// show (redirects, no_leader, indeterminate, replies reordered).
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <thread>

#include "eventually.h"
#include "fake_server.h"
#include "fenced_store/fenced_store.h"
#include "lockd/client/client.h"
#include "lockd_process.h"
#include "temp_dir.h"

namespace lockd::client {

// Readable codes in failure messages.
void PrintTo(Code code, std::ostream* os) { *os << code_name(code); }

namespace {

using namespace std::chrono_literals;
using testing::FakeServer;
using testing::LockdProcess;
using testing::eventually;

std::string addr(std::uint16_t port) { return "127.0.0.1:" + std::to_string(port); }

Options options_for(const std::string& address) {
  Options o;
  o.addresses = {address};
  o.reply_timeout = 5s;
  o.jitter_seed = 1;
  return o;
}

// Splits "A 5 o k" into fields.
std::vector<std::string> words(const std::string& line) { return testing::fields(line); }

TEST(Client, AcquireReleaseKeep) {
  LockdProcess lockd;
  Client client(options_for(addr(lockd.port())));
  auto lock = client.acquire("alice", "orders/42", 10'000);
  ASSERT_TRUE(lock.ok()) << lock.status().to_string();
  EXPECT_GT(lock->token, 0u);
  EXPECT_EQ(lock->owner, "alice");

  auto other = client.acquire("bob", "orders/42", 10'000);
  EXPECT_EQ(other.code(), Code::kTimedOut);

  EXPECT_TRUE(client.keep(lock.value(), 20'000).ok());
  EXPECT_EQ(client.keep(lock->token + 1, "orders/42", 1'000).code, Code::kNotHeld);
  EXPECT_TRUE(client.release(lock.value()).ok());
  EXPECT_EQ(client.release(lock.value()).code, Code::kNotHeld);
  EXPECT_EQ(client.keep(lock.value(), 1'000).code, Code::kNotHeld);

  auto again = client.acquire("bob", "orders/42", 10'000);
  ASSERT_TRUE(again.ok());
  EXPECT_GT(again->token, lock->token);
}

TEST(Client, InvalidArgumentsNeverReachTheServer) {
  LockdProcess lockd;
  Client client(options_for(addr(lockd.port())));
  EXPECT_EQ(client.acquire("has space", "k", 100).code(), Code::kInvalidArgument);
  EXPECT_EQ(client.acquire("o", "", 100).code(), Code::kInvalidArgument);
  EXPECT_EQ(client.keep(1, "k", 0).code, Code::kInvalidArgument);
  // Over the server's configured maximum: the server's E (no echo) is
  // still paired with the right request.
  EXPECT_EQ(client.acquire("o", "k", 4'000'000'000).code(), Code::kRejected);
  EXPECT_TRUE(client.acquire("o", "k", 1'000).ok());
  Client bad({.addresses = {"nonsense"}});
  EXPECT_EQ(bad.acquire("o", "k", 100).code(), Code::kInvalidArgument);
}

TEST(Client, WaitIsGrantedOnReleaseAndTimesOutWithT) {
  LockdProcess lockd;
  Client client(options_for(addr(lockd.port())));
  auto holder = client.acquire("alice", "k", 10'000);
  ASSERT_TRUE(holder.ok());

  const auto start = Clock::now();
  auto timed_out = client.acquire("bob", "k", 10'000, 200);
  EXPECT_EQ(timed_out.code(), Code::kTimedOut);
  EXPECT_GE(Clock::now() - start, 190ms);

  std::optional<Result<Lock>> waited;
  std::thread waiter([&] { waited = client.acquire("bob", "k", 10'000, 5'000); });
  // The release goes out on the same connection while bob's acquire waits.
  ASSERT_TRUE(eventually([&] { return client.release(holder.value()).ok(); }));
  waiter.join();
  ASSERT_TRUE(waited && waited->ok()) << waited->status().to_string();
  EXPECT_GT(waited->value().token, holder->token);
}

TEST(Client, PipelinedRepliesArriveOutOfOrder) {
  LockdProcess lockd;
  auto opened = Connection::open(*parse_address(addr(lockd.port())), 3s);
  ASSERT_TRUE(opened.ok());
  Connection& conn = *opened.value();
  const auto deadline = Clock::now() + 10s;
  Request hold{Verb::kAcquire, "alice", "k", 0, 10'000, 0};
  auto t_hold = conn.submit(hold);
  ASSERT_TRUE(t_hold.ok());
  auto held = conn.wait(t_hold.value(), deadline);
  ASSERT_TRUE(held.ok());

  // 1: waits for k. 2: answered at once. 3: releases k, which hands it to 1.
  auto t1 = conn.submit({Verb::kAcquire, "bob", "k", 0, 10'000, 5'000});
  auto t2 = conn.submit({Verb::kAcquire, "carol", "other", 0, 10'000, 0});
  auto t3 = conn.submit({Verb::kRelease, "", "k", held->token, 0, 0});
  ASSERT_TRUE(t1.ok() && t2.ok() && t3.ok());
  // Collected in the reverse order of sending; each gets its own reply.
  auto r3 = conn.wait(t3.value(), deadline);
  auto r2 = conn.wait(t2.value(), deadline);
  auto r1 = conn.wait(t1.value(), deadline);
  ASSERT_TRUE(r1.ok() && r2.ok() && r3.ok());
  EXPECT_EQ(r3->kind, ReplyKind::kReleased);
  EXPECT_EQ(r2->kind, ReplyKind::kAcquired);
  EXPECT_EQ(r2->key, "other");
  EXPECT_EQ(r1->kind, ReplyKind::kAcquired);
  EXPECT_EQ(r1->owner, "bob");
  EXPECT_GT(r1->token, r2->token);  // granted after carol's: it arrived last

  // A second acquire of the same owner and key while one is in flight
  // could not be told apart on the wire: refused, not sent.
  auto w = conn.submit({Verb::kAcquire, "dave", "k", 0, 10'000, 5'000});
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(conn.submit({Verb::kAcquire, "dave", "k", 0, 10'000, 0}).code(), Code::kInFlight);
  conn.submit({Verb::kRelease, "", "k", r1->token, 0, 0});
  EXPECT_TRUE(conn.wait(w.value(), deadline).ok());
}

TEST(Client, ManyThreadsShareOneConnection) {
  LockdProcess lockd;
  Client client(options_for(addr(lockd.port())));
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        const std::string key = "k" + std::to_string(t) + "-" + std::to_string(i);
        auto l = client.acquire("o" + std::to_string(t), key, 10'000);
        if (l.ok() && client.release(l.value()).ok()) ++ok;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok.load(), 400);
}

TEST(Client, GuardReleasesWhenAnExceptionUnwinds) {
  LockdProcess lockd;
  Client client(options_for(addr(lockd.port())));
  std::uint64_t token = 0;
  try {
    auto guard = client.lock("alice", "k", {.lease_ms = 60'000});
    ASSERT_TRUE(guard.ok());
    token = guard->token();
    EXPECT_EQ(client.acquire("bob", "k", 1'000).code(), Code::kTimedOut);
    throw std::runtime_error("work failed");
  } catch (const std::runtime_error&) {
  }
  auto after = client.acquire("bob", "k", 1'000);  // no wait: free at once
  ASSERT_TRUE(after.ok()) << after.status().to_string();
  EXPECT_GT(after->token, token);
}

TEST(Client, GuardReleaseIsExplicitToo) {
  LockdProcess lockd;
  Client client(options_for(addr(lockd.port())));
  auto guard = client.lock("alice", "k", {.lease_ms = 60'000, .keep = false});
  ASSERT_TRUE(guard.ok());
  EXPECT_EQ(guard->keeper(), nullptr);
  LockGuard moved = std::move(guard.value());
  EXPECT_TRUE(moved.release().ok());
  EXPECT_TRUE(moved.release().ok());  // second time: nothing to do
  EXPECT_TRUE(client.acquire("bob", "k", 1'000).ok());
}

TEST(Client, KeeperKeepsALockThroughThreeLeases) {
  LockdProcess lockd;
  Client client(options_for(addr(lockd.port())));
  std::atomic<int> lost_calls{0};
  auto guard = client.lock("alice", "k", {.lease_ms = 500, .on_lost = [&](const Status&) {
                                            ++lost_calls;
                                          }});
  ASSERT_TRUE(guard.ok());
  std::this_thread::sleep_for(1'700ms);  // more than three leases
  EXPECT_FALSE(guard->lost()) << guard->keeper()->lost_reason().to_string();
  EXPECT_GE(guard->keeper()->kept_count(), 3u);  // every ~167 ms: 10 if the machine is idle
  Client other(options_for(addr(lockd.port())));
  EXPECT_EQ(other.acquire("bob", "k", 1'000).code(), Code::kTimedOut);
  EXPECT_TRUE(guard->release().ok());
  EXPECT_EQ(lost_calls.load(), 0);
}

TEST(Client, KeeperReportsLossWhenTheServerRestarts) {
  auto lockd = std::make_unique<LockdProcess>();
  const std::uint16_t port = lockd->port();
  Client client(options_for(addr(port)));
  std::atomic<int> lost_calls{0};
  Status why;
  std::mutex why_mu;
  auto guard = client.lock("alice", "k", {.lease_ms = 600, .on_lost = [&](const Status& s) {
                                            const std::lock_guard lk(why_mu);
                                            why = s;
                                            ++lost_calls;
                                          }});
  ASSERT_TRUE(guard.ok());
  std::this_thread::sleep_for(300ms);
  EXPECT_FALSE(guard->lost());
  lockd.reset();  // SIGKILL: the lock table is gone
  lockd = std::make_unique<LockdProcess>(
      std::vector<std::string>{"--listen", "127.0.0.1:" + std::to_string(port)});
  ASSERT_TRUE(eventually([&] { return guard->lost(); }, 5s));
  {
    const std::lock_guard lk(why_mu);
    EXPECT_EQ(why.code, Code::kNotHeld) << why.to_string();
  }
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(lost_calls.load(), 1);
  EXPECT_EQ(guard->release().code, Code::kNotHeld);
}

TEST(Client, KeeperReportsLossWhenTheServerStaysDown) {
  auto lockd = std::make_unique<LockdProcess>();
  Client client(options_for(addr(lockd->port())));
  auto guard = client.lock("alice", "k", {.lease_ms = 400});
  ASSERT_TRUE(guard.ok());
  const auto start = Clock::now();
  lockd.reset();
  ASSERT_TRUE(eventually([&] { return guard->lost(); }, 5s));
  // Not before the lease's safe end, not long after it.
  EXPECT_LT(Clock::now() - start, 1'500ms);
}

// A restarted server closed the client's idle connection: the next call
// finds that out before sending and goes over a new connection (it was not
// sent, so nothing is lost), instead of reporting the node unreachable.
TEST(Client, TheFirstCallAfterARestartGoesOverANewConnection) {
  auto lockd = std::make_unique<LockdProcess>();
  const std::uint16_t port = lockd->port();
  Client client(options_for(addr(port)));
  ASSERT_TRUE(client.acquire("alice", "k", 10'000).ok());
  lockd.reset();  // SIGKILL: the lock table is gone
  lockd = std::make_unique<LockdProcess>(
      std::vector<std::string>{"--listen", "127.0.0.1:" + std::to_string(port)});
  auto again = client.acquire("bob", "k", 10'000);
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_TRUE(client.release(again.value()).ok());
}

TEST(Client, FencingTokensLetAResourceRefuseAPausedHolder) {
  LockdProcess lockd;
  Client client(options_for(addr(lockd.port())));
  const testing::TempDir tmp("lockd-fenced");
  const auto dir = std::filesystem::path(tmp.sub("store"));
  std::filesystem::create_directories(dir);
  examples::FencedStore store(dir.string());

  auto first = client.acquire("alice", "report", 200);  // no keeper: alice "pauses"
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(store.write("report", first->token, "alice v1"));
  std::this_thread::sleep_for(300ms);  // alice's lease runs out meanwhile
  auto second = client.acquire("bob", "report", 10'000);
  ASSERT_TRUE(second.ok());
  ASSERT_TRUE(store.write("report", second->token, "bob v1"));
  EXPECT_FALSE(store.write("report", first->token, "alice v2 (late)"));  // fenced
  EXPECT_EQ(store.read("report"), "bob v1");
}

// --- against FakeServer: cluster answers --------------------------------

TEST(ClientCluster, FollowsARedirectToTheLeader) {
  FakeServer leader([](const std::string& line) -> std::vector<std::string> {
    const auto f = words(line);
    if (f[0] == "A") return {"A 77 " + f[1] + " " + f[2]};
    if (f[0] == "R") return {"R " + f[1] + " " + f[2]};
    return {};
  });
  const std::string leader_addr = leader.address();
  FakeServer follower([&](const std::string& line) -> std::vector<std::string> {
    const auto f = words(line);
    return {"M " + leader_addr + " " + f[1] + " " + f[2]};
  });
  Client client(options_for(follower.address()));
  auto lock = client.acquire("alice", "k", 1'000);
  ASSERT_TRUE(lock.ok()) << lock.status().to_string();
  EXPECT_EQ(lock->token, 77u);
  EXPECT_EQ(follower.received(), (std::vector<std::string>{"A alice k 1000"}));
  // Later requests go straight to the leader.
  EXPECT_TRUE(client.release(lock.value()).ok());
  EXPECT_EQ(leader.received(), (std::vector<std::string>{"A alice k 1000", "R 77 k"}));
  EXPECT_EQ(follower.received().size(), 1u);
}

TEST(ClientCluster, GivesUpOnARedirectLoop) {
  std::string self;
  FakeServer loop([&](const std::string& line) -> std::vector<std::string> {
    const auto f = words(line);
    return {"M " + self + " " + f[1] + " " + f[2]};
  });
  self = loop.address();
  Client client(options_for(loop.address()));
  auto lock = client.acquire("alice", "k", 1'000);
  EXPECT_EQ(lock.code(), Code::kNoLeader);
  EXPECT_EQ(loop.received().size(), 4u);  // the first try and 3 redirects
}

TEST(ClientCluster, RetriesNoLeaderWithBackoff) {
  std::atomic<int> calls{0};
  FakeServer node([&](const std::string& line) -> std::vector<std::string> {
    const auto f = words(line);
    if (++calls <= 3) return {"E no_leader " + f[1] + " " + f[2]};
    return {"A 5 " + f[1] + " " + f[2]};
  });
  Options o = options_for(node.address());
  o.backoff_initial = 40ms;
  Client client(o);
  const auto start = Clock::now();
  auto lock = client.acquire("alice", "k", 1'000);
  ASSERT_TRUE(lock.ok()) << lock.status().to_string();
  EXPECT_EQ(calls.load(), 4);
  // Jittered backoff: at least half of 40 + 80 + 160 ms.
  EXPECT_GE(Clock::now() - start, 140ms);
}

TEST(ClientCluster, NoLeaderUntilTheBudgetRunsOut) {
  FakeServer node([](const std::string& line) -> std::vector<std::string> {
    const auto f = words(line);
    return {"E no_leader " + f[1] + " " + f[2]};
  });
  Options o = options_for(node.address());
  o.no_leader_budget = 400ms;
  Client client(o);
  const auto start = Clock::now();
  auto lock = client.acquire("alice", "k", 1'000);
  EXPECT_EQ(lock.code(), Code::kNoLeader);
  EXPECT_LT(Clock::now() - start, 1'000ms);
  EXPECT_GE(node.received().size(), 3u);
}

TEST(ClientCluster, NoLeaderMovesOnToAnotherNode) {
  FakeServer lost([](const std::string& line) -> std::vector<std::string> {
    const auto f = words(line);
    return {"E no_leader " + f[1] + " " + f[2]};
  });
  FakeServer leader([](const std::string& line) -> std::vector<std::string> {
    const auto f = words(line);
    return {"A 9 " + f[1] + " " + f[2]};
  });
  Options o = options_for(lost.address());
  o.addresses.push_back(leader.address());
  Client client(o);
  auto lock = client.acquire("alice", "k", 1'000);
  ASSERT_TRUE(lock.ok()) << lock.status().to_string();
  EXPECT_EQ(lock->token, 9u);
}

TEST(ClientCluster, SkipsAnUnreachableNode) {
  std::uint16_t dead_port = 0;
  { FakeServer gone([](const std::string&) { return std::vector<std::string>{}; });
    dead_port = gone.port(); }
  FakeServer leader([](const std::string& line) -> std::vector<std::string> {
    const auto f = words(line);
    return {"A 9 " + f[1] + " " + f[2]};
  });
  Options o = options_for(addr(dead_port));
  o.addresses.push_back(leader.address());
  Client client(o);
  EXPECT_TRUE(client.acquire("alice", "k", 1'000).ok());
  Client none(options_for(addr(dead_port)));
  EXPECT_EQ(none.acquire("alice", "k", 1'000).code(), Code::kUnreachable);
}

TEST(ClientCluster, IndeterminateIsAStatusNotARetry) {
  FakeServer node([](const std::string& line) -> std::vector<std::string> {
    const auto f = words(line);
    return {"E indeterminate " + f[1] + " " + f[2]};
  });
  Client client(options_for(node.address()));
  EXPECT_EQ(client.acquire("alice", "k", 1'000).code(), Code::kIndeterminate);
  EXPECT_EQ(client.release(5, "k").code, Code::kIndeterminate);
  EXPECT_EQ(node.received().size(), 2u);  // never resent: it may have happened
}

TEST(ClientCluster, RepliesReorderedByTheServerStillMatch) {
  // Holds the replies to the first two requests and sends them reversed
  // after the third, which is answered at once.
  std::vector<std::string> held;
  FakeServer node([&](const std::string& line) -> std::vector<std::string> {
    const auto f = words(line);
    std::string reply = f[0] == "A" ? "A " + std::to_string(100 + held.size()) + " " + f[1] + " " + f[2]
                                    : "K " + f[1] + " " + f[2];
    if (held.size() < 2) {
      held.push_back(reply);
      return {};
    }
    return {reply, held[1], held[0]};
  });
  auto opened = Connection::open(*parse_address(node.address()), 3s);
  ASSERT_TRUE(opened.ok());
  auto& conn = *opened.value();
  auto t1 = conn.submit({Verb::kAcquire, "a", "k1", 0, 100, 0});
  auto t2 = conn.submit({Verb::kAcquire, "b", "k2", 0, 100, 0});
  auto t3 = conn.submit({Verb::kKeep, "", "k3", 5, 100, 0});
  const auto deadline = Clock::now() + 5s;
  auto r1 = conn.wait(t1.value(), deadline);
  auto r2 = conn.wait(t2.value(), deadline);
  auto r3 = conn.wait(t3.value(), deadline);
  ASSERT_TRUE(r1.ok() && r2.ok() && r3.ok());
  EXPECT_EQ(r1->token, 100u);
  EXPECT_EQ(r1->owner, "a");
  EXPECT_EQ(r2->token, 101u);
  EXPECT_EQ(r3->kind, ReplyKind::kKept);
}

TEST(ClientCluster, AnUnknownReplyBreaksTheConnection) {
  FakeServer node([](const std::string&) -> std::vector<std::string> { return {"A 1 x y"}; });
  Client client(options_for(node.address()));
  EXPECT_EQ(client.acquire("alice", "k", 1'000).code(), Code::kIndeterminate);
}

TEST(ClientCluster, ALateGrantNobodyWaitsForIsReleased) {
  // Answers the acquire only when pushed, after the client gave up.
  FakeServer node([](const std::string& line) -> std::vector<std::string> {
    const auto f = words(line);
    if (f[0] == "R") return {"R " + f[1] + " " + f[2]};
    return {};
  });
  Options o = options_for(node.address());
  o.reply_timeout = 200ms;
  Client client(o);
  EXPECT_EQ(client.acquire("alice", "k", 1'000).code(), Code::kIndeterminate);
  node.push("A 31 alice k");
  // The next call reads the late grant and releases it.
  FakeServer* n = &node;
  ASSERT_TRUE(eventually([&] {
    client.release(1, "other");  // any call drives the reader
    for (const auto& l : n->received()) {
      if (l == "R 31 k") return true;
    }
    return false;
  }, 5s));
}

TEST(ClientCluster, KeeperReportsLossOnN) {
  FakeServer node([](const std::string& line) -> std::vector<std::string> {
    const auto f = words(line);
    if (f[0] == "A") return {"A 8 " + f[1] + " " + f[2]};
    if (f[0] == "K") return {"N " + f[1] + " " + f[2]};
    return {"R " + f[1] + " " + f[2]};
  });
  Client client(options_for(node.address()));
  std::atomic<bool> lost{false};
  // A long lease: the first K goes out at a third of it (2 s), and its N
  // is final. A keeper that took N for a passing error and kept retrying
  // would report the loss only near the lease's safe end (~6 s), while
  // someone else may already hold the key.
  const auto start = Clock::now();
  auto guard = client.lock("alice", "k", {.lease_ms = 6000, .on_lost = [&](const Status& s) {
                                            lost = s.code == Code::kNotHeld;
                                          }});
  ASSERT_TRUE(guard.ok());
  ASSERT_TRUE(eventually([&] { return lost.load(); }, 10s));
  EXPECT_LT(Clock::now() - start, 4'000ms) << "the loss was reported long after the first N";
  EXPECT_TRUE(guard->lost());
  EXPECT_EQ(node.received()[1], "K 8 k 6000");
  EXPECT_EQ(node.received().size(), 2u) << "K retried after N";
}

TEST(ClientCluster, KeeperGivesUpAtTheLeasesEndNotAtTheRetryBudget) {
  FakeServer node([](const std::string& line) -> std::vector<std::string> {
    const auto f = words(line);
    if (f[0] == "A") return {"A 8 " + f[1] + " " + f[2]};
    if (f[0] == "R") return {"N " + f[1] + " " + f[2]};
    return {"E no_leader " + f[1] + " " + f[2]};
  });
  Options o = options_for(node.address());
  o.no_leader_budget = 30s;
  Client client(o);
  const auto start = Clock::now();
  auto guard = client.lock("alice", "k", {.lease_ms = 300});
  ASSERT_TRUE(guard.ok());
  ASSERT_TRUE(eventually([&] { return guard->lost(); }, 5s));
  EXPECT_LT(Clock::now() - start, 1'000ms);
}

}  // namespace
}  // namespace lockd::client
