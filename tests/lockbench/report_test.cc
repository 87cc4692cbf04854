// The fairness index reported for `contended`.
#include "report.h"

#include <gtest/gtest.h>

namespace lockbench {
namespace {

TEST(ReportTest, JainIndexIsOneWhenEqual) {
  EXPECT_DOUBLE_EQ(jain_index({5, 5, 5, 5}), 1.0);
}

TEST(ReportTest, JainIndexIsOneOverNWhenOneClientGetsAll) {
  EXPECT_DOUBLE_EQ(jain_index({0, 0, 0, 12}), 0.25);
}

TEST(ReportTest, JainIndexOfNothingIsZero) {
  EXPECT_EQ(jain_index({}), 0.0);
  EXPECT_EQ(jain_index({0, 0}), 0.0);
}

}  // namespace
}  // namespace lockbench
