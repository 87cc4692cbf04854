// Everything a lockbench run is told by its flags.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend.h"
#include "tls.h"

namespace lockbench {

enum class Workload : std::uint8_t {
  kUncontended,  // random keys from a large space: acquire, release, repeat
  kContended,    // a few hot keys: acquire with wait, release on grant
  kHold,         // acquire M distinct keys and keep them (memory per lock)
  kWaiters,      // C connections queue on one key; FIFO hand-off chain
  kHoldKeep,     // random keys: acquire, extend the lease --keeps times, release
  // v1.2 shared keys (lockd `S`; Redis: Redisson's scripts), each a
  // contended loop (acquire with wait, release on grant) on hot keys:
  kReadersHeavy,  // --write-percent writers (A), the rest readers (S limit 0)
  kSemaphore,     // every acquire one permit of a semaphore of --limit (S limit N)
};

// A server address.
struct Endpoint {
  std::string host;
  std::uint16_t port = 0;
  std::string to_string() const { return host + ":" + std::to_string(port); }
};

struct Config {
  std::string host = "127.0.0.1";
  std::uint16_t port = 7070;
  // lockd cluster mode (--cluster or --addr given more than once): every
  // member. lockbench finds the leader among them, follows `M` when
  // leadership moves and reconnects when a node goes away.
  std::vector<Endpoint> cluster;
  BackendKind backend = BackendKind::kLockd;
  Workload workload = Workload::kUncontended;
  std::uint32_t connections = 50;
  std::uint32_t pipeline = 1;     // outstanding requests per connection
  double duration_s = 10;         // uncontended/contended; a time limit for hold/waiters
  std::uint64_t ops = 0;          // stop after this many requests (0: use duration)
  std::uint64_t keyspace = 100'000'000;  // uncontended key space
  std::uint32_t hot_keys = 8;            // contended hot set
  std::uint64_t hold_keys = 1'000'000;   // hold: distinct keys to acquire
  std::uint32_t waiters = 1000;          // waiters: connections queued on one key
  std::uint32_t keeps = 10;              // hold-keep: lease extensions per acquired lock
  std::uint32_t limit = 8;               // semaphore: permits
  std::uint32_t write_percent = 10;      // readers-heavy: share of exclusive acquires
  std::uint64_t lease_ms = 10'000;
  std::uint64_t hold_lease_ms = 900'000;  // long enough to read RSS afterwards
  std::uint64_t wait_ms = 30'000;         // contended/waiters acquire wait
  std::uint32_t retry_ms = 1;             // Redis: sleep between SET NX retries
  std::uint64_t seed = 1;
  std::string key_prefix = "lb";
  bool progress = true;  // one line per second on stderr
  bool json = false;     // the report as JSON on stdout
  TlsOptions tls;        // --tls-ca ...: every connection over TLS
};

const char* workload_name(Workload w);

}  // namespace lockbench
