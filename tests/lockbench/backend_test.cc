// How the lockd backend classifies cluster replies: `M` and the two
// leader-change errors are their own outcomes (counted apart, never
// protocol errors), every other `E` stays an error.
#include "backend.h"

#include <gtest/gtest.h>

namespace lockbench {
namespace {

Reply decode(std::string_view line) {
  auto b = make_backend(BackendKind::kLockd);
  std::size_t consumed = 0;
  Reply r;
  EXPECT_EQ(b->decode(line, consumed, ReqKind::kAcquire, Flavor::kPlain, r), DecodeStatus::kReply)
      << line;
  EXPECT_EQ(consumed, line.size());
  return r;
}

TEST(LockdBackendTest, MovedCarriesTheLeaderAddressAndTheEcho) {
  const Reply r = decode("M 127.0.0.1:7002 alice k\n");
  EXPECT_EQ(r.outcome, Outcome::kMoved);
  EXPECT_EQ(r.detail, "127.0.0.1:7002");
  EXPECT_EQ(r.owner, "alice");
  EXPECT_EQ(r.key, "k");
  EXPECT_TRUE(r.has_echo);
  const Reply rel = decode("M 127.0.0.1:7002 42 k\n");
  EXPECT_EQ(rel.outcome, Outcome::kMoved);
  EXPECT_EQ(rel.token, 42u);
}

TEST(LockdBackendTest, LeaderChangeErrorsAreTheirOwnOutcomes) {
  EXPECT_EQ(decode("E no_leader alice k\n").outcome, Outcome::kNoLeader);
  EXPECT_EQ(decode("E indeterminate 7 k\n").outcome, Outcome::kIndeterminate);
  EXPECT_EQ(decode("E bad_key\n").outcome, Outcome::kError);
}

TEST(LockdBackendTest, SharedHoldsAreSAndReleasedWithR) {
  auto b = make_backend(BackendKind::kLockd);
  std::string out;
  b->encode_acquire_as(out, Flavor::kRead, 8, "o", "k", 100, 0);
  b->encode_acquire_as(out, Flavor::kSemaphore, 8, "o", "k", 100, 5);
  b->encode_acquire_as(out, Flavor::kWrite, 8, "o", "k", 100, 5);
  b->encode_release_as(out, Flavor::kSemaphore, 9, "o", "k");
  EXPECT_EQ(out, "S o k 0 100\nS o k 8 100 5\nA o k 100 5\nR 9 k\n");
  const Reply r = decode("S 12 o k\n");
  EXPECT_EQ(r.outcome, Outcome::kGranted);
  EXPECT_EQ(r.token, 12u);
  EXPECT_EQ(r.owner, "o");
}

// Redisson's scripts answer in their own shapes: the rw lock's acquire is
// nil when held and a pttl when not; its release 1 or 0 (other readers
// remain) when released, nil when not held; the semaphore's acquire is the
// permit id, or nil / ":<next expiry>" when none is free.
TEST(RedisBackendTest, RedissonRepliesByFlavor) {
  auto b = make_backend(BackendKind::kRedis);
  const auto outcome = [&](std::string_view in, ReqKind kind, Flavor flavor) {
    std::size_t consumed = 0;
    Reply r;
    EXPECT_EQ(b->decode(in, consumed, kind, flavor, r), DecodeStatus::kReply) << in;
    return r.outcome;
  };
  EXPECT_EQ(outcome("$-1\r\n", ReqKind::kAcquire, Flavor::kRead), Outcome::kGranted);
  EXPECT_EQ(outcome(":2999\r\n", ReqKind::kAcquire, Flavor::kWrite), Outcome::kNotGranted);
  EXPECT_EQ(outcome(":0\r\n", ReqKind::kRelease, Flavor::kRead), Outcome::kReleased);
  EXPECT_EQ(outcome("$-1\r\n", ReqKind::kRelease, Flavor::kWrite), Outcome::kNotReleased);
  EXPECT_EQ(outcome("$3\r\nw.1\r\n", ReqKind::kAcquire, Flavor::kSemaphore), Outcome::kGranted);
  EXPECT_EQ(outcome("$5\r\n:1234\r\n", ReqKind::kAcquire, Flavor::kSemaphore), Outcome::kNotGranted);
  EXPECT_EQ(outcome("$-1\r\n", ReqKind::kAcquire, Flavor::kSemaphore), Outcome::kNotGranted);
  EXPECT_EQ(outcome(":1\r\n", ReqKind::kRelease, Flavor::kSemaphore), Outcome::kReleased);
  EXPECT_EQ(outcome(":0\r\n", ReqKind::kRelease, Flavor::kSemaphore), Outcome::kNotReleased);
  EXPECT_EQ(outcome("+OK\r\n", ReqKind::kAcquire, Flavor::kRead), Outcome::kError);
}

}  // namespace
}  // namespace lockbench
