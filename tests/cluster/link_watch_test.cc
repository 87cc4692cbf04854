// LinkWatch: the log lines about a peer's link, on a clock moved by hand.
#include "lockd/cluster/link_watch.h"

#include <gtest/gtest.h>

namespace lockd::cluster {
namespace {

constexpr TimeNs kS = 1000 * kNsPerMs;

TEST(LinkWatch, LostStillDownAndBack) {
  LinkWatch w("node 2 (raft 127.0.0.1:7080)", "node 2", 0);
  EXPECT_EQ(w.observe(false, 1 * kS), std::nullopt);  // not reached yet, start-up
  EXPECT_EQ(w.observe(true, 2 * kS), std::nullopt);   // reached in time: nothing to say
  EXPECT_EQ(w.observe(true, 3 * kS), std::nullopt);
  EXPECT_EQ(w.observe(false, 10 * kS), std::nullopt);  // said once it stays down a second
  EXPECT_EQ(w.observe(false, 10 * kS + 999 * kNsPerMs), std::nullopt);
  EXPECT_EQ(w.observe(false, 11 * kS), "lost the link to node 2 (raft 127.0.0.1:7080); retrying");
  EXPECT_EQ(w.observe(false, 12 * kS), std::nullopt);
  EXPECT_EQ(w.observe(false, 14 * kS), std::nullopt);
  EXPECT_EQ(w.observe(false, 15 * kS), "node 2 (raft 127.0.0.1:7080) still down for 5s");
  EXPECT_EQ(w.observe(false, 44 * kS), std::nullopt);
  EXPECT_EQ(w.observe(false, 45 * kS), "node 2 (raft 127.0.0.1:7080) still down for 35s");
  EXPECT_EQ(w.observe(true, 50 * kS), "node 2 is back after 40s");
  EXPECT_EQ(w.observe(true, 51 * kS), std::nullopt);
}

// A link closed and redialled at once (a waiting node asking a member
// again with a new handshake) is no news: nothing either way.
TEST(LinkWatch, ALinkBackWithinTheGraceSaysNothing) {
  LinkWatch w("node 2 (raft h:1)", "node 2", 0);
  EXPECT_EQ(w.observe(true, 1 * kS), std::nullopt);
  for (int i = 0; i < 10; ++i) {
    const TimeNs at = (2 + 2 * i) * kS;
    EXPECT_EQ(w.observe(false, at), std::nullopt);
    EXPECT_EQ(w.observe(false, at + 900 * kNsPerMs), std::nullopt);
    EXPECT_EQ(w.observe(true, at + kS), std::nullopt);
  }
  // A real loss is still said, and its end.
  EXPECT_EQ(w.observe(false, 30 * kS), std::nullopt);
  EXPECT_EQ(w.observe(false, 31 * kS), "lost the link to node 2 (raft h:1); retrying");
  EXPECT_EQ(w.observe(true, 32 * kS), "node 2 is back after 2s");
}

TEST(LinkWatch, APeerNeverReachedIsReportedAfterTheFirstInterval) {
  LinkWatch w("node 3 (raft h:1)", "node 3", 100 * kS);
  EXPECT_EQ(w.observe(false, 104 * kS), std::nullopt);
  EXPECT_EQ(w.observe(false, 105 * kS), "node 3 (raft h:1) still down for 5s");
  EXPECT_EQ(w.observe(true, 106 * kS), "node 3 is back after 6s");
}

}  // namespace
}  // namespace lockd::cluster
