// LogHistogram: bucket arithmetic and percentiles within the promised error.
#include "histogram.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "keygen.h"

namespace lockbench {
namespace {

TEST(HistogramTest, EmptyReportsZero) {
  LogHistogram h;
  EXPECT_EQ(h.count(), 0u);
  EXPECT_EQ(h.percentile(50), 0u);
  EXPECT_EQ(h.max(), 0u);
  EXPECT_EQ(h.min(), 0u);
  EXPECT_EQ(h.mean(), 0.0);
}

TEST(HistogramTest, SmallValuesAreExact) {
  LogHistogram h;
  for (std::uint64_t v = 1; v <= 100; ++v) h.record(v);
  EXPECT_EQ(h.percentile(50), 50u);
  EXPECT_EQ(h.percentile(99), 99u);
  EXPECT_EQ(h.percentile(100), 100u);
  EXPECT_EQ(h.min(), 1u);
  EXPECT_DOUBLE_EQ(h.mean(), 50.5);
}

TEST(HistogramTest, BucketsTileTheRangeWithoutGaps) {
  for (std::size_t b = 0; b + 1 < LogHistogram::kBuckets; ++b) {
    ASSERT_EQ(LogHistogram::bucket_high(b) + 1, LogHistogram::bucket_low(b + 1)) << b;
  }
  EXPECT_EQ(LogHistogram::bucket_of(UINT64_MAX), LogHistogram::kBuckets - 1);
  EXPECT_EQ(LogHistogram::bucket_high(LogHistogram::kBuckets - 1), UINT64_MAX);
}

TEST(HistogramTest, EveryValueFallsInsideItsBucket) {
  SplitMix64 rng(7);
  for (int i = 0; i < 100'000; ++i) {
    const std::uint64_t v = rng.next() >> (rng.next() % 64);
    const std::size_t b = LogHistogram::bucket_of(v);
    ASSERT_LE(LogHistogram::bucket_low(b), v);
    ASSERT_GE(LogHistogram::bucket_high(b), v);
  }
}

TEST(HistogramTest, PercentilesWithinRelativeErrorOfExact) {
  // Latency-like data: mostly ~100 us, a tail to tens of ms.
  SplitMix64 rng(42);
  std::vector<std::uint64_t> samples;
  LogHistogram h;
  for (int i = 0; i < 200'000; ++i) {
    std::uint64_t v = 50'000 + rng.below(100'000);
    if (rng.below(100) == 0) v = 1'000'000 + rng.below(50'000'000);
    samples.push_back(v);
    h.record(v);
  }
  std::sort(samples.begin(), samples.end());
  const double max_rel_error = 1.0 / static_cast<double>(LogHistogram::kSubBuckets);
  for (double p : {50.0, 90.0, 99.0, 99.9, 100.0}) {
    const auto rank = static_cast<std::size_t>(std::ceil(p / 100.0 * samples.size()));
    const double exact = static_cast<double>(samples[rank - 1]);
    const double got = static_cast<double>(h.percentile(p));
    EXPECT_GE(got, exact) << "p" << p;  // never understates
    EXPECT_LE((got - exact) / exact, max_rel_error) << "p" << p;
  }
  EXPECT_EQ(h.max(), samples.back());
}

TEST(HistogramTest, MergeEqualsRecordingEverything) {
  LogHistogram a, b, all;
  for (std::uint64_t v = 1; v < 5000; v += 3) {
    (v % 2 ? a : b).record(v * 1000);
    all.record(v * 1000);
  }
  a.merge(b);
  EXPECT_EQ(a.count(), all.count());
  EXPECT_EQ(a.min(), all.min());
  EXPECT_EQ(a.max(), all.max());
  for (double p : {1.0, 50.0, 99.0, 99.9}) EXPECT_EQ(a.percentile(p), all.percentile(p));
}

TEST(HistogramTest, PercentileCappedAtMax) {
  LogHistogram h;
  h.record(1'000'001);
  EXPECT_EQ(h.percentile(100), 1'000'001u);
  EXPECT_EQ(h.percentile(50), 1'000'001u);
}

}  // namespace
}  // namespace lockbench
