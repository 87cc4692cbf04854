// The lock table against every row of protocol.md §5, §6, §6a, §8 and §9.
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
  KeepOutcome keep(Token t, std::string_view key, std::uint64_t lease_ms) {
    auto r = table_.keep(now_, t, key, lease_ms);
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
  EXPECT_TRUE(table_.cancel_waiter(now_, bob, out_));
  EXPECT_FALSE(table_.cancel_waiter(now_, bob, out_));
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
  // Straight on the table: check_invariants() walks the index, so calling
  // it 100,000 times would make this test slow, not stronger.
  for (WaiterId w = 1'000'000; w < 1'100'000; ++w) {
    ASSERT_EQ(table_.acquire(now_, {"w", "k", 1000, 60'000, 1, w}).outcome,
              AcquireOutcome::kQueued);
    // Every refill of the queue arms the same lease end again.
    ASSERT_LE(table_.deadline_count(), 2'000u);
    ASSERT_TRUE(table_.cancel_waiter(now_, w, out_));
  }
  table_.check_invariants();
  EXPECT_EQ(table_.waiter_count(), 0u);
  // The stale entries were compacted away; nothing is due for an hour.
  advance_to(now_ + 60'001 * kMs);
  EXPECT_TRUE(take().empty());
}

// --- §6a keep ---

TEST_F(LockTableTest, KeepLiveLeaseMovesExpiryKeepsTokenOwnerAndQueue) {
  auto r = acquire("alice", "k", 1000);
  now_ += 400 * kMs;
  EXPECT_EQ(keep(r.token, "k", 5000), KeepOutcome::kKept);
  const KeyState* s = table_.find("k");
  EXPECT_EQ(s->token, r.token);
  EXPECT_EQ(s->owner, "alice");
  EXPECT_EQ(s->expires_at_ns, now_ + 5000 * kMs);
  // The lease counts from the grant, so the grant time stays derivable.
  EXPECT_EQ(s->lease_ms, 5400u);
  EXPECT_EQ(table_.stats().keeps, 1u);
  EXPECT_EQ(table_.stats().grants, 1u);  // no new token
}

TEST_F(LockTableTest, KeepRoundsUpToAWholeMillisecondAfterTheGrant) {
  auto r = acquire("alice", "k", 1000);
  const TimeNs granted = now_;
  now_ += 400 * kMs + 1;  // 1 ns past a whole millisecond
  ASSERT_EQ(keep(r.token, "k", 1000), KeepOutcome::kKept);
  const KeyState* s = table_.find("k");
  EXPECT_EQ(s->expires_at_ns, granted + 1401 * kMs);  // under 1 ms more than asked
  EXPECT_GE(s->expires_at_ns, now_ + 1000 * kMs);
  EXPECT_EQ(s->expires_at_ns - ms_to_ns(s->lease_ms), granted);
}

TEST_F(LockTableTest, KeepEndedLeaseIsNEvenBeforeSweepOrTakeover) {
  auto r = acquire("alice", "k", 100);
  now_ += 100 * kMs;  // at expires_at the lease is over
  EXPECT_EQ(keep(r.token, "k", 5000), KeepOutcome::kNotKept);
  const KeyState* s = table_.find("k");
  ASSERT_NE(s, nullptr);  // still registered: not swept
  EXPECT_EQ(s->expires_at_ns, now_);  // not revived
  now_ += 50 * kMs;
  EXPECT_EQ(keep(r.token, "k", 5000), KeepOutcome::kNotKept);
  EXPECT_EQ(acquire("bob", "k", 1000).outcome, AcquireOutcome::kGranted);  // takeover still works
  EXPECT_EQ(table_.stats().keeps, 0u);
}

TEST_F(LockTableTest, KeepWrongTokenIsNAndChangesNothing) {
  auto r = acquire("alice", "k", 1000);
  const TimeNs expiry = table_.find("k")->expires_at_ns;
  EXPECT_EQ(keep(r.token + 1, "k", 5000), KeepOutcome::kNotKept);
  EXPECT_EQ(keep(r.token - 1, "k", 5000), KeepOutcome::kNotKept);
  EXPECT_EQ(table_.find("k")->expires_at_ns, expiry);
  EXPECT_EQ(table_.find("k")->token, r.token);
}

TEST_F(LockTableTest, KeepUnregisteredKeyIsN) {
  EXPECT_EQ(keep(kFirst, "nope", 1000), KeepOutcome::kNotKept);
  auto r = acquire("alice", "k", 1000);
  EXPECT_EQ(keep(r.token, "other", 1000), KeepOutcome::kNotKept);
  ASSERT_EQ(release(r.token, "k"), ReleaseOutcome::kReleased);
  EXPECT_EQ(keep(r.token, "k", 1000), KeepOutcome::kNotKept);  // released: gone
  EXPECT_EQ(table_.key_count(), 0u);
}

TEST_F(LockTableTest, KeepCanShortenAndSweepAndTakeoverFollowIt) {
  auto r = acquire("alice", "k", 10'000);
  now_ += 100 * kMs;
  ASSERT_EQ(keep(r.token, "k", 200), KeepOutcome::kKept);
  EXPECT_EQ(table_.find("k")->expires_at_ns, now_ + 200 * kMs);
  EXPECT_EQ(acquire("bob", "k", 1000).outcome, AcquireOutcome::kHeld);
  now_ += 200 * kMs;  // the shortened lease is over, the first would not be
  EXPECT_EQ(table_.sweep(now_), 1u);
  EXPECT_EQ(table_.find("k"), nullptr);

  auto r2 = acquire("alice", "k2", 10'000);
  ASSERT_EQ(keep(r2.token, "k2", 200), KeepOutcome::kKept);
  now_ += 200 * kMs;
  auto taken = acquire("bob", "k2", 1000);  // lazy takeover at the new expiry
  EXPECT_EQ(taken.outcome, AcquireOutcome::kGranted);
  EXPECT_GT(taken.token, r2.token);
}

TEST_F(LockTableTest, KeepExtendsPastFirstLeaseForSweepAndTakeover) {
  auto r = acquire("alice", "k", 100);
  now_ += 50 * kMs;
  ASSERT_EQ(keep(r.token, "k", 1000), KeepOutcome::kKept);
  now_ += 100 * kMs;  // past the first lease, inside the kept one
  EXPECT_EQ(table_.sweep(now_), 0u);
  EXPECT_EQ(acquire("bob", "k", 1000).outcome, AcquireOutcome::kHeld);
  EXPECT_EQ(keep(r.token, "k", 1000), KeepOutcome::kKept);  // again, still live
  EXPECT_EQ(release(r.token, "k"), ReleaseOutcome::kReleased);
}

TEST_F(LockTableTest, KeepWithWaitersMovesHandOffLater) {
  auto r = acquire("alice", "k", 200);
  acquire("bob", "k", 1000, 60'000);
  EXPECT_EQ(*table_.next_deadline(), now_ + 200 * kMs);
  now_ += 100 * kMs;
  ASSERT_EQ(keep(r.token, "k", 500), KeepOutcome::kKept);  // lease end: +200 -> +600
  const TimeNs new_end = now_ + 500 * kMs;
  advance_to(now_ + 100 * kMs);  // the old lease end passes: its entry is stale
  EXPECT_TRUE(take().empty());
  EXPECT_EQ(table_.find("k")->token, r.token);
  EXPECT_EQ(table_.stats().expirations, 0u);
  EXPECT_EQ(*table_.next_deadline(), new_end);
  advance_to(new_end - 1);
  EXPECT_TRUE(take().empty());
  advance_to(new_end);
  auto d = take();
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].owner, "bob");
  EXPECT_GT(d[0].token, r.token);
  EXPECT_EQ(table_.stats().handoffs_expiry, 1u);
}

TEST_F(LockTableTest, KeepWithWaitersMovesHandOffEarlier) {
  auto r = acquire("alice", "k", 10'000);
  acquire("bob", "k", 1000, 60'000);
  now_ += 100 * kMs;
  ASSERT_EQ(keep(r.token, "k", 300), KeepOutcome::kKept);
  const TimeNs new_end = now_ + 300 * kMs;
  EXPECT_EQ(*table_.next_deadline(), new_end);  // the timer must come sooner
  advance_to(new_end - 1);
  EXPECT_TRUE(take().empty());
  advance_to(new_end);
  auto d = take();
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].owner, "bob");
  // bob's own lease runs from the hand-off; the old entry at +10 s is
  // stale (other token) and hands nothing off when it passes.
  advance_to(now_ + 10'000 * kMs);
  for (const auto& x : take()) EXPECT_NE(x.kind, DeliveryKind::kGranted);
}

TEST_F(LockTableTest, KeepBackAndForthLeavesOneLiveHandOff) {
  auto r = acquire("alice", "k", 1000);
  acquire("bob", "k", 1000, 60'000);
  acquire("carol", "k", 1000, 60'000);
  // Same `now`: the expiry alternates between two values, so entries for
  // the first value come back to life; only one may hand the key off.
  for (int i = 0; i < 10; ++i) {
    ASSERT_EQ(keep(r.token, "k", i % 2 == 0 ? 2000 : 1000), KeepOutcome::kKept);
  }
  const TimeNs end = now_ + 2000 * kMs;
  advance_to(end);
  auto d = take();
  ASSERT_EQ(d.size(), 1u);  // bob, not bob and then carol
  EXPECT_EQ(d[0].owner, "bob");
  EXPECT_EQ(table_.find("k")->expires_at_ns, end + 1000 * kMs);
}

TEST_F(LockTableTest, KeepAfterHandOffWithOldTokenIsN) {
  auto r = acquire("alice", "k", 200);
  acquire("bob", "k", 1000, 60'000);
  advance_to(now_ + 200 * kMs);  // expiry hand-off to bob
  auto d = take();
  ASSERT_EQ(d.size(), 1u);
  const TimeNs bob_end = table_.find("k")->expires_at_ns;
  EXPECT_EQ(keep(r.token, "k", 5000), KeepOutcome::kNotKept);
  EXPECT_EQ(table_.find("k")->expires_at_ns, bob_end);
  EXPECT_EQ(keep(d[0].token, "k", 5000), KeepOutcome::kKept);  // bob's own token works

  // The same after a release hand-off.
  auto r2 = acquire("carol", "k2", 1000);
  acquire("dave", "k2", 1000, 60'000);
  ASSERT_EQ(release(r2.token, "k2"), ReleaseOutcome::kReleased);
  ASSERT_EQ(take().size(), 1u);
  EXPECT_EQ(keep(r2.token, "k2", 5000), KeepOutcome::kNotKept);
}

TEST_F(LockTableTest, DeadlineIndexStaysBoundedUnderKeeps) {
  auto r = acquire("alice", "k", 3'600'000);
  acquire("bob", "k", 1000, 300'000);
  for (int i = 0; i < 100'000; ++i) {
    now_ += kMs;
    ASSERT_EQ(table_.keep(now_, r.token, "k", 3'600'000), KeepOutcome::kKept);
    ASSERT_LE(table_.deadline_count(), 2'000u);
  }
  // Keeps that move the expiry back and forth within one `now` (a client
  // pipelining K lines read in one go) leave identical entries that are
  // all live whenever the expiry is back at their value.
  for (int i = 0; i < 100'000; ++i) {
    ASSERT_EQ(table_.keep(now_, r.token, "k", i % 2 == 0 ? 1000 : 2000), KeepOutcome::kKept);
    ASSERT_LE(table_.deadline_count(), 2'000u);
  }
  table_.check_invariants();
  EXPECT_EQ(table_.find("k")->waiter_count(), 1u);
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

// A waiter that queues at the very push that compacts the deadline heap
// (found by a 30,000-step simulator run): the holder's lease entry must
// survive that compaction, or the hand-off at the lease's end never comes
// and the queue starves. Each run puts the compaction at another push;
// one of them is the queueing acquire's own.
TEST(LockTableDeadlines, AWaiterQueuedAsTheHeapCompactsIsStillHandedTheKey) {
  for (std::size_t stale = 500; stale < 560; ++stale) {
    LockTable t({}, kFirst);
    const TimeNs now = 1'000 * kMs;
    WaiterId w = 1;
    ASSERT_EQ(t.acquire(now, {"h", "a", 60'000, 0, 1, w++}).outcome, AcquireOutcome::kGranted);
    ASSERT_EQ(t.acquire(now, {"h", "b", 1'000, 0, 1, w++}).outcome, AcquireOutcome::kGranted);
    // Stale entries: a waiter on `a` that leaves again (its lease entry
    // for `a` and its wait entry both turn stale).
    for (std::size_t i = 0; i < stale; ++i, ++w) {
      ASSERT_EQ(t.acquire(now, {"x", "a", 1'000, 60'000, 2, w}).outcome, AcquireOutcome::kQueued);
      std::vector<Delivery> none;
      ASSERT_TRUE(t.cancel_waiter(now, w, none));
      ASSERT_TRUE(none.empty());
    }
    const WaiterId last = w;
    ASSERT_EQ(t.acquire(now, {"y", "b", 1'000, 60'000, 3, last}).outcome, AcquireOutcome::kQueued);
    std::vector<Delivery> out;
    t.advance(now + 1'001 * kMs, out);
    ASSERT_EQ(out.size(), 1u) << "with " << stale << " stale waiters before";
    EXPECT_EQ(out[0].waiter, last);
    EXPECT_EQ(out[0].kind, DeliveryKind::kGranted);
    t.check_invariants();
  }
}

}  // namespace
}  // namespace lockd::locks

// Whom each holding was granted to (single mode's lost notice `X`): the
// acquire's client, a waiter's at a hand-off, each shared holder's own;
// taken once; gone with the holder.
namespace lockd::locks {
namespace {

TEST_F(LockTableTest, EachHoldingRemembersItsClientUntilTaken) {
  const Token t1 = acquire("alice", "k", 1000, 0, /*client=*/7).token;
  acquire("bob", "k", 1000, 60'000, /*client=*/8);  // queued
  EXPECT_EQ(table_.find("k")->granted_to, 7u);
  EXPECT_EQ(release(t1, "k"), ReleaseOutcome::kReleased);
  const auto handed = take();
  ASSERT_EQ(handed.size(), 1u);
  EXPECT_EQ(table_.find("k")->granted_to, 8u);  // the waiter's, at the hand-off
  EXPECT_EQ(table_.take_granted_to("k", t1), 0u);  // released: no such holder
  EXPECT_EQ(table_.take_granted_to("k", handed[0].token), 8u);
  EXPECT_EQ(table_.take_granted_to("k", handed[0].token), 0u);  // once
  EXPECT_EQ(table_.find("k")->token, handed[0].token);      // the holding itself stays
  EXPECT_EQ(table_.take_granted_to("nope", handed[0].token), 0u);

  auto s1 = table_.acquire(now_, {"r1", "s", 1000, 0, 21, next_waiter_++, true, 0});
  auto s2 = table_.acquire(now_, {"r2", "s", 1000, 0, 22, next_waiter_++, true, 0});
  table_.check_invariants();
  EXPECT_EQ(table_.take_granted_to("s", s2.token), 22u);
  EXPECT_EQ(table_.take_granted_to("s", s1.token), 21u);
  EXPECT_EQ(table_.take_granted_to("s", s1.token), 0u);
}

}  // namespace
}  // namespace lockd::locks
