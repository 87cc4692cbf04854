// Runner: drives one benchmark run on one libevent loop and collects its
// results.
//
// Why one thread: lockd serves from one reactor thread, and on the 2-core
// machines we compare on, the client gets the other core. The client does
// per reply one decode, one histogram update and one encode; per socket
// event one read() and one write(); and two clock reads per event, not per
// request, so it stays well ahead of the server it measures.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config.h"
#include "histogram.h"

namespace lockbench {

// Exit statuses (documented in docs/benchmarks/lockbench.md).
enum ExitCode : int {
  kExitOk = 0,
  kExitFailed = 1,      // ran, but protocol errors, lost waiters, FIFO broken or keeps refused
  kExitUsage = 2,       // bad flags
  kExitNoServer = 3,    // cannot connect, or the server closed a connection
  kExitBadServer = 4,   // the server answered something that is not the protocol
};

struct Counters {
  std::uint64_t ops = 0;            // replies received (every request is an op)
  std::uint64_t granted = 0;
  std::uint64_t not_granted = 0;    // lockd T / Redis nil (incl. retries)
  std::uint64_t busy = 0;           // lockd B
  std::uint64_t released = 0;
  std::uint64_t not_released = 0;   // N / :0 to a release of a lock we held
  std::uint64_t kept = 0;           // hold-keep: K / :1 to a keep
  std::uint64_t not_kept = 0;       // hold-keep: N / :0 to a keep of a lock we held
  std::uint64_t wait_timeouts = 0;  // a waiting acquire gave up
  std::uint64_t protocol_errors = 0;
  // lockd cluster mode: replies and events of a leader change. Each is
  // followed by starting that sequence over (after a short pause for
  // no_leader), not counted as a protocol error.
  std::uint64_t moved = 0;          // `M`: asked a follower
  std::uint64_t no_leader = 0;      // `E no_leader`
  std::uint64_t indeterminate = 0;  // `E indeterminate`
  std::uint64_t lost = 0;           // requests dropped with a connection that closed or moved
  std::uint64_t reconnects = 0;     // connections (re)opened after the first
};

struct Results {
  double elapsed_s = 0;
  double ops_per_s = 0;
  Counters counters;
  LogHistogram latency_ns;       // every request: send to reply
  LogHistogram acquire_wait_ns;  // contended/waiters: first attempt to grant
  LogHistogram handoff_ns;       // contended: a release sent to the next grant of that key
  LogHistogram probe_ns;         // waiters: requests on another key meanwhile
  LogHistogram keep_ns;          // hold-keep: the keeps alone, send to reply
  std::vector<std::uint64_t> grants_per_connection;  // contended fairness
  // hold
  std::uint64_t held = 0;
  // waiters
  std::uint64_t waiters_served = 0;
  std::uint64_t fifo_violations = 0;
  double enqueue_ms = 0;  // time to queue every waiter
  double serve_ms = 0;    // first release to last waiter served
  std::string leader;  // cluster: the address the run ended on
  std::string tls_suite;  // --tls-ca: what the first handshake negotiated, e.g. "TLSv1.3 TLS_AES_256_GCM_SHA384"
  // Empty on success; else a one-line reason and the exit status.
  std::string failure;
  int exit_code = kExitOk;
};

// Runs the benchmark `cfg` describes. Never throws for server behaviour:
// problems end up in Results::failure / exit_code.
Results run_benchmark(const Config& cfg);

}  // namespace lockbench
