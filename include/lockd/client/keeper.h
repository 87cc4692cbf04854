// Keeps a held lock alive: a background thread sends `K token key lease_ms`
// every third of the lease (Redisson's watchdog, etcd's KeepAlive), so a
// holder doing long work never needs a huge lease up front — if it dies,
// the lock frees within one lease.
//
// The lock is lost when the server answers `N` (the lease ended, or the
// key moved on), or when no `K` could be confirmed before the lease's
// safe end (`sent_at + lease`: unreachable servers, no leader, unknown
// outcomes). Loss is reported once, through the callback (on the keeper's
// thread) and through lost(), which the holder should check before each
// step that relies on the lock. A lost lock is never kept again: its
// token is dead, the work must stop (or be fenced by the resource).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "lockd/client/connection.h"
#include "lockd/client/status.h"

namespace lockd::client {

class Client;
struct Lock;

class Keeper {
 public:
  // Starts keeping `lock` (lease_ms must be > 0). `client` must outlive
  // the Keeper.
  Keeper(Client& client, const Lock& lock, std::function<void(const Status&)> on_lost = {});
  ~Keeper();  // stop()
  Keeper(const Keeper&) = delete;
  Keeper& operator=(const Keeper&) = delete;

  // Stops extending and joins the thread (at most one request's timeout).
  void stop();
  // True once the lock is known lost (never becomes false again).
  bool lost() const { return lost_.load(std::memory_order_acquire); }
  // Why it was lost; kOk while it is not.
  Status lost_reason() const;
  // Extensions the server confirmed.
  std::uint64_t kept_count() const { return kept_.load(std::memory_order_relaxed); }

 private:
  void run(Client& client, std::uint64_t token, std::string key, std::uint64_t lease_ms,
           Clock::time_point sent_at);
  void declare_lost(Status why);

  std::function<void(const Status&)> on_lost_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  Status lost_reason_;
  std::atomic<bool> lost_{false};
  std::atomic<std::uint64_t> kept_{0};
  std::thread thread_;  // last: started after everything above exists
};

}  // namespace lockd::client
