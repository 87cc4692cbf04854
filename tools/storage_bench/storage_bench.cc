// storage_bench: measures the file WAL and lock-table snapshots on this
// machine's disk. Not a test; the figures go to docs/storage.md.
//
//   storage_bench [--dir DIR] [--seconds S] [--locks N] [--log-mib M]
//
// 1. fdatasync of one small append (the device's floor);
// 2. group commit: P proposers simulated as P entries per save (one Ready
//    carrying one loop turn's proposals), P = 1, 64, 1024: entries/s,
//    entries per sync, sync latency p50/p99;
// 3. a snapshot of N held locks through SnapshotWriter (fork): the loop's
//    stall (fork + the largest read-back slice + adopt), child time, size;
//    then recovery: open() + restore() of that snapshot;
// 4. recovery of an M MiB log: open() with the segments evicted from the
//    page cache (posix_fadvise DONTNEED on our own files) and warm.
#include <fcntl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "lockd/locks/lock_table.h"
#include "lockd/locks/lock_table_snapshot.h"
#include "lockd/storage/file_storage.h"
#include "lockd/storage/snapshot_writer.h"
#include "lockd/storage/wal_format.h"

using namespace lockd;
using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// CPU time of this process (user + system), for the CPU-bound steps: less
// distorted than wall time on a loaded machine.
double cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size())))];
}

void fresh(const std::string& dir) {
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
}

void die(const raft::StorageStatus& s) {
  std::fprintf(stderr, "storage_bench: %s\n", s.message.c_str());
  std::exit(1);
}

// A lock command's size on the wire is ~60 bytes (acquire with a key and owner).
std::string payload(std::uint64_t i) {
  std::string s = "acquire owner-" + std::to_string(i % 1000) + " key-" + std::to_string(i) + " 30000 0 ";
  s.resize(64, '.');
  return s;
}

void raw_fdatasync(const std::string& dir, int n) {
  fresh(dir);
  const std::string path = dir + "/raw";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  std::vector<double> us;
  const std::string rec(100, 'r');
  for (int i = 0; i < n; ++i) {
    const auto t0 = Clock::now();
    if (::write(fd, rec.data(), rec.size()) != static_cast<ssize_t>(rec.size()) || ::fdatasync(fd) != 0) {
      std::perror("raw");
      std::exit(1);
    }
    us.push_back(ms_since(t0) * 1000);
  }
  ::close(fd);
  std::printf("raw write+fdatasync of 100 bytes: p50 %.0f us, p99 %.0f us (%d samples)\n", percentile(us, 0.5),
              percentile(us, 0.99), n);
}

void group_commit(const std::string& dir, std::size_t proposers, double seconds) {
  fresh(dir);
  storage::FileStorage st({dir, 64u << 20, true});
  if (auto s = st.open(); !s.ok()) die(s);
  std::vector<raft::Entry> batch(proposers);
  std::vector<double> us;
  raft::Index next = 1;
  const auto start = Clock::now();
  while (ms_since(start) < seconds * 1000) {
    for (auto& e : batch) e = raft::Entry{1, next, raft::EntryType::kCommand, payload(next)}, ++next;
    const auto t0 = Clock::now();
    if (auto s = st.save(raft::HardState{1, 1, next - 1}, batch, nullptr); !s.ok()) die(s);
    us.push_back(ms_since(t0) * 1000);
  }
  const double secs = ms_since(start) / 1000;
  const auto& stats = st.stats();
  std::printf("proposers %5zu: %9.0f entries/s durable, %7.0f syncs/s, %6.1f entries/sync, save p50 %5.0f us p99 %6.0f us, %.1f MiB/s\n",
              proposers, static_cast<double>(stats.entries) / secs, static_cast<double>(stats.syncs) / secs,
              static_cast<double>(stats.entries) / static_cast<double>(stats.syncs), percentile(us, 0.5),
              percentile(us, 0.99), static_cast<double>(stats.bytes) / secs / (1 << 20));
}

