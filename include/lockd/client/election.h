// Leader election on one key, the way etcd's Election API and Curator's
// LeaderLatch do it, on lockd's primitives (docs/clients.md, "Leader
// election"):
//
//   Election election(client, "service/primary", {.lease_ms = 10'000});
//   if (Status s = election.campaign("node-a"); !s.ok()) return s;  // waits, wins
//   while (!election.lost()) serve_as_primary(election.token());    // fence with it
//   election.resign();
//
// - campaign(value): acquires the key with `value` as the owner, waiting
//   in a loop (waits of ElectionOptions::wait_ms each) until it wins or
//   its deadline passes; then a Keeper keeps the lease alive. The value is
//   an owner string: 1..64 visible ASCII bytes (protocol.md §2).
// - leader(): who leads now (one `W`), nullopt when nobody does.
// - observe(): an Observer that yields every change of leader (a `W`
//   watch, deduplicated: the same holding is reported once).
// - resign(): releases the key (and stops the keeper).
// - lost(): leadership is gone — the server pushed `X` (the lease ended),
//   answered `N` to a keep, or no keep was confirmed before the lease's
//   safe end (an unknown outcome counts as lost). `on_lost` is called once
//   with the reason, on the keeper's thread; it may call resign().
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "lockd/client/guard.h"
#include "lockd/client/status.h"
#include "lockd/client/watch.h"

namespace lockd::client {

class Client;

struct ElectionOptions {
  std::uint64_t lease_ms = 10'000;  // the leader's lease, kept alive every third
  std::uint64_t wait_ms = 60'000;   // each wait of campaign(); within the server's max wait
  std::function<void(const Status&)> on_lost = nullptr;
};

// The leader a watch saw: its value (owner) and its fencing token.
struct Leader {
  std::string value;
  std::uint64_t token = 0;
  std::uint64_t rev = 0;
  bool operator==(const Leader&) const = default;
};

// Every change of leader, as a blocking iterator.
class Observer {
 public:
  explicit Observer(std::unique_ptr<Watch> watch) : watch_(std::move(watch)) {}
  // The next change, waiting until `deadline`: a Leader, or an empty
  // optional inside when nobody leads (the key is free or held shared).
  // nullopt (outer) when the deadline passed or the watch ended.
  std::optional<std::optional<Leader>> next(Clock::time_point deadline);
  Status status() const { return watch_->status(); }
  void stop() { watch_->stop(); }

  // Pure: the leader a state names (nobody for free or shared).
  static std::optional<Leader> leader_of(const WatchEvent& e);

 private:
  std::unique_ptr<Watch> watch_;
  bool first_ = true;
  std::optional<Leader> last_;
};

class Election {
 public:
  Election(Client& client, std::string key, ElectionOptions options = {});
  ~Election();  // resign()

  // Waits until this candidate leads, or `deadline` (kTimedOut). kOk once
  // it leads; kInFlight if it already campaigns or leads.
  Status campaign(std::string_view value, Clock::time_point deadline = Clock::time_point::max());
  Result<std::optional<Leader>> leader();
  std::unique_ptr<Observer> observe();
  // Releases the key if held. kOk, kNotHeld (it had already ended), or a
  // transport error (then resign() may be called again).
  Status resign();

  bool leading() const { return guard_.has_value() && !guard_->released(); }
  bool lost() const { return guard_.has_value() && guard_->lost(); }
  // The leader's fencing token (0 when not leading).
  std::uint64_t token() const { return leading() ? guard_->token() : 0; }
  const std::string& key() const { return key_; }

 private:
  Client& client_;
  const std::string key_;
  ElectionOptions options_;
  std::optional<LockGuard> guard_;
};

}  // namespace lockd::client
