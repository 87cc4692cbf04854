// lockd-sim: runs the deterministic cluster simulator over a range of seeds.
//
//   lockd-sim --nodes 1..9 --seeds N --steps M [--seed S] [--bug NAME] [--membership | --lifecycle]
//             [--max-failures K] [-v]
//
// Runs seeds S .. S+N-1 (S defaults to 1). A failing seed prints the
// invariant it broke and the one command that replays it. The last line is
// always "<passed> passed, <failed> failed".
#include <chrono>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <cstring>
#include <string>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include "simulator.h"

namespace {

// Printed by the abort handler: a LOCKD_CHECK inside the core aborts the
// whole process, and the seed must not be lost with it.
char g_replay_line[512];

void on_abort(int) {
  const char* head = "lockd-sim: aborted; replay with: ";
  ssize_t ignored = write(STDERR_FILENO, head, std::strlen(head));
  ignored = write(STDERR_FILENO, g_replay_line, std::strlen(g_replay_line));
  ignored = write(STDERR_FILENO, "\n", 1);
  (void)ignored;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"lockd-sim: deterministic simulation of a lockd Raft cluster"};
  lockd::sim::SimOptions opts;
  std::uint64_t seeds = 100;
  std::uint64_t first_seed = 1;
  std::string bug = "none";
  std::uint64_t max_failures = 0;
  app.add_option("--nodes", opts.nodes, "cluster size (1 to 9)")->check(CLI::Range(1, 9));
  app.add_option("--seeds", seeds, "how many seeds to run");
  app.add_option("--steps", opts.steps, "steps (ticks) per seed")->check(CLI::Range(10, 100000000));
  app.add_option("--seed", first_seed, "first seed");
  app.add_option("--max-failures", max_failures, "stop after this many failed seeds (0: run them all)");
  app.add_option("--bug", bug,
                 "plant a bug: none, commit-old-term, vote-before-persist, keep-vote-on-new-term, "
                 "skip-log-up-to-date, heartbeat-full-commit, ack-before-persist, expire-ignores-lease, "
                 "quorum-of-all, leader-never-steps-down, no-leader-stickiness, accept-stale-responses, accept-stale-append-responses, "
                 "assume-followers-committed; with --lifecycle: gate-admit-called-voter, gate-identity-is-data, "
                 "gate-learners-confirm, gate-skip-confirmations, gate-peer-count-only, gate-restore-votes, "
                 "gate-empty-confirms, init-at-once, heard-not-durable, heard-counts-prevotes");
  app.add_flag("--membership", opts.membership,
               "membership changes under the faults (add, promote, remove, replace)");
  app.add_flag("--lifecycle", opts.lifecycle,
               "a node's lifecycle: data dirs and flags, the real start gate, cluster init, disk loss "
               "(whole and partial), re-seeding from a backup, stale flags, late start, wrong then right "
               "secret (docs/raft.md)")
      ->excludes(app.get_option("--membership"));
  app.add_flag("--exclusive-only", opts.exclusive_only, "clients issue A only (no S), as before issue 22");
  app.add_flag("--compact-keep", opts.compact_keep,
               "compactions keep some entries behind the snapshot (as the daemon does)");
  app.add_flag("-v,--verbose", opts.verbose, "trace every event");
  app.add_flag("--trace-messages", opts.trace_messages, "also trace every delivered message");
  CLI11_PARSE(app, argc, argv);
  if (!lockd::sim::parse_planted_bug(bug, opts.bug)) {
    std::fprintf(stderr, "lockd-sim: unknown --bug %s\n", bug.c_str());
    return 2;
  }
  std::signal(SIGABRT, on_abort);

  std::uint64_t passed = 0;
  std::uint64_t failed = 0;
  std::uint64_t steps = 0;
  std::uint64_t shared_grants = 0, shared_runs = 0, limit_mismatches = 0;
  // The only clock read: for the speed report on stderr, never for the run.
  const auto started = std::chrono::steady_clock::now();
  const std::clock_t started_cpu = std::clock();
  for (std::uint64_t s = first_seed; s < first_seed + seeds; ++s) {
    std::string replay = lockd::sim::replay_command(opts, s);
    std::snprintf(g_replay_line, sizeof g_replay_line, "%s", replay.c_str());
    lockd::sim::SeedResult r = lockd::sim::run_seed(opts, s);
    steps += r.steps;
    shared_grants += r.shared_grants;
    shared_runs += r.shared_runs;
    limit_mismatches += r.limit_mismatches;
    if (r.passed) {
      ++passed;
    } else {
      ++failed;
      std::printf("seed %llu FAILED at step %llu: %s\n  replay: %s\n", static_cast<unsigned long long>(s),
                  static_cast<unsigned long long>(r.failed_step), r.failure.c_str(), replay.c_str());
      std::fflush(stdout);
      if (max_failures != 0 && failed >= max_failures) break;
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  const double cpu = static_cast<double>(std::clock() - started_cpu) / CLOCKS_PER_SEC;
  std::fprintf(stderr, "lockd-sim: %llu steps in %.1f s wall, %.1f s CPU (%.0f steps per CPU second)\n",
               static_cast<unsigned long long>(steps), seconds, cpu, cpu > 0 ? static_cast<double>(steps) / cpu : 0.0);
  std::fprintf(stderr, "lockd-sim: %llu shared grants, %llu runs of readers handed off together, %llu limit mismatches\n",
               static_cast<unsigned long long>(shared_grants), static_cast<unsigned long long>(shared_runs),
               static_cast<unsigned long long>(limit_mismatches));
  std::printf("%llu passed, %llu failed\n", static_cast<unsigned long long>(passed),
              static_cast<unsigned long long>(failed));
  return failed == 0 ? 0 : 1;
}
