// The pure pieces of the admin API: URI decoding, list selection (order,
// prefix, paging) over a real LockTable, and the 1M-key listing cost.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <fmt/format.h>

#include "lockd/admin/uri.h"
#include "lockd/admin/views.h"
#include "lockd/common/latency_histogram.h"

namespace lockd::admin {
namespace {

constexpr TimeNs kNow = 1'000'000'000'000;

TEST(UriTest, PercentDecodeIsStrict) {
  EXPECT_EQ(percent_decode("a%2Fb"), "a/b");
  EXPECT_EQ(percent_decode("50%25"), "50%");
  EXPECT_EQ(percent_decode("a+b"), "a+b");
  EXPECT_EQ(percent_decode("%3f%3F"), "??");
  EXPECT_EQ(percent_decode(""), "");
  EXPECT_EQ(percent_decode("%"), std::nullopt);
  EXPECT_EQ(percent_decode("%4"), std::nullopt);
  EXPECT_EQ(percent_decode("%zz"), std::nullopt);
  EXPECT_EQ(percent_decode("ab%"), std::nullopt);
}

TEST(UriTest, EncodeRoundTripsEveryByte) {
  std::string all;
  for (int c = 0; c < 256; ++c) all.push_back(static_cast<char>(c));
  EXPECT_EQ(percent_decode(percent_encode(all)), all);
  EXPECT_EQ(percent_encode("a/b?c%d"), "a%2Fb%3Fc%25d");
}

TEST(UriTest, QuerySplitsAndDecodes) {
  const auto q = parse_query("prefix=a%2F&&limit=3&flag");
  ASSERT_TRUE(q);
  ASSERT_EQ(q->size(), 3u);
  EXPECT_EQ((*q)[0], (std::pair<std::string, std::string>{"prefix", "a/"}));
  EXPECT_EQ((*q)[1], (std::pair<std::string, std::string>{"limit", "3"}));
  EXPECT_EQ((*q)[2], (std::pair<std::string, std::string>{"flag", ""}));
  EXPECT_FALSE(parse_query("a=%x1"));
}

TEST(ViewsTest, MsUntilRoundsTowardMinusInfinity) {
  EXPECT_EQ(ms_until(kNow + 1'500'000, kNow), 1);
  EXPECT_EQ(ms_until(kNow, kNow), 0);
  EXPECT_EQ(ms_until(kNow - 1, kNow), -1);
  EXPECT_EQ(ms_until(kNow - 2'000'000, kNow), -2);
}

locks::AcquireRequest req(std::string_view owner, std::string_view key, std::uint64_t lease_ms) {
  return {owner, key, lease_ms, 0, 1, 0};
}

TEST(ViewsTest, SelectIsSortedBoundedAndPaged) {
  locks::LockTable t({}, 1);
  for (const char* k : {"m", "a/2", "z", "a/1", "b", "a/10"}) t.acquire(kNow, req("o", k, 1000));
  bool truncated = true;
  auto all = select_locks(t, {}, truncated);
  ASSERT_EQ(all.size(), 6u);
  EXPECT_FALSE(truncated);
  std::vector<std::string> keys;
  for (const auto& r : all) keys.push_back(*r.first);
  EXPECT_EQ(keys, (std::vector<std::string>{"a/1", "a/10", "a/2", "b", "m", "z"}));

  auto page = select_locks(t, {"a/", "", 2}, truncated);
  ASSERT_EQ(page.size(), 2u);
  EXPECT_TRUE(truncated);
  EXPECT_EQ(*page[1].first, "a/10");
  page = select_locks(t, {"a/", "a/10", 2}, truncated);
  ASSERT_EQ(page.size(), 1u);
  EXPECT_EQ(*page[0].first, "a/2");
  EXPECT_FALSE(truncated);
  page = select_locks(t, {"", "", 6}, truncated);
  EXPECT_FALSE(truncated);
}

TEST(ViewsTest, LockJsonListsWaitersFrontFirst) {
  locks::LockTable t({}, 1);
  t.acquire(kNow, req("alice", "k", 1000));
  t.acquire(kNow, {"bob", "k", 500, 2000, 7, 1});
  t.acquire(kNow, {"carol", "k", 600, 3000, 8, 2});
  const auto j = lock_json(t, "k", kNow + 1'000'000);
  ASSERT_TRUE(j);
  EXPECT_EQ((*j)["owner"], "alice");
  EXPECT_EQ((*j)["expires_in_ms"], 999);
  EXPECT_EQ((*j)["waiters"][0]["owner"], "bob");
  EXPECT_EQ((*j)["waiters"][0]["wait_left_ms"], 1999);
  EXPECT_EQ((*j)["waiters"][1]["owner"], "carol");
  EXPECT_FALSE(lock_json(t, "nope", kNow));
}

TEST(LatencyHistogramTest, BucketsArePowersOfTwoMicroseconds) {
  EXPECT_EQ(LatencyHistogram::bucket_of(0), 0u);
  EXPECT_EQ(LatencyHistogram::bucket_of(1'000), 0u);
  EXPECT_EQ(LatencyHistogram::bucket_of(1'001), 1u);
  EXPECT_EQ(LatencyHistogram::bucket_of(2'000), 1u);
  EXPECT_EQ(LatencyHistogram::bucket_of(2'001), 2u);
  EXPECT_EQ(LatencyHistogram::bucket_of(LatencyHistogram::bound_ns(20)), 20u);
  EXPECT_EQ(LatencyHistogram::bucket_of(LatencyHistogram::bound_ns(20) + 1),
            LatencyHistogram::kFiniteBuckets);
  EXPECT_EQ(LatencyHistogram::bucket_of(INT64_MAX), LatencyHistogram::kFiniteBuckets);
  for (TimeNs d = 1; d < 5'000'000'000; d = d * 3 + 7) {
    const std::size_t b = LatencyHistogram::bucket_of(d);
    if (b < LatencyHistogram::kFiniteBuckets) {
      EXPECT_LE(d, LatencyHistogram::bound_ns(b)) << d;
    }
    if (b > 0) {
      EXPECT_GT(d, LatencyHistogram::bound_ns(b - 1)) << d;
    }
  }
}

// The cost of `/v1/locks` and `/v1/top` over a million keys: run with
// LOCKD_BENCH=1 (docs/operations.md quotes its output).
TEST(ViewsBench, MillionKeys) {
  if (std::getenv("LOCKD_BENCH") == nullptr) GTEST_SKIP() << "set LOCKD_BENCH=1";
  constexpr std::size_t kKeys = 1'000'000;
  locks::LockTable t({2 * kKeys, 10, 10}, 1);
  for (std::size_t i = 0; i < kKeys; ++i) {
    const std::string k = fmt::format("orders/{:07}", (i * 7919) % kKeys);
    t.acquire(kNow, req("owner", k, 60'000));
  }
  const auto time = [&](const char* what, auto&& fn) {
    constexpr int kRuns = 5;
    double best_ms = 1e18;
    for (int r = 0; r < kRuns; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      fn();
      best_ms = std::min(best_ms, std::chrono::duration<double, std::milli>(
                                      std::chrono::steady_clock::now() - t0)
                                      .count());
    }
    std::printf("[bench] %-46s %8.1f ms (best of %d)\n", what, best_ms, kRuns);
  };
  bool truncated = false;
  time("select_locks limit=1000, 1M keys", [&] { select_locks(t, {"", "", 1000}, truncated); });
  time("select_locks limit=10000, 1M keys", [&] { select_locks(t, {"", "", 10000}, truncated); });
  time("select_locks prefix=orders/09 limit=1000",
       [&] { select_locks(t, {"orders/09", "", 1000}, truncated); });
  time("list_locks_json limit=1000 + dump",
       [&] { list_locks_json(t, {"", "", 1000}, kNow).dump(); });
  time("count_holders (status, metrics), 1M keys", [&] { count_holders(t, kNow); });
}

}  // namespace
}  // namespace lockd::admin
