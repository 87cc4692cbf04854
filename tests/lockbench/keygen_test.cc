// Key generators: deterministic from the seed, in range, and `hold`'s
// partitions cover the key set exactly once.
#include "keygen.h"

#include <gtest/gtest.h>

#include <set>
#include <vector>

namespace lockbench {
namespace {

TEST(KeygenTest, FormatKey) {
  KeyBuf k;
  format_key(k, "lb:uncontended", 12345);
  EXPECT_EQ(k.view(), "lb:uncontended:12345");
  format_key(k, "p", UINT64_MAX);
  EXPECT_EQ(k.view(), "p:18446744073709551615");
}

TEST(KeygenTest, LongestPrefixFits) {
  KeyBuf k;
  const std::string prefix(kMaxKeyPrefixBytes, 'x');
  format_key(k, prefix, UINT64_MAX);
  EXPECT_EQ(k.view().size(), kMaxKeyPrefixBytes + 1 + 20);
  EXPECT_LE(k.view().size(), kMaxKeyBytes);
}

TEST(KeygenTest, UniformIsDeterministicAndInRange) {
  UniformKeys a(1000, 9), b(1000, 9), c(1000, 10);
  bool differs = false;
  for (int i = 0; i < 10'000; ++i) {
    const auto x = a.next();
    ASSERT_LT(x, 1000u);
    ASSERT_EQ(x, b.next());
    differs |= x != c.next();
  }
  EXPECT_TRUE(differs);
}

TEST(KeygenTest, UniformCoversSmallSpaceEvenly) {
  constexpr std::uint64_t kSpace = 8;
  constexpr int kDraws = 80'000;
  HotKeys hot(kSpace, 1);
  std::vector<int> seen(kSpace);
  for (int i = 0; i < kDraws; ++i) ++seen[hot.next()];
  for (int n : seen) {
    EXPECT_GT(n, kDraws / kSpace * 9 / 10);
    EXPECT_LT(n, kDraws / kSpace * 11 / 10);
  }
}

TEST(KeygenTest, PartitionsCoverEveryKeyOnce) {
  constexpr std::uint64_t kParts = 7, kTotal = 1000;
  std::set<std::uint64_t> all;
  std::uint64_t n = 0;
  for (std::uint64_t p = 0; p < kParts; ++p) {
    PartitionKeys part(p, kParts, kTotal);
    std::uint64_t idx = 0;
    while (part.next(idx)) {
      ASSERT_EQ(idx % kParts, p);
      all.insert(idx);
      ++n;
    }
  }
  EXPECT_EQ(n, kTotal);
  EXPECT_EQ(all.size(), kTotal);
  EXPECT_EQ(*all.rbegin(), kTotal - 1);
}

TEST(KeygenTest, MorePartsThanKeys) {
  PartitionKeys part(5, 10, 3);
  std::uint64_t idx = 0;
  EXPECT_FALSE(part.next(idx));
}

}  // namespace
}  // namespace lockbench