void evict(const std::string& dir) {
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const int fd = ::open(e.path().c_str(), O_RDONLY);
    if (fd < 0) continue;
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

void snapshot_of_locks(const std::string& dir, std::size_t n) {
  fresh(dir);
  locks::LockTable table(locks::Limits{n + 1, 10, 1000}, 1);
  const auto b0 = Clock::now();
  for (std::size_t i = 0; i < n; ++i) {
    const std::string key = "lock:" + std::to_string(i) + ":resource-name";
    table.acquire(1, {"owner-" + std::to_string(i % 5000), key, 600000, 0, 1, 0});
  }
  std::printf("built %zu held locks in %.0f ms\n", table.key_count(), ms_since(b0));

  const auto s0 = Clock::now();
  const double c0 = cpu_ms();
  std::string bytes = locks::serialize(table, "app");
  std::printf("serialize() in-process (what a non-forking snapshot would stall): %.0f ms wall, %.0f ms CPU, %.1f MiB\n",
              ms_since(s0), cpu_ms() - c0, static_cast<double>(bytes.size()) / (1 << 20));
  bytes = std::string();

  storage::FileStorage st({dir, 64u << 20, true});
  if (auto s = st.open(); !s.ok()) die(s);
  std::vector<raft::Entry> batch;
  for (raft::Index i = 1; i <= 1000; ++i) batch.push_back({1, i, raft::EntryType::kCommand, payload(i)});
  if (auto s = st.save(raft::HardState{1, 1, 1000}, batch, nullptr); !s.ok()) die(s);

  // fork() alone, a few times (what the loop pays at the start of a snapshot).
  std::vector<double> forks;
  for (int i = 0; i < 5; ++i) {
    const auto f0 = Clock::now();
    const pid_t pid = ::fork();
    if (pid == 0) ::_exit(0);
    forks.push_back(ms_since(f0));
    ::waitpid(pid, nullptr, 0);
  }
  std::printf("fork() of this process (%zu locks): min %.1f ms, median %.1f ms over 5\n", n,
              *std::min_element(forks.begin(), forks.end()), percentile(forks, 0.5));

  storage::SnapshotWriter writer(st);  // 1 MiB read-back slices
  const auto w0 = Clock::now();
  if (auto s = writer.start({1000, 1}, [&] { return locks::serialize(table, "app"); }); !s.ok()) die(s);
  double max_poll_ms = 0;
  std::size_t polls = 0;
  std::optional<storage::SnapshotWriter::Done> done;
  while (!done) {
    const auto p0 = Clock::now();
    done = writer.poll();
    max_poll_ms = std::max(max_poll_ms, ms_since(p0));
    ++polls;
    if (!done) ::usleep(1000);  // the loop serves clients in between
  }
  if (!done->status.ok()) die(done->status);
  const auto& t = writer.timing();
  std::printf("SnapshotWriter (fork): total %.0f ms; loop stalls: fork %.1f ms, longest poll %.1f ms "
              "(1 MiB read-back slice or adopt), adopt %.1f ms; child %.0f ms; read-back %.1f ms over %zu polls; "
              "file %.1f MiB\n",
              ms_since(w0), t.fork_ms, max_poll_ms, t.adopt_ms, t.child_ms, t.read_ms, polls,
              static_cast<double>(t.bytes) / (1 << 20));
  const std::size_t keys = table.key_count();
  done.reset();

  // Recovery of those locks: open() (reads and checks the snapshot file)
  // plus restore() into a fresh table.
  // A second directory with the same files (the first is still locked).
  const std::string copy = dir + "-recover";
  fresh(copy);
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().filename() != "LOCK") std::filesystem::copy_file(e.path(), copy + "/" + e.path().filename().string());
  }
  evict(copy);
  storage::FileStorage again({copy, 64u << 20, true});
  const auto o0 = Clock::now();
  const double oc0 = cpu_ms();
  if (auto s = again.open(); !s.ok()) die(s);
  const double open_ms = ms_since(o0);
  const double open_cpu = cpu_ms() - oc0;
  locks::LockTable restored(locks::Limits{n + 1, 10, 1000}, 1);
  std::string header, error;
  const auto x0 = Clock::now();
  const double xc0 = cpu_ms();
  if (!locks::restore(again.snapshot().data, restored, header, error)) {
    std::fprintf(stderr, "restore: %s\n", error.c_str());
    std::exit(1);
  }
  const double restore_ms = ms_since(x0);
  const double restore_cpu = cpu_ms() - xc0;
  std::printf("recovery of %zu held locks: open() %.0f ms (read + CRC of the snapshot file, cold) + restore() %.0f ms "
              "= %.0f ms wall; CPU %.0f + %.0f = %.0f ms\n",
              restored.key_count(), open_ms, restore_ms, open_ms + restore_ms, open_cpu, restore_cpu,
              open_cpu + restore_cpu);
  if (restored.key_count() != keys) std::exit(1);
}

