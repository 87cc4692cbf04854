// Watch: who holds a key, now and at every change (`W`/`V`, protocol.md
// §5c), as a blocking iterator:
//
//   auto watch = client.watch("service/primary");
//   while (auto e = watch->next(Clock::now() + 30s)) {
//     if (e->state.kind == KeyState::Kind::kHeld) use(e->state.owner);
//   }
//
// A Watch runs on a connection of its own (the Client's credential and
// TLS), served by any node (no leader needed), with one thread that
// reconnects when the connection ends — to the next address, after a short
// jittered pause — and watches again. States arrive in `rev` order; one
// whose `rev` is not newer than every state already seen (the state a new
// node answers `W` with after a reconnect, a lagging follower) is dropped.
// A consumer that falls behind by more than kMaxQueuedStates loses the
// oldest queued states, never the newest (the server coalesces the same
// way). A refusal that a retry cannot change (kForbidden, kUnauthenticated,
// kBusy: a watch limit) ends the watch: next() returns nullopt and status()
// says why.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "lockd/client/connection.h"
#include "lockd/client/protocol.h"
#include "lockd/client/status.h"

namespace lockd::client {

struct Options;

struct WatchEvent {
  std::string key;
  std::uint64_t rev = 0;
  KeyState state;
};

// Most states a Watch queues for a consumer that does not call next().
constexpr std::size_t kMaxQueuedStates = 4096;

class Watch {
 public:
  Watch(const Options& options, std::string key);
  ~Watch();  // stop()
  Watch(const Watch&) = delete;
  Watch& operator=(const Watch&) = delete;

  // The next state, waiting until `deadline`: nullopt when the deadline
  // passed, or the watch was stopped or ended (see status()).
  std::optional<WatchEvent> next(Clock::time_point deadline);
  // Sends nothing more, closes the connection (ending the watch at the
  // server) and wakes next(). Idempotent.
  void stop();
  // kOk while the watch runs (also while it reconnects); why it ended.
  Status status() const;
  // Largest `rev` seen so far (0 before the first state).
  std::uint64_t last_rev() const;
  const std::string& key() const { return key_; }
  // Connections the watch has made (1 + reconnects).
  std::uint64_t connections() const;

  // Pure: the rule of which states are kept. True (and `last_rev` moved)
  // when `rev` is newer than `last_rev`.
  static bool newer(std::uint64_t rev, std::uint64_t& last_rev);

 private:
  void run();
  void offer(std::uint64_t rev, const KeyState& state);

  std::vector<Address> addresses_;
  std::chrono::milliseconds connect_timeout_;
  std::chrono::milliseconds reply_timeout_;
  std::string credential_;
  TlsFiles tls_;
  const std::string key_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  Status status_;
  std::uint64_t last_rev_ = 0;
  std::uint64_t connections_ = 0;
  std::deque<WatchEvent> queue_;
  Connection* current_ = nullptr;  // the run thread's connection, for stop()
  std::thread thread_;  // last
};

}  // namespace lockd::client
