// The watches of one C++ Client share one connection (WatchSession): a
// real lockd counts one watcher for all of them, a key is watched once
// however many Watches it has, the last Watch of a key sends `U`, a
// refused key ends only its own Watches, a reconnect watches every key once
// on one new connection, and closing the Client ends its watches.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "client_options.h"
#include "eventually.h"
#include "fake_server.h"
#include "http_get.h"
#include "lockd/client/client.h"
#include "lockd_process.h"
#include "metric.h"

namespace lockd::client {
namespace {

using namespace std::chrono_literals;
using testing::FakeServer;
using testing::LockdProcess;
using testing::eventually;

using testing::addr;
using testing::options_for;

// One gauge of a real lockd's /metrics.
double gauge(const LockdProcess& lockd, const std::string& series) {
  return testing::metric(testing::http(lockd.admin_port(), "/metrics").body, series);
}

std::size_t count_of(const FakeServer& node, const std::string& line) {
  std::size_t n = 0;
  for (const auto& l : node.received()) n += l == line ? 1 : 0;
  return n;
}

LockdProcess with_admin(std::vector<std::string> more = {}) {
  std::vector<std::string> flags{"--admin", "127.0.0.1:0"};
  flags.insert(flags.end(), more.begin(), more.end());
  return LockdProcess(flags);
}

TEST(WatchSession, ManyWatchesOfAClientShareOneConnection) {
  LockdProcess lockd = with_admin();
  Client client(options_for({addr(lockd.port())}));
  std::vector<std::unique_ptr<Watch>> watches;
  for (int i = 0; i < 200; ++i) watches.push_back(client.watch("k" + std::to_string(i % 10)));
  for (auto& w : watches) {
    auto first = w->next(Clock::now() + 10s);
    ASSERT_TRUE(first.has_value()) << w->key() << ": " << w->status().to_string();
    EXPECT_EQ(first->state.kind, KeyState::Kind::kFree);
  }
  // One connection watches the ten keys, each once.
  EXPECT_EQ(gauge(lockd, "lockd_watchers"), 1.0);
  EXPECT_EQ(gauge(lockd, "lockd_watches"), 10.0);
  EXPECT_EQ(watches[0]->connections(), 1u);

  Client other(options_for({addr(lockd.port())}));
  auto lock = other.acquire("alice", "k3", 10'000);
  ASSERT_TRUE(lock.ok()) << lock.status().to_string();
  for (auto& w : watches) {
    if (w->key() != "k3") continue;
    auto held = w->next(Clock::now() + 10s);
    ASSERT_TRUE(held.has_value()) << w->status().to_string();
    EXPECT_EQ(held->state.owner, "alice");
    EXPECT_EQ(held->state.token, lock->token);
  }
  // The change reached k3's watches only.
  for (auto& w : watches) {
    if (w->key() != "k3") {
      EXPECT_FALSE(w->next(Clock::now()).has_value()) << w->key();
    }
  }
}

TEST(WatchSession, TheLastWatchOfAKeySendsUnwatch) {
  LockdProcess lockd = with_admin();
  Client client(options_for({addr(lockd.port())}));
  auto a = client.watch("k");
  auto b = client.watch("k");
  ASSERT_TRUE(a->next(Clock::now() + 10s).has_value());
  ASSERT_TRUE(b->next(Clock::now() + 10s).has_value());
  EXPECT_EQ(gauge(lockd, "lockd_watches"), 1.0);

  a->stop();  // b still watches: nothing is sent
  Client other(options_for({addr(lockd.port())}));
  auto lock = other.acquire("alice", "k", 10'000);
  ASSERT_TRUE(lock.ok());
  auto held = b->next(Clock::now() + 10s);
  ASSERT_TRUE(held.has_value()) << b->status().to_string();
  EXPECT_EQ(held->state.owner, "alice");
  EXPECT_FALSE(a->next(Clock::now()).has_value());
  EXPECT_EQ(gauge(lockd, "lockd_watches"), 1.0);

  b->stop();  // the last one: `U k` on the connection, which stays open
  ASSERT_TRUE(eventually([&] { return gauge(lockd, "lockd_watches") == 0.0; }, 10s));
  EXPECT_EQ(gauge(lockd, "lockd_connections"), 2.0);  // the watch connection and `other`'s
}

// Stopping a key's only Watch and watching it again at once, many times:
// the `W` is never overtaken by the `U` before it, so the key stays
// watched and the newest Watch sees the next change.
TEST(WatchSession, StopAndWatchAgainLeavesTheKeyWatched) {
  LockdProcess lockd = with_admin();
  Client client(options_for({addr(lockd.port())}));
  auto w = client.watch("k");
  ASSERT_TRUE(w->next(Clock::now() + 10s).has_value());
  for (int i = 0; i < 100; ++i) {
    w->stop();
    w = client.watch("k");
  }
  ASSERT_TRUE(w->next(Clock::now() + 10s).has_value()) << w->status().to_string();
  ASSERT_TRUE(eventually([&] { return gauge(lockd, "lockd_watches") == 1.0; }, 10s));
  Client other(options_for({addr(lockd.port())}));
  auto lock = other.acquire("alice", "k", 10'000);
  ASSERT_TRUE(lock.ok());
  auto held = w->next(Clock::now() + 10s);
  ASSERT_TRUE(held.has_value()) << w->status().to_string();
  EXPECT_EQ(held->state.owner, "alice");
  EXPECT_EQ(gauge(lockd, "lockd_watches"), 1.0);
}

// Past --max-watches-per-connection the server answers `B`: that key's
// Watch ends with kBusy; the others go on.
TEST(WatchSession, ARefusedKeyEndsOnlyItsOwnWatches) {
  LockdProcess lockd = with_admin({"--max-watches-per-connection", "2"});
  Client client(options_for({addr(lockd.port())}));
  auto a = client.watch("a");
  ASSERT_TRUE(a->next(Clock::now() + 10s).has_value());
  auto b = client.watch("b");
  ASSERT_TRUE(b->next(Clock::now() + 10s).has_value());
  auto c = client.watch("c");
  EXPECT_FALSE(c->next(Clock::now() + 10s).has_value());
  EXPECT_EQ(c->status().code, Code::kBusy) << c->status().to_string();
  Client other(options_for({addr(lockd.port())}));
  ASSERT_TRUE(other.acquire("alice", "b", 10'000).ok());
  auto held = b->next(Clock::now() + 10s);
  ASSERT_TRUE(held.has_value()) << b->status().to_string();
  EXPECT_EQ(held->state.owner, "alice");
  EXPECT_TRUE(a->status().ok());
}

// The node goes away: the session watches each key once on the next node,
// and every Watch of a key gets that node's states (older revs dropped).
TEST(WatchSession, AReconnectWatchesEveryKeyOnce) {
  auto first = std::make_unique<FakeServer>([](const std::string& line) -> std::vector<std::string> {
    if (line.starts_with("W ")) return {"W " + line.substr(2) + " 5 free"};
    return {};
  });
  FakeServer second([](const std::string& line) -> std::vector<std::string> {
    if (line.starts_with("W ")) return {"W " + line.substr(2) + " 6 free"};
    return {};
  });
  Client client(options_for({first->address(), second.address()}));
  std::vector<std::unique_ptr<Watch>> watches;
  for (int i = 0; i < 30; ++i) watches.push_back(client.watch(std::string(1, static_cast<char>('a' + i % 3))));
  for (auto& w : watches) ASSERT_TRUE(w->next(Clock::now() + 10s).has_value()) << w->key();
  first.reset();  // the node goes away
  for (auto& w : watches) {
    auto again = w->next(Clock::now() + 10s);
    ASSERT_TRUE(again.has_value()) << w->key() << ": " << w->status().to_string();
    EXPECT_EQ(again->rev, 6u);
  }
  EXPECT_EQ(count_of(second, "W a"), 1u);
  EXPECT_EQ(count_of(second, "W b"), 1u);
  EXPECT_EQ(count_of(second, "W c"), 1u);
  EXPECT_EQ(watches[0]->connections(), 2u);
  second.push("V b 7 held x 9");
  for (auto& w : watches) {
    if (w->key() != "b") continue;
    auto held = w->next(Clock::now() + 10s);
    ASSERT_TRUE(held.has_value());
    EXPECT_EQ(held->rev, 7u);
    EXPECT_EQ(held->state.owner, "x");
  }
}

TEST(WatchSession, ClosingTheClientEndsItsWatches) {
  LockdProcess lockd = with_admin();
  Client client(options_for({addr(lockd.port())}));
  auto w = client.watch("k");
  ASSERT_TRUE(w->next(Clock::now() + 10s).has_value());
  client.close();
  const auto start = Clock::now();
  EXPECT_FALSE(w->next(Clock::now() + 10s).has_value());
  EXPECT_LT(Clock::now() - start, 5s);  // ended, not timed out
  EXPECT_EQ(w->status().code, Code::kUnreachable);
  ASSERT_TRUE(eventually([&] { return gauge(lockd, "lockd_watchers") == 0.0; }, 10s));
  auto late = client.watch("k");  // after close: ended at once
  EXPECT_FALSE(late->next(Clock::now() + 5s).has_value());
  EXPECT_EQ(late->status().code, Code::kUnreachable);
}

}  // namespace
}  // namespace lockd::client
