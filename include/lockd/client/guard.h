// LockGuard: a held lock that releases itself when it goes out of scope
// (also during stack unwinding), and with a Keeper keeps its lease alive
// meanwhile. Made by Client::lock(). Move-only.
#pragma once

#include <cstdint>
#include <memory>

#include "lockd/client/keeper.h"
#include "lockd/client/status.h"

namespace lockd::client {

class LockGuard {
 public:
  LockGuard(Client& client, Lock lock, std::unique_ptr<Keeper> keeper);
  // release(), ignoring the outcome. Like any call it may block: up to the
  // reply timeout, or the no-leader retry budget while a cluster elects.
  ~LockGuard();
  LockGuard(LockGuard&& other) noexcept;
  LockGuard& operator=(LockGuard&& other) noexcept;
  LockGuard(const LockGuard&) = delete;
  LockGuard& operator=(const LockGuard&) = delete;

  const Lock& lock() const;
  std::uint64_t token() const;
  // True if the keeper found the lock lost: stop relying on it.
  bool lost() const { return keeper_ && keeper_->lost(); }
  // The keeper, or nullptr when made without keep.
  const Keeper* keeper() const { return keeper_.get(); }

  // Stops the keeper and sends `R`. kOk, kNotHeld (the lease had already
  // ended), or a transport error (kUnreachable, kNoLeader, kIndeterminate
  // ...). The guard counts as released only after `R` or `N`: after a
  // transport error it still holds the lock (lock() works, the keeper stays
  // stopped) and release() may be called again. After `R`/`N` a second
  // call does nothing and returns kOk. Safe to call from the loss callback.
  Status release();
  // True once the server confirmed the release (or that nothing was held).
  bool released() const { return lock_ == nullptr; }

 private:
  Client* client_;
  std::unique_ptr<Lock> lock_;  // null once released or moved from
  std::unique_ptr<Keeper> keeper_;
};

}  // namespace lockd::client
