// The lock table against every row of protocol.md §5, §6, §8 and §9.
#include "lockd/locks/lock_table.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace lockd::locks {
namespace {

constexpr TimeNs kMs = kNsPerMs;
constexpr Token kFirst = 1000;

class LockTableTest : public ::testing::Test {
 protected:
  explicit LockTableTest(Limits limits = {}) : table_(limits, kFirst) {}

  AcquireResult acquire(std::string_view owner, std::string_view key, std::uint64_t lease_ms,
                        std::uint64_t wait_ms = 0, ClientId client = 1) {
    const WaiterId w = next_waiter_++;
    last_waiter_ = w;
    auto r = table_.acquire(now_, {owner, key, lease_ms, wait_ms, client, w});
    table_.check_invariants();
    return r;
  }
  ReleaseOutcome release(Token t, std::string_view key) {
    auto r = table_.release(now_, t, key, out_);
    table_.check_invariants();
    return r;
  }
  void advance_to(TimeNs t) {
    now_ = t;
    table_.advance(now_, out_);
    table_.check_invariants();
  }
  std::vector<Delivery> take() { return std::exchange(out_, {}); }

  LockTable table_;
  TimeNs now_ = 1'000 * kMs;
  WaiterId next_waiter_ = 1;
  WaiterId last_waiter_ = 0;
  std::vector<Delivery> out_;
};

TEST_F(LockTableTest, AcquireUnregisteredKeyGrantsFirstToken) {
  auto r = acquire("alice", "k", 1000);
  EXPECT_EQ(r.outcome, AcquireOutcome::kGranted);
  EXPECT_EQ(r.token, kFirst);
  const KeyState* s = table_.find("k");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->owner, "alice");
  EXPECT_EQ(s->expires_at_ns, now_ + 1000 * kMs);
}

TEST_F(LockTableTest, AcquireHeldKeyWithoutWaitIsT) {
  acquire("alice", "k", 1000);
  EXPECT_EQ(acquire("bob", "k", 1000).outcome, AcquireOutcome::kHeld);
  EXPECT_EQ(table_.find("k")->owner, "alice");
}

TEST_F(LockTableTest, OwnerIsNoAuthority) {
  auto first = acquire("alice", "k", 1000);
  now_ += 500 * kMs;
  auto again = acquire("alice", "k", 1000);
  EXPECT_EQ(again.outcome, AcquireOutcome::kHeld);  // not the holder's token
  EXPECT_EQ(table_.find("k")->token, first.token);
  EXPECT_EQ(table_.find("k")->expires_at_ns, now_ - 500 * kMs + 1000 * kMs);  // not renewed
}

TEST_F(LockTableTest, ExpiredKeyIsTakenOverLazilyWithNewToken) {
  auto first = acquire("alice", "k", 100);
  now_ += 100 * kMs;  // expiry is inclusive: at expires_at the lease is over
  auto r = acquire("bob", "k", 1000);
  ASSERT_EQ(r.outcome, AcquireOutcome::kGranted);
  EXPECT_GT(r.token, first.token);
  EXPECT_EQ(table_.find("k")->owner, "bob");
  EXPECT_EQ(table_.stats().takeovers, 1u);
}

TEST_F(LockTableTest, TakeoverLeavesWaitersQueued) {
  acquire("alice", "k", 100);
  acquire("w1", "k", 1000, 10'000);
  now_ += 100 * kMs;  // alice expired but advance() has not run yet
  auto r = acquire("bob", "k", 1000);
  EXPECT_EQ(r.outcome, AcquireOutcome::kGranted);
  EXPECT_EQ(table_.find("k")->waiter_count(), 1u);
  // bob's lease ends at +1000ms; then w1 gets it.
  advance_to(now_ + 999 * kMs);
  EXPECT_TRUE(take().empty());
  advance_to(now_ + 1 * kMs);
  auto d = take();
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].owner, "w1");
  EXPECT_EQ(d[0].kind, DeliveryKind::kGranted);
}

TEST_F(LockTableTest, ReleaseMatchingTokenWithoutWaitersDeletesKey) {
  auto r = acquire("alice", "k", 1000);
  EXPECT_EQ(release(r.token, "k"), ReleaseOutcome::kReleased);
  EXPECT_EQ(table_.find("k"), nullptr);
  EXPECT_EQ(table_.key_count(), 0u);
}

TEST_F(LockTableTest, ReleaseWrongTokenKeepsLock) {
  auto r = acquire("alice", "k", 1000);
  EXPECT_EQ(release(r.token + 1, "k"), ReleaseOutcome::kNotReleased);
  EXPECT_EQ(table_.find("k")->token, r.token);
}

TEST_F(LockTableTest, ReleaseUnregisteredKeyIsN) {
  EXPECT_EQ(release(5, "nope"), ReleaseOutcome::kNotReleased);
}

