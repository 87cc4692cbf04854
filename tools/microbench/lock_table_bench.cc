// Google Benchmark of the pure lock table: the per-request cost without
// sockets, and the sweep over a large table. Run:
//   ./build/bin/lock_table_bench
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "lockd/locks/lock_table.h"

using namespace lockd;
using namespace lockd::locks;

namespace {

std::vector<std::string> make_keys(std::size_t n) {
  std::vector<std::string> keys;
  keys.reserve(n);
  for (std::size_t i = 0; i < n; ++i) keys.push_back("key:" + std::to_string(i));
  return keys;
}

// Acquire then release on keys from a large space: the uncontended path.
void BM_AcquireRelease(benchmark::State& state) {
  const auto keys = make_keys(100'000);
  LockTable table(Limits{}, 1);
  std::vector<Delivery> out;
  std::size_t i = 0;
  TimeNs now = 0;
  for (auto _ : state) {
    const std::string& k = keys[i++ % keys.size()];
    auto r = table.acquire(now, {"owner", k, 30'000, 0, 1, 0});
    table.release(now, r.token, k, out);
    now += 1000;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * 2);
}
BENCHMARK(BM_AcquireRelease);

// A hand-off chain: release with one waiter queued each time.
void BM_ReleaseHandOff(benchmark::State& state) {
  LockTable table(Limits{}, 1);
  std::vector<Delivery> out;
  TimeNs now = 0;
  WaiterId w = 1;
  Token t = table.acquire(now, {"holder", "hot", 30'000, 0, 1, 0}).token;
  for (auto _ : state) {
    table.acquire(now, {"waiter", "hot", 30'000, 1000, 2, w++});
    out.clear();
    table.release(now, t, "hot", out);
    t = out.front().token;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}
BENCHMARK(BM_ReleaseHandOff);

// One sweep over N held keys of which none has expired (the common case:
// the walk itself is the cost).
void BM_SweepNothingExpired(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const auto keys = make_keys(n);
  LockTable table(Limits{n, 10, 10}, 1);
  for (const auto& k : keys) table.acquire(0, {"owner", k, 3'600'000, 0, 1, 0});
  for (auto _ : state) benchmark::DoNotOptimize(table.sweep(1));
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * n));
}
BENCHMARK(BM_SweepNothingExpired)->Arg(1'000'000)->Unit(benchmark::kMillisecond);

// One slice of the server's sweep (4096 buckets) over a million keys: the
// most a sweep adds to one loop turn.
void BM_SweepSlice(benchmark::State& state) {
  constexpr std::size_t kN = 1'000'000;
  const auto keys = make_keys(kN);
  LockTable table(Limits{kN, 10, 10}, 1);
  for (const auto& k : keys) table.acquire(0, {"owner", k, 3'600'000, 0, 1, 0});
  std::size_t freed = 0;
  for (auto _ : state) benchmark::DoNotOptimize(table.sweep_step(1, 4096, freed));
}
BENCHMARK(BM_SweepSlice)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
