// The pure pieces of the admin API: URI decoding, list selection (order,
// prefix, paging) over a real LockTable. The 1M-key listing cost is a
// benchmark: tools/microbench/admin_views_bench.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

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

std::vector<std::string> keys_of(const nlohmann::ordered_json& j) {
  std::vector<std::string> out;
  for (const auto& l : j["locks"]) out.push_back(l["key"]);
  return out;
}

TEST(ViewsTest, ListIsSortedBoundedAndPaged) {
  locks::LockTable t({}, 1);
  for (const char* k : {"m", "a/2", "z", "a/1", "b", "a/10"}) t.acquire(kNow, req("o", k, 1000));
  auto all = list_locks_json(t, {}, kNow);
  EXPECT_EQ(all["truncated"], false);
  EXPECT_EQ(keys_of(all), (std::vector<std::string>{"a/1", "a/10", "a/2", "b", "m", "z"}));

  auto page = list_locks_json(t, {"a/", "", 2}, kNow);
  EXPECT_EQ(keys_of(page), (std::vector<std::string>{"a/1", "a/10"}));
  EXPECT_EQ(page["truncated"], true);
  EXPECT_EQ(page["next_after"], "a/10");
  page = list_locks_json(t, {"a/", "a/10", 2}, kNow);
  EXPECT_EQ(keys_of(page), (std::vector<std::string>{"a/2"}));
  EXPECT_EQ(page["truncated"], false);
  EXPECT_EQ(list_locks_json(t, {"", "", 6}, kNow)["truncated"], false);
}

TEST(ViewsTest, SplitScanSkipsKeysDeletedBetweenSlices) {
  locks::LockTable t({}, 1);
  std::vector<locks::Delivery> out;
  for (int i = 0; i < 100; ++i) t.acquire(kNow, req("o", fmt::format("k{:03}", i), 1000));
  ListScan scan(t, {"", "", 10});
  const std::size_t half = t.bucket_count() / 2;
  t.for_each_in_buckets(0, half, [&](std::string_view k, const locks::KeyState& s) {
    scan.offer(k, s, kNow);
  });
  const locks::KeyState* gone = t.find("k000");
  ASSERT_NE(gone, nullptr);
  t.release(kNow, gone->token, "k000", out);  // deleted mid-scan
  t.for_each_in_buckets(half, t.bucket_count(), [&](std::string_view k,
                                                    const locks::KeyState& s) {
    scan.offer(k, s, kNow);
  });
  const auto j = scan.finish(kNow);
  const auto keys = keys_of(j);
  EXPECT_TRUE(std::is_sorted(keys.begin(), keys.end()));
  EXPECT_EQ(std::count(keys.begin(), keys.end(), "k000"), 0);
  EXPECT_EQ(keys.back(), "k009");
  EXPECT_EQ(j["truncated"], true);
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

}  // namespace
}  // namespace lockd::admin
