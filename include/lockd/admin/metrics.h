// Prometheus text exposition (format 0.0.4) of lockd's counters.
//
// Why no registry of live metric objects: every figure already lives in
// one authoritative place (ServerStats, LockStats, the table's sizes,
// /proc), so `/metrics` samples them at scrape time. Nothing is counted
// twice, and the request hot path pays for nothing but its own counters.
// MetricsWriter only guarantees the format: one HELP/TYPE per family,
// escaped label values, cumulative histogram buckets.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

#include "lockd/admin/views.h"
#include "lockd/common/latency_histogram.h"

namespace lockd::server {
class LockServer;
}

namespace lockd::admin {

// One label: name and (unescaped) value.
using Label = std::pair<std::string_view, std::string_view>;

// Appends exposition text to a string.
class MetricsWriter {
 public:
  explicit MetricsWriter(std::string& out) : out_(out) {}

  // Starts a family: `# HELP` and `# TYPE` lines. `type` is counter, gauge
  // or histogram.
  void family(std::string_view name, std::string_view type, std::string_view help);
  // One sample of the current family (or of `name` with a suffix).
  void sample(std::string_view name, std::initializer_list<Label> labels, double value);
  void sample(std::string_view name, std::initializer_list<Label> labels, std::uint64_t value);
  // A family with one unlabelled sample: the common case.
  template <typename T>
  void single(std::string_view name, std::string_view type, std::string_view help, T value) {
    family(name, type, help);
    sample(name, {}, value);
  }
  // A whole histogram family from LatencyHistogram, in seconds.
  void histogram(std::string_view name, std::string_view help, const LatencyHistogram& h);

 private:
  void labels(std::initializer_list<Label> labels, std::string_view extra_name = {},
              std::string_view extra_value = {});
  std::string& out_;
};

// Figures of this process from /proc (Linux); zero when unreadable.
struct ProcessStats {
  std::uint64_t resident_bytes = 0;
  std::uint64_t virtual_bytes = 0;
  std::uint64_t open_fds = 0;
  std::uint64_t max_fds = 0;
  double cpu_seconds = 0;         // user + system
  double start_time_seconds = 0;  // since the Unix epoch
};
ProcessStats read_process_stats();

// The whole `/metrics` body.
std::string render_metrics(const server::LockServer& server, const NodeInfo& node,
                           TimeNs now_ns);

}  // namespace lockd::admin