void log_recovery(const std::string& dir, std::size_t mib) {
  fresh(dir);
  std::uint64_t entries = 0;
  {
    storage::FileStorage st({dir, 64u << 20, false});  // generation only: no syncs
    if (auto s = st.open(); !s.ok()) die(s);
    std::vector<raft::Entry> batch(4096);
    raft::Index next = 1;
    while (st.stats().bytes < (static_cast<std::uint64_t>(mib) << 20)) {
      for (auto& e : batch) e = raft::Entry{1, next, raft::EntryType::kCommand, payload(next)}, ++next;
      if (auto s = st.save(raft::HardState{1, 1, next - 1}, batch, nullptr); !s.ok()) die(s);
    }
    entries = next - 1;
  }
  for (int cold = 1; cold >= 0; --cold) {
    if (cold) evict(dir);
    const auto t0 = Clock::now();
    const double c0 = cpu_ms();
    storage::FileStorage st({dir, 64u << 20, true});
    if (auto s = st.open(); !s.ok()) die(s);
    const double ms = ms_since(t0);
    std::printf("recovery of a %zu MiB log (%llu entries, %zu segments), %s page cache: %.0f ms wall (%.0f MiB/s), %.0f ms CPU\n",
                mib, static_cast<unsigned long long>(entries), st.recovery().segments, cold ? "cold" : "warm", ms,
                static_cast<double>(st.recovery().wal_bytes) / (1 << 20) / (ms / 1000), cpu_ms() - c0);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"storage_bench: file WAL group commit, snapshots and recovery on this disk"};
  std::string dir = "/tmp/lockd-storage-bench";
  double seconds = 5;
  std::size_t locks_n = 1'000'000;
  std::size_t log_mib = 256;
  std::string only;
  app.add_option("--dir", dir, "scratch directory (removed and recreated)");
  app.add_option("--seconds", seconds, "seconds per group-commit run")->check(CLI::Range(0.1, 600.0));
  app.add_option("--locks", locks_n, "held locks in the snapshot run")->check(CLI::Range(1, 20'000'000));
  app.add_option("--log-mib", log_mib, "size of the log for the recovery run")->check(CLI::Range(1, 8192));
  app.add_option("--only", only, "run one part: raw, group, snapshot, recovery");
  CLI11_PARSE(app, argc, argv);

  if (only.empty() || only == "raw") raw_fdatasync(dir + "/raw", 2000);
  if (only.empty() || only == "group") {
    for (std::size_t p : {1, 64, 1024}) group_commit(dir + "/group", p, seconds);
  }
  if (only.empty() || only == "snapshot") snapshot_of_locks(dir + "/snap", locks_n);
  if (only.empty() || only == "recovery") log_recovery(dir + "/log", log_mib);
  std::filesystem::remove_all(dir);
  return 0;
}
