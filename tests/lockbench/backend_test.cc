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
  EXPECT_EQ(b->decode(line, consumed, ReqKind::kAcquire, r), DecodeStatus::kReply) << line;
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

}  // namespace
}  // namespace lockbench
