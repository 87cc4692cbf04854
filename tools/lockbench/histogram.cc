#include "histogram.h"

#include <bit>
#include <cmath>

namespace lockbench {

std::size_t LogHistogram::bucket_of(std::uint64_t value) {
  if (value < kSubBuckets) return static_cast<std::size_t>(value);
  const unsigned msb = 63U - static_cast<unsigned>(std::countl_zero(value));
  const unsigned group = msb - kSubBucketBits + 1;  // >= 1
  const std::uint64_t sub = (value >> (group - 1)) - kSubBuckets;
  return static_cast<std::size_t>(group * kSubBuckets + sub);
}

std::uint64_t LogHistogram::bucket_low(std::size_t bucket) {
  const std::uint64_t group = bucket >> kSubBucketBits;
  const std::uint64_t sub = bucket & (kSubBuckets - 1);
  if (group == 0) return sub;
  return (sub + kSubBuckets) << (group - 1);
}

std::uint64_t LogHistogram::bucket_high(std::size_t bucket) {
  const std::uint64_t group = bucket >> kSubBucketBits;
  const std::uint64_t width = group == 0 ? 1 : std::uint64_t{1} << (group - 1);
  return bucket_low(bucket) + (width - 1);
}

void LogHistogram::record(std::uint64_t value) {
  ++counts_[bucket_of(value)];
  ++count_;
  if (value < min_) min_ = value;
  if (value > max_) max_ = value;
  sum_ += static_cast<long double>(value);
}

void LogHistogram::merge(const LogHistogram& other) {
  for (std::size_t i = 0; i < kBuckets; ++i) counts_[i] += other.counts_[i];
  count_ += other.count_;
  if (other.count_ != 0 && other.min_ < min_) min_ = other.min_;
  if (other.max_ > max_) max_ = other.max_;
  sum_ += other.sum_;
}

void LogHistogram::reset() { *this = LogHistogram{}; }

double LogHistogram::mean() const {
  return count_ == 0 ? 0.0 : static_cast<double>(sum_ / static_cast<long double>(count_));
}

std::uint64_t LogHistogram::percentile(double percent) const {
  if (count_ == 0) return 0;
  if (percent <= 0) return min();
  if (percent > 100) percent = 100;
  // Rank of the sample we want, 1-based: the smallest r with r/count >= p.
  auto rank = static_cast<std::uint64_t>(std::ceil(percent / 100.0 * static_cast<double>(count_)));
  if (rank < 1) rank = 1;
  if (rank > count_) rank = count_;
  std::uint64_t seen = 0;
  for (std::size_t i = 0; i < kBuckets; ++i) {
    seen += counts_[i];
    if (seen >= rank) {
      const std::uint64_t high = bucket_high(i);
      return high > max_ ? max_ : (high < min() ? min() : high);
    }
  }
  return max_;
}

}  // namespace lockbench
