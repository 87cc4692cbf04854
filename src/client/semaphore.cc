#include "lockd/client/semaphore.h"

#include "lockd/client/client.h"

namespace lockd::client {

Semaphore::Semaphore(Client& client, std::string key, std::uint32_t permits)
    : client_(&client), key_(std::move(key)), permits_(permits) {}

Result<SharedGuard> Semaphore::acquire(std::string_view owner, LockOptions options) {
  if (permits_ == 0 || permits_ > kMaxLimit) {
    return Status{Code::kInvalidArgument, "a semaphore needs 1..65535 permits"};
  }
  return client_->lock_shared(owner, key_, permits_, std::move(options));
}

}  // namespace lockd::client