TEST_F(LockTableTest, ReleaseHandsToFrontWaiterWithNewTokenAndItsLease) {
  auto held = acquire("alice", "k", 1000);
  acquire("bob", "k", 2500, 10'000, /*client=*/7);
  const WaiterId bob = last_waiter_;
  now_ += 10 * kMs;
  EXPECT_EQ(release(held.token, "k"), ReleaseOutcome::kReleased);
  auto d = take();
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].client, 7u);
  EXPECT_EQ(d[0].waiter, bob);
  EXPECT_EQ(d[0].kind, DeliveryKind::kGranted);
  EXPECT_GT(d[0].token, held.token);
  EXPECT_EQ(d[0].owner, "bob");
  EXPECT_EQ(d[0].key, "k");
  EXPECT_EQ(table_.find("k")->expires_at_ns, now_ + 2500 * kMs);
  EXPECT_EQ(table_.stats().handoffs_release, 1u);
}

TEST_F(LockTableTest, HandOffIsFifoOverManyWaiters) {
  auto held = acquire("holder", "k", 1000);
  constexpr int kWaiters = 500;
  for (int i = 0; i < kWaiters; ++i) {
    ASSERT_EQ(acquire("w" + std::to_string(i), "k", 1000, 60'000, i).outcome,
              AcquireOutcome::kQueued);
  }
  Token token = held.token;
  for (int i = 0; i < kWaiters; ++i) {
    ASSERT_EQ(release(token, "k"), ReleaseOutcome::kReleased);
    auto d = take();
    ASSERT_EQ(d.size(), 1u);
    EXPECT_EQ(d[0].owner, "w" + std::to_string(i));
    EXPECT_GT(d[0].token, token);
    token = d[0].token;
  }
  EXPECT_EQ(release(token, "k"), ReleaseOutcome::kReleased);
  EXPECT_EQ(table_.key_count(), 0u);
}

TEST_F(LockTableTest, ExpiryHandsKeyToFrontWaiterAtLeaseEnd) {
  auto held = acquire("alice", "k", 200);
  acquire("bob", "k", 1000, 10'000);
  ASSERT_TRUE(table_.next_deadline().has_value());
  EXPECT_EQ(*table_.next_deadline(), now_ + 200 * kMs);
  advance_to(now_ + 199 * kMs);
  EXPECT_TRUE(take().empty());
  advance_to(now_ + 1 * kMs);
  auto d = take();
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].owner, "bob");
  EXPECT_GT(d[0].token, held.token);
  EXPECT_EQ(table_.find("k")->expires_at_ns, now_ + 1000 * kMs);
  EXPECT_EQ(table_.stats().handoffs_expiry, 1u);
  EXPECT_EQ(release(held.token, "k"), ReleaseOutcome::kNotReleased);
}

TEST_F(LockTableTest, WaitTimeoutAnswersT) {
  acquire("alice", "k", 10'000);
  acquire("bob", "k", 1000, 300, /*client=*/9);
  advance_to(now_ + 299 * kMs);
  EXPECT_TRUE(take().empty());
  advance_to(now_ + 1 * kMs);
  auto d = take();
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].kind, DeliveryKind::kTimedOut);
  EXPECT_EQ(d[0].client, 9u);
  EXPECT_EQ(d[0].owner, "bob");
  EXPECT_EQ(table_.waiter_count(), 0u);
  EXPECT_EQ(table_.find("k")->waiter_count(), 0u);
}

