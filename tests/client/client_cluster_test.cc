// The C++ client against a real cluster: three `lockd --mode cluster`
// processes on loopback (tests/support/lockd_cluster.h), for what the
// FakeServer tests in client_test.cc can only script: a follower's real
// `M`, a leader killed with -9 while the client holds a lock (and while the
// keeper extends it), a cluster that lost its majority, a paused node.
// Every wait is a poll against a generous deadline (eventually()).
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "eventually.h"
#include "lockd/client/client.h"
#include "lockd_cluster.h"

namespace lockd::client {

// Readable codes in failure messages.
void PrintTo(Code code, std::ostream* os) { *os << code_name(code); }

namespace {

using namespace std::chrono_literals;
using testing::eventually;
using testing::LockdCluster;

// The other nodes of a three-node cluster, in id order.
std::vector<int> others(int id) {
  std::vector<int> out;
  for (int i = 1; i <= 3; ++i) {
    if (i != id) out.push_back(i);
  }
  return out;
}

// True once node `id` names `leader` as its leader (a follower learns of
// it from the first append, which may still be on its way when the
// leader already serves).
bool knows_leader(LockdCluster& c, int id, int leader) {
  return c.status_json(id).find("\"leader\":\"" + c.client_addr(leader) + "\"") !=
         std::string::npos;
}

// The leader, once both followers name it (0 if that never happens): a
// follower that does not know the leader yet would answer `E no_leader`.
int settled_leader(LockdCluster& c) {
  const int leader = c.wait_leader();
  if (leader == 0) return 0;
  for (const int f : others(leader)) {
    if (!eventually([&] { return knows_leader(c, f, leader); })) {
      ADD_FAILURE() << "node " << f << " never named the leader: " << c.status_json(f);
      return 0;
    }
  }
  return leader;
}

Options options_for(LockdCluster& c, const std::vector<int>& ids) {
  Options o;
  o.addresses.clear();
  for (const int id : ids) o.addresses.push_back(c.client_addr(id));
  o.jitter_seed = 1;
  return o;
}

std::string echo(const Lock& lock) { return std::to_string(lock.token) + " " + lock.key; }

// The first address is a follower: the acquire is redirected (a real `M`)
// and granted by the leader, which then takes the release.
TEST(ClientRealCluster, FollowsAFollowersRedirectToTheLeader) {
  LockdCluster c(3);
  const int leader = settled_leader(c);
  ASSERT_NE(leader, 0);
  const auto followers = others(leader);
  // Both followers before the leader: only following `M` reaches it at once.
  Client client(options_for(c, {followers[0], followers[1], leader}));
  auto lock = client.acquire("alice", "k1", 30'000);
  ASSERT_TRUE(lock.ok()) << lock.status().to_string();
  EXPECT_GT(lock->token, 1'700'000'000'000'000'000ull);  // a cluster token (§10)
  // Held at the leader, by that token.
  EXPECT_EQ(call_leader(c, "A bob k1"), "T bob k1");
  EXPECT_EQ(call_leader(c, "K " + echo(lock.value()) + " 30000"), "K " + echo(lock.value()));
  // The client's release reaches the leader: the key is free again.
  EXPECT_TRUE(client.release(lock.value()).ok());
  EXPECT_EQ(call_leader(c, "R " + echo(lock.value())), "N " + echo(lock.value()));
  auto again = client.acquire("bob", "k1", 30'000);
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_GT(again->token, lock->token);
  EXPECT_TRUE(client.release(again.value()).ok());

  // Given only a follower, the client reaches the leader by its `M` alone.
  Client lone(options_for(c, {followers[1]}));
  auto via_m = lone.acquire("carol", "k2", 30'000);
  ASSERT_TRUE(via_m.ok()) << via_m.status().to_string();
  EXPECT_EQ(call_leader(c, "A bob k2"), "T bob k2");
  EXPECT_TRUE(lone.release(via_m.value()).ok());
  EXPECT_EQ(call_leader(c, "R " + echo(via_m.value())), "N " + echo(via_m.value()));
}

// The leader dies (-9) while the client holds a lock. The same Client
// object, with no help from the test (it is not told who leads next),
// rides through the election: the release right after the kill reaches
// the new leader, where the lock survived, and later acquires go there.
TEST(ClientRealCluster, ReleasesAtTheNewLeaderAfterTheLeaderIsKilled) {
  LockdCluster c(3);
  const int leader = settled_leader(c);
  ASSERT_NE(leader, 0);
  const auto followers = others(leader);
  Client client(options_for(c, {leader, followers[0], followers[1]}));
  auto lock = client.acquire("alice", "k1", 60'000);
  ASSERT_TRUE(lock.ok()) << lock.status().to_string();
  auto other = client.acquire("alice", "k2", 60'000);
  ASSERT_TRUE(other.ok()) << other.status().to_string();

  c.kill9(leader);
  // At once: the followers still name the dead leader for a moment, then
  // know none, then the new one. All within the no-leader budget (10 s).
  const Status released = client.release(lock.value());
  EXPECT_TRUE(released.ok()) << released.to_string();
  const int next = c.wait_leader();
  ASSERT_NE(next, 0);
  EXPECT_NE(next, leader);
  // k2 survived the failover too, with its token.
  EXPECT_EQ(call_leader(c, "A bob k2"), "T bob k2");
  // New acquires go through the new leader, with larger tokens.
  auto taken = client.acquire("bob", "k1", 60'000);
  ASSERT_TRUE(taken.ok()) << taken.status().to_string();
  EXPECT_GT(taken->token, other->token);
  EXPECT_EQ(client.acquire("carol", "k1", 1'000).code(), Code::kTimedOut);
  EXPECT_TRUE(client.release(other.value()).ok());
  EXPECT_TRUE(client.release(taken.value()).ok());
  EXPECT_EQ(client.release(lock.value()).code, Code::kNotHeld);
}

// A client's watches share one connection to one member (any member serves
// watches). That member is killed with -9: the watches move together to
// another member, over one new connection, and see the changes made after
// (states in rev order, none older than what they had).
TEST(ClientRealCluster, WatchesMoveTogetherWhenTheirMemberIsKilled) {
  LockdCluster c(3);
  const int leader = settled_leader(c);
  ASSERT_NE(leader, 0);
  const auto followers = others(leader);
  // Watches start at a follower (the first address); requests go to the leader.
  Client watcher(options_for(c, {followers[0], followers[1], leader}));
  std::vector<std::unique_ptr<Watch>> watches;
  for (int i = 0; i < 40; ++i) watches.push_back(watcher.watch(i % 2 == 0 ? "even" : "odd"));
  for (auto& w : watches) ASSERT_TRUE(w->next(Clock::now() + 20s).has_value()) << w->status().to_string();
  EXPECT_EQ(watches[0]->connections(), 1u);

  c.kill9(followers[0]);
  Client writer(options_for(c, {leader, followers[1]}));
  auto lock = writer.acquire("alice", "even", 60'000);
  ASSERT_TRUE(lock.ok()) << lock.status().to_string();
  for (auto& w : watches) {
    if (w->key() != "even") continue;
    std::optional<WatchEvent> held;
    // The state the new member answers W with may come first (it may
    // already show alice); then alice's grant, if not yet seen.
    while (auto e = w->next(Clock::now() + 20s)) {
      if (e->state.kind == KeyState::Kind::kHeld) {
        held = e;
        break;
      }
    }
    ASSERT_TRUE(held.has_value()) << w->status().to_string();
    EXPECT_EQ(held->state.owner, "alice");
    EXPECT_EQ(held->state.token, lock->token);
  }
  EXPECT_EQ(watches[0]->connections(), 2u);  // one reconnect for all forty
  for (auto& w : watches) EXPECT_TRUE(w->status().ok()) << w->status().to_string();
  EXPECT_TRUE(writer.release(lock.value()).ok());
}

// The keeper extends a lease through a leader's -9: the lease (3 s) is far
// longer than the failover, so a `K` is confirmed by the new leader before
// the lease's safe end, and nobody else can take the key meanwhile.
TEST(ClientRealCluster, KeeperHoldsTheLockAcrossALeaderKill) {
  LockdCluster c(3);
  const int leader = c.wait_leader();
  ASSERT_NE(leader, 0);
  const auto followers = others(leader);
  Client client(options_for(c, {leader, followers[0], followers[1]}));
  std::atomic<int> lost_calls{0};
  auto guard = client.lock("alice", "k1", {.lease_ms = 3'000, .on_lost = [&](const Status&) {
                                             ++lost_calls;
                                           }});
  ASSERT_TRUE(guard.ok()) << guard.status().to_string();
  const Keeper& keeper = *guard->keeper();
  // One `K` confirmed by the old leader (every second).
  ASSERT_TRUE(eventually([&] { return keeper.kept_count() >= 1; }));
  c.kill9(leader);
  const std::uint64_t kept_before = keeper.kept_count();
  // Two more confirmed after the kill: by the new leader.
  ASSERT_TRUE(eventually([&] { return keeper.kept_count() >= kept_before + 2 || keeper.lost(); }));
  EXPECT_FALSE(guard->lost()) << keeper.lost_reason().to_string();
  EXPECT_NE(c.wait_leader(), leader);
  EXPECT_EQ(call_leader(c, "A bob k1"), "T bob k1");
  const Lock held = guard->lock();
  EXPECT_TRUE(guard->release().ok());
  EXPECT_EQ(call_leader(c, "R " + echo(held)), "N " + echo(held));
  EXPECT_EQ(lost_calls.load(), 0);
}

// With two of three nodes killed nothing commits, so no `K` can be
// confirmed: the keeper reports the loss once, at the lease's safe end —
// not at the first failed `K`, and not only when the client's no-leader
// budget (10 s) runs out.
TEST(ClientRealCluster, KeeperReportsLossWhenTheClusterLosesItsMajority) {
  LockdCluster c(3);
  const int leader = c.wait_leader();
  ASSERT_NE(leader, 0);
  const auto followers = others(leader);
  Client client(options_for(c, {leader, followers[0], followers[1]}));
  constexpr auto kLease = 1'500ms;
  std::atomic<int> lost_calls{0};
  auto guard = client.lock("alice", "k1", {.lease_ms = kLease.count(), .on_lost = [&](const Status&) {
                                             ++lost_calls;
                                           }});
  ASSERT_TRUE(guard.ok()) << guard.status().to_string();
  const Keeper& keeper = *guard->keeper();
  ASSERT_TRUE(eventually([&] { return keeper.kept_count() >= 1; }));
  // The last confirmed `K` was sent at most a third of the lease (and a
  // round trip) ago, so its safe end is at least 2/3 of a lease away.
  const auto killed_at = Clock::now();
  c.kill9(leader);
  c.kill9(followers[0]);
  ASSERT_TRUE(eventually([&] { return guard->lost(); }));
  const auto lost_after = Clock::now() - killed_at;
  EXPECT_GE(lost_after, kLease / 2);
  EXPECT_LT(lost_after, kLease + 3'000ms);  // slack for a loaded sanitizer run, far below 10 s
  EXPECT_EQ(keeper.lost_reason().code, Code::kNotHeld) << keeper.lost_reason().to_string();
  EXPECT_EQ(lost_calls.load(), 1);
  // A majority again, so the guard's release (R or N) does not spend the
  // whole no-leader budget.
  c.start(followers[0]);
}

// A leader that is paused (SIGSTOP) keeps its connections but answers
// nothing. A `K` sent to it gets no reply within the reply timeout; the
// keeper retries, and the client sends the retry to another node, which
// redirects it to the new leader, before the lease's safe end.
TEST(ClientRealCluster, KeeperMovesOnFromAPausedLeader) {
  LockdCluster c(3);
  const int leader = c.wait_leader();
  ASSERT_NE(leader, 0);
  const auto followers = others(leader);
  Options o = options_for(c, {leader, followers[0], followers[1]});
  o.reply_timeout = 500ms;
  Client client(o);
  auto guard = client.lock("alice", "k1", {.lease_ms = 3'000});
  ASSERT_TRUE(guard.ok()) << guard.status().to_string();
  const Keeper& keeper = *guard->keeper();
  ASSERT_TRUE(eventually([&] { return keeper.kept_count() >= 1; }));
  c.signal(leader, SIGSTOP);
  const std::uint64_t kept_before = keeper.kept_count();
  ASSERT_TRUE(eventually([&] { return keeper.kept_count() >= kept_before + 2 || keeper.lost(); }));
  EXPECT_FALSE(guard->lost()) << keeper.lost_reason().to_string();
  EXPECT_EQ(call_leader(c, "A bob k1", leader), "T bob k1");
  EXPECT_TRUE(guard->release().ok());
  c.signal(leader, SIGCONT);
}

// A follower that is paused (SIGSTOP) still accepts connections (the
// kernel does), but never answers. The request sent to it ends as
// kIndeterminate after the reply timeout (it may have been processed, as
// far as the client can know), and the next request tries the next node
// instead of the same silent one.
TEST(ClientRealCluster, MovesOnFromAPausedFollower) {
  LockdCluster c(3);
  const int leader = settled_leader(c);
  ASSERT_NE(leader, 0);
  const auto followers = others(leader);
  const int paused = followers[0];
  c.signal(paused, SIGSTOP);
  Options o = options_for(c, {paused, leader, followers[1]});
  o.reply_timeout = 300ms;
  Client client(o);
  const auto start = Clock::now();
  auto first = client.acquire("alice", "k1", 30'000);
  EXPECT_EQ(first.code(), Code::kIndeterminate) << first.status().to_string();
  EXPECT_GE(Clock::now() - start, 300ms);
  auto second = client.acquire("alice", "k1", 30'000);
  ASSERT_TRUE(second.ok()) << second.status().to_string();
  EXPECT_TRUE(client.release(second.value()).ok());
  // And the client stays with the leader: later calls do not time out.
  const auto later = Clock::now();
  auto third = client.acquire("alice", "k1", 30'000);
  ASSERT_TRUE(third.ok()) << third.status().to_string();
  EXPECT_TRUE(client.release(third.value()).ok());
  EXPECT_LT(Clock::now() - later, 300ms * 2);
  c.signal(paused, SIGCONT);
}

// Shared holds through a real cluster: read locks and semaphore permits
// taken via a follower's `M`, each replicated with its own token; the
// leader killed with -9; after the election every holder is still there
// (the writer still waits, the full pool still refuses), each is released
// alone at the new leader, and the queued writer is granted last.
TEST(ClientRealCluster, SharedHoldersSurviveALeaderKill) {
  LockdCluster c(3);
  const int leader = settled_leader(c);
  ASSERT_NE(leader, 0);
  const auto followers = others(leader);
  Client client(options_for(c, {followers[0], leader, followers[1]}));
  auto r1 = client.lock_shared("r1", "cfg", {.lease_ms = 60'000, .keep = false});
  auto r2 = client.lock_shared("r2", "cfg", {.lease_ms = 60'000, .keep = false});
  ASSERT_TRUE(r1.ok()) << r1.status().to_string();
  ASSERT_TRUE(r2.ok()) << r2.status().to_string();
  EXPECT_GT(r2->token(), r1->token());
  Semaphore pool(client, "pool", 2);
  auto p1 = pool.acquire("p1", {.lease_ms = 60'000, .keep = false});
  auto p2 = pool.acquire("p2", {.lease_ms = 60'000, .keep = false});
  ASSERT_TRUE(p1.ok() && p2.ok());
  EXPECT_EQ(pool.acquire("p3", {.lease_ms = 1'000}).code(), Code::kTimedOut);

  c.kill9(leader);
  // Right after the kill: one reader leaves (rides through the election).
  const Status s1 = r1->release();
  ASSERT_TRUE(s1.ok()) << s1.to_string();
  ASSERT_NE(c.wait_leader(), 0);
  // The other reader is still there: a writer waits for it.
  EXPECT_EQ(call_leader(c, "A w cfg"), "T w cfg");
  EXPECT_EQ(call_leader(c, "S p3 pool 2"), "T p3 pool");  // both permits survived
  EXPECT_EQ(call_leader(c, "S x pool 3"), "E limit_mismatch x pool");
  EXPECT_TRUE(p1->release().ok());
  auto p3 = pool.acquire("p3", {.lease_ms = 60'000, .keep = false});
  ASSERT_TRUE(p3.ok()) << p3.status().to_string();
  EXPECT_GT(p3->token(), p2->token());  // p2 still holds: its token is readable
  EXPECT_TRUE(r2->release().ok());
  auto w = client.acquire("w", "cfg", 1'000);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  EXPECT_TRUE(client.release(w.value()).ok());
  EXPECT_TRUE(p2->release().ok());
  EXPECT_TRUE(p3->release().ok());
}

}  // namespace
}  // namespace lockd::client
