#include "lockd/client/keeper.h"

#include <algorithm>

#include "lockd/client/client.h"

namespace lockd::client {

namespace {

// Pause between tries of a `K` that failed for a transient reason
// (unreachable, no leader, unknown outcome), capped by a third of the lease.
constexpr std::chrono::milliseconds kRetryPause{100};

}  // namespace

Keeper::Keeper(Client& client, const Lock& lock, std::function<void(const Status&)> on_lost)
    : on_lost_(std::move(on_lost)) {
  LOCKD_CHECK(lock.lease_ms > 0);
  thread_ = std::thread([this, &client, token = lock.token, key = lock.key,
                         lease_ms = lock.lease_ms, sent_at = lock.sent_at] {
    run(client, token, key, lease_ms, sent_at);
  });
}

Keeper::~Keeper() { stop(); }

void Keeper::stop() {
  {
    const std::lock_guard lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Status Keeper::lost_reason() const {
  const std::lock_guard lk(mu_);
  return lost_reason_;
}

void Keeper::declare_lost(Status why) {
  {
    const std::lock_guard lk(mu_);
    lost_reason_ = why;
  }
  lost_.store(true, std::memory_order_release);
  if (on_lost_) on_lost_(why);
}

void Keeper::run(Client& client, std::uint64_t token, std::string key, std::uint64_t lease_ms,
                 Clock::time_point sent_at) {
  const std::chrono::milliseconds lease(lease_ms);
  const auto interval = std::max(lease / 3, std::chrono::milliseconds(1));
  // The lease surely lasts until `safe_end` (it started after `sent_at`).
  auto safe_end = sent_at + lease;
  auto next = sent_at + interval;
  for (;;) {
    {
      std::unique_lock lk(mu_);
      if (cv_.wait_until(lk, next, [&] { return stopping_; })) return;
    }
    const auto k_sent_at = Clock::now();
    if (k_sent_at >= safe_end) {
      declare_lost({Code::kNotHeld, "the lease ended before an extension was confirmed"});
      return;
    }
    Request req;
    req.verb = Verb::kKeep;
    req.token = token;
    req.key = key;
    req.lease_ms = lease_ms;
    // No point in retrying (no_leader) or waiting for a reply past the end.
    const auto reply = client.call(req, safe_end);
    Status s;
    if (!reply.ok()) {
      s = reply.status();
    } else if (reply->kind == ReplyKind::kNotHeld) {
      s = {Code::kNotHeld, "the server answered N: the lease ended or the key moved on"};
    } else if (reply->kind != ReplyKind::kKept) {
      s = {Code::kProtocol, "unexpected reply kind to a keep"};
    }
    if (s.ok()) {
      kept_.fetch_add(1, std::memory_order_relaxed);
      safe_end = k_sent_at + lease;
      next = k_sent_at + interval;
      continue;
    }
    if (s.code == Code::kNotHeld || s.code == Code::kRejected || s.code == Code::kInvalidArgument ||
        s.code == Code::kProtocol || s.code == Code::kUnauthenticated || s.code == Code::kForbidden) {
      declare_lost(s);  // the server says no, and asking again will not change it
      return;
    }
    // Transient: try again soon, while the lease may still run.
    next = std::min(Clock::now() + std::min(kRetryPause, interval), safe_end);
  }
}

}  // namespace lockd::client
