#include "lockd/client/watch.h"

#include "lockd/client/client.h"
#include "lockd/client/watch_session.h"

namespace lockd::client {

Watch::Watch(std::shared_ptr<WatchSession> session, std::string key, OnState on_state)
    : session_(std::move(session)), own_session_(false), key_(std::move(key)), on_state_(std::move(on_state)) {
  start();
}

Watch::Watch(const Options& options, std::string key)
    : session_(std::make_shared<WatchSession>(options)), own_session_(true), key_(std::move(key)) {
  start();
}

void Watch::start() {
  Request probe;
  probe.verb = Verb::kWatch;
  probe.key = key_;
  if (Status s = validate(probe); !s.ok()) {
    status_ = s;
    return;
  }
  session_->add(this);  // last: pushes may reach this Watch from now on
}

Watch::~Watch() { stop(); }

void Watch::stop() {
  {
    const std::lock_guard lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  // Not under mu_: the session offers under its own lock, then ours.
  session_->remove(this);
  if (own_session_) session_->close({Code::kUnreachable, "the watch is stopped"});
}

Status Watch::status() const {
  const std::lock_guard lk(mu_);
  return status_;
}

std::uint64_t Watch::last_rev() const {
  const std::lock_guard lk(mu_);
  return last_rev_;
}

std::uint64_t Watch::connections() const { return session_->connections(); }

bool Watch::newer(std::uint64_t rev, std::uint64_t& last_rev) {
  if (rev <= last_rev) return false;
  last_rev = rev;
  return true;
}

bool Watch::offer(std::uint64_t rev, const KeyState& state) {
  {
    const std::lock_guard lk(mu_);
    if (stopping_ || !newer(rev, last_rev_)) return false;
    queue_.push_back(WatchEvent{key_, rev, state});
    if (queue_.size() > kMaxQueuedStates) queue_.pop_front();
  }
  cv_.notify_all();
  return true;
}

std::optional<Result<WatchEvent>> Watch::take() {
  const std::lock_guard lk(mu_);
  if (stopping_) return std::nullopt;
  if (!queue_.empty()) {
    WatchEvent e = std::move(queue_.front());
    queue_.pop_front();
    return Result<WatchEvent>(std::move(e));
  }
  if (!status_.ok() && !end_told_) {
    end_told_ = true;
    return Result<WatchEvent>(status_);
  }
  return std::nullopt;
}

void Watch::end(const Status& why) {
  {
    const std::lock_guard lk(mu_);
    if (status_.ok()) status_ = why;
  }
  cv_.notify_all();
}

std::optional<WatchEvent> Watch::next(Clock::time_point deadline) {
  if (on_state_) return std::nullopt;  // its states go to on_state_
  std::unique_lock lk(mu_);
  cv_.wait_until(lk, deadline, [&] { return !queue_.empty() || stopping_ || !status_.ok(); });
  if (queue_.empty()) return std::nullopt;
  WatchEvent e = std::move(queue_.front());
  queue_.pop_front();
  return e;
}

}  // namespace lockd::client
