// LockTable: every lock, holder and wait queue of one lockd, as a pure
// deterministic state machine.
//
// The table takes commands (acquire, release, keep, expire, cancel a
// waiter, advance time, sweep) with `now` passed in, and answers with
// values: the outcome for the caller plus Deliveries, the replies owed to
// *other* waiting clients (a hand-off, a wait that ran out). It reads no
// clock, owns no socket and arms no timer: it only says, through
// next_deadline(), when it next wants advance() to be called.
//
// Single mode drives it straight from the reactor. Cluster mode applies the
// very same commands from the Raft log on every replica, which is why every
// decision here depends only on the command sequence and the `now` values.
//
// Runs on the reactor thread; not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "lockd/common/time.h"
#include "lockd/locks/key_string.h"

namespace lockd::locks {

// A fencing token: every grant gets one larger than any granted before.
using Token = std::uint64_t;
// Who receives an asynchronous reply; opaque to the table (a connection id
// in the server). Only echoed back in Deliveries.
using ClientId = std::uint64_t;
// Names one waiting acquire; unique over the table's life, chosen by the
// caller so that a Raft log can carry it and every replica agrees.
using WaiterId = std::uint64_t;

// Caps from the operator (--max-keys, --max-waiters-per-key, --max-waiters).
struct Limits {
  std::size_t max_keys = 1'000'000;
  std::size_t max_waiters_per_key = 10'000;
  std::size_t max_waiters = 1'000'000;
};

// Everything one acquire asks for. Views must stay valid for the call only.
struct AcquireRequest {
  std::string_view owner;
  std::string_view key;
  std::uint64_t lease_ms = 0;  // > 0; range checked by the parser
  std::uint64_t wait_ms = 0;   // 0 = do not wait
  ClientId client = 0;         // who gets the later reply if it waits
  WaiterId waiter = 0;         // its name if it waits
};

enum class AcquireOutcome {
  kGranted,  // `A token owner key` now
  kHeld,     // `T owner key` now: held by someone else and wait_ms == 0
  kQueued,   // no reply now; a Delivery answers it later
  kBusy,     // `B owner key` now: a cap is full, nothing changed
};

struct AcquireResult {
  AcquireOutcome outcome;
  Token token = 0;  // set when kGranted
};

enum class ReleaseOutcome {
  kReleased,     // `R token key`
  kNotReleased,  // `N token key`
};

enum class KeepOutcome {
  kKept,     // `K token key`: the lease now ends later (or earlier)
  kNotKept,  // `N token key`: unknown key, other token, or the lease had ended
};

// How a lease came to an end, for hand-off accounting.
enum class HandoffCause {
  kRelease,  // the holder released with waiters queued
  kExpiry,   // the lease ran out with waiters queued
};

enum class DeliveryKind {
  kGranted,   // the waiter now holds the key: `A token owner key`
  kTimedOut,  // its wait ran out: `T owner key`
};

// A reply owed to a waiting client, produced as a side effect of a command.
struct Delivery {
  ClientId client;
  WaiterId waiter;
  DeliveryKind kind;
  Token token;  // set when kGranted
  std::string owner;
  std::string key;
};

// Counters a metrics layer exposes; only ever grow.
struct LockStats {
  std::uint64_t grants = 0;               // every token handed out
  std::uint64_t handoffs_release = 0;     // to a waiter because of a release
  std::uint64_t handoffs_expiry = 0;      // to a waiter because a lease ran out
  std::uint64_t takeovers = 0;            // lazy takeovers of an expired key
  std::uint64_t keeps = 0;                // leases extended (or shortened) by `K`
  std::uint64_t expirations = 0;          // leases that ended by expiry
  std::uint64_t wait_timeouts = 0;        // waiters answered `T` by their deadline
  std::uint64_t waiters_cancelled = 0;    // waiters dropped without a reply
  std::uint64_t sweeps = 0;               // sweep() calls
  std::uint64_t swept_keys = 0;           // keys deleted by sweeps
};

// One queued acquire.
struct Waiter {
  WaiterId id;
  ClientId client;
  std::string owner;
  std::uint64_t lease_ms;
  TimeNs wait_deadline_ns;
};

// One registered key: it always has a holder (maybe with an expired lease).
struct KeyState {
  std::string owner;
  Token token = 0;
  TimeNs expires_at_ns = 0;
  // The span from the grant to expires_at_ns: the acquire's lease, then
  // whatever each keep made it (so it can exceed the max lease of one
  // request). Kept whole so that the grant time (expires_at_ns - lease_ms)
  // stays exact for the admin views without a field of its own (8 bytes
  // would cost every key 16 in its hash node).
  std::uint64_t lease_ms = 0;
  // FIFO of waiters, allocated only while the key has any: most keys never
  // do, and an empty std::list would cost every key its size.
  std::unique_ptr<std::list<Waiter>> waiters;

