// net::PreciseTimer on a real event_base: fires once, never before its
// moment; a new arming replaces the old one; cancel stops it; a moment
// already past fires at the next turn.
#include "lockd/net/precise_timer.h"

#include <event2/event.h>
#include <gtest/gtest.h>

#include <vector>

#include "lockd/net/clock.h"

namespace lockd::net {
namespace {

constexpr TimeNs kMs = 1'000'000;

class PreciseTimerTest : public ::testing::Test {
 protected:
  void SetUp() override { base_ = event_base_new(); }
  void TearDown() override {
    timer_.reset();
    event_base_free(base_);
  }
  void make() {
    timer_ = std::make_unique<PreciseTimer>(base_, [this] { fired_.push_back(monotonic_now_ns()); });
  }
  // Runs the loop until `until_ns` (a libevent timer ends it).
  void run_until(TimeNs until_ns) {
    const TimeNs left = until_ns - monotonic_now_ns();
    if (left <= 0) {
      event_base_loop(base_, EVLOOP_NONBLOCK);
      return;
    }
    timeval tv{static_cast<time_t>(left / 1'000'000'000), static_cast<suseconds_t>(left % 1'000'000'000 / 1000 + 1)};
    event_base_loopexit(base_, &tv);
    event_base_dispatch(base_);
  }

  event_base* base_ = nullptr;
  std::unique_ptr<PreciseTimer> timer_;
  std::vector<TimeNs> fired_;
};

TEST_F(PreciseTimerTest, FiresOnceAndNeverBeforeItsMoment) {
  make();
  const TimeNs now = monotonic_now_ns();
  timer_->arm_at(now + 20 * kMs, now);
  EXPECT_TRUE(timer_->armed());
  run_until(now + 200 * kMs);
  ASSERT_EQ(fired_.size(), 1u);
  EXPECT_GE(fired_[0], now + 20 * kMs);
  EXPECT_FALSE(timer_->armed());
}

TEST_F(PreciseTimerTest, ANewArmingReplacesTheOldOne) {
  make();
  const TimeNs now = monotonic_now_ns();
  timer_->arm_at(now + 10 * kMs, now);
  timer_->arm_at(now + 60 * kMs, now);
  run_until(now + 200 * kMs);
  ASSERT_EQ(fired_.size(), 1u);
  EXPECT_GE(fired_[0], now + 60 * kMs);
}

TEST_F(PreciseTimerTest, ACancelledTimerDoesNotFire) {
  make();
  const TimeNs now = monotonic_now_ns();
  timer_->arm_at(now + 10 * kMs, now);
  timer_->cancel();
  EXPECT_FALSE(timer_->armed());
  run_until(now + 60 * kMs);
  EXPECT_TRUE(fired_.empty());
}

// Expired while the loop was busy, then re-armed later in the same turn:
// the stale expiry must not fire the new arming early.
TEST_F(PreciseTimerTest, AnExpiryOverwrittenBeforeItWasReadDoesNotFire) {
  make();
  TimeNs now = monotonic_now_ns();
  timer_->arm_at(now + 1 * kMs, now);
  while (monotonic_now_ns() < now + 5 * kMs) {
  }  // expired, unread
  now = monotonic_now_ns();
  timer_->arm_at(now + 50 * kMs, now);
  run_until(now + 30 * kMs);
  EXPECT_TRUE(fired_.empty());
  run_until(now + 200 * kMs);
  ASSERT_EQ(fired_.size(), 1u);
  EXPECT_GE(fired_[0], now + 50 * kMs);
}

TEST_F(PreciseTimerTest, AMomentAlreadyPastFiresAtTheNextTurn) {
  make();
  const TimeNs now = monotonic_now_ns();
  timer_->arm_at(now - 5 * kMs, now);
  run_until(now + 50 * kMs);
  EXPECT_EQ(fired_.size(), 1u);
}

}  // namespace
}  // namespace lockd::net
