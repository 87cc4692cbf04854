// lockbench: the redis-benchmark of lockd. Parses flags, runs one
// benchmark against lockd or Redis, prints the report.
#include <CLI/CLI.hpp>

#include <csignal>
#include <cstdio>
#include <map>
#include <optional>
#include <vector>

#include "config.h"
#include "keygen.h"
#include "lockd/version/version.h"
#include "report.h"
#include "runner.h"
#ifdef LOCKBENCH_HAVE_ZOOKEEPER
#include "zk_runner.h"
#endif

namespace {

// For hold and waiters --duration is a time limit, not the run length.
constexpr double kDefaultFinishLimitS = 300;
// Flag bounds: beyond them a run is a mistake, not a benchmark.
constexpr unsigned kMaxConnections = 100'000;
constexpr unsigned kMaxPipeline = 1024;
constexpr unsigned kMaxHotKeys = 1'000'000;
constexpr std::uint64_t kMaxHoldKeys = 100'000'000;
constexpr unsigned kMaxWaiters = 1'000'000;
// The protocol's defaults for --max-lease-ms and --max-wait-ms (spec §2).
constexpr std::uint64_t kMaxLeaseMs = 3'600'000;
constexpr std::uint64_t kMaxWaitMs = 300'000;
constexpr unsigned kMaxRetryMs = 10'000;

}  // namespace