  std::size_t waiter_count() const { return waiters ? waiters->size() : 0; }
};

class LockTable {
 public:
  // `first_token` is the token of the first grant; the caller picks it so
  // tokens keep growing across restarts (see docs/architecture.md).
  LockTable(Limits limits, Token first_token);

  LockTable(const LockTable&) = delete;
  LockTable& operator=(const LockTable&) = delete;

  // §5 of the protocol. Never produces Deliveries (a lazy takeover leaves
  // the queue as it is).
  AcquireResult acquire(TimeNs now, const AcquireRequest& req);

  // §6. A release with waiters hands the key to the front waiter and
  // appends its Delivery to `out`.
  ReleaseOutcome release(TimeNs now, Token token, std::string_view key,
                         std::vector<Delivery>& out);

  // §6a (v1.1). If `key` carries `token` and its lease has not ended at
  // `now`, moves its expiry to about now + lease_ms (later or earlier) and
  // keeps token, owner and queue. An ended lease is never revived, even if
  // not yet swept or taken over. The new expiry is now + lease_ms rounded
  // up to a whole millisecond after the grant (under 1 ms more), which
  // keeps the grant time exact (see KeyState::lease_ms). Never produces
  // Deliveries: the new expiry is at least 1 ms away.
  KeepOutcome keep(TimeNs now, Token token, std::string_view key, std::uint64_t lease_ms);

  // Ends the lease of `key` if it still carries `token` and has run out at
  // `now`: hands it to the front waiter, or deletes the key. Returns whether
  // anything changed. This is the cluster `Expire` command; single mode
  // reaches the same code through advance().
  bool expire(TimeNs now, std::string_view key, Token token, std::vector<Delivery>& out);

  // Removes a waiter without a reply (its connection closed). Returns false
  // if it is not waiting (already served or timed out).
  bool cancel_waiter(WaiterId id);

  // Cluster mode: the token of the next grant. Each replicated entry sets
  // it to (token base + entry index) before it applies, so every replica
  // grants the same tokens. Tokens only grow: `next` below the current
  // next token is our bug (checked).
  void set_next_token(Token next);

  // Cluster mode: drops every queued waiter without a reply (a new leader's
  // first entry: the waiters' connections were on the old leader). Returns
  // how many.
  std::size_t cancel_all_waiters();

  // Single-mode clock: answers every wait that has run out (`T`) and hands
  // every expired key with waiters to its front waiter.
  void advance(TimeNs now, std::vector<Delivery>& out);

  // The earliest moment advance() has work to do, if any. May be early (an
  // entry that turned stale), never late.
  std::optional<TimeNs> next_deadline() const;

  // Deletes expired keys that have no waiters, in one go. Returns how many.
  // Tests and small tables; the server uses sweep_step().
  std::size_t sweep(TimeNs now);

  // One bounded slice of a sweep pass: visits at most `max_buckets` hash
  // buckets from where the previous slice stopped (a pass starts when none
  // is under way), deleting expired keys without waiters. Adds what it
  // freed to `freed`. Returns true when the pass is complete. Bounding the
  // slice keeps one sweep of a million keys from stalling the loop: walking
  // a large hash map is one cache miss per key. A key skipped because the
  // map rehashed (grew) during a pass is caught by the next pass.
  bool sweep_step(TimeNs now, std::size_t max_buckets, std::size_t& freed);

