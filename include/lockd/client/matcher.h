// Matches reply lines to the pipelined requests they answer (protocol.md §1:
// a waiting acquire is answered later, so replies can arrive out of request
// order; the echoed fields tell them apart). Pure: no I/O, no clock. The
// one place the C++ client's matching rules live.
//
// Rules:
// - Pushes (`V`, `X`, §5c) are never replies: the connection routes them
//   before it calls match(), and match() never takes one.
// - `A`/`S`/`T`/`B` and an `M`/`E` whose echo is `owner key` answer the
//   acquire (`A` or `S`) with that owner and key. Two acquires with one
//   owner and key in flight at once could not be told apart (one may wait
//   while the other is answered at once), so the second is refused with
//   kInFlight, whether each is exclusive or shared; Client::call() then
//   holds the second back until the first is answered and sends it with
//   the wait it has left (docs/clients.md: the same answer in every client).
// - `R`/`K`/`N` and an `M`/`E` whose echo is `token key` answer the oldest
//   release or keep in flight with that token and key (an `R` reply prefers
//   a release, a `K` reply a keep). Those are answered in request order.
// - `W`/`U` and a `B`/`E` whose echo is the key alone answer the oldest
//   watch or unwatch of that key (a `W` reply prefers a `W`, a `U` a `U`).
// - `E bad_lease`/`bad_wait`/`bad_limit` carry the echo since v1.3 (§7) and
//   match as above. Without an echo (a v1.2 server) such an error is pinned
//   on a request only when exactly one request in flight could have drawn
//   it; otherwise match() returns nullopt and the error is unattributed:
//   every request that could have drawn it (candidates()) ends at once as
//   an unknown outcome (kIndeterminate, never kRejected or kNotHeld), stays
//   in flight so that its real reply is still matched (a late grant is
//   then released), and no keeper declares its lock lost for it.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "lockd/client/protocol.h"
#include "lockd/client/status.h"

namespace lockd::client {

class Matcher {
 public:
  using Id = std::uint64_t;
  // A request in flight.
  struct Entry {
    Id id;
    Request request;
  };

  // Records a request about to be sent (in wire order). kInFlight if an
  // acquire with the same owner and key is already in flight.
  Status add(Id id, const Request& request);
  // The request `reply` answers, removed from the in-flight set; nullopt
  // if no request in flight matches (a protocol error).
  std::optional<Entry> match(const Reply& reply);
  // The ids in flight that could have drawn `reply`, an `E` without echo.
  std::vector<Id> candidates(const Reply& reply) const;
  // True for an `E` without echo that match() could not pin on exactly one
  // request: not a reason to distrust the connection (see the rules).
  static bool unattributable(const Reply& reply) {
    return reply.kind == ReplyKind::kError && !reply.has_echo();
  }
  // Removes and returns every id in flight, oldest first (connection lost).
  std::vector<Id> drain();
  std::size_t in_flight() const { return order_.size(); }
  // True while an acquire (`A` or `S`) of `owner` and `key` is in flight.
  bool acquire_in_flight(std::string_view owner, std::string_view key) const {
    return by_echo_.contains(acquire_echo(owner, key));
  }

 private:
  using Iter = std::list<Entry>::iterator;

  static std::string acquire_echo(std::string_view owner, std::string_view key);
  static std::string token_echo(std::uint64_t token, std::string_view key);
  static std::string key_echo(std::string_view key);
  // Whether `r` could have drawn the echo-less error `reply`.
  static bool could_draw(const Reply& reply, const Request& r);
  static std::string echo_of(const Request& r);
  // Removes `it` from both indexes and returns it.
  Entry take(Iter it);
  // Finds the entry for an echo key; `prefer` picks a verb among several.
  std::optional<Iter> find(const std::string& echo, std::optional<Verb> prefer);

  std::list<Entry> order_;                                // wire order
  std::unordered_map<std::string, std::list<Iter>> by_echo_;  // echo -> entries, oldest first
};

}  // namespace lockd::client
