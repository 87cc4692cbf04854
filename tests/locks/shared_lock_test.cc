// The lock table against every row and bullet of protocol.md §5b (v1.2):
// shared acquires (`S`), reader-writer locks and semaphores in one strict
// FIFO queue, per-holder tokens and leases, hand-off of runs of readers.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "lockd/locks/lock_table.h"

namespace lockd::locks {
namespace {

constexpr TimeNs kMs = kNsPerMs;
constexpr Token kFirst = 1000;

class SharedLockTest : public ::testing::Test {
 protected:
  explicit SharedLockTest(Limits limits = {}) : table_(limits, kFirst) {}

  AcquireResult s(std::string_view owner, std::string_view key, std::uint16_t limit,
                  std::uint64_t lease_ms = 1000, std::uint64_t wait_ms = 0, ClientId client = 1) {
    return run(owner, key, lease_ms, wait_ms, client, true, limit);
  }
  AcquireResult a(std::string_view owner, std::string_view key, std::uint64_t lease_ms = 1000,
                  std::uint64_t wait_ms = 0, ClientId client = 1) {
    return run(owner, key, lease_ms, wait_ms, client, false, 0);
  }
  AcquireResult run(std::string_view owner, std::string_view key, std::uint64_t lease_ms,
                    std::uint64_t wait_ms, ClientId client, bool shared, std::uint16_t limit) {
    last_waiter_ = next_waiter_++;
    auto r = table_.acquire(now_, {owner, key, lease_ms, wait_ms, client, last_waiter_, shared, limit});
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
  bool cancel(WaiterId w) {
    bool r = table_.cancel_waiter(now_, w, out_);
    table_.check_invariants();
    return r;
  }
  std::vector<Delivery> take() { return std::exchange(out_, {}); }
  // Owners of the key's holders, oldest first, as "a,b,c".
  std::string holders(std::string_view key) const {
    const KeyState* st = table_.find(key);
    if (st == nullptr) return "-";
    std::string out;
    st->for_each_holder([&](const Holder& h) {
      if (!out.empty()) out += ",";
      out += h.owner;
    });
    return out;
  }
  // Owners granted by the deliveries, in order, shared ones marked "s:".
  static std::string granted(const std::vector<Delivery>& d) {
    std::string out;
    for (const Delivery& x : d) {
      if (!out.empty()) out += ",";
      if (x.kind == DeliveryKind::kTimedOut) out += "T:";
      else if (x.shared) out += "s:";
      out += x.owner;
    }
    return out;
  }

  LockTable table_;
  TimeNs now_ = 1'000 * kMs;
  WaiterId next_waiter_ = 1;
  WaiterId last_waiter_ = 0;
  std::vector<Delivery> out_;
};

// --- §5b rows ---

TEST_F(SharedLockTest, NotRegisteredRegistersSharedWithNewToken) {
  auto r = s("r1", "k", 3, 500);
  ASSERT_EQ(r.outcome, AcquireOutcome::kGranted);
  EXPECT_EQ(r.token, kFirst);
  const KeyState* st = table_.find("k");
  ASSERT_NE(st, nullptr);
  EXPECT_TRUE(st->shared());
  EXPECT_EQ(st->limit(), 3);
  EXPECT_EQ(st->holder_count(), 1u);
  EXPECT_EQ(st->holder_with(r.token)->expires_at_ns, now_ + 500 * kMs);
  EXPECT_EQ(table_.holder_count(), 1u);
}

TEST_F(SharedLockTest, SameLimitBelowLimitAddsHolderWithItsOwnTokenAndLease) {
  auto r1 = s("r1", "k", 2, 500);
  now_ += 10 * kMs;
  auto r2 = s("r2", "k", 2, 900);
  ASSERT_EQ(r2.outcome, AcquireOutcome::kGranted);
  EXPECT_GT(r2.token, r1.token);
  const KeyState* st = table_.find("k");
  EXPECT_EQ(holders("k"), "r1,r2");
  EXPECT_EQ(st->holder_with(r1.token)->expires_at_ns, now_ - 10 * kMs + 500 * kMs);
  EXPECT_EQ(st->holder_with(r2.token)->expires_at_ns, now_ + 900 * kMs);
  EXPECT_EQ(table_.holder_count(), 2u);
  // Full: the third is T.
  EXPECT_EQ(s("r3", "k", 2).outcome, AcquireOutcome::kHeld);
}

TEST_F(SharedLockTest, LimitZeroHasNoCap) {
  for (int i = 0; i < 500; ++i) {
    ASSERT_EQ(s("r" + std::to_string(i), "k", 0).outcome, AcquireOutcome::kGranted);
  }
  EXPECT_EQ(table_.find("k")->holder_count(), 500u);
  EXPECT_EQ(table_.holder_count(), 500u);
  EXPECT_EQ(table_.key_count(), 1u);
}

TEST_F(SharedLockTest, OtherLimitOfLiveHoldersIsMismatch) {
  s("r1", "k", 2);
  EXPECT_EQ(s("r2", "k", 3).outcome, AcquireOutcome::kLimitMismatch);
  EXPECT_EQ(s("r2", "k", 0).outcome, AcquireOutcome::kLimitMismatch);
  // Even with a wait: nothing is queued.
  EXPECT_EQ(s("r2", "k", 3, 1000, 5000).outcome, AcquireOutcome::kLimitMismatch);
  EXPECT_EQ(table_.waiter_count(), 0u);
  EXPECT_EQ(table_.stats().limit_mismatches, 3u);
  EXPECT_EQ(holders("k"), "r1");
}

TEST_F(SharedLockTest, OtherLimitOfQueuedSharedWaitersIsMismatch) {
  a("w", "k");
  ASSERT_EQ(s("r1", "k", 4, 1000, 5000).outcome, AcquireOutcome::kQueued);
  EXPECT_EQ(s("r2", "k", 5, 1000, 5000).outcome, AcquireOutcome::kLimitMismatch);
  EXPECT_EQ(s("r2", "k", 4, 1000, 5000).outcome, AcquireOutcome::kQueued);
}

TEST_F(SharedLockTest, AnyLimitOnceNoLiveHolderNorQueuedShared) {
  s("r1", "k", 2, 100);
  now_ += 100 * kMs;  // r1's lease ended: it no longer carries the limit
  auto r = s("r2", "k", 7);
  ASSERT_EQ(r.outcome, AcquireOutcome::kGranted);
  EXPECT_EQ(table_.find("k")->limit(), 7);
  EXPECT_EQ(holders("k"), "r2");  // the ended holder was replaced
}

TEST_F(SharedLockTest, HeldExclusivelyIsTWithoutWait) {
  a("w", "k");
  EXPECT_EQ(s("r", "k", 0).outcome, AcquireOutcome::kHeld);
}

TEST_F(SharedLockTest, FullIsTWithoutWaitAndQueuedWithWait) {
  s("r1", "k", 1);
  EXPECT_EQ(s("r2", "k", 1).outcome, AcquireOutcome::kHeld);
  EXPECT_EQ(s("r2", "k", 1, 1000, 500).outcome, AcquireOutcome::kQueued);
  EXPECT_EQ(table_.waiter_count(), 1u);
}

TEST_F(SharedLockTest, SomebodyQueuedIsTEvenWithRoom) {
  s("r1", "k", 0);
  ASSERT_EQ(a("w", "k", 1000, 5000).outcome, AcquireOutcome::kQueued);
  // Room for readers, but a writer waits: no passing it.
  EXPECT_EQ(s("r2", "k", 0).outcome, AcquireOutcome::kHeld);
  EXPECT_EQ(s("r2", "k", 0, 1000, 5000).outcome, AcquireOutcome::kQueued);
  EXPECT_EQ(holders("k"), "r1");
}

TEST_F(SharedLockTest, ExclusiveAcquireOnSharedKey) {
  s("r1", "k", 0);
  EXPECT_EQ(a("w", "k").outcome, AcquireOutcome::kHeld);
  EXPECT_EQ(a("w", "k", 1000, 5000).outcome, AcquireOutcome::kQueued);
}

TEST_F(SharedLockTest, CapsGiveBusy) {
  LockTable t(Limits{1, 1, 10}, kFirst);
  ASSERT_EQ(t.acquire(now_, {"r1", "k", 1000, 0, 1, 1, true, 1}).outcome, AcquireOutcome::kGranted);
  // A new key past --max-keys.
  EXPECT_EQ(t.acquire(now_, {"r1", "k2", 1000, 0, 1, 2, true, 1}).outcome, AcquireOutcome::kBusy);
  // The key's queue full.
  EXPECT_EQ(t.acquire(now_, {"r2", "k", 1000, 100, 1, 3, true, 1}).outcome, AcquireOutcome::kQueued);
  EXPECT_EQ(t.acquire(now_, {"r3", "k", 1000, 100, 1, 4, true, 1}).outcome, AcquireOutcome::kBusy);
  // A shared holder of a shared key is not a key: limit 0 readers go on.
  LockTable u(Limits{1, 1, 10}, kFirst);
  for (WaiterId w = 1; w < 50; ++w) {
    ASSERT_EQ(u.acquire(now_, {"r", "k", 1000, 0, 1, w, true, 0}).outcome, AcquireOutcome::kGranted);
  }
  t.check_invariants();
  u.check_invariants();
}

// --- One queue, strict FIFO ---

TEST_F(SharedLockTest, WriterReleaseGrantsTheWholeRunOfReadersAndStopsAtNextWriter) {
  auto w1 = a("w1", "k");
  s("r1", "k", 0, 1000, 5000);
  s("r2", "k", 0, 1000, 5000);
  s("r3", "k", 0, 1000, 5000);
  a("w2", "k", 1000, 5000);
  s("r4", "k", 0, 1000, 5000);
  ASSERT_EQ(release(w1.token, "k"), ReleaseOutcome::kReleased);
  auto d = take();
  EXPECT_EQ(granted(d), "s:r1,s:r2,s:r3");
  EXPECT_LT(d[0].token, d[1].token);
  EXPECT_LT(d[1].token, d[2].token);
  EXPECT_EQ(holders("k"), "r1,r2,r3");
  EXPECT_EQ(table_.waiter_count(), 2u);
  EXPECT_EQ(table_.stats().handoffs_release, 3u);
  // The writer gets it once the last reader leaves, and r4 only after it.
  release(d[0].token, "k");
  release(d[1].token, "k");
  EXPECT_EQ(granted(take()), "");
  release(d[2].token, "k");
  auto d2 = take();
  EXPECT_EQ(granted(d2), "w2");
  EXPECT_FALSE(table_.find("k")->shared());
  release(d2[0].token, "k");
  EXPECT_EQ(granted(take()), "s:r4");
}

TEST_F(SharedLockTest, HandOffRespectsTheLimit) {
  auto w = a("w", "k");
  for (int i = 0; i < 5; ++i) s("r" + std::to_string(i), "k", 2, 1000, 5000);
  release(w.token, "k");
  auto d = take();
  EXPECT_EQ(granted(d), "s:r0,s:r1");
  EXPECT_EQ(table_.waiter_count(), 3u);
  // One permit back: exactly one more.
  release(d[0].token, "k");
  EXPECT_EQ(granted(take()), "s:r2");
}

TEST_F(SharedLockTest, ReaderQueuedBehindWriterIsNotAdmittedPastIt) {
  auto r1 = s("r1", "k", 0);
  a("w", "k", 1000, 5000);
  s("r2", "k", 0, 1000, 5000);
  EXPECT_EQ(holders("k"), "r1");
  release(r1.token, "k");
  EXPECT_EQ(granted(take()), "w");
  EXPECT_EQ(holders("k"), "w");
}

TEST_F(SharedLockTest, WriterDoesNotJumpReadersThatCameFirst) {
  auto r1 = s("r1", "k", 1);
  s("r2", "k", 1, 1000, 5000);
  a("w", "k", 1000, 5000);
  release(r1.token, "k");
  EXPECT_EQ(granted(take()), "s:r2");
}

// --- Lazy expiry: ended leases do not count ---

TEST_F(SharedLockTest, EndedSharedLeasesDoNotCountAgainstTheLimit) {
  s("r1", "k", 2, 100);
  s("r2", "k", 2, 1000);
  now_ += 100 * kMs;
  auto r3 = s("r3", "k", 2);
  ASSERT_EQ(r3.outcome, AcquireOutcome::kGranted);
  EXPECT_EQ(holders("k"), "r2,r3");
  EXPECT_EQ(s("r4", "k", 2).outcome, AcquireOutcome::kHeld);
}

TEST_F(SharedLockTest, ExclusiveTakesOverWhenEveryReaderLeaseEnded) {
  s("r1", "k", 0, 100);
  s("r2", "k", 0, 200);
  now_ += 150 * kMs;
  EXPECT_EQ(a("w", "k").outcome, AcquireOutcome::kHeld);  // r2 still live
  now_ += 50 * kMs;
  auto w = a("w", "k");
  ASSERT_EQ(w.outcome, AcquireOutcome::kGranted);
  EXPECT_FALSE(table_.find("k")->shared());
  EXPECT_EQ(holders("k"), "w");
  EXPECT_EQ(table_.holder_count(), 1u);
}

TEST_F(SharedLockTest, SharedTakesOverAnEndedExclusiveLease) {
  a("w", "k", 100);
  now_ += 100 * kMs;
  auto r = s("r", "k", 3);
  ASSERT_EQ(r.outcome, AcquireOutcome::kGranted);
  EXPECT_TRUE(table_.find("k")->shared());
  EXPECT_EQ(holders("k"), "r");
}

TEST_F(SharedLockTest, ExpiryOfOneReaderHandsItsPermitToTheFrontWaiter) {
  s("r1", "k", 2, 100);
  s("r2", "k", 2, 1000);
  s("r3", "k", 2, 1000, 5000);
  advance_to(now_ + 99 * kMs);
  EXPECT_TRUE(take().empty());
  advance_to(now_ + 1 * kMs);
  auto d = take();
  EXPECT_EQ(granted(d), "s:r3");
  EXPECT_EQ(holders("k"), "r2,r3");
  EXPECT_EQ(table_.stats().handoffs_expiry, 1u);
}

TEST_F(SharedLockTest, WriterWaitsForEveryReaderLeaseToEnd) {
  s("r1", "k", 0, 100);
  s("r2", "k", 0, 300);
  a("w", "k", 1000, 5000);
  advance_to(now_ + 100 * kMs);
  EXPECT_TRUE(take().empty());
  EXPECT_EQ(holders("k"), "r2");
  advance_to(now_ + 200 * kMs);
  EXPECT_EQ(granted(take()), "w");
}

TEST_F(SharedLockTest, SweepRemovesEndedSharedHoldersOneByOne) {
  s("r1", "k", 0, 100);
  auto r2 = s("r2", "k", 0, 300);
  now_ += 100 * kMs;
  EXPECT_EQ(table_.sweep(now_), 0u);  // the key stays: r2 holds it
  EXPECT_EQ(holders("k"), "r2");
  EXPECT_EQ(table_.holder_count(), 1u);
  now_ += 200 * kMs;
  s("r3", "other", 0, 100);
  // r2's lease ended with the key's last holder: the sweep deletes the
  // key, so its R, which would have been R before (§8), is now N.
  EXPECT_EQ(table_.sweep(now_), 1u);
  EXPECT_EQ(table_.find("k"), nullptr);
  EXPECT_EQ(release(r2.token, "k"), ReleaseOutcome::kNotReleased);
  EXPECT_EQ(table_.holder_count(), 1u);
  EXPECT_EQ(table_.sweep(now_ + 100 * kMs), 1u);
  EXPECT_EQ(table_.holder_count(), 0u);
}

// --- Hand-off when the front waiter leaves ---

TEST_F(SharedLockTest, FrontWriterTimingOutLetsTheReadersBehindIn) {
  s("r1", "k", 0);
  a("w", "k", 1000, 100);
  s("r2", "k", 0, 1000, 5000);
  s("r3", "k", 0, 1000, 5000);
  advance_to(now_ + 100 * kMs);
  auto d = take();
  EXPECT_EQ(granted(d), "T:w,s:r2,s:r3");
  EXPECT_EQ(holders("k"), "r1,r2,r3");
  EXPECT_EQ(table_.stats().handoffs_queue, 2u);
}

TEST_F(SharedLockTest, FrontWriterCancelledLetsTheReadersBehindIn) {
  s("r1", "k", 0);
  a("w", "k", 1000, 5000);
  const WaiterId w = last_waiter_;
  s("r2", "k", 0, 1000, 5000);
  ASSERT_TRUE(cancel(w));
  EXPECT_EQ(granted(take()), "s:r2");
}

TEST_F(SharedLockTest, CancelInTheMiddleHandsNothingOff) {
  auto r1 = s("r1", "k", 1);
  s("r2", "k", 1, 1000, 5000);
  a("w", "k", 1000, 5000);
  const WaiterId w = last_waiter_;
  ASSERT_TRUE(cancel(w));
  EXPECT_TRUE(take().empty());
  release(r1.token, "k");
  EXPECT_EQ(granted(take()), "s:r2");
}

TEST_F(SharedLockTest, CancelOfSeveralWaitersGrantsNoneOfThem) {
  s("r1", "k", 0);
  a("w", "k", 1000, 5000, 7);
  const WaiterId w = last_waiter_;
  s("r2", "k", 0, 1000, 5000, 7);
  const WaiterId r2 = last_waiter_;
  s("r3", "k", 0, 1000, 5000, 8);
  // Connection 7 closes: its writer and reader go together, and only r3
  // (another connection) is let in.
  const std::vector<WaiterId> gone{w, r2};
  EXPECT_EQ(table_.cancel_waiters(now_, gone, out_), 2u);
  table_.check_invariants();
  EXPECT_EQ(granted(take()), "s:r3");
  EXPECT_EQ(holders("k"), "r1,r3");
}

// --- Per holder: R and K act on the matching one ---

TEST_F(SharedLockTest, ReleaseOfOneReaderReleasesOnlyIt) {
  auto r1 = s("r1", "k", 0);
  auto r2 = s("r2", "k", 0);
  auto r3 = s("r3", "k", 0);
  EXPECT_EQ(release(r2.token, "k"), ReleaseOutcome::kReleased);
  EXPECT_EQ(holders("k"), "r1,r3");
  EXPECT_EQ(release(r2.token, "k"), ReleaseOutcome::kNotReleased);
  EXPECT_EQ(release(r3.token + 1, "k"), ReleaseOutcome::kNotReleased);
  EXPECT_EQ(release(r1.token, "k"), ReleaseOutcome::kReleased);
  EXPECT_EQ(release(r3.token, "k"), ReleaseOutcome::kReleased);
  // The last holder left and nobody waits: the key is gone.
  EXPECT_EQ(table_.find("k"), nullptr);
  EXPECT_EQ(table_.key_count(), 0u);
}

TEST_F(SharedLockTest, EndedButRegisteredReaderStillGetsR) {
  auto r1 = s("r1", "k", 0, 100);
  s("r2", "k", 0, 1000);
  now_ += 200 * kMs;
  EXPECT_EQ(release(r1.token, "k"), ReleaseOutcome::kReleased);
}

TEST_F(SharedLockTest, KeepExtendsOnlyTheMatchingHolderAndNeverRevives) {
  auto r1 = s("r1", "k", 0, 100);
  auto r2 = s("r2", "k", 0, 100);
  now_ += 50 * kMs;
  ASSERT_EQ(keep(r1.token, "k", 1000), KeepOutcome::kKept);
  const KeyState* st = table_.find("k");
  EXPECT_EQ(st->holder_with(r1.token)->expires_at_ns, now_ + 1000 * kMs);
  EXPECT_EQ(st->holder_with(r2.token)->expires_at_ns, now_ + 50 * kMs);
  now_ += 50 * kMs;
  EXPECT_EQ(keep(r2.token, "k", 1000), KeepOutcome::kNotKept);  // ended
  EXPECT_EQ(keep(r2.token + 100, "k", 1000), KeepOutcome::kNotKept);
}

TEST_F(SharedLockTest, KeepOfAReaderMovesItsHandOff) {
  auto r1 = s("r1", "k", 1, 100);
  s("r2", "k", 1, 1000, 5000);
  now_ += 50 * kMs;
  keep(r1.token, "k", 500);
  advance_to(now_ + 50 * kMs);
  EXPECT_TRUE(take().empty());
  advance_to(now_ + 450 * kMs);
  EXPECT_EQ(granted(take()), "s:r2");
}

// --- Tokens ---

TEST_F(SharedLockTest, EveryGrantGetsALargerToken) {
  Token last = 0;
  auto w = a("w", "k");
  last = w.token;
  for (int i = 0; i < 4; ++i) s("r" + std::to_string(i), "k", 0, 1000, 5000);
  release(w.token, "k");
  for (const Delivery& d : take()) {
    EXPECT_GT(d.token, last);
    last = d.token;
  }
  auto other = a("x", "other");
  EXPECT_GT(other.token, last);
}

TEST_F(SharedLockTest, ModeFlipsBackAndForth) {
  auto r = s("r", "k", 3);
  a("w", "k", 1000, 5000);
  s("r2", "k", 3, 1000, 5000);
  release(r.token, "k");
  auto d = take();
  ASSERT_EQ(granted(d), "w");
  EXPECT_FALSE(table_.find("k")->shared());
  EXPECT_EQ(table_.find("k")->limit(), 3);  // r2 still carries it
  EXPECT_EQ(s("r3", "k", 4, 1000, 5000).outcome, AcquireOutcome::kLimitMismatch);
  release(d[0].token, "k");
  EXPECT_EQ(granted(take()), "s:r2");
  EXPECT_TRUE(table_.find("k")->shared());
}

// A random walk over few keys and owners with every command, checking the
// invariants after each step (check_invariants covers the front being
// ungrantable, counters, deadlines) and the two safety properties by hand.
TEST_F(SharedLockTest, RandomWalkKeepsSafety) {
  std::uint64_t x = 88172645463325252ull;
  auto rnd = [&x](std::uint64_t n) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x % n;
  };
  std::vector<std::pair<std::string, Token>> tokens;
  std::vector<WaiterId> waiting;
  for (int step = 0; step < 20'000; ++step) {
    const std::string key = "k" + std::to_string(rnd(3));
    switch (rnd(7)) {
      case 0:
      case 1: {
        auto r = s("r", key, static_cast<std::uint16_t>(rnd(2) * 2), 1 + rnd(300), rnd(3) * 100);
        if (r.outcome == AcquireOutcome::kGranted) tokens.push_back({key, r.token});
        if (r.outcome == AcquireOutcome::kQueued) waiting.push_back(last_waiter_);
        break;
      }
      case 2: {
        auto r = a("w", key, 1 + rnd(300), rnd(3) * 100);
        if (r.outcome == AcquireOutcome::kGranted) tokens.push_back({key, r.token});
        if (r.outcome == AcquireOutcome::kQueued) waiting.push_back(last_waiter_);
        break;
      }
      case 3:
        if (!tokens.empty()) {
          auto& [k, t] = tokens[rnd(tokens.size())];
          release(t, k);
        }
        break;
      case 4:
        if (!tokens.empty()) {
          auto& [k, t] = tokens[rnd(tokens.size())];
          keep(t, k, 1 + rnd(300));
        }
        break;
      case 5:
        if (!waiting.empty()) cancel(waiting[rnd(waiting.size())]);
        break;
      case 6:
        advance_to(now_ + static_cast<TimeNs>(rnd(100)) * kMs);
        if (rnd(10) == 0) table_.sweep(now_);
        break;
    }
    for (const Delivery& d : take()) {
      if (d.kind == DeliveryKind::kGranted) tokens.push_back({d.key, d.token});
    }
    // Safety at `now_`: no live exclusive holder beside any other live
    // holder, never more live shared holders than the limit.
    table_.for_each([&](std::string_view, const KeyState& st) {
      std::size_t live = 0;
      st.for_each_holder([&](const Holder& h) { live += h.expires_at_ns > now_ ? 1 : 0; });
      if (!st.shared()) {
        ASSERT_LE(live, 1u);
      } else if (st.limit() != 0) {
        ASSERT_LE(live, st.limit());
      }
    });
  }
  EXPECT_GT(table_.stats().handoffs_queue + table_.stats().handoffs_release, 100u);
  EXPECT_GT(table_.stats().shared_grants, 1000u);
}

}  // namespace
}  // namespace lockd::locks
