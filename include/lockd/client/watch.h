// Watch: who holds a key, now and at every change (`W`/`V`, protocol.md
// §5c), as a blocking iterator:
//
//   auto watch = client.watch("service/primary");
//   while (auto e = watch->next(Clock::now() + 30s)) {
//     if (e->state.kind == KeyState::Kind::kHeld) use(e->state.owner);
//   }
//
// The watches of a Client share one connection of their own (the Client's
// credential and TLS; any node serves it, no leader needed) and one thread
// (WatchSession): each Watch's `W` is answered with its first state, every
// change of the key reaches each Watch of it, and when the connection ends
// the session reconnects — to the next address, after a short jittered
// pause — and watches every key again. States arrive in `rev` order; one
// whose `rev` is not newer than every state already seen (the state a new
// node answers `W` with after a reconnect, a lagging follower) is dropped.
// A consumer that falls behind by more than kMaxQueuedStates loses the
// oldest queued states, never the newest (the server coalesces the same
// way). A refusal that a retry cannot change (kForbidden, kUnauthenticated,
// kBusy: a watch limit, e.g. more than --max-watches-per-connection keys
// watched by one Client) ends the watch: next() returns nullopt and
// status() says why. Closing the Client ends its watches (kUnreachable).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <memory>
#include <vector>

#include "lockd/client/connection.h"
#include "lockd/client/protocol.h"
#include "lockd/client/status.h"

namespace lockd::client {

struct Options;
class WatchSession;

struct WatchEvent {
  std::string key;
  std::uint64_t rev = 0;
  KeyState state;
};

// Most states a Watch queues for a consumer that does not call next().
constexpr std::size_t kMaxQueuedStates = 4096;

// A watch's states handed to a function instead of next()
// (Client::watch(key, on_state)): each state, in `rev` order, then — if the
// watch ends other than by stop() (a refusal, the Client closed) — its
// Status once. Calls for one Watch never overlap; they run on the thread
// of the Client's watch session that serves every such Watch of the
// Client, so a slow one delays the others. It may call stop() on its own
// Watch (nothing is called after), but must not destroy that Watch or
// close the Client. A Watch that cannot start (an invalid key, the Client
// closed) says so in status() when watch() returns, and never calls it.
using OnState = std::function<void(const Result<WatchEvent>&)>;

class Watch {
 public:
  // A watch of the Client's session (Client::watch()); with `on_state`,
  // its states go there instead of to next().
  Watch(std::shared_ptr<WatchSession> session, std::string key, OnState on_state = nullptr);
  // A watch with a session (a connection and a thread) of its own.
  Watch(const Options& options, std::string key);
  ~Watch();  // stop()
  Watch(const Watch&) = delete;
  Watch& operator=(const Watch&) = delete;

  // The next state, waiting until `deadline`: nullopt when the deadline
  // passed, or the watch was stopped or ended (see status()). Always
  // nullopt for a Watch with an OnState (its states go there).
  std::optional<WatchEvent> next(Clock::time_point deadline);
  // Ends the watch and wakes next(): no state arrives after this returns,
  // and no OnState call runs (one running on another thread is waited
  // for; called from its own OnState, that call is the last). The server
  // is sent `U` when this was the last Watch of its key on the session.
  // Idempotent.
  void stop();
  // kOk while the watch runs (also while it reconnects); why it ended.
  Status status() const;
  // Largest `rev` seen so far (0 before the first state).
  std::uint64_t last_rev() const;
  const std::string& key() const { return key_; }
  // Connections its session has made (1 + reconnects).
  std::uint64_t connections() const;

  // Pure: the rule of which states are kept. True (and `last_rev` moved)
  // when `rev` is newer than `last_rev`.
  static bool newer(std::uint64_t rev, std::uint64_t& last_rev);

 private:
  friend class WatchSession;
  // Validates the key and registers with the session.
  void start();
  // From the session, under its lock: a state of the key (true if it was
  // queued); the end.
  bool offer(std::uint64_t rev, const KeyState& state);
  void end(const Status& why);
  // For the session's delivering thread (an OnState watch): the next
  // queued state, else the end once, else nothing (also once stopped).
  std::optional<Result<WatchEvent>> take();
  bool has_on_state() const { return on_state_ != nullptr; }

  std::shared_ptr<WatchSession> session_;
  const bool own_session_;
  const std::string key_;
  const OnState on_state_;
  // The session's, under its lock: queued for its delivering thread.
  bool ready_ = false;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  Status status_;
  std::uint64_t last_rev_ = 0;
  std::deque<WatchEvent> queue_;
  bool end_told_ = false;  // an OnState watch's end was handed over
};

}  // namespace lockd::client
