// WatchHub: the watch index of v1.3 (protocol.md §5c): which connections
// watch which keys, and the pushes (`V`) owed to them.
//
// Indexed per key: a watched key has one Entry holding its watchers (a
// vector of client ids) and the state last pushed to them; each watching
// connection has a small vector of pointers to the Entries it watches. A
// change of a key costs one hash lookup when anything is watched (nothing
// but a counter increment and an emptiness test when nothing is), and the
// key is only marked dirty: the pushes go out at flush(), once per loop turn
// (single mode) or applied batch (cluster mode), with the key's last state
// only, so several changes in one turn cost one push per watcher.
//
// `rev`: single mode counts changes (every key_changed() adds one) from
// `first_rev`, seeded like single-mode tokens (the wall clock in ns at start,
// above --token-floor) so a restarted process never hands out a rev below
// one its predecessor did; cluster mode sets it to the index of the entry
// being applied (set_rev()).
//
// Runs on the reactor thread; not thread-safe.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "lockd/locks/lock_table.h"
#include "lockd/proto/reply.h"

namespace lockd::server {

// Where pushes go (implemented by LockServer).
class PushOutput {
 public:
  // The output buffer of `client`, or nullptr when it is gone or closing.
  virtual std::string* push_buffer(locks::ClientId client) = 0;
  // Schedules the flush of `client`'s output; may close it (and so call
  // WatchHub::client_closed()) when its unsent output passes the cap.
  virtual void push_queued(locks::ClientId client) = 0;

 protected:
  ~PushOutput() = default;
};

struct WatchLimits {
  std::size_t max_per_connection = 1'024;  // --max-watches-per-connection
  std::size_t max_total = 1'000'000;       // --max-watches
};

struct WatchStats {
  std::uint64_t pushes = 0;          // `V` lines sent
  std::uint64_t refused = 0;         // `W` answered `B`
  std::uint64_t watches_added = 0;   // `W` that started a watch
};

// The state a watcher sees of `state` (nullptr: the key is not registered).
proto::WatchState watch_state_of(const locks::KeyState* state);

class WatchHub final : public locks::KeyObserver {
 public:
  WatchHub(WatchLimits limits, bool log_revs, std::uint64_t first_rev = 1)
      : limits_(limits), log_revs_(log_revs), rev_(log_revs ? 0 : std::max<std::uint64_t>(first_rev, 1)) {}

  enum class WatchOutcome { kWatching, kBusy };
  // `W key` from `client`: appends `W key rev state` (or `B key` at a cap)
  // to `out`. A key it already watches answers the state now and stays one
  // watch. Pushes a pending change of `key` to its other watchers first, so
  // none of them misses it.
  WatchOutcome watch(locks::ClientId client, std::string_view key, const locks::LockTable& table,
                     PushOutput& push, std::string& out);
  // `U key`: appends `U key` (also when `key` was not watched).
  void unwatch(locks::ClientId client, std::string_view key, std::string& out);
  // `client`'s connection closed: every watch of it ends.
  void client_closed(locks::ClientId client);
  // Pushes the last state of every key changed since the previous flush to
  // its watchers, when it differs from what they were last told.
  void flush(const locks::LockTable& table, PushOutput& push);

  // locks::KeyObserver
  void key_changed(std::string_view key) override;
  // The whole table was replaced (a snapshot installed): every watched key
  // may have changed.
  void all_changed();

  // The current rev: single mode the change counter (from first_rev), cluster mode the
  // index of the entry applied last. 0 only in a cluster member that has
  // applied nothing yet.
  std::uint64_t rev() const { return rev_; }
  // Cluster mode: the entry about to be applied (its changes carry it).
  void set_rev(std::uint64_t rev) {
    if (rev > rev_) rev_ = rev;
  }

  std::size_t watch_count() const { return total_; }
  std::size_t watcher_count() const { return by_client_.size(); }
  std::size_t watched_keys() const { return keys_.size(); }
  bool watches(locks::ClientId client) const { return by_client_.contains(client); }
  const WatchStats& stats() const { return stats_; }
  void set_limits(WatchLimits limits) { limits_ = limits; }

 private:
  struct Entry {
    std::vector<locks::ClientId> watchers;
    proto::WatchState last;     // what the watchers were last told
    std::uint64_t change_rev = 0;  // rev of the key's latest change
    bool dirty = false;            // changed since the last flush (in dirty_)
  };
  struct StringHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  using Map = std::unordered_map<std::string, Entry, StringHash, std::equal_to<>>;
  using Node = Map::value_type;

  // Pushes `state` to e's watchers when it differs from what they were told.
  void push_if_changed(Node& e, proto::WatchState state, PushOutput& push);
  void remove_watcher(Node& e, locks::ClientId client);
  void erase_if_unused(Node& e);

  WatchLimits limits_;
  bool log_revs_;  // cluster mode: rev comes from set_rev()
  std::uint64_t rev_ = 0;
  Map keys_;
  std::unordered_map<locks::ClientId, std::vector<Node*>> by_client_;
  std::vector<Node*> dirty_;
  std::vector<locks::ClientId> scratch_;
  std::size_t total_ = 0;
  bool flushing_ = false;
  WatchStats stats_;
};

}  // namespace lockd::server
