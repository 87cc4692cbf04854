// lockctl's human units and tables.
#include <gtest/gtest.h>

#include "format.h"

namespace lockd::lockctl {
namespace {

TEST(FormatTest, DurationsPickTheirUnit) {
  EXPECT_EQ(human_duration_ms(0), "0ms");
  EXPECT_EQ(human_duration_ms(850), "850ms");
  EXPECT_EQ(human_duration_ms(12'345), "12.3s");
  EXPECT_EQ(human_duration_ms(59'999), "59.9s");  // truncated, never "60.0s"
  EXPECT_EQ(human_duration_ms(60'000), "1m00s");
  EXPECT_EQ(human_duration_ms(245'000), "4m05s");
  EXPECT_EQ(human_duration_ms(7'380'000), "2h03m");
  EXPECT_EQ(human_duration_ms(273'600'000), "3d04h");
  EXPECT_EQ(human_duration_ms(-1'500), "-1.5s");
}

TEST(FormatTest, ExpiryReadsLikeASentence) {
  EXPECT_EQ(human_expiry_ms(12'300), "in 12.3s");
  EXPECT_EQ(human_expiry_ms(0), "in 0ms");
  EXPECT_EQ(human_expiry_ms(-1'200), "expired 1.2s ago");
}

TEST(FormatTest, TablesAlignColumnsWithoutTrailingSpaces) {
  Table t({"KEY", "OWNER"});
  t.add({"orders/42", "alice"});
  t.add({"k", ""});
  EXPECT_EQ(t.render(), "KEY        OWNER\norders/42  alice\nk\n");
  EXPECT_EQ(t.size(), 2u);
  EXPECT_EQ(cell(nlohmann::ordered_json()), "-");
  EXPECT_EQ(cell(nlohmann::ordered_json(18'446'744'073'709'551'615ULL)), "18446744073709551615");
}

}  // namespace
}  // namespace lockd::lockctl
