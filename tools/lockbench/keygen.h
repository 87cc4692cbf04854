// Key generators for the workloads: which key a request names.
//
// Why separate: the key stream decides what a run measures (collisions in
// `uncontended`, the hot set in `contended`, the exact set held in `hold`),
// so it is deterministic from a seed and unit-tested on its own. Keys are
// written into a caller's fixed buffer: no allocation per request.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace lockbench {

// Longest key any generator writes: prefix + ':' + 20 digits, bounded well
// under the protocol's 250 bytes.
constexpr std::size_t kMaxKeyBytes = 96;
constexpr std::size_t kMaxKeyPrefixBytes = kMaxKeyBytes - 24;

// A key held in place (a Slot owns one per outstanding request).
struct KeyBuf {
  std::array<char, kMaxKeyBytes> bytes{};
  std::uint8_t size = 0;
  std::string_view view() const { return {bytes.data(), size}; }
};

// Writes `<prefix>:<index>` into `out`. `prefix` must be at most
// kMaxKeyPrefixBytes (checked by the caller at flag parsing).
void format_key(KeyBuf& out, std::string_view prefix, std::uint64_t index);

// splitmix64: a small, fast, seedable generator; statistically fine for
// picking keys, and its whole state is one integer.
class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next();
  // Uniform in [0, bound); bound > 0. Modulo bias is below bound/2^64:
  // negligible for a benchmark.
  std::uint64_t below(std::uint64_t bound);

 private:
  std::uint64_t state_;
};

// `uncontended`: keys uniform over [0, space). With space much larger than
// the number of keys held at once, two clients rarely pick the same key.
class UniformKeys {
 public:
  UniformKeys(std::uint64_t space, std::uint64_t seed) : space_(space), rng_(seed) {}
  std::uint64_t next() { return rng_.below(space_); }

 private:
  std::uint64_t space_;
  SplitMix64 rng_;
};

// `contended`: keys uniform over a small hot set [0, hot).
using HotKeys = UniformKeys;

// `hold`: the distinct keys [0, total) dealt round-robin to `parts`
// generators: part p gets p, p + parts, p + 2*parts ... < total. Together
// the parts yield every key exactly once.
class PartitionKeys {
 public:
  PartitionKeys(std::uint64_t part, std::uint64_t parts, std::uint64_t total)
      : next_(part), stride_(parts), total_(total) {}
  // False once this part is exhausted.
  bool next(std::uint64_t& index);

 private:
  std::uint64_t next_;
  std::uint64_t stride_;
  std::uint64_t total_;
};

}  // namespace lockbench
