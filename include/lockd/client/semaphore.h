// Semaphore: N permits on one key, counted by the server (`S owner key N`,
// v1.2 protocol.md §5b). Each acquire() takes one permit as a SharedGuard
// with its own fencing token and lease (kept alive by a Keeper); the
// server grants at most N at once and queues the rest in one FIFO queue,
// so waiters are served in arrival order. A permit whose holder dies frees
// itself when its lease ends. Every client of one key must use the same
// N: another N gets kLimitMismatch while the key has holders or waiters.
//
//   Semaphore pool(client, "workers/encode", 8);
//   auto permit = pool.acquire("worker-3", {.lease_ms = 10'000, .wait_ms = 60'000});
//   if (!permit.ok()) return report(permit.status());
//   encode(job, permit->token());   // at most 8 of these run at once
//
// A value type holding a reference to its Client (which must outlive it);
// as thread-safe as the Client.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "lockd/client/status.h"

namespace lockd::client {

class Client;
class SharedGuard;
struct LockOptions;

class Semaphore {
 public:
  // `permits` must be 1..65535; 0 (no cap) would be a read lock, and every
  // acquire() reports kInvalidArgument.
  Semaphore(Client& client, std::string key, std::uint32_t permits);

  // Takes one permit, waiting up to `options.wait_ms`: kTimedOut (`T`) when
  // none came free in time, kBusy, kLimitMismatch, or a transport code.
  Result<SharedGuard> acquire(std::string_view owner, LockOptions options);

  const std::string& key() const { return key_; }
  std::uint32_t permits() const { return permits_; }

 private:
  Client* client_;
  std::string key_;
  std::uint32_t permits_;
};

}  // namespace lockd::client
