// SharedGuard: one shared hold (`S`, v1.2) — a reader of a reader-writer
// lock, or a permit of a Semaphore — that releases itself when it goes out
// of scope and, with a Keeper, keeps its own lease alive. Made by
// Client::lock_shared() and Semaphore::acquire(). Move-only.
//
// A distinct type from LockGuard so that code which must hold a key
// exclusively (a writer) cannot be handed a reader's guard by mistake;
// it behaves the same: `R` and `K` act on this holder alone, by its token,
// and every other holder of the key is untouched.
#pragma once

#include <cstdint>

#include "lockd/client/guard.h"

namespace lockd::client {

class SharedGuard {
 public:
  explicit SharedGuard(LockGuard held) : held_(std::move(held)) {}

  const Lock& lock() const { return held_.lock(); }
  // This holder's own fencing token (every shared grant has its own).
  std::uint64_t token() const { return held_.token(); }
  // The key's limit: 0 for a read lock, N for a semaphore of N permits.
  std::uint32_t limit() const { return held_.lock().limit; }
  // True if the keeper found this hold lost: stop relying on it.
  bool lost() const { return held_.lost(); }
  const Keeper* keeper() const { return held_.keeper(); }
  // Stops the keeper and sends `R` for this holder. As LockGuard::release().
  Status release() { return held_.release(); }

 private:
  LockGuard held_;
};

}  // namespace lockd::client
