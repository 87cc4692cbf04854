#include "report.h"

#include <fmt/format.h>

#include <algorithm>

namespace lockbench {
namespace {

constexpr double kNsPerMsD = 1e6;

nlohmann::json latency_json(const LogHistogram& h) {
  return {{"count", h.count()},       {"mean", h.mean()},
          {"p50", h.percentile(50)},  {"p90", h.percentile(90)},
          {"p99", h.percentile(99)},  {"p999", h.percentile(99.9)},
          {"max", h.max()}};
}

std::string latency_line(std::string_view label, const LogHistogram& h) {
  auto ms = [](std::uint64_t ns) { return static_cast<double>(ns) / kNsPerMsD; };
  return fmt::format(
      "  {:<14} p50 {:.3f}  p90 {:.3f}  p99 {:.3f}  p99.9 {:.3f}  max {:.3f} ms  (n={})\n", label,
      ms(h.percentile(50)), ms(h.percentile(90)), ms(h.percentile(99)), ms(h.percentile(99.9)),
      ms(h.max()), h.count());
}

}  // namespace

double jain_index(const std::vector<std::uint64_t>& counts) {
  double sum = 0;
  double sum_sq = 0;
  for (std::uint64_t c : counts) {
    const auto x = static_cast<double>(c);
    sum += x;
    sum_sq += x * x;
  }
  if (counts.empty() || sum_sq == 0) return 0;
  return sum * sum / (static_cast<double>(counts.size()) * sum_sq);
}

nlohmann::json report_json(const Config& cfg, const Results& res) {
  const Counters& k = res.counters;
  nlohmann::json j = {
      {"backend", backend_name(cfg.backend)},
      {"workload", workload_name(cfg.workload)},
      {"connections", cfg.workload == Workload::kWaiters ? cfg.waiters + 2 : cfg.connections},
      {"pipeline", cfg.pipeline},
      {"tls", cfg.tls.enabled()},
      {"tls_suite", res.tls_suite},
      {"elapsed_s", res.elapsed_s},
      {"ops", k.ops},
      {"ops_per_s", res.ops_per_s},
      {"latency_ns", latency_json(res.latency_ns)},
      {"counters",
       {{"granted", k.granted},
        {"not_granted", k.not_granted},
        {"busy", k.busy},
        {"released", k.released},
        {"not_released", k.not_released},
        {"kept", k.kept},
        {"not_kept", k.not_kept},
        {"wait_timeouts", k.wait_timeouts},
        {"protocol_errors", k.protocol_errors}}},
      {"ok", res.failure.empty()},
  };
  if (!res.failure.empty()) j["failure"] = res.failure;
  if (!cfg.cluster.empty()) {
    j["cluster"] = {{"leader", res.leader},
                    {"moved", k.moved},
                    {"no_leader", k.no_leader},
                    {"indeterminate", k.indeterminate},
                    {"lost", k.lost},
                    {"reconnects", k.reconnects}};
  }
  if (cfg.workload == Workload::kContended || cfg.workload == Workload::kReadersHeavy ||
      cfg.workload == Workload::kSemaphore) {
    const auto& g = res.grants_per_connection;
    const auto [mn, mx] = std::minmax_element(g.begin(), g.end());
    j["contended"] = {{"hot_keys", cfg.hot_keys},
                      {"acquire_wait_ns", latency_json(res.acquire_wait_ns)},
                      {"handoff_ns", latency_json(res.handoff_ns)},
                      {"grants_min", g.empty() ? 0 : *mn},
                      {"grants_max", g.empty() ? 0 : *mx},
                      {"fairness_jain", jain_index(g)}};
  }
  if (cfg.workload == Workload::kHoldKeep) {
    j["hold_keep"] = {{"keeps_per_lock", cfg.keeps}, {"keep_latency_ns", latency_json(res.keep_ns)}};
  }
  if (cfg.workload == Workload::kHold) {
    j["hold"] = {{"keys", cfg.hold_keys}, {"held", k.granted}};
  }
  if (cfg.workload == Workload::kWaiters) {
    j["waiters"] = {{"waiters", cfg.waiters},
                    {"served", res.waiters_served},
                    {"fifo_violations", res.fifo_violations},
                    {"enqueue_ms", res.enqueue_ms},
                    {"serve_ms", res.serve_ms},
                    {"acquire_wait_ns", latency_json(res.acquire_wait_ns)},
                    {"probe_latency_ns", latency_json(res.probe_ns)}};
  }
  return j;
}

std::string report_text(const Config& cfg, const Results& res) {
  const Counters& k = res.counters;
  std::string s = fmt::format(
      "{} {}: {} connections, pipeline {}{}, {:.2f} s\n  {:.0f} ops/s ({} ops)\n",
      backend_name(cfg.backend), workload_name(cfg.workload),
      cfg.workload == Workload::kWaiters ? cfg.waiters + 2 : cfg.connections, cfg.pipeline,
      cfg.tls.enabled() ? ", TLS" : "", res.elapsed_s, res.ops_per_s, k.ops);
  s += latency_line("latency", res.latency_ns);
  s += fmt::format(
      "  granted {}  not granted {}  busy {}  released {}  not released {}  wait timeouts {}  "
      "protocol errors {}\n",
      k.granted, k.not_granted, k.busy, k.released, k.not_released, k.wait_timeouts,
      k.protocol_errors);
  if (!cfg.cluster.empty()) {
    s += fmt::format(
        "  cluster: leader {}  M {}  no_leader {}  indeterminate {}  lost {}  reconnects {}\n",
        res.leader, k.moved, k.no_leader, k.indeterminate, k.lost, k.reconnects);
  }
  if (cfg.workload == Workload::kContended || cfg.workload == Workload::kReadersHeavy ||
      cfg.workload == Workload::kSemaphore) {
    s += latency_line("acquire wait", res.acquire_wait_ns);
    s += latency_line("hand-off", res.handoff_ns);
    const auto& g = res.grants_per_connection;
    if (!g.empty()) {
      const auto [mn, mx] = std::minmax_element(g.begin(), g.end());
      s += fmt::format("  grants per connection: min {} max {}  Jain fairness {:.3f}\n", *mn, *mx,
                       jain_index(g));
    }
  }
  if (cfg.workload == Workload::kHoldKeep) {
    s += fmt::format("  keeps per lock {}  kept {}  not kept {}\n", cfg.keeps, k.kept, k.not_kept);
    s += latency_line("keep", res.keep_ns);
  }
  if (cfg.workload == Workload::kHold) {
    s += fmt::format("  held {} of {} keys\n", k.granted, cfg.hold_keys);
  }
  if (cfg.workload == Workload::kWaiters) {
    s += fmt::format(
        "  waiters {}: served {}  FIFO violations {}  enqueue {:.1f} ms  serve {:.1f} ms\n",
        cfg.waiters, res.waiters_served, res.fifo_violations, res.enqueue_ms, res.serve_ms);
    s += latency_line("waiter wait", res.acquire_wait_ns);
    s += latency_line("other key", res.probe_ns);
  }
  return s;
}

}  // namespace lockbench