TEST_F(LockTableTest, CancelledWaiterIsSkippedAndGetsNothing) {
  auto held = acquire("alice", "k", 1000);
  acquire("bob", "k", 1000, 10'000);
  const WaiterId bob = last_waiter_;
  acquire("carol", "k", 1000, 10'000);
  EXPECT_TRUE(table_.cancel_waiter(bob));
  EXPECT_FALSE(table_.cancel_waiter(bob));
  table_.check_invariants();
  release(held.token, "k");
  auto d = take();
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].owner, "carol");
  // bob's wait deadline passes with no reply.
  advance_to(now_ + 20'000 * kMs);
  for (const auto& x : take()) EXPECT_NE(x.owner, "bob");
}

TEST_F(LockTableTest, SweepDeletesOnlyExpiredKeysWithoutWaiters) {
  auto a = acquire("a", "expired", 100);
  acquire("b", "valid", 10'000);
  acquire("c", "expired-with-waiters", 100);
  acquire("d", "expired-with-waiters", 100, 60'000);
  now_ += 150 * kMs;
  // Before the sweep, an expired key can still be released.
  auto b = acquire("x", "expired2", 100);
  now_ += 150 * kMs;
  EXPECT_EQ(release(b.token, "expired2"), ReleaseOutcome::kReleased);
  EXPECT_EQ(table_.sweep(now_), 1u);  // "expired" only; the other has a waiter
  EXPECT_EQ(table_.find("expired"), nullptr);
  EXPECT_NE(table_.find("valid"), nullptr);
  EXPECT_NE(table_.find("expired-with-waiters"), nullptr);
  EXPECT_EQ(release(a.token, "expired"), ReleaseOutcome::kNotReleased);
}

TEST_F(LockTableTest, SweepInSlicesCoversEveryKey) {
  for (int i = 0; i < 5000; ++i) acquire("o", "k" + std::to_string(i), 100);
  acquire("o", "long", 100'000);
  now_ += 100 * kMs;
  std::size_t freed = 0;
  int slices = 0;
  while (!table_.sweep_step(now_, 64, freed)) ++slices;
  EXPECT_GT(slices, 10);
  EXPECT_EQ(freed, 5000u);
  EXPECT_EQ(table_.key_count(), 1u);
  EXPECT_EQ(table_.stats().sweeps, 1u);
  table_.check_invariants();
}

TEST_F(LockTableTest, TokensStrictlyIncreaseOverEveryKindOfGrant) {
  Token last = 0;
  auto check = [&](Token t) {
    EXPECT_GT(t, last);
    last = t;
  };
  check(acquire("a", "k1", 100).token);
  acquire("b", "k1", 100, 10'000);
  check(acquire("c", "k2", 100).token);
  advance_to(now_ + 100 * kMs);  // expiry hand-off k1 -> b
  auto d = take();
  ASSERT_EQ(d.size(), 1u);
  check(d[0].token);
  check(acquire("e", "k2", 100).token);  // lazy takeover
  check(acquire("f", "k3", 100).token);
}

TEST_F(LockTableTest, ExpireCommandChecksTokenAndDeadline) {
  auto r = acquire("alice", "k", 100);
  EXPECT_FALSE(table_.expire(now_ + 100 * kMs, "k", r.token + 1, out_));  // stale token
  EXPECT_FALSE(table_.expire(now_ + 99 * kMs, "k", r.token, out_));       // not yet
  EXPECT_TRUE(table_.expire(now_ + 100 * kMs, "k", r.token, out_));
  EXPECT_EQ(table_.find("k"), nullptr);
}

TEST_F(LockTableTest, DeadlineIndexStaysBoundedUnderWaiterChurn) {
  acquire("holder", "k", 3'600'000);
  for (int i = 0; i < 100'000; ++i) {
    acquire("w", "k", 1000, 60'000);
    ASSERT_TRUE(table_.cancel_waiter(last_waiter_));
  }
  EXPECT_EQ(table_.waiter_count(), 0u);
  // The stale entries were compacted away; nothing is due for an hour.
  advance_to(now_ + 60'001 * kMs);
  EXPECT_TRUE(take().empty());
}

class LockTableCapsTest : public LockTableTest {
 protected:
  LockTableCapsTest() : LockTableTest(Limits{3, 2, 3}) {}
};

TEST_F(LockTableCapsTest, KeyTableCapGivesBusyForNewKeysOnly) {
  acquire("a", "k1", 1000);
  acquire("a", "k2", 1000);
  auto k3 = acquire("a", "k3", 1000);
  EXPECT_EQ(acquire("a", "k4", 1000).outcome, AcquireOutcome::kBusy);
  EXPECT_EQ(acquire("b", "k1", 1000).outcome, AcquireOutcome::kHeld);  // existing key
  release(k3.token, "k3");
  EXPECT_EQ(acquire("a", "k4", 1000).outcome, AcquireOutcome::kGranted);
}

TEST_F(LockTableCapsTest, PerKeyQueueCapGivesBusy) {
  acquire("a", "k1", 1000);
  EXPECT_EQ(acquire("w1", "k1", 1000, 1000).outcome, AcquireOutcome::kQueued);
  EXPECT_EQ(acquire("w2", "k1", 1000, 1000).outcome, AcquireOutcome::kQueued);
  EXPECT_EQ(acquire("w3", "k1", 1000, 1000).outcome, AcquireOutcome::kBusy);
  EXPECT_EQ(acquire("w3", "k1", 1000, 0).outcome, AcquireOutcome::kHeld);
  EXPECT_EQ(table_.find("k1")->waiter_count(), 2u);
}

TEST_F(LockTableCapsTest, TotalWaitersCapGivesBusy) {
  acquire("a", "k1", 1000);
  acquire("a", "k2", 1000);
  acquire("w", "k1", 1000, 1000);
  acquire("w", "k1", 1000, 1000);
  acquire("w", "k2", 1000, 1000);
  EXPECT_EQ(acquire("w", "k2", 1000, 1000).outcome, AcquireOutcome::kBusy);
  EXPECT_EQ(table_.waiter_count(), 3u);
}

}  // namespace
}  // namespace lockd::locks
