// Matches reply lines to the pipelined requests they answer (protocol.md §1:
// a waiting acquire is answered later, so replies can arrive out of request
// order; the echoed fields tell them apart). Pure: no I/O, no clock.
//
// Rules:
// - `A`/`S`/`T`/`B` and an `M`/`E` whose echo is `owner key` answer the
//   acquire (`A` or `S`) with that owner and key. Two acquires with one
//   owner and key in flight at once could not be told apart (one may wait
//   while the other is answered at once), so the second is refused with
//   kInFlight, whether each is exclusive or shared.
// - `R`/`K`/`N` and an `M`/`E` whose echo is `token key` answer the oldest
//   release or keep in flight with that token and key (an `R` reply prefers
//   a release, a `K` reply a keep). Those are answered in request order.
// - An `E` without echo (a malformed request, which validate() keeps off
//   the wire, or a lease/wait above the server's configured maximum) is
//   answered at once, so it belongs to the oldest request in flight that
//   could have drawn it and could not still be waiting.
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
  // Removes and returns every id in flight, oldest first (connection lost).
  std::vector<Id> drain();
  std::size_t in_flight() const { return order_.size(); }

 private:
  using Iter = std::list<Entry>::iterator;

  static std::string acquire_echo(std::string_view owner, std::string_view key);
  static std::string token_echo(std::uint64_t token, std::string_view key);
  // Removes `it` from both indexes and returns it.
  Entry take(Iter it);
  // Finds the entry for an echo key; `prefer` picks a verb among several.
  std::optional<Iter> find(const std::string& echo, std::optional<Verb> prefer);

  std::list<Entry> order_;                                // wire order
  std::unordered_map<std::string, std::list<Iter>> by_echo_;  // echo -> entries, oldest first
};

}  // namespace lockd::client
