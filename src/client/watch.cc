#include "lockd/client/watch.h"

#include <algorithm>
#include <random>

#include "lockd/client/client.h"

namespace lockd::client {

Watch::Watch(const Options& options, std::string key)
    : connect_timeout_(options.connect_timeout),
      reply_timeout_(options.reply_timeout),
      credential_(options.credential),
      tls_(options.tls),
      key_(std::move(key)) {
  for (const std::string& text : options.addresses) {
    if (auto a = parse_address(text)) addresses_.push_back(*a);
  }
  Request probe;
  probe.verb = Verb::kWatch;
  probe.key = key_;
  if (Status s = validate(probe); !s.ok()) {
    status_ = s;
    return;
  }
  if (addresses_.empty()) {
    status_ = {Code::kInvalidArgument, "no valid address to watch from"};
    return;
  }
  thread_ = std::thread([this] { run(); });
}

Watch::~Watch() { stop(); }

void Watch::stop() {
  {
    const std::lock_guard lk(mu_);
    stopping_ = true;
    if (current_ != nullptr) current_->shut_down();  // ends a wait() for the W reply
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Status Watch::status() const {
  const std::lock_guard lk(mu_);
  return status_;
}

std::uint64_t Watch::last_rev() const {
  const std::lock_guard lk(mu_);
  return last_rev_;
}

std::uint64_t Watch::connections() const {
  const std::lock_guard lk(mu_);
  return connections_;
}

bool Watch::newer(std::uint64_t rev, std::uint64_t& last_rev) {
  if (rev <= last_rev) return false;
  last_rev = rev;
  return true;
}

void Watch::offer(std::uint64_t rev, const KeyState& state) {
  {
    const std::lock_guard lk(mu_);
    if (!newer(rev, last_rev_)) return;
    queue_.push_back(WatchEvent{key_, rev, state});
    if (queue_.size() > kMaxQueuedStates) queue_.pop_front();
  }
  cv_.notify_all();
}

std::optional<WatchEvent> Watch::next(Clock::time_point deadline) {
  std::unique_lock lk(mu_);
  cv_.wait_until(lk, deadline, [&] { return !queue_.empty() || stopping_ || !status_.ok(); });
  if (queue_.empty()) return std::nullopt;
  WatchEvent e = std::move(queue_.front());
  queue_.pop_front();
  return e;
}

void Watch::run() {
  std::mt19937_64 rng{std::random_device{}()};
  std::size_t target = 0;
  auto pause = std::chrono::milliseconds(50);
  const auto stopping = [&] {
    const std::lock_guard lk(mu_);
    return stopping_;
  };
  // Sleeps up to `d` (jittered), or until stop().
  const auto rest = [&](std::chrono::milliseconds d) {
    std::uniform_int_distribution<std::int64_t> dist(d.count() / 2, d.count());
    std::unique_lock lk(mu_);
    cv_.wait_for(lk, std::chrono::milliseconds(dist(rng)), [&] { return stopping_; });
    pause = std::min(pause * 2, std::chrono::milliseconds(1000));
  };
  while (!stopping()) {
    const Address address = addresses_[target];
    target = (target + 1) % addresses_.size();
    auto opened = Connection::open(address, connect_timeout_, credential_, tls_);
    if (!opened.ok()) {
      if (opened.code() == Code::kUnauthenticated || opened.code() == Code::kInvalidArgument) {
        const std::lock_guard lk(mu_);
        status_ = opened.status();
        cv_.notify_all();
        return;
      }
      rest(pause);
      continue;
    }
    std::unique_ptr<Connection> conn = std::move(opened.value());
    {
      const std::lock_guard lk(mu_);
      ++connections_;
      current_ = conn.get();
      if (stopping_) conn->shut_down();
    }
    // Forgets the connection before it is destroyed (stop() may look).
    struct Forget {
      Watch* w;
      ~Forget() {
        const std::lock_guard lk(w->mu_);
        w->current_ = nullptr;
      }
    } forget{this};
    // Pushes may come before the `W` reply is read here: both go through
    // offer(), which keeps only newer revs, so their order does not matter.
    conn->set_push_handler([this](const Reply& push) {
      if (push.kind == ReplyKind::kChanged && push.key == key_) offer(push.rev, push.state);
    });
    Request w;
    w.verb = Verb::kWatch;
    w.key = key_;
    auto ticket = conn->submit(w);
    if (!ticket.ok()) {
      rest(pause);
      continue;
    }
    auto reply = conn->wait(ticket.value(), Clock::now() + reply_timeout_);
    if (!reply.ok()) {
      rest(pause);
      continue;
    }
    if (reply->kind == ReplyKind::kWatching) {
      offer(reply->rev, reply->state);
      pause = std::chrono::milliseconds(50);
    } else {
      Status end;
      if (reply->kind == ReplyKind::kBusy) {
        end = {Code::kBusy, "the server's watch limit is reached"};
      } else if (reply->kind == ReplyKind::kError && reply->error_code == "forbidden") {
        end = {Code::kForbidden, "the ACL does not allow W on " + key_};
      } else if (reply->kind == ReplyKind::kError && reply->error_code == "unauthenticated") {
        end = {Code::kUnauthenticated, "the server wants a credential to watch"};
      } else if (reply->kind == ReplyKind::kError && reply->error_code == "unknown_command") {
        end = {Code::kRejected, "the server does not know W (older than protocol v1.3)"};
      }
      if (!end.ok()) {
        const std::lock_guard lk(mu_);
        status_ = end;
        cv_.notify_all();
        return;
      }
      rest(pause);  // E no_leader (a member not yet caught up): another node
      continue;
    }
    // Watching: until the connection ends or stop().
    std::unique_lock lk(mu_);
    while (!stopping_ && !conn->broken()) {
      cv_.wait_for(lk, std::chrono::milliseconds(50));
    }
    lk.unlock();
    conn->set_push_handler(nullptr);
  }
}

}  // namespace lockd::client
