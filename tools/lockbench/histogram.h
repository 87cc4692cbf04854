// LogHistogram: latency distribution in HDR-style log buckets.
//
// Why: a benchmark records millions of samples per second; keeping them all
// to sort at the end costs memory and time that would show up in the very
// numbers we measure. Each power of two is split into kSubBuckets linear
// buckets, so any reported percentile is within 1/kSubBuckets (< 1%) of the
// true sample, whatever its magnitude, in a fixed ~60 KiB array.
//
// Runs on the benchmark's one event-loop thread; not thread-safe.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace lockbench {

class LogHistogram {
 public:
  // log2 of the linear buckets per power of two: 2^7 = 128 gives < 0.8%
  // relative error.
  static constexpr unsigned kSubBucketBits = 7;
  static constexpr std::uint64_t kSubBuckets = std::uint64_t{1} << kSubBucketBits;
  // Groups needed to cover every uint64 value: group 0 is [0, kSubBuckets)
  // exactly, group g >= 1 is [2^(g+6), 2^(g+7)).
  static constexpr std::size_t kGroups = 64 - kSubBucketBits + 1;
  static constexpr std::size_t kBuckets = kGroups * kSubBuckets;

  void record(std::uint64_t value);
  void merge(const LogHistogram& other);
  void reset();

  std::uint64_t count() const { return count_; }
  std::uint64_t min() const { return count_ == 0 ? 0 : min_; }
  std::uint64_t max() const { return max_; }
  double mean() const;

  // The value at or below which `percent` (0..100] of the samples fall,
  // reported as the highest value of its bucket (capped at max()), so it
  // never understates. 0 when empty.
  std::uint64_t percentile(double percent) const;

  // Bucket arithmetic, public for the unit tests.
  static std::size_t bucket_of(std::uint64_t value);
  static std::uint64_t bucket_low(std::size_t bucket);
  static std::uint64_t bucket_high(std::size_t bucket);

 private:
  std::array<std::uint64_t, kBuckets> counts_{};
  std::uint64_t count_ = 0;
  std::uint64_t min_ = UINT64_MAX;
  std::uint64_t max_ = 0;
  // Sum for the mean; long double so 2^64 ns of samples do not overflow.
  long double sum_ = 0;
};

}  // namespace lockbench