int main(int argc, char** argv) {
  using namespace lockbench;
  Config cfg;
  CLI::App app{"lockbench: load generator for lockd (and Redis, for comparison)"};
  std::vector<std::string> addrs;
  app.add_option("--addr", addrs,
                 "server HOST:PORT (default 127.0.0.1:7070); more than one: a lockd cluster");
  std::vector<std::string> cluster;
  app.add_option("--cluster", cluster,
                 "lockd cluster members HOST:PORT,HOST:PORT,...: find the leader, follow M")
      ->delimiter(',');
  std::map<std::string, BackendKind> backends{{"lockd", BackendKind::kLockd},
                                              {"redis", BackendKind::kRedis}};
#ifdef LOCKBENCH_HAVE_ZOOKEEPER
  backends.emplace("zookeeper", BackendKind::kZooKeeper);
#endif
  app.add_option("--backend", cfg.backend,
                 "lockd or redis (or zookeeper, when built with libzookeeper-mt-dev)")
      ->transform(CLI::CheckedTransformer(backends, CLI::ignore_case));
  const std::map<std::string, Workload> workloads{{"uncontended", Workload::kUncontended},
                                                  {"contended", Workload::kContended},
                                                  {"readers-heavy", Workload::kReadersHeavy},
                                                  {"semaphore", Workload::kSemaphore},
                                                  {"hold", Workload::kHold},
                                                  {"waiters", Workload::kWaiters},
                                                  {"hold-keep", Workload::kHoldKeep}};
  app.add_option("-w,--workload", cfg.workload,
                 "uncontended, contended, hold, waiters, hold-keep, readers-heavy or semaphore")
      ->transform(CLI::CheckedTransformer(workloads, CLI::ignore_case));
  app.add_option("-c,--connections", cfg.connections, "connections (not for waiters)")
      ->check(CLI::Range(1U, kMaxConnections))
      ->capture_default_str();
  app.add_option("-P,--pipeline", cfg.pipeline, "outstanding requests per connection")
      ->check(CLI::Range(1U, kMaxPipeline))
      ->capture_default_str();
  auto* dur = app.add_option("-d,--duration", cfg.duration_s,
                             "seconds to run (hold/waiters: time limit, default 300)")
                  ->check(CLI::PositiveNumber);
  app.add_option("-n,--ops", cfg.ops, "stop after this many requests instead (0: use duration)");
  app.add_option("--keyspace", cfg.keyspace, "uncontended: key space size")
      ->check(CLI::Range(std::uint64_t{1}, UINT64_MAX))
      ->capture_default_str();
  app.add_option("--hot-keys", cfg.hot_keys, "contended, readers-heavy: number of hot keys")
      ->check(CLI::Range(1U, kMaxHotKeys))
      ->capture_default_str();
  app.add_option("--limit", cfg.limit, "semaphore: permits (S limit N, one key)")
      ->check(CLI::Range(1U, 65535U))
      ->capture_default_str();
  app.add_option("--write-percent", cfg.write_percent,
                 "readers-heavy: percent of acquires that are exclusive (A); the rest S limit 0")
      ->check(CLI::Range(0U, 100U))
      ->capture_default_str();
  app.add_option("--keys", cfg.hold_keys, "hold: distinct keys to acquire and keep")
      ->check(CLI::Range(std::uint64_t{1}, kMaxHoldKeys))
      ->capture_default_str();
  app.add_option("--waiters", cfg.waiters, "waiters: connections queued on one key")
      ->check(CLI::Range(1U, kMaxWaiters))
      ->capture_default_str();
  app.add_option("--keeps", cfg.keeps, "hold-keep: lease extensions per acquired lock")
      ->check(CLI::Range(std::uint32_t{0}, std::uint32_t{1'000'000}))
      ->capture_default_str();
  app.add_option("--lease-ms", cfg.lease_ms, "lease of each acquire")
      ->check(CLI::Range(std::uint64_t{1}, kMaxLeaseMs))
      ->capture_default_str();
  app.add_option("--hold-lease-ms", cfg.hold_lease_ms, "hold: lease of the kept locks")
      ->check(CLI::Range(std::uint64_t{1}, kMaxLeaseMs))
      ->capture_default_str();
  app.add_option("--wait-ms", cfg.wait_ms, "contended/waiters: how long an acquire waits")
      ->check(CLI::Range(std::uint64_t{0}, kMaxWaitMs))
      ->capture_default_str();
  app.add_option("--retry-ms", cfg.retry_ms, "redis: sleep between SET NX retries while waiting")
      ->check(CLI::Range(1U, kMaxRetryMs))
      ->capture_default_str();
  app.add_option("--seed", cfg.seed, "key generator seed")->capture_default_str();
  app.add_option("--key-prefix", cfg.key_prefix, "prefix of every key")
      ->check([](const std::string& p) {
        return p.empty() || p.size() > kMaxKeyPrefixBytes - 16 ? std::string("1..56 bytes")
                                                               : std::string();
      })
      ->capture_default_str();
  app.add_option("--tls-ca", cfg.tls.ca,
                 "TLS on every connection (lockd --client-tls, redis --tls-port): the CA the "
                 "server's certificate must chain to")
      ->check(CLI::ExistingFile);
  auto* tls_cert = app.add_option("--tls-cert", cfg.tls.cert, "TLS: client certificate (PEM)")
                       ->check(CLI::ExistingFile);
  auto* tls_key = app.add_option("--tls-key", cfg.tls.key, "TLS: the client certificate's key (PEM)")
                      ->check(CLI::ExistingFile);
  tls_cert->needs(tls_key);
  tls_key->needs(tls_cert);
  app.add_option("--tls-server-name", cfg.tls.server_name,
                 "TLS: the name the server's certificate must show (default: the host dialed)");
  app.add_flag("--json", cfg.json, "print the report as JSON on stdout");
  bool quiet = false;
  app.add_flag("-q,--quiet", quiet, "no progress lines on stderr");
  app.set_version_flag("--version", "lockbench " + std::string(lockd::version::full()));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : kExitUsage;
  }
  cfg.progress = !quiet;
  const auto parse = [](const std::string& addr) -> std::optional<Endpoint> {
    const auto colon = addr.rfind(':');
    if (colon == std::string::npos || colon == 0) return std::nullopt;
    try {
      const unsigned long port = std::stoul(addr.substr(colon + 1));
      if (port == 0 || port > 65535) return std::nullopt;
      return Endpoint{addr.substr(0, colon), static_cast<std::uint16_t>(port)};
    } catch (const std::exception&) {
      return std::nullopt;
    }
  };
  if (addrs.size() > 1) cluster.insert(cluster.begin(), addrs.begin(), addrs.end());
  if (addrs.empty()) addrs.push_back("127.0.0.1:7070");
  for (const std::string& a : cluster.empty() ? addrs : cluster) {
    const auto ep = parse(a);
    if (!ep) {
      std::fprintf(stderr, "lockbench: addresses must be HOST:PORT, got '%s'\n", a.c_str());
      return kExitUsage;
    }
    if (cluster.empty()) {
      cfg.host = ep->host;
      cfg.port = ep->port;
    } else {
      cfg.cluster.push_back(*ep);
    }
  }
  if (!cfg.cluster.empty() && cfg.backend != BackendKind::kZooKeeper &&
      (cfg.backend != BackendKind::kLockd || cfg.workload == Workload::kWaiters)) {
    std::fprintf(stderr, "lockbench: a cluster target takes the lockd backend and the "
                         "uncontended, contended, hold or hold-keep workload\n");
    return kExitUsage;
  }
  if (!cfg.tls.enabled() && (!cfg.tls.cert.empty() || !cfg.tls.server_name.empty())) {
    std::fprintf(stderr, "lockbench: --tls-cert and --tls-server-name need --tls-ca\n");
    return kExitUsage;
  }
  if (cfg.tls.enabled() && cfg.backend == BackendKind::kZooKeeper) {
    std::fprintf(stderr, "lockbench: --tls-ca is for the lockd and redis backends\n");
    return kExitUsage;
  }
  if (dur->count() == 0 &&
      (cfg.workload == Workload::kHold || cfg.workload == Workload::kWaiters)) {
    cfg.duration_s = kDefaultFinishLimitS;
  }
  std::signal(SIGPIPE, SIG_IGN);

#ifdef LOCKBENCH_HAVE_ZOOKEEPER
  const Results res = cfg.backend == BackendKind::kZooKeeper ? run_zookeeper(cfg) : run_benchmark(cfg);
#else
  const Results res = run_benchmark(cfg);
#endif
  if (res.exit_code == kExitNoServer || res.exit_code == kExitBadServer ||
      res.exit_code == kExitUsage || res.counters.ops == 0) {
    // Nothing worth reporting: one line and the status.
    std::fprintf(stderr, "lockbench: %s\n",
                 res.failure.empty() ? "no requests completed" : res.failure.c_str());
    return res.exit_code == kExitOk ? kExitFailed : res.exit_code;
  }
  if (cfg.json) {
    std::printf("%s\n", report_json(cfg, res).dump(2).c_str());
  } else {
    std::printf("%s", report_text(cfg, res).c_str());
  }
  if (!res.failure.empty()) std::fprintf(stderr, "lockbench: %s\n", res.failure.c_str());
  return res.exit_code;
}
