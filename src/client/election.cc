#include "lockd/client/election.h"

#include <algorithm>
#include <thread>

#include "lockd/client/client.h"

namespace lockd::client {

std::optional<Leader> Observer::leader_of(const WatchEvent& e) {
  if (e.state.kind != KeyState::Kind::kHeld) return std::nullopt;
  return Leader{e.state.owner, e.state.token, e.rev};
}

std::optional<std::optional<Leader>> Observer::next(Clock::time_point deadline) {
  for (;;) {
    auto e = watch_->next(deadline);
    if (!e) return std::nullopt;
    std::optional<Leader> now = leader_of(*e);
    // The same holding (value and token) is one leadership, whatever rev
    // announced it again; a new token is a new term, even for one value.
    const bool same = now.has_value() == last_.has_value() &&
                      (!now || (now->value == last_->value && now->token == last_->token));
    if (!first_ && same) continue;
    first_ = false;
    last_ = now;
    return std::optional<std::optional<Leader>>(std::move(now));
  }
}

Election::Election(Client& client, std::string key, ElectionOptions options)
    : client_(client), key_(std::move(key)), options_(std::move(options)) {}

Election::~Election() { resign(); }

Status Election::campaign(std::string_view value, Clock::time_point deadline) {
  if (leading()) return {Code::kInFlight, "already leading " + key_};
  auto pause = std::chrono::milliseconds(50);
  for (;;) {
    const auto now = Clock::now();
    if (now >= deadline) return {Code::kTimedOut, "did not win " + key_ + " before the deadline"};
    std::uint64_t wait = options_.wait_ms;
    if (deadline != Clock::time_point::max()) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - now).count();
      wait = std::min<std::uint64_t>(wait, static_cast<std::uint64_t>(std::max<long long>(left, 1)));
    }
    auto g = client_.lock(value, key_,
                          {.lease_ms = options_.lease_ms, .wait_ms = wait, .on_lost = options_.on_lost});
    if (g.ok()) {
      guard_.emplace(std::move(g.value()));
      return Status::Ok();
    }
    switch (g.code()) {
      case Code::kTimedOut:
        continue;  // somebody else still leads: wait again
      case Code::kInvalidArgument:
      case Code::kInFlight:
      case Code::kRejected:
      case Code::kUnauthenticated:
      case Code::kForbidden:
      case Code::kProtocol:
        return g.status();  // asking again changes nothing
      default:
        // kBusy, kUnreachable, kNoLeader, kIndeterminate (a late grant is
        // released by the connection): try again after a pause.
        if (Clock::now() + pause >= deadline) return g.status();
        std::this_thread::sleep_for(pause);
        pause = std::min(pause * 2, std::chrono::milliseconds(1000));
    }
  }
}

Result<std::optional<Leader>> Election::leader() {
  auto w = client_.watch(key_);  // on the client's watch connection; U when done
  auto e = w->next(Clock::now() + client_.options().connect_timeout + client_.options().reply_timeout);
  if (!e) {
    const Status s = w->status();
    if (!s.ok()) return s;
    return Status{Code::kUnreachable, "no node answered W " + key_ + " in time"};
  }
  return Observer::leader_of(*e);
}

std::unique_ptr<Observer> Election::observe() { return std::make_unique<Observer>(client_.watch(key_)); }

Status Election::resign() {
  if (!guard_) return Status::Ok();
  Status s = guard_->release();
  if (guard_->released()) guard_.reset();
  return s;
}

}  // namespace lockd::client
