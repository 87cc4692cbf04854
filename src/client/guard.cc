#include "lockd/client/guard.h"

#include "lockd/client/client.h"

namespace lockd::client {

LockGuard::LockGuard(Client& client, Lock lock, std::unique_ptr<Keeper> keeper)
    : client_(&client), lock_(std::make_unique<Lock>(std::move(lock))), keeper_(std::move(keeper)) {}

LockGuard::~LockGuard() { release(); }

LockGuard::LockGuard(LockGuard&& other) noexcept
    : client_(other.client_), lock_(std::move(other.lock_)), keeper_(std::move(other.keeper_)) {}

LockGuard& LockGuard::operator=(LockGuard&& other) noexcept {
  if (this != &other) {
    release();
    client_ = other.client_;
    lock_ = std::move(other.lock_);
    keeper_ = std::move(other.keeper_);
  }
  return *this;
}

const Lock& LockGuard::lock() const {
  LOCKD_CHECK(lock_ != nullptr);  // used after release() or a move
  return *lock_;
}

std::uint64_t LockGuard::token() const { return lock().token; }

Status LockGuard::release() {
  if (!lock_) return Status::Ok();
  if (keeper_) keeper_->stop();  // no `K` may race the `R`
  Status s = client_->release(*lock_);
  // Released only once the server says so: `R`, or `N` (the token holds
  // nothing any more, so there is nothing left to release). Any other
  // outcome (unreachable, no leader, unknown) leaves the guard holding the
  // lock, so release() can be called again.
  if (s.ok() || s.code == Code::kNotHeld) lock_.reset();
  return s;
}

}  // namespace lockd::client
