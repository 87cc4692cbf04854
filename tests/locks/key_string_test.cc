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

// Move assignment (a heap of them reorders by moving): the target's own
// heap block is freed (ASan would report a leak), the source gives up its.
TEST(KeyStringTest, MoveAssignmentKeepsTheBytesAndOwnsOneBlock) {
  const std::string inline_key = "bench:hold:42";
  const std::string long_key(100, 'k');
  for (const auto& [to, from] : {std::pair{inline_key, long_key}, std::pair{long_key, inline_key},
                                 std::pair{long_key, long_key + "x"}, std::pair{inline_key, inline_key + "x"}}) {
    KeyString a(to);
    KeyString b(from);
    a = std::move(b);
    EXPECT_EQ(a.view(), from);
    EXPECT_EQ(b.size(), 0u);  // NOLINT(bugprone-use-after-move): moved-from is empty
    KeyString& self = a;
    a = std::move(self);
    EXPECT_EQ(a.view(), from);
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

// OwnerString: a holder's owner in 16 bytes, inline up to 15 (as
// std::string's 32), one heap block beyond; assign and clear free it (ASan).
namespace lockd::locks {
namespace {

TEST(OwnerStringTest, InlineUpToFifteenBytesAndOneBlockBeyond) {
  EXPECT_EQ(sizeof(OwnerString), 16u);
  for (std::size_t n : {0ul, 1ul, 15ul, 16ul, 64ul}) {
    const std::string s(n, 'o');
    OwnerString o(s);
    EXPECT_EQ(o.view(), s) << n;
    EXPECT_EQ(o.empty(), n == 0);
    o.assign(std::string(n + 1, 'p'));
    EXPECT_EQ(o.view(), std::string(n + 1, 'p'));
    OwnerString copy = o;
    copy.clear();
    EXPECT_TRUE(copy.empty());
    EXPECT_EQ(o.size(), n + 1);
  }
}

}  // namespace
}  // namespace lockd::locks
