#include "lockd/client/keeper.h"

#include <algorithm>

#include "lockd/client/client.h"

namespace lockd::client {

namespace {

// Pause between tries of a `K` that failed for a transient reason
// (unreachable, no leader, unknown outcome), capped by a third of the lease.
constexpr std::chrono::milliseconds kRetryPause{100};

}  // namespace

LeaseSchedule::LeaseSchedule(Clock::time_point lease_from, std::chrono::milliseconds lease)
    : lease_(lease),
      interval_(std::max(lease / 3, std::chrono::milliseconds(1))),
      safe_end_(lease_from + lease),
      next_(lease_from + interval_) {}

Clock::time_point LeaseSchedule::lease_from(const Lock& lock) {
  if (lock.wait_ms == 0 || lock.granted_at == Clock::time_point{}) return lock.sent_at;
  return std::max(lock.sent_at, lock.granted_at);
}

void LeaseSchedule::kept(Clock::time_point sent_at, Clock::time_point reply_at) {
  safe_end_ = sent_at + lease_;
  next_ = std::max(sent_at + interval_, reply_at);
}

void LeaseSchedule::retry(Clock::time_point now) {
  next_ = std::min(now + std::min(kRetryPause, interval_), safe_end_);
}

Keeper::Keeper(Client& client, const Lock& lock, std::function<void(const Status&)> on_lost)
    : client_(client), token_(lock.token), on_lost_(std::move(on_lost)) {
  LOCKD_CHECK(lock.lease_ms > 0);
  registered_ = client.add_keeper(token_, this);
  thread_ = std::thread([this, &client, token = lock.token, key = lock.key,
                         lease_ms = lock.lease_ms, from = LeaseSchedule::lease_from(lock)] {
    run(client, token, key, lease_ms, from);
  });
}

Keeper::~Keeper() { stop(); }

void Keeper::stop() {
  bool unregister = false;
  {
    const std::lock_guard lk(mu_);
    stopping_ = true;
    unregister = registered_;
    registered_ = false;
  }
  if (unregister) client_.remove_keeper(token_, this);
  cv_.notify_all();
  if (!thread_.joinable()) return;
  if (thread_.get_id() == std::this_thread::get_id()) {
    // From the loss callback: the thread returns right after it, touching
    // nothing of this object (see declare_lost).
    thread_.detach();
  } else {
    thread_.join();
  }
}

void Keeper::halt() {
  {
    const std::lock_guard lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
}

void Keeper::lost_notice() {
  {
    const std::lock_guard lk(mu_);
    notice_ = true;
  }
  cv_.notify_all();
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
  // A copy: the callback may destroy this Keeper (releasing its guard).
  const auto on_lost = on_lost_;
  if (on_lost) on_lost(why);
}

void Keeper::run(Client& client, std::uint64_t token, std::string key, std::uint64_t lease_ms,
                 Clock::time_point lease_from) {
  LeaseSchedule schedule(lease_from, std::chrono::milliseconds(lease_ms));
  for (;;) {
    {
      std::unique_lock lk(mu_);
      cv_.wait_until(lk, schedule.next_keep(), [&] { return stopping_ || notice_; });
      if (stopping_) return;
      if (notice_) {
        lk.unlock();
        declare_lost({Code::kNotHeld, "the server pushed X: the lease ended by expiry"});
        return;
      }
    }
    const auto k_sent_at = Clock::now();
    if (schedule.ended(k_sent_at)) {
      declare_lost({Code::kNotHeld, "the lease ended before an extension was confirmed"});
      return;
    }
    Request req;
    req.verb = Verb::kKeep;
    req.token = token;
    req.key = key;
    req.lease_ms = lease_ms;
    // No point in retrying (no_leader) or waiting for a reply past the end.
    const auto reply = client.call(req, schedule.safe_end());
    {
      const std::lock_guard lk(mu_);
      if (stopping_) return;  // close() or release: no verdict wanted
    }
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
      schedule.kept(k_sent_at, Clock::now());
      continue;
    }
    if (s.code == Code::kNotHeld || s.code == Code::kRejected || s.code == Code::kInvalidArgument ||
        s.code == Code::kProtocol || s.code == Code::kUnauthenticated || s.code == Code::kForbidden) {
      declare_lost(s);  // the server says no, and asking again will not change it
      return;
    }
    // Transient: try again soon, while the lease may still run.
    schedule.retry(Clock::now());
  }
}

}  // namespace lockd::client