  // --- read-only views (admin API, metrics, tests) ---
  const KeyState* find(std::string_view key) const;
  template <typename Fn>  // Fn(std::string_view key, const KeyState&)
  void for_each(Fn&& fn) const {
    for (const auto& [k, s] : keys_) fn(k.view(), s);
  }
  // Bucket-level walk for scans split across loop turns (the admin API's
  // listings): visits the keys of buckets [first, last). A key present for
  // a whole scan is seen exactly once as long as bucket_count() does not
  // change (a rehash); the caller restarts when it does.
  std::size_t bucket_count() const { return keys_.bucket_count(); }
  template <typename Fn>  // Fn(std::string_view key, const KeyState&)
  void for_each_in_buckets(std::size_t first, std::size_t last, Fn&& fn) const {
    for (std::size_t b = first; b < last && b < keys_.bucket_count(); ++b) {
      for (auto it = keys_.cbegin(b); it != keys_.cend(b); ++it) fn(it->first.view(), it->second);
    }
  }
  std::size_t key_count() const { return keys_.size(); }
  std::size_t waiter_count() const { return waiter_index_.size(); }
  // Entries in the deadline index, stale ones included (tests of its bound).
  std::size_t deadline_count() const { return deadlines_.size(); }
  Token next_token() const { return next_token_; }
  const LockStats& stats() const { return stats_; }
  const Limits& limits() const { return limits_; }
  // New caps (cluster mode: a replicated config entry). Lowering one below
  // what the table holds evicts nothing: growth past it is refused (`B`)
  // until it drains below.
  void set_limits(Limits limits);

  // Test and simulation hook: verifies every internal invariant (indexes
  // agree with queues, caps hold) and aborts on a violation.
  void check_invariants() const;

 private:
  // The snapshot codec (lock_table_snapshot.h) reads and rebuilds every
  // private field, deadline heap included, so a restored table behaves
  // exactly like the original.
  friend struct SnapshotAccess;

  // An entry of the deadline index. Entries are never removed in place: an
  // entry whose waiter left, whose key changed token, or whose key's
  // expiry was moved by a keep is stale and is skipped when it reaches the
  // top (STYLE §9).
  struct Deadline {
    TimeNs at_ns;
    enum class Kind : std::uint8_t {
      kLease,  // key's lease ends; `id` is the token it was armed for, live
               // only while the key has waiters, that token and expiry at_ns
      kWait,   // a waiter's wait ends; `id` is the WaiterId
    } kind;
    std::uint64_t id;
    std::string key;  // kLease only
  };
  struct DeadlineLater {
    bool operator()(const Deadline& a, const Deadline& b) const { return a.at_ns > b.at_ns; }
  };
  struct StringHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  using KeyMap = std::unordered_map<KeyString, KeyState, StringHash, std::equal_to<>>;
  // Where a waiter sits, for O(1) cancel. Element pointers of an
  // unordered_map stay valid across rehashes; its iterators do not.
  struct WaiterRef {
    KeyMap::value_type* entry;
    std::list<Waiter>::iterator it;
  };

  Token grant(KeyState& state, std::string_view owner, std::uint64_t lease_ms, TimeNs now);
  // Gives `it`'s key to its front waiter, or deletes the key when none.
  void hand_off_or_delete(KeyMap::iterator it, TimeNs now, HandoffCause cause,
                          std::vector<Delivery>& out);
  void push_deadline(Deadline d);
  bool deadline_is_live(const Deadline& d) const;
  void compact_deadlines_if_needed();
  void drop_empty_queue(KeyState& state);

  Limits limits_;
  Limits invariant_limits_;  // the largest caps ever in force: what check_invariants() bounds
  Token next_token_;
  KeyMap keys_;
  std::unordered_map<WaiterId, WaiterRef> waiter_index_;
  std::vector<Deadline> deadlines_;  // min-heap on at_ns
  std::size_t keys_with_waiters_ = 0;
  std::size_t sweep_cursor_ = 0;  // next bucket of the pass under way
  std::vector<std::string_view> sweep_scratch_;  // keys to erase in a slice
  LockStats stats_;
};

}  // namespace lockd::locks
