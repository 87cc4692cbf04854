// The watches of one C++ Client share one connection (WatchSession): a
// real lockd counts one watcher for all of them, a key is watched once
// however many Watches it has, the last Watch of a key sends `U`, a
// refused key ends only its own Watches, a reconnect watches every key once
// on one new connection, and closing the Client ends its watches.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
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

// Watches with an OnState: each state, in rev order, on the one thread of
// the session that calls them (not the caller's, not one per watch).
TEST(WatchSession, OnStateGetsEveryStateInOrderOnOneThread) {
  LockdProcess lockd = with_admin();
  Client client(options_for({addr(lockd.port())}));
  struct Seen {
    std::mutex mu;
    std::vector<std::uint64_t> revs;
    std::vector<KeyState::Kind> kinds;
    std::set<std::thread::id> threads;
  };
  std::vector<std::unique_ptr<Seen>> seen;
  std::vector<std::unique_ptr<Watch>> watches;
  for (int i = 0; i < 100; ++i) {
    seen.push_back(std::make_unique<Seen>());
    Seen* mine = seen.back().get();
    watches.push_back(client.watch("k" + std::to_string(i % 5), [mine](const Result<WatchEvent>& e) {
      ASSERT_TRUE(e.ok()) << e.status().to_string();
      const std::lock_guard lk(mine->mu);
      mine->revs.push_back(e->rev);
      mine->kinds.push_back(e->state.kind);
      mine->threads.insert(std::this_thread::get_id());
    }));
  }
  const auto count = [](Seen& s) {
    const std::lock_guard lk(s.mu);
    return s.revs.size();
  };
  ASSERT_TRUE(eventually([&] {
    return std::all_of(seen.begin(), seen.end(), [&](auto& s) { return count(*s) >= 1; });
  }, 10s));
  EXPECT_EQ(gauge(lockd, "lockd_watchers"), 1.0);
  Client other(options_for({addr(lockd.port())}));
  auto lock = other.acquire("alice", "k2", 10'000);
  ASSERT_TRUE(lock.ok());
  ASSERT_TRUE(other.release(lock.value()).ok());
  std::set<std::thread::id> threads;
  for (int i = 0; i < 100; ++i) {
    Seen& s = *seen[static_cast<std::size_t>(i)];
    if (i % 5 == 2) {
      ASSERT_TRUE(eventually([&] { return count(s) >= 3; }, 10s)) << i;
    }
    const std::lock_guard lk(s.mu);
    EXPECT_EQ(s.revs.size(), i % 5 == 2 ? 3u : 1u) << i;  // free, held, free; the others: free
    EXPECT_TRUE(std::is_sorted(s.revs.begin(), s.revs.end()));
    EXPECT_EQ(s.kinds.front(), KeyState::Kind::kFree);
    if (i % 5 == 2) {
      EXPECT_EQ(s.kinds[1], KeyState::Kind::kHeld);
    }
    threads.insert(s.threads.begin(), s.threads.end());
  }
  EXPECT_EQ(threads.size(), 1u);
  EXPECT_FALSE(threads.contains(std::this_thread::get_id()));
  EXPECT_FALSE(watches[0]->next(Clock::now()).has_value());  // its states went to OnState
}

// stop() from another thread waits for a running OnState call, and none
// comes after it; an OnState may stop its own watch (that call is the last).
// Plain watches of the same keys keep them watched, so changes keep coming.
TEST(WatchSession, StopWaitsForARunningOnStateAndOnStateMayStopItsOwnWatch) {
  LockdProcess lockd = with_admin();
  Client client(options_for({addr(lockd.port())}));
  auto slow_plain = client.watch("slow");
  auto self_plain = client.watch("self");
  std::atomic<int> calls{0};
  std::atomic<bool> in_call{false};
  std::promise<void> let_go;  // ends the held call
  auto slow = client.watch("slow", [&, go = let_go.get_future().share()](const Result<WatchEvent>&) {
    in_call = true;
    if (++calls == 2) go.wait_for(10s);  // held until the test lets it go
    in_call = false;
  });
  std::atomic<Watch*> self{nullptr};
  std::atomic<int> self_calls{0};
  std::atomic<bool> stopped{false};
  std::promise<void> released;  // the release is queued behind the call
  auto stopper = client.watch("self", [&, queued = released.get_future().share()](const Result<WatchEvent>&) {
    if (++self_calls != 2) return;
    queued.wait_for(10s);
    self.load()->stop();
    stopped = true;
  });
  self = stopper.get();
  ASSERT_TRUE(eventually([&] { return calls.load() == 1 && self_calls.load() == 1; }, 10s));
  const auto wait_for = [](Watch& w, KeyState::Kind kind) {
    while (auto e = w.next(Clock::now() + 10s)) {
      if (e->state.kind == kind) return true;
    }
    return false;
  };

  Client other(options_for({addr(lockd.port())}));
  auto slow_lock = other.acquire("alice", "slow", 10'000);
  ASSERT_TRUE(slow_lock.ok());
  ASSERT_TRUE(eventually([&] { return in_call.load() && calls.load() == 2; }, 10s));
  std::atomic<bool> stop_returned{false}, in_call_at_return{true};
  std::thread stopping([&] {
    slow->stop();
    in_call_at_return = in_call.load();
    stop_returned = true;
  });
  // A stop() that does not wait returns at once, the call still held.
  EXPECT_FALSE(eventually([&] { return stop_returned.load(); }, 300ms));
  let_go.set_value();
  stopping.join();
  EXPECT_FALSE(in_call_at_return.load());  // the running call had ended
  ASSERT_TRUE(other.release(slow_lock.value()).ok());
  ASSERT_TRUE(wait_for(*slow_plain, KeyState::Kind::kHeld));
  ASSERT_TRUE(wait_for(*slow_plain, KeyState::Kind::kFree));  // the release reached the session

  auto self_lock = other.acquire("alice", "self", 10'000);
  ASSERT_TRUE(self_lock.ok());
  ASSERT_TRUE(eventually([&] { return self_calls.load() == 2; }, 10s));
  ASSERT_TRUE(other.release(self_lock.value()).ok());
  ASSERT_TRUE(wait_for(*self_plain, KeyState::Kind::kHeld));
  ASSERT_TRUE(wait_for(*self_plain, KeyState::Kind::kFree));
  released.set_value();
  ASSERT_TRUE(eventually([&] { return stopped.load(); }, 10s));
  ASSERT_TRUE(other.acquire("bob", "other-key", 10'000).ok());  // one more turn of the session
  EXPECT_EQ(calls.load(), 2);       // nothing after stop()
  EXPECT_EQ(self_calls.load(), 2);  // nothing after the call that stopped it
  EXPECT_EQ(gauge(lockd, "lockd_watches"), 2.0);  // the plain watches' keys
}

// An OnState hears how its watch ended, once: a refusal, the client closed.
TEST(WatchSession, OnStateHearsTheEndOnce) {
  LockdProcess lockd = with_admin({"--max-watches-per-connection", "1"});
  Client client(options_for({addr(lockd.port())}));
  std::mutex mu;
  std::vector<Status> a_ends, b_ends;
  std::atomic<int> a_states{0};
  const auto on = [&](std::vector<Status>& ends, std::atomic<int>* states) {
    return [&ends, states, &mu](const Result<WatchEvent>& e) {
      if (e.ok()) {
        if (states != nullptr) ++*states;
        return;
      }
      const std::lock_guard lk(mu);
      ends.push_back(e.status());
    };
  };
  auto a = client.watch("a", on(a_ends, &a_states));
  ASSERT_TRUE(eventually([&] { return a_states.load() == 1; }, 10s));
  auto b = client.watch("b", on(b_ends, nullptr));
  ASSERT_TRUE(eventually([&] {
    const std::lock_guard lk(mu);
    return b_ends.size() == 1;
  }, 10s));
  EXPECT_EQ(b->status().code, Code::kBusy);
  client.close();  // ends `a` too; the call runs before close() returns
  {
    const std::lock_guard lk(mu);
    ASSERT_EQ(a_ends.size(), 1u);
    EXPECT_EQ(a_ends[0].code, Code::kUnreachable);
    EXPECT_EQ(b_ends.size(), 1u);
    EXPECT_EQ(b_ends[0].code, Code::kBusy);
  }
  // A watch that cannot start says so in status() at once; no call.
  std::atomic<int> late_calls{0};
  auto late = client.watch("c", [&](const Result<WatchEvent>&) { ++late_calls; });
  EXPECT_EQ(late->status().code, Code::kUnreachable);
  Client open(options_for({addr(lockd.port())}));
  auto bad = open.watch("bad key", [&](const Result<WatchEvent>&) { ++late_calls; });
  EXPECT_EQ(bad->status().code, Code::kInvalidArgument);
  late.reset();
  bad.reset();
  open.close();
  EXPECT_EQ(late_calls.load(), 0);
}

}  // namespace
}  // namespace lockd::client
