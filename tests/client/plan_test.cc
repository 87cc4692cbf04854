// The shared client test plan (docs/client-test-plan.md), C++ column: the
// scenarios that need the wire, against a real lockd where one can show
// them and against FakeServer for exact interleavings (a v1.2 server's
// echo-less error, pushes between replies, late grants). The pure rules
// (matcher, keeper schedule) are in protocol_test.cc.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>
#include <optional>
#include <thread>

#include "client_options.h"
#include "eventually.h"
#include "fake_server.h"
#include "lockd/client/client.h"
#include "lockd_process.h"

namespace lockd::client {

void PrintTo(Code code, std::ostream* os);

namespace {

using namespace std::chrono_literals;
using testing::FakeServer;
using testing::LockdProcess;
using testing::eventually;
using testing::fields;

using testing::addr;
using testing::options_for;

bool saw(const FakeServer& node, const std::string& line) {
  for (const auto& l : node.received()) {
    if (l == line) return true;
  }
  return false;
}

std::size_t count_of(const FakeServer& node, const std::string& line) {
  std::size_t n = 0;
  for (const auto& l : node.received()) n += l == line ? 1 : 0;
  return n;
}

// C01: a lock granted after a wait longer than its lease is kept: the
// keeper dates the lease from the grant, not from the send.
TEST(ClientPlan, C01_LongWaitThenKeep) {
  LockdProcess lockd;
  Client client(options_for({addr(lockd.port())}));
  ASSERT_TRUE(client.acquire("holder", "job", 1'500).ok());  // not kept: ends in 1.5 s
  std::atomic<bool> lost{false};
  auto guard = client.lock("waiter", "job", {.lease_ms = 1'000, .wait_ms = 5'000,
                                             .on_lost = [&](const Status&) { lost = true; }});
  ASSERT_TRUE(guard.ok()) << guard.status().to_string();
  const auto granted = Clock::now();
  while (Clock::now() - granted < 3s) {
    ASSERT_FALSE(guard->lost()) << guard->keeper()->lost_reason().to_string();
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_FALSE(lost.load());
  EXPECT_GE(guard->keeper()->kept_count(), 2u);
  // Still the holder: a third party cannot get in.
  Client other(options_for({addr(lockd.port())}));
  EXPECT_EQ(other.acquire("third", "job", 1'000).code(), Code::kTimedOut);
  EXPECT_TRUE(guard->release().ok());
}

// C03: a v1.3 server's range error carries the echo and fails only the
// request it names; a validly queued acquire of another thread is not
// touched and gets its own grant later.
TEST(ClientPlan, C03_ErrorWithEchoAmongPipelined) {
  LockdProcess lockd({"--max-wait-ms", "3000"});
  Client client(options_for({addr(lockd.port())}));
  auto first = client.acquire("holder", "k", 30'000);
  ASSERT_TRUE(first.ok());
  auto kept = client.lock("keeper", "other", {.lease_ms = 900});
  ASSERT_TRUE(kept.ok());
  std::optional<Result<Lock>> queued;
  std::thread waiter([&] { queued.emplace(client.acquire("w1", "k", 30'000, 2'500)); });
  std::this_thread::sleep_for(100ms);  // let w1 be queued first (either order must work)
  EXPECT_EQ(client.acquire("w2", "k", 30'000, 5'000).code(), Code::kRejected);
  EXPECT_EQ(client.keep(first.value(), 3'600'001).code, Code::kRejected);
  EXPECT_TRUE(client.release(first.value()).ok());
  waiter.join();
  ASSERT_TRUE(queued->ok()) << queued->status().to_string();
  EXPECT_FALSE(kept->lost());
}

// C04: a v1.2 server answers a too long wait with `E bad_wait` and no
// echo. Two acquires with a wait are in flight: the client cannot know
// whose it is, so it blames neither: both end at once as unknown outcomes
// (never kRejected), the queued one's later grant is released at once,
// and the keeper on the same connection is untouched (the connection stays).
TEST(ClientPlan, C04_ErrorWithoutEchoIsNeverPinnedOnAnother) {
  std::atomic<int> keeps{0};
  FakeServer node([&](const std::string& line) -> std::vector<std::string> {
    const auto f = fields(line);
    if (line == "A w2 k 30000 999999") return {"E bad_wait"};  // v1.2: no echo
    if (f[0] == "A" && f[1] == "w1") return {};                 // queued: answered by push
    if (f[0] == "A") return {"A 7 " + f[1] + " " + f[2]};
    if (f[0] == "K") {
      ++keeps;
      return {"K " + f[1] + " " + f[2]};
    }
    return {"R " + f[1] + " " + f[2]};
  });
  Options o = options_for({node.address()});
  o.reply_timeout = 5s;
  Client client(o);
  auto kept = client.lock("keeper", "other", {.lease_ms = 600});
  ASSERT_TRUE(kept.ok());
  std::optional<Result<Lock>> w1;
  std::thread waiter([&] { w1.emplace(client.acquire("w1", "k", 30'000, 20'000)); });
  ASSERT_TRUE(eventually([&] { return saw(node, "A w1 k 30000 20000"); }, 5s));
  const auto start = Clock::now();
  EXPECT_EQ(client.acquire("w2", "k", 30'000, 999'999).code(), Code::kIndeterminate);
  waiter.join();
  EXPECT_LT(Clock::now() - start, 3s);  // at once, not at either deadline
  EXPECT_EQ(w1->code(), Code::kIndeterminate);
  node.push("A 9 w1 k");  // the queued acquire's grant after all: released
  EXPECT_TRUE(eventually([&] { return saw(node, "R 9 k"); }, 5s));
  const int before = keeps.load();
  ASSERT_TRUE(eventually([&] { return keeps.load() >= before + 2; }, 5s));
  EXPECT_FALSE(kept->lost());
  EXPECT_TRUE(client.acquire("w3", "k3", 1'000).ok());  // the connection still serves
}

// C05: an acquire the caller gave up on (its deadline passed while it was
// queued) whose grant arrives later is released at once, although no
// thread calls the client again.
TEST(ClientPlan, C05_LateGrantReleasedOnAnIdleClient) {
  FakeServer node([](const std::string& line) -> std::vector<std::string> {
    const auto f = fields(line);
    if (f[0] == "R") return {"R " + f[1] + " " + f[2]};
    return {};
  });
  Options o = options_for({node.address()});
  o.reply_timeout = 200ms;
  Client client(o);
  EXPECT_EQ(client.acquire("alice", "k", 1'000, 100).code(), Code::kIndeterminate);
  node.push("A 31 alice k");
  EXPECT_TRUE(eventually([&] { return saw(node, "R 31 k"); }, 5s));  // nobody calls
}

// C06: release() from inside the loss callback neither deadlocks nor
// terminates (the keeper must not join itself).
TEST(ClientPlan, C06_ReleaseFromTheLossCallback) {
  std::atomic<bool> refuse{false};
  FakeServer node([&](const std::string& line) -> std::vector<std::string> {
    const auto f = fields(line);
    if (f[0] == "A") return {"A 8 " + f[1] + " " + f[2]};
    if (f[0] == "K") return {(refuse ? "N " : "K ") + f[1] + " " + f[2]};
    return {"N " + f[1] + " " + f[2]};
  });
  Client client(options_for({node.address()}));
  std::atomic<LockGuard*> self{nullptr};
  std::atomic<bool> done{false};
  std::atomic<int> code{-1};
  auto guard = client.lock("alice", "k", {.lease_ms = 300, .on_lost = [&](const Status&) {
                                            code = static_cast<int>(self.load()->release().code);
                                            done = true;
                                          }});
  ASSERT_TRUE(guard.ok());
  self = &guard.value();
  refuse = true;
  ASSERT_TRUE(eventually([&] { return done.load(); }, 5s));
  EXPECT_EQ(code.load(), static_cast<int>(Code::kNotHeld));
  EXPECT_TRUE(guard->released());
  EXPECT_TRUE(saw(node, "R 8 k"));
}

// C07: a caller that is redirected to another node does not fail the
// requests other callers have in flight on the old connection.
TEST(ClientPlan, C07_NodeSwitchKeepsOtherCallersInFlight) {
  FakeServer leader([](const std::string& line) -> std::vector<std::string> {
    const auto f = fields(line);
    if (f[0] == "A") return {"A 12 " + f[1] + " " + f[2]};
    return {"R " + f[1] + " " + f[2]};
  });
  const std::string leader_addr = leader.address();
  FakeServer old_node([&](const std::string& line) -> std::vector<std::string> {
    const auto f = fields(line);
    if (f[0] == "A" && f[1] == "queued") return {};  // answered later by push
    return {"M " + leader_addr + " " + f[1] + " " + f[2]};
  });
  Client client(options_for({old_node.address(), leader.address()}));
  std::optional<Result<Lock>> queued;
  std::thread waiter([&] { queued.emplace(client.acquire("queued", "k", 10'000, 5'000)); });
  ASSERT_TRUE(eventually([&] { return saw(old_node, "A queued k 10000 5000"); }, 5s));
  auto moved = client.acquire("other", "k2", 10'000);
  ASSERT_TRUE(moved.ok()) << moved.status().to_string();
  old_node.push("A 11 queued k");
  waiter.join();
  ASSERT_TRUE(queued->ok()) << queued->status().to_string();
  EXPECT_EQ(queued->value().token, 11u);
}

// C08: after close() keepers stop at once: no `K`, no reconnect; the lease
// then ends on its own.
TEST(ClientPlan, C08_CloseStopsKeepers) {
  LockdProcess lockd;
  Client client(options_for({addr(lockd.port())}));
  auto guard = client.lock("alice", "k", {.lease_ms = 900});
  ASSERT_TRUE(guard.ok());
  ASSERT_TRUE(eventually([&] { return guard->keeper()->kept_count() >= 1; }, 5s));
  client.close();
  const auto kept = guard->keeper()->kept_count();
  Client other(options_for({addr(lockd.port())}));
  EXPECT_TRUE(eventually([&] { return other.acquire("bob", "k", 10'000).ok(); }, 5s, 50ms));
  EXPECT_EQ(guard->keeper()->kept_count(), kept);
  EXPECT_EQ(client.acquire("carol", "x", 1'000).code(), Code::kUnreachable);
  EXPECT_EQ(guard->release().code, Code::kUnreachable);
  EXPECT_FALSE(guard->released());
}

// C09: a guard is released only once the server confirms; a release that
// failed can be retried through the guard.
TEST(ClientPlan, C09_ReleasedOnlyAfterConfirmationAndRetryable) {
  std::atomic<bool> leader_back{false};
  FakeServer node([&](const std::string& line) -> std::vector<std::string> {
    const auto f = fields(line);
    if (f[0] == "A") return {"A 8 " + f[1] + " " + f[2]};
    if (!leader_back) return {"E no_leader " + f[1] + " " + f[2]};
    return {"R " + f[1] + " " + f[2]};
  });
  Options o = options_for({node.address()});
  o.no_leader_budget = 200ms;
  Client client(o);
  auto guard = client.lock("alice", "k", {.lease_ms = 30'000, .keep = false});
  ASSERT_TRUE(guard.ok());
  EXPECT_EQ(guard->release().code, Code::kNoLeader);
  EXPECT_FALSE(guard->released());
  EXPECT_EQ(guard->token(), 8u);
  leader_back = true;
  const auto before = count_of(node, "R 8 k");
  EXPECT_TRUE(guard->release().ok());
  EXPECT_TRUE(guard->released());
  EXPECT_EQ(count_of(node, "R 8 k"), before + 1);
  EXPECT_TRUE(guard->release().ok());  // nothing left to do
  EXPECT_EQ(count_of(node, "R 8 k"), before + 1);
}

// C10: two threads sharing one owner acquire one key on one connection:
// the second waits in the client until the first is answered and goes
// out with the wait it has left — both are answered within their one wait
// (here `T`: someone else holds the key), neither is refused.
TEST(ClientPlan, C10_SecondAcquireOfSameOwnerAndKeyWaitsItsTurn) {
  LockdProcess lockd;
  Client holder(options_for({addr(lockd.port())}));
  ASSERT_TRUE(holder.acquire("someone", "k", 30'000).ok());
  Client client(options_for({addr(lockd.port())}));
  const auto start = Clock::now();
  Code codes[2] = {Code::kOk, Code::kOk};
  std::thread t0([&] { codes[0] = client.acquire("shared-owner", "k", 10'000, 2'000).code(); });
  std::thread t1([&] { codes[1] = client.acquire("shared-owner", "k", 10'000, 2'000).code(); });
  t0.join();
  t1.join();
  EXPECT_EQ(codes[0], Code::kTimedOut);
  EXPECT_EQ(codes[1], Code::kTimedOut);
  EXPECT_LT(Clock::now() - start, 3'500ms);  // one wait, not two
  // And once the key is free, the owner's next acquire is granted.
}

// C11: pushes (`V`, `X`) between pipelined replies are never replies.
TEST(ClientPlan, C11_PushesBetweenRepliesAreNotReplies) {
  FakeServer node([](const std::string& line) -> std::vector<std::string> {
    const auto f = fields(line);
    if (f[0] == "A") return {"V other 3 free", "X 99 zz", "A 5 " + f[1] + " " + f[2]};
    return {"V " + f[2] + " 7 held a 5", "R " + f[1] + " " + f[2], "V " + f[2] + " 8 free"};
  });
  Client client(options_for({node.address()}));
  auto lock = client.acquire("a", "k", 1'000);
  ASSERT_TRUE(lock.ok()) << lock.status().to_string();
  EXPECT_TRUE(client.release(lock.value()).ok());
  EXPECT_TRUE(client.acquire("b", "k", 1'000).ok());
}

// C12: watch(key) yields states in rev order; after its node goes away it
// watches again on another one and drops the state that is not newer.
TEST(ClientPlan, C12_WatchReconnectsAndDropsOlderStates) {
  auto first = std::make_unique<FakeServer>([](const std::string& line) -> std::vector<std::string> {
    if (line == "W k") return {"W k 5 held a 1"};
    return {};
  });
  FakeServer second([](const std::string& line) -> std::vector<std::string> {
    if (line == "W k") return {"W k 4 held a 1"};  // a follower behind the first node
    return {};
  });
  Client client(options_for({first->address(), second.address()}));
  auto watch = client.watch("k");
  auto e = watch->next(Clock::now() + 5s);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->rev, 5u);
  EXPECT_EQ(e->state.owner, "a");
  first->push("V k 6 free");
  e = watch->next(Clock::now() + 5s);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->rev, 6u);
  EXPECT_EQ(e->state.kind, KeyState::Kind::kFree);
  first.reset();  // the node goes away
  ASSERT_TRUE(eventually([&] { return saw(second, "W k"); }, 10s));
  ASSERT_TRUE(eventually([&] { return watch->connections() >= 2; }, 10s));
  second.push("V k 6 free");       // not newer: dropped
  second.push("V k 7 held b 2");
  e = watch->next(Clock::now() + 5s);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->rev, 7u);
  EXPECT_EQ(e->state.owner, "b");
  EXPECT_EQ(watch->last_rev(), 7u);
}

// C13: `X` for a kept lock stops the keeper and reports the loss at once,
// long before the next `K` would have found it.
TEST(ClientPlan, C13_KeeperStopsAtX) {
  FakeServer node([](const std::string& line) -> std::vector<std::string> {
    const auto f = fields(line);
    if (f[0] == "A") return {"A 8 " + f[1] + " " + f[2]};
    if (f[0] == "K") return {"K " + f[1] + " " + f[2]};
    return {"N " + f[1] + " " + f[2]};
  });
  Client client(options_for({node.address()}));
  std::atomic<bool> lost{false};
  auto guard = client.lock("alice", "k", {.lease_ms = 30'000, .on_lost = [&](const Status&) {
                                            lost = true;
                                          }});
  ASSERT_TRUE(guard.ok());
  const auto pushed = Clock::now();
  node.push("X 8 k");
  ASSERT_TRUE(eventually([&] { return lost.load(); }, 5s));
  EXPECT_LT(Clock::now() - pushed, 2s);
  EXPECT_NE(guard->keeper()->lost_reason().message.find("X"), std::string::npos);
  EXPECT_EQ(count_of(node, "K 8 k 30000"), 0u);
}

// C14: the election helper: campaign waits and wins, leader() and
// observe() see every change of leader (the same holding once), resign()
// releases, and `X` is a clear loss signal.
TEST(ClientPlan, C14_ElectionOnAFakeNode) {
  FakeServer node([](const std::string& line) -> std::vector<std::string> {
    const auto f = fields(line);
    if (f[0] == "A") return {"A 8 " + f[1] + " " + f[2]};
    if (f[0] == "W") return {"W " + f[1] + " 3 held node-a 8"};
    if (f[0] == "U") return {"U " + f[1]};  // leader()'s watch ends
    if (f[0] == "K") return {"K " + f[1] + " " + f[2]};
    return {"R " + f[1] + " " + f[2]};
  });
  Client client(options_for({node.address()}));
  std::atomic<bool> lost{false};
  Election election(client, "svc", {.lease_ms = 30'000, .on_lost = [&](const Status&) { lost = true; }});
  ASSERT_TRUE(election.campaign("node-a").ok());
  EXPECT_TRUE(election.leading());
  EXPECT_EQ(election.token(), 8u);
  auto leader = election.leader();
  ASSERT_TRUE(leader.ok());
  ASSERT_TRUE(leader->has_value());
  EXPECT_EQ(leader->value().value, "node-a");
  auto observer = election.observe();
  auto change = observer->next(Clock::now() + 5s);
  ASSERT_TRUE(change && change->has_value());
  EXPECT_EQ((*change)->value, "node-a");
  node.push("V svc 4 held node-a 8");  // the same holding: not a change
  node.push("V svc 5 free");
  change = observer->next(Clock::now() + 5s);
  ASSERT_TRUE(change.has_value());
  EXPECT_FALSE(change->has_value());  // nobody leads
  node.push("V svc 6 held node-b 9");
  change = observer->next(Clock::now() + 5s);
  ASSERT_TRUE(change && change->has_value());
  EXPECT_EQ((*change)->value, "node-b");
  node.push("X 8 svc");
  ASSERT_TRUE(eventually([&] { return lost.load() && election.lost(); }, 5s));
  EXPECT_TRUE(election.resign().ok());
  EXPECT_TRUE(saw(node, "R 8 svc"));
  EXPECT_FALSE(election.leading());
}

// C11 on a real lockd (v1.3 §5c): a connection that watches a key and
// changes it itself gets `V` pushes between its own pipelined replies;
// every reply still reaches its request and the pushes the handler.
TEST(ClientPlan, C11_PushesBetweenRepliesOnARealServer) {
  LockdProcess lockd;
  auto opened = Connection::open(*parse_address(addr(lockd.port())), 3s);
  ASSERT_TRUE(opened.ok()) << opened.status().to_string();
  auto& conn = *opened.value();
  std::mutex mu;
  std::vector<std::uint64_t> revs;
  conn.set_push_handler([&](const Reply& push) {
    const std::lock_guard lk(mu);
    if (push.kind == ReplyKind::kChanged && push.key == "k") revs.push_back(push.rev);
  });
  auto w = conn.submit(Request{Verb::kWatch, "", "k"});
  ASSERT_TRUE(w.ok());
  auto watching = conn.wait(w.value(), Clock::now() + 5s);
  ASSERT_TRUE(watching.ok()) << watching.status().to_string();
  EXPECT_EQ(watching->kind, ReplyKind::kWatching);
  for (int i = 0; i < 20; ++i) {
    Request a;
    a.verb = Verb::kAcquire;
    a.owner = "o" + std::to_string(i);
    a.key = "k";
    a.lease_ms = 10'000;
    auto ta = conn.submit(a);
    ASSERT_TRUE(ta.ok());
    auto granted = conn.wait(ta.value(), Clock::now() + 5s);
    ASSERT_TRUE(granted.ok()) << granted.status().to_string();
    ASSERT_EQ(granted->kind, ReplyKind::kAcquired);
    Request r;
    r.verb = Verb::kRelease;
    r.token = granted->token;
    r.key = "k";
    auto tr = conn.submit(r);
    ASSERT_TRUE(tr.ok());
    auto released = conn.wait(tr.value(), Clock::now() + 5s);
    ASSERT_TRUE(released.ok()) << released.status().to_string();
    ASSERT_EQ(released->kind, ReplyKind::kReleased);
  }
  ASSERT_TRUE(eventually([&] {
    const std::lock_guard lk(mu);
    return revs.size() >= 40;
  }, 5s));
  const std::lock_guard lk(mu);
  for (std::size_t i = 1; i < revs.size(); ++i) EXPECT_LT(revs[i - 1], revs[i]);
  EXPECT_GT(revs.front(), watching->rev);
  EXPECT_FALSE(conn.broken());
}

// C12 on a real lockd: states in rev order as another client takes and
// releases the key.
TEST(ClientPlan, C12_WatchOnARealServer) {
  LockdProcess lockd;
  Client client(options_for({addr(lockd.port())}));
  auto watch = client.watch("svc");
  auto e = watch->next(Clock::now() + 5s);
  ASSERT_TRUE(e.has_value()) << watch->status().to_string();
  EXPECT_EQ(e->state.kind, KeyState::Kind::kFree);
  Client other(options_for({addr(lockd.port())}));
  auto lock = other.acquire("alice", "svc", 10'000);
  ASSERT_TRUE(lock.ok());
  auto held = watch->next(Clock::now() + 5s);
  ASSERT_TRUE(held.has_value());
  EXPECT_EQ(held->state.kind, KeyState::Kind::kHeld);
  EXPECT_EQ(held->state.owner, "alice");
  EXPECT_EQ(held->state.token, lock->token);
  EXPECT_GT(held->rev, e->rev);
  ASSERT_TRUE(other.release(lock.value()).ok());
  auto freed = watch->next(Clock::now() + 5s);
  ASSERT_TRUE(freed.has_value());
  EXPECT_EQ(freed->state.kind, KeyState::Kind::kFree);
  EXPECT_GT(freed->rev, held->rev);
}

// C13 on a real lockd: the server's lease ends (the keeper was told a far
// longer one, so its first `K` would come after 10 s): the `X` push
// reports the loss at once.
TEST(ClientPlan, C13_KeeperStopsAtXOnARealServer) {
  LockdProcess lockd;
  Client client(options_for({addr(lockd.port())}));
  auto lock = client.acquire("alice", "k", 300);
  ASSERT_TRUE(lock.ok());
  Lock believed = lock.value();
  believed.lease_ms = 30'000;
  std::atomic<bool> lost{false};
  Keeper keeper(client, believed, [&](const Status&) { lost = true; });
  ASSERT_TRUE(eventually([&] { return lost.load(); }, 5s));
  EXPECT_NE(keeper.lost_reason().message.find("X"), std::string::npos)
      << keeper.lost_reason().to_string();
  EXPECT_EQ(keeper.kept_count(), 0u);
}

// C14 on a real lockd: a second candidate waits, observes the first as
// leader, and is elected when the first resigns.
TEST(ClientPlan, C14_ElectionOnARealServer) {
  LockdProcess lockd;
  Client a(options_for({addr(lockd.port())}));
  Client b(options_for({addr(lockd.port())}));
  Election first(a, "election/x", {.lease_ms = 3'000});
  Election second(b, "election/x", {.lease_ms = 3'000, .wait_ms = 1'000});
  ASSERT_TRUE(first.campaign("node-a").ok());
  auto now = second.leader();
  ASSERT_TRUE(now.ok()) << now.status().to_string();
  ASSERT_TRUE(now->has_value());
  EXPECT_EQ(now->value().value, "node-a");
  EXPECT_EQ(now->value().token, first.token());
  auto observer = second.observe();
  auto seen = observer->next(Clock::now() + 5s);
  ASSERT_TRUE(seen && seen->has_value());
  EXPECT_EQ((*seen)->value, "node-a");
  std::atomic<bool> elected{false};
  std::thread campaign([&] { elected = second.campaign("node-b", Clock::now() + 20s).ok(); });
  std::this_thread::sleep_for(1'500ms);  // more than one round of waiting
  EXPECT_FALSE(elected.load());
  EXPECT_TRUE(first.resign().ok());
  campaign.join();
  ASSERT_TRUE(elected.load());
  EXPECT_GT(second.token(), 0u);
  // The observer saw the hand-over: maybe "nobody" first, then node-b.
  std::optional<Leader> last;
  while (auto change = observer->next(Clock::now() + 2s)) {
    last = *change;
    if (last && last->value == "node-b") break;
  }
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ(last->value, "node-b");
  EXPECT_FALSE(second.lost());
  EXPECT_TRUE(second.resign().ok());
}

}  // namespace
}  // namespace lockd::client
