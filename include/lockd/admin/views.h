// JSON views of a lockd's state for the admin API (spec interfaces.md):
// pure functions from the lock table / server counters and `now` to
// nlohmann::ordered_json. No I/O, no clock reads: the HTTP layer passes `now`.
//
// Why free functions over read-only views: the admin API must not change
// lock state, and keeping the views pure lets unit tests and the 1M-key
// benchmark call them without a socket.
//
// Cost: list_locks() and top() scan every key once (the table is a hash
// map with no order); per-request output is bounded by `limit`. See
// docs/operations.md for measured times at 1M keys.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "lockd/common/time.h"
#include "lockd/locks/lock_table.h"

namespace lockd::server {
class LockServer;
}

namespace lockd::admin {

// `/v1/locks` paging bounds.
constexpr std::size_t kDefaultListLimit = 1000;
constexpr std::size_t kMaxListLimit = 10'000;  // larger limits are clamped
// `/v1/top` rows per table.
constexpr std::size_t kDefaultTopLimit = 10;
constexpr std::size_t kMaxTopLimit = 100;
// Waiters listed by `/v1/locks/KEY` (the queue itself is bounded by
// --max-waiters-per-key, which an operator may set very high).
constexpr std::size_t kMaxWaitersListed = 10'000;

// What a node says about itself beyond the lock table.
struct NodeInfo {
  std::string version;       // LOCKD_VERSION
  std::string mode;          // "single" (cluster fills the rest later)
  std::string listen;        // client address, host:port
  TimeNs started_ns = 0;     // monotonic, for uptime
};

// Milliseconds from `now` to `at`, rounded toward -infinity so a lease that
// ran out even 1 ns ago is negative.
std::int64_t ms_until(TimeNs at_ns, TimeNs now_ns);

// Largest table whose holders are counted exactly. A scan costs ~140 ns a
// key at 1M keys (hash-map nodes are cache misses), far too long a stall
// for every scrape; above this, `holders` is the key count.
constexpr std::size_t kExactHoldersMaxKeys = 10'000;

// Keys holding a lease that has not run out (expired, unswept keys are not
// counted). One scan of the table.
std::size_t count_holders(const locks::LockTable& table, TimeNs now_ns);

// What `/v1/status` and `lockd_holders` report: count_holders() when the
// table has at most kExactHoldersMaxKeys keys (`exact` set), else the key
// count, an upper bound that counts a run-out lease until the next sweep
// or takeover.
std::size_t holders_bounded(const locks::LockTable& table, TimeNs now_ns, bool& exact);

// `/v1/status`.
nlohmann::ordered_json status_json(const server::LockServer& server, const NodeInfo& node, TimeNs now_ns);

// `/v1/locks` query: keys starting with `prefix` and greater than `after`
// (exclusive, for the next page), first `limit` in byte order.
struct ListQuery {
  std::string prefix;
  std::string after;
  std::size_t limit = kDefaultListLimit;
};
using KeyRef = std::pair<const std::string*, const locks::KeyState*>;
// The selection behind `/v1/locks`, sorted by key; `truncated` is set when
// more keys matched. O(n log limit) over n keys, O(limit) memory.
std::vector<KeyRef> select_locks(const locks::LockTable& table, const ListQuery& q,
                                 bool& truncated);
nlohmann::ordered_json list_locks_json(const locks::LockTable& table, const ListQuery& q, TimeNs now_ns);

// `/v1/locks/KEY`, or nullopt when the key is not registered.
std::optional<nlohmann::ordered_json> lock_json(const locks::LockTable& table, std::string_view key,
                                        TimeNs now_ns);

// `/v1/top` (lockctl top): status, the busiest keys among the latest
// requests, the longest queues and the oldest holders, `limit` rows each.
nlohmann::ordered_json top_json(const server::LockServer& server, const NodeInfo& node,
                        std::size_t limit, TimeNs now_ns);

}  // namespace lockd::admin
