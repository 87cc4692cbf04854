// WatchSession: the one connection a Client's watches share (protocol.md
// §5c). Every Watch of a Client registers here. The session sends `W` for
// each new Watch (the server watches a key once per connection and answers
// a second `W` with the state now: the new Watch's first state), hands
// every `V` push of a key to each Watch of that key, sends `U` when the
// last Watch of a key stops, and when the connection ends it connects
// again — to the next address, after a jittered pause — and watches every
// key again. A Client with 10,000 watches has one watch connection and two
// threads (the session's and the connection's reader), not 10,000 of each;
// a third calls the OnState of the watches that have one (watch.h).
//
// The session's connection is its own, not the one requests use: any node
// serves watches (no leader needed), so watches stay put while requests
// follow the leader.
//
// Wire order: only the session's thread sends `W` and `U`, one batch at a
// time, deciding each key's request from the registry when the batch is
// made (a key with Watches that have no state yet gets `W`; a key with no
// Watch left that the server watches gets `U`); the next batch is made only
// after the last one's replies. So a `U` can never overtake the `W` of a
// Watch added after it, and the server ends up watching exactly the keys
// that have Watches.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "lockd/client/connection.h"
#include "lockd/client/protocol.h"
#include "lockd/client/status.h"

namespace lockd::client {

struct Options;
class Watch;

class WatchSession {
 public:
  explicit WatchSession(const Options& options);
  ~WatchSession();  // close()
  WatchSession(const WatchSession&) = delete;
  WatchSession& operator=(const WatchSession&) = delete;

  // Registers `watch` (its key valid): from now on it gets its key's
  // pushes, and the session sends a `W` whose reply is its first state. On
  // a closed session the watch ends at once with the session's status.
  void add(Watch* watch);
  // Unregisters `watch`: no call reaches it once this returns. The key's
  // last Watch makes the session send `U`. A no-op for one not registered.
  void remove(Watch* watch);
  // Ends every Watch with `why`, closes the connection and stops the
  // thread; later add()s end at once with `why`. Idempotent.
  void close(const Status& why);

  // Connections made so far (1 + reconnects).
  std::uint64_t connections() const;
  // Keys the server watches for the current connection (W answered, no U
  // sent since).
  std::size_t watched_keys() const;

 private:
  // The thread: connects, sends batches of W/U, reconnects.
  void run();
  // A push from the connection's reader thread.
  void on_push(const Reply& push);
  // Ends the key's Watches with `why` and forgets them; mu_ held.
  void end_key(const std::string& key, const Status& why);
  // Ends every Watch with `why`; mu_ held.
  void end_all(const Status& why);
  // Hands `watch` a state (and, for an OnState watch, queues it for the
  // delivering thread); mu_ held.
  void offer_to(Watch* watch, std::uint64_t rev, const KeyState& state);
  // Queues an OnState watch for the delivering thread; mu_ held.
  void ready(Watch* watch);
  // The delivering thread: calls each ready watch's OnState, off mu_.
  void deliver();
  // Sends one batch of W/U and waits for its replies; true if the
  // connection is still good. mu_ held by `lk` on entry and exit.
  bool send_batch(std::unique_lock<std::mutex>& lk);

  std::vector<Address> addresses_;
  const std::chrono::milliseconds connect_timeout_;
  const std::chrono::milliseconds reply_timeout_;
  const std::string credential_;
  const TlsFiles tls_;

  mutable std::mutex mu_;  // everything below; never held across I/O
  std::condition_variable cv_;
  bool closed_ = false;
  Status end_;  // why the session ended (closed_ or a refusal no node changes)
  std::unordered_map<std::string, std::vector<Watch*>> watches_;
  std::unordered_set<std::string> fresh_;    // keys with a Watch that needs a W
  std::unordered_set<std::string> dirty_;    // keys whose W/U the next batch decides
  std::unordered_set<std::string> watched_;  // keys the server watches for conn_
  std::shared_ptr<Connection> conn_;
  bool drop_conn_ = false;  // the next turn closes conn_ and connects elsewhere
  std::uint64_t connections_ = 0;
  std::deque<Watch*> ready_;         // OnState watches with something to hand over
  Watch* delivering_ = nullptr;      // the one whose OnState runs now
  std::condition_variable deliver_cv_;  // ready_ grew, or delivering_ is done
  std::thread deliverer_;  // started by the first OnState watch
  std::thread thread_;  // last
};

}  // namespace lockd::client
