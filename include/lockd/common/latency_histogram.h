// LatencyHistogram: a fixed-bucket histogram of durations for the request
// latency metric (`lockd_request_duration_seconds`).
//
// Why fixed power-of-two buckets: recording sits on the request hot path,
// so it must not allocate or search; the bucket index is one bit_width().
// Bucket i holds durations in (kFirstBoundNs * 2^(i-1), kFirstBoundNs * 2^i]
// (bucket 0: up to 1 µs); the last bucket is +Inf. Counts are per bucket,
// not cumulative: the exposition cumulates them at scrape time.
//
// Header-only and free of dependencies so the server layer can own one
// without linking the admin layer. Updated and read on the reactor thread.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>

#include "lockd/common/time.h"

namespace lockd {

class LatencyHistogram {
 public:
  static constexpr TimeNs kFirstBoundNs = 1'000;  // 1 µs
  // Finite bounds: 1 µs .. 2^20 µs (~1.05 s); one more bucket is +Inf.
  static constexpr std::size_t kFiniteBuckets = 21;
  static constexpr std::size_t kBuckets = kFiniteBuckets + 1;

  // Upper bound of finite bucket `i`, in nanoseconds.
  static constexpr TimeNs bound_ns(std::size_t i) { return kFirstBoundNs << i; }

  // The bucket a duration falls in (negative durations count as 0).
  static constexpr std::size_t bucket_of(TimeNs d_ns) {
    if (d_ns <= kFirstBoundNs) return 0;
    // Smallest i with d <= kFirstBoundNs * 2^i is bit_width(ceil(d/first) - 1).
    const auto units = static_cast<std::uint64_t>((d_ns - 1) / kFirstBoundNs);
    const auto i = static_cast<std::size_t>(std::bit_width(units));
    return i < kFiniteBuckets ? i : kFiniteBuckets;
  }

  void record(TimeNs d_ns) {
    if (d_ns < 0) d_ns = 0;
    ++counts_[bucket_of(d_ns)];
    ++count_;
    sum_ns_ += static_cast<std::uint64_t>(d_ns);
  }

  const std::array<std::uint64_t, kBuckets>& counts() const { return counts_; }
  std::uint64_t count() const { return count_; }
  std::uint64_t sum_ns() const { return sum_ns_; }

 private:
  std::array<std::uint64_t, kBuckets> counts_{};
  std::uint64_t count_ = 0;
  std::uint64_t sum_ns_ = 0;
};

}  // namespace lockd
