// Keeps a held lock alive: a background thread sends `K token key lease_ms`
// every third of the lease (Redisson's watchdog, etcd's KeepAlive), so a
// holder doing long work never needs a huge lease up front — if it dies,
// the lock frees within one lease.
//
// The lock is lost when the server answers `N` (the lease ended, or the
// key moved on), when the server pushes `X token key` (the lease ended by
// expiry, §5c: reported at once), or when no `K` could be confirmed before
// the lease's safe end (unreachable servers, no leader, unknown outcomes).
// Loss is reported once, through the callback (on the keeper's thread) and
// through lost(), which the holder should check before each step that
// relies on the lock. A lost lock is never kept again: its token is dead,
// the work must stop (or be fenced by the resource). The callback may
// release or destroy the guard that owns the keeper.
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

// The keeper's timing rules, pure (every time is passed in), so they live
// in one place and are unit-tested with an injected clock:
// - The lease is dated from `lease_from(lock)`: for an acquire without a
//   wait, when it was sent (the lease started after that); for one with a
//   wait, when its grant arrived (the lease started at the hand-off, which
//   may be long after the send: dating it from the send would make every
//   wait longer than the lease look like a lost lock).
// - A confirmed `K` moves the safe end to when that `K` was *sent* plus the
//   lease (the server's new lease started after the send; dating it from
//   the reply would believe it lasts a round trip longer than it does).
// - The next `K` goes a third of the lease after the last confirmed one
//   was sent (at once if its reply came later than that); a transient
//   failure retries after min(100 ms, lease/3), never past the safe end.
class LeaseSchedule {
 public:
  LeaseSchedule(Clock::time_point lease_from, std::chrono::milliseconds lease);
  static Clock::time_point lease_from(const Lock& lock);

  Clock::time_point safe_end() const { return safe_end_; }
  Clock::time_point next_keep() const { return next_; }
  // True when a `K` sent at `now` could no longer be in time.
  bool ended(Clock::time_point now) const { return now >= safe_end_; }
  // A `K` sent at `sent_at` was confirmed by a reply that arrived at `reply_at`.
  void kept(Clock::time_point sent_at, Clock::time_point reply_at);
  // A `K` failed for a transient reason at `now`.
  void retry(Clock::time_point now);

 private:
  std::chrono::milliseconds lease_;
  std::chrono::milliseconds interval_;
  Clock::time_point safe_end_;
  Clock::time_point next_;
};

class Keeper {
 public:
  // Starts keeping `lock` (lease_ms must be > 0). `client` must outlive
  // the Keeper.
  Keeper(Client& client, const Lock& lock, std::function<void(const Status&)> on_lost = {});
  ~Keeper();  // stop()
  Keeper(const Keeper&) = delete;
  Keeper& operator=(const Keeper&) = delete;

  // Stops extending and joins the thread (at most one request's timeout).
  // Called from the keeper's own thread (the loss callback), it stops
  // without joining itself.
  void stop();
  // True once the lock is known lost (never becomes false again).
  bool lost() const { return lost_.load(std::memory_order_acquire); }
  // Why it was lost; kOk while it is not.
  Status lost_reason() const;
  // Extensions the server confirmed.
  std::uint64_t kept_count() const { return kept_.load(std::memory_order_relaxed); }

 private:
  friend class Client;
  // The server pushed `X` for this lock's token (Client's push routing).
  void lost_notice();
  // Client::close(): stop at once, without a word to the server.
  void halt();
  void run(Client& client, std::uint64_t token, std::string key, std::uint64_t lease_ms,
           Clock::time_point lease_from);
  void declare_lost(Status why);

  Client& client_;
  const std::uint64_t token_;
  std::function<void(const Status&)> on_lost_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  bool notice_ = false;  // `X` arrived
  bool registered_ = false;
  Status lost_reason_;
  std::atomic<bool> lost_{false};
  std::atomic<std::uint64_t> kept_{0};
  std::thread thread_;  // last: started after everything above exists
};

}  // namespace lockd::client
