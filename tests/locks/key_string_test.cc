// KeyString: inline up to 39 bytes, one heap block beyond, moves that keep
// the bytes, and lookups by string_view in the lock table's map.
#include "lockd/locks/key_string.h"

#include <gtest/gtest.h>

#include <string>
#include <unordered_set>
#include <utility>

namespace lockd::locks {
namespace {

TEST(KeyStringTest, HoldsEveryLengthUpToTheProtocolMaximum) {
  for (std::size_t n : {1ul, 15ul, 16ul, 38ul, 39ul, 40ul, 64ul, 250ul, 255ul}) {
    std::string s;
    for (std::size_t i = 0; i < n; ++i) s.push_back(static_cast<char>('!' + i % 90));
    const KeyString k(s);
    EXPECT_EQ(k.view(), s) << n;
    EXPECT_EQ(k.size(), n);
    const KeyString copy(k);
    EXPECT_EQ(copy.view(), s);
    KeyString moved_from(s);
    const KeyString moved(std::move(moved_from));
    EXPECT_EQ(moved.view(), s);
  }
}

TEST(KeyStringTest, ComparesWithViewsAndStrings) {
  const KeyString k("orders/2026/11/30/0000000000000042");  // 34 bytes: inline
  EXPECT_TRUE(k == std::string_view("orders/2026/11/30/0000000000000042"));
  EXPECT_TRUE(std::string("orders/2026/11/30/0000000000000042") == k);
  EXPECT_FALSE(k == KeyString("orders/2026/11/30/0000000000000043"));
}

TEST(KeyStringTest, FitsTheHashNodeWithoutGrowingIt) {
  // A std::string is 32 bytes; the node of a KeyString map still rounds to
  // the same malloc chunk (see key_string.h).
  EXPECT_EQ(sizeof(KeyString), 40u);
}

}  // namespace
}  // namespace lockd::locks
