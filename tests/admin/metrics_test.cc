// The exposition writer: HELP/TYPE lines, escaped labels, cumulative
// histogram buckets.
#include <gtest/gtest.h>

#include "lockd/admin/metrics.h"

namespace lockd::admin {
namespace {

TEST(MetricsWriterTest, FamiliesAndEscapedLabels) {
  std::string out;
  MetricsWriter w(out);
  w.family("lockd_x_total", "counter", "Things.");
  w.sample("lockd_x_total", {{"k", "a\"b\\c\nd"}}, std::uint64_t{3});
  w.sample("lockd_x_total", {}, 1.5);
  EXPECT_EQ(out,
            "# HELP lockd_x_total Things.\n# TYPE lockd_x_total counter\n"
            "lockd_x_total{k=\"a\\\"b\\\\c\\nd\"} 3\nlockd_x_total 1.5\n");
}

TEST(MetricsWriterTest, HistogramBucketsAreCumulative) {
  LatencyHistogram h;
  h.record(500);        // bucket 0 (<= 1 µs)
  h.record(1'500);      // bucket 1 (<= 2 µs)
  h.record(1'800);      // bucket 1
  h.record(5'000'000'000);  // +Inf
  std::string out;
  MetricsWriter w(out);
  w.histogram("lat_seconds", "Latency.", h);
  EXPECT_NE(out.find("lat_seconds_bucket{le=\"1e-06\"} 1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("lat_seconds_bucket{le=\"2e-06\"} 3\n"), std::string::npos) << out;
  EXPECT_NE(out.find("lat_seconds_bucket{le=\"+Inf\"} 4\n"), std::string::npos) << out;
  EXPECT_NE(out.find("lat_seconds_count 4\n"), std::string::npos) << out;
}

TEST(ProcessStatsTest, ReadsProc) {
  const ProcessStats p = read_process_stats();
  EXPECT_GT(p.resident_bytes, 0u);
  EXPECT_GT(p.open_fds, 2u);
  EXPECT_GT(p.start_time_seconds, 1e9);
}

}  // namespace
}  // namespace lockd::admin
