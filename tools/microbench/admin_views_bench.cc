// The admin API's listings over a million keys (docs/operations.md quotes
// these numbers). Run: ./build/bin/admin_views_bench
#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "lockd/admin/views.h"
#include "lockd/locks/lock_table.h"

using namespace lockd;

namespace {

constexpr TimeNs kNow = 1'000'000'000'000;
constexpr std::size_t kKeys = 1'000'000;

// One table for every benchmark: building it takes seconds.
const locks::LockTable& million_keys() {
  static const auto* table = [] {
    auto* t = new locks::LockTable({2 * kKeys, 10, 10}, 1);
    for (std::size_t i = 0; i < kKeys; ++i) {
      const std::string k = fmt::format("orders/{:07}", (i * 7919) % kKeys);
      t->acquire(kNow, {"owner", k, 60'000, 0, 1, 0});
    }
    return t;
  }();
  return *table;
}

void BM_ListLocks(benchmark::State& state, std::string prefix) {
  const auto& t = million_keys();
  const auto limit = static_cast<std::size_t>(state.range(0));
  for (auto _ : state) {
    benchmark::DoNotOptimize(admin::list_locks_json(t, {prefix, "", limit}, kNow).dump());
  }
}
BENCHMARK_CAPTURE(BM_ListLocks, all, std::string())
    ->Arg(1000)->Arg(10000)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ListLocks, prefix, std::string("orders/09"))
    ->Arg(1000)->Unit(benchmark::kMillisecond);

// One slice of a split listing: the most a listing adds to one loop turn.
void BM_ListSlice(benchmark::State& state) {
  const auto& t = million_keys();
  for (auto _ : state) {
    admin::ListScan scan(t, {"", "", 1000});
    t.for_each_in_buckets(0, 4096, [&](std::string_view k, const locks::KeyState& s) {
      scan.offer(k, s, kNow);
    });
  }
}
BENCHMARK(BM_ListSlice)->Unit(benchmark::kMicrosecond);

void BM_CountHolders(benchmark::State& state) {
  const auto& t = million_keys();
  for (auto _ : state) benchmark::DoNotOptimize(admin::count_holders(t, kNow));
}
BENCHMARK(BM_CountHolders)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
