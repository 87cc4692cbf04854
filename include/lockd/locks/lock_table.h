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
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "lockd/common/time.h"
#include "lockd/locks/key_string.h"
#include "lockd/locks/node_pool.h"

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
  friend bool operator==(const Limits&, const Limits&) = default;
};

// Everything one acquire asks for. Views must stay valid for the call only.
struct AcquireRequest {
  std::string_view owner;
  std::string_view key;
  std::uint64_t lease_ms = 0;  // > 0; range checked by the parser
  std::uint64_t wait_ms = 0;   // 0 = do not wait
  ClientId client = 0;         // who gets the later reply if it waits
  WaiterId waiter = 0;         // its name if it waits
  bool shared = false;         // `S` (v1.2, §5b) rather than `A`
  std::uint16_t limit = 0;     // `S` only: most shared holders, 0 = no cap
};

enum class AcquireOutcome {
  kGranted,        // `A token owner key` (or `S ...` for a shared acquire) now
  kHeld,           // `T owner key` now: held by someone else and wait_ms == 0
  kQueued,         // no reply now; a Delivery answers it later
  kBusy,           // `B owner key` now: a cap is full, nothing changed
  kLimitMismatch,  // `E limit_mismatch owner key` now: the key carries another limit (§5b)
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

// How a holder came to leave, for hand-off accounting.
enum class HandoffCause {
  kRelease,  // a holder released with waiters queued
  kExpiry,   // a lease ran out with waiters queued
  kQueue,    // the front waiter left the queue (wait ran out, connection closed)
};

enum class DeliveryKind {
  kGranted,   // the waiter now holds the key: `A token owner key` (`S ...` if shared)
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
  bool shared = false;  // the waiter asked with `S`: its grant is `S token owner key`
};

// Counters a metrics layer exposes; only ever grow.
struct LockStats {
  std::uint64_t grants = 0;               // every token handed out
  std::uint64_t shared_grants = 0;        // ... of them to `S` holders
  std::uint64_t handoffs_release = 0;     // to a waiter because of a release
  std::uint64_t handoffs_expiry = 0;      // to a waiter because a lease ran out
  std::uint64_t handoffs_queue = 0;       // to a waiter because the one before it left
  std::uint64_t takeovers = 0;            // lazy takeovers of an expired key
  std::uint64_t keeps = 0;                // leases extended (or shortened) by `K`
  std::uint64_t expirations = 0;          // leases that ended by expiry (per holder)
  std::uint64_t wait_timeouts = 0;        // waiters answered `T` by their deadline
  std::uint64_t waiters_cancelled = 0;    // waiters dropped without a reply
  std::uint64_t limit_mismatches = 0;     // `S` refused with `E limit_mismatch`
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
  bool shared = false;      // an `S` waiter
  std::uint16_t limit = 0;  // its limit when shared
};

// One holder of a key: an exclusive `A` holder, or one of a shared key's
// `S` holders. Each has its own fencing token, owner and lease.
struct Holder {
  OwnerString owner;
  Token token = 0;  // 0 only in an exclusive slot that is empty (see KeyState)
  TimeNs expires_at_ns = 0;
  // The span from the grant to expires_at_ns: the acquire's lease, then
  // whatever each keep made it (so it can exceed the max lease of one
  // request). Kept whole so that the grant time (expires_at_ns - lease_ms)
  // stays exact for the admin views without a field of its own.
  std::uint64_t lease_ms = 0;
  // The client whose request this holding was granted to (the acquire's,
  // or the waiter's at a hand-off): where single mode sends the lost
  // notice `X` (protocol §5c). The table only keeps it; 0 when unknown (a
  // restored table) or once the server told it. Not in snapshots. Cluster
  // mode keeps its own (a client id means nothing on another member).
  ClientId granted_to = 0;
};
static_assert(sizeof(Holder) == 48);

// What a key needs beyond one exclusive holder: its wait queue and its
// shared holders. Allocated only while the key has waiters or is shared,
// so a plain exclusive key costs exactly what it did before v1.2.
struct KeyExtra {
  // FIFO of `A` and `S` waiters: one queue, strict order (§5b).
  std::list<Waiter> waiters;
  // Shared holders by token: tokens only grow, so this is oldest grant
  // first. Empty unless `shared`.
  std::map<Token, Holder> holders;
  bool shared = false;       // the key's holders are `S` holders
  std::uint16_t limit = 0;   // the limit of its shared holders / queued `S` waiters
  std::uint32_t queued_shared = 0;  // `S` waiters in `waiters`
};

struct KeyState;
// A hash node's value: the key and its state.
using KeyEntry = std::pair<const KeyString, KeyState>;

// One registered key: it always has at least one holder (maybe with an
// expired lease). Its own fields (the Holder base) are the exclusive
// holder; a shared key leaves them empty (token 0) and keeps its holders in
// `extra`. 72 bytes: with its 40-byte KeyString, the hash node is 128 bytes
// (next pointer, key, state, cached hash), one block of the table's
// NodePool.
struct KeyState : Holder {
  std::unique_ptr<KeyExtra> extra;
  // The lease-end index (LockTable::track_lost_leases): while the exclusive
  // holder's client is still to be told that its lease ended, the key sits
  // in the list of the wheel slot of its lease end. `lease_pprev` points at
  // whatever points at this entry (the slot's head or the previous entry's
  // lease_next); nullptr when not listed.
  KeyEntry* lease_next = nullptr;
  KeyEntry** lease_pprev = nullptr;

  bool shared() const { return extra && extra->shared; }
  std::size_t waiter_count() const { return extra ? extra->waiters.size() : 0; }
  // The queue, front first; nullptr when nobody waits.
  const std::list<Waiter>* waiters() const {
    return extra && !extra->waiters.empty() ? &extra->waiters : nullptr;
  }
  std::size_t holder_count() const { return shared() ? extra->holders.size() : (token != 0 ? 1 : 0); }
  // The limit the key's shared holders and queued `S` waiters carry (0 =
  // no cap, or nothing shared).
  std::uint16_t limit() const {
    return extra && (extra->shared || extra->queued_shared > 0) ? extra->limit : 0;
  }
  // The oldest holder (the exclusive one, or the first shared grant).
  const Holder& oldest() const {
    if (shared()) return extra->holders.begin()->second;
    return *this;
  }
  // The holder carrying `token`, or nullptr.
  const Holder* holder_with(Token t) const {
    if (!shared()) return token == t && t != 0 ? static_cast<const Holder*>(this) : nullptr;
    auto it = extra->holders.find(t);
    return it == extra->holders.end() ? nullptr : &it->second;
  }
  template <typename Fn>  // Fn(const Holder&), oldest grant first
  void for_each_holder(Fn&& fn) const {
    if (!shared()) {
      if (token != 0) fn(static_cast<const Holder&>(*this));
      return;
    }
    for (const auto& [t, h] : extra->holders) fn(h);
  }
};
static_assert(sizeof(KeyState) == 72);

// Told of every change of a key's holders (a grant, a release, an expiry
// the table learns of, a shared holder joining or leaving): the watch
// index (v1.3, §5c). Called inside the table's command, after the change;
// it must not call back into the table.
class KeyObserver {
 public:
  virtual void key_changed(std::string_view key) = 0;

 protected:
  ~KeyObserver() = default;
};

// Told when a tracked holding's lease ended (single mode's lost notice `X`,
// protocol §5c): once per holding, with the client it was granted to.
// Called inside the table's command; it must not call back into the table.
class LostObserver {
 public:
  virtual void lease_lost(ClientId client, Token token, std::string_view key) = 0;

 protected:
  ~LostObserver() = default;
};

class LockTable {
 public:
  // `first_token` is the token of the first grant; the caller picks it so
  // tokens keep growing across restarts (see docs/architecture.md).
  LockTable(Limits limits, Token first_token);

  LockTable(const LockTable&) = delete;
  LockTable& operator=(const LockTable&) = delete;

  // §5 (`A`) and §5b (`S`) of the protocol. Never produces Deliveries: a
  // lazy takeover leaves the queue as it is, and an `S` is granted at once
  // only when nobody is queued.
  AcquireResult acquire(TimeNs now, const AcquireRequest& req);

  // §6. Removes the one holder of `key` carrying `token` (a holder whose
  // lease ended but that is still registered matches), then hands off from
  // the front of the queue for as long as the front can be granted, with a
  // Delivery in `out` for each grant (§5b "Hand-off").
  ReleaseOutcome release(TimeNs now, Token token, std::string_view key,
                         std::vector<Delivery>& out);

  // §6a (v1.1). If `key` carries `token` and its lease has not ended at
  // `now`, moves its expiry to about now + lease_ms (later or earlier) and
  // keeps token, owner and queue. An ended lease is never revived, even if
  // not yet swept or taken over. The new expiry is now + lease_ms rounded
  // up to a whole millisecond after the grant (under 1 ms more), which
  // keeps the grant time exact (see KeyState::lease_ms). Never produces
  // Deliveries: the new expiry is at least 1 ms away. When kept and
  // `kept` is given, it says which holder and where its lease ended before
  // (single mode's `X` follows a lease moved earlier: no second lookup).
  struct KeptLease {
    const Holder* holder = nullptr;
    TimeNs previous_end_ns = 0;
    bool shared = false;  // one of a shared key's holders
  };
  KeepOutcome keep(TimeNs now, Token token, std::string_view key, std::uint64_t lease_ms,
                   KeptLease* kept = nullptr);

  // Ends the lease of the holder of `key` carrying `token` if it has run
  // out at `now`: removes it, then hands off from the front as release()
  // does (or deletes the key when nobody is left). Returns whether anything
  // changed. This is the cluster `Expire` command; single mode reaches the
  // same code through advance().
  bool expire(TimeNs now, std::string_view key, Token token, std::vector<Delivery>& out);

  // Removes a waiter without a reply (its connection closed). If it was at
  // the front, the new front may now be grantable (a run of readers behind
  // a writer that left): those grants go to `out`, with `now` their grant
  // time. Returns false if it is not waiting (already served or timed out).
  bool cancel_waiter(TimeNs now, WaiterId id, std::vector<Delivery>& out);
  // The same for several waiters at once (one closed connection's): all
  // leave before any hand-off, so none of them is granted on its way out.
  // Returns how many were waiting.
  std::size_t cancel_waiters(TimeNs now, std::span<const WaiterId> ids, std::vector<Delivery>& out);

  // Cluster mode: the token of the next grant. Each replicated entry sets
  // it to at least (token base + entry index) before it applies, so every
  // replica grants the same tokens. Tokens only grow: `next` below the
  // current next token is our bug (checked).
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

  // The client the holder of `key` carrying `token` was granted to
  // (Holder::granted_to), which is forgotten: the server tells it `X` once.
  // 0 when there is no such holder or it was taken before.
  ClientId take_granted_to(std::string_view key, Token token);

  // Single mode (set once, on an empty table): from then on every exclusive
  // holding granted to a client (ClientId != 0) has its lease end indexed
  // in a timing wheel whose links live in the key's own node (no memory
  // per lock beyond it), and `o` hears of it once when the lease has ended:
  // from run_lost_leases(), at most one wheel tick (~1 ms) after the end,
  // or at once when a takeover, a hand-off at lease end or a sweep removes
  // the holder first. The client is then forgotten (granted_to = 0). A
  // release, or a keep that moves the end, moves or drops it. Shared
  // holdings are not indexed (the server uses take_granted_to for them).
  void track_lost_leases(LostObserver* o);
  // Tells `o` of every indexed lease whose end lies in a wheel tick that
  // ended by `now`.
  void run_lost_leases(TimeNs now);
  // Whether run_lost_leases(now) would look at anything (one comparison).
  bool lost_leases_due(TimeNs now) const {
    return lease_indexed_ > 0 && tick_of(now) > lease_done_tick_;
  }
  // When run_lost_leases() next has a slot to look at: maybe early (the
  // slot's leases end in a later turn of the wheel), never late.
  std::optional<TimeNs> next_lost_check() const;
  // The lease-end index's tick: 2^20 ns (~1.05 ms). A lease is told once
  // the tick its end falls in is over.
  static constexpr int kLeaseTickShift = 20;
  static constexpr TimeNs kLeaseTickNs = TimeNs{1} << kLeaseTickShift;
  // Holdings in the lease-end index (tests, metrics).
  std::size_t lost_leases_indexed() const { return lease_indexed_; }
  // The node pool (tests and the memory benchmark's arithmetic).
  const NodePool& node_pool() const { return node_pool_; }

  // --- read-only views (admin API, metrics, tests) ---
  const KeyState* find(std::string_view key) const;
  // Every registered holder, shared ones each counted (expired ones too,
  // until swept or replaced).
  std::size_t holder_count() const { return keys_.size() - shared_keys_ + shared_holders_; }
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
  // Who is told of changed keys (not owned; null: nobody, the default).
  // One pointer test per change when unset.
  void set_observer(KeyObserver* o) { observer_ = o; }
  KeyObserver* observer() const { return observer_; }

  // Test and simulation hook: verifies every internal invariant (indexes
  // agree with queues, caps hold) and aborts on a violation.
  void check_invariants() const;

 private:
  // The snapshot codec (lock_table_snapshot.h) reads and rebuilds every
  // private field, deadline heap included, so a restored table behaves
  // exactly like the original.
  friend struct SnapshotAccess;

  // An entry of the deadline index. Entries are never removed in place: an
  // entry whose waiter left, whose holder left, or whose holder's expiry
  // was moved by a keep is stale and is skipped when it reaches the top
  // (STYLE §9).
  struct Deadline {
    TimeNs at_ns;
    enum class Kind : std::uint8_t {
      kLease,  // a holder's lease ends; `id` is its token, live only while
               // the key has waiters and that holder, with expiry at_ns
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
  using KeyMap = std::unordered_map<KeyString, KeyState, StringHash, std::equal_to<>,
                                    PoolAllocator<KeyEntry>>;
  static_assert(std::is_same_v<KeyMap::value_type, KeyEntry>);
  // Where a waiter sits, for O(1) cancel. Element pointers of an
  // unordered_map stay valid across rehashes; its iterators do not.
  struct WaiterRef {
    KeyMap::value_type* entry;
    std::list<Waiter>::iterator it;
  };

  Token grant(Holder& holder, std::string_view owner, std::uint64_t lease_ms, ClientId client,
              TimeNs now);
  // Makes `state` exclusive with one new holder (any old holders must be gone).
  Token grant_exclusive(KeyState& state, std::string_view owner, std::uint64_t lease_ms,
                        ClientId client, TimeNs now);
  // Adds one shared holder; `state` must be shared or have no holder.
  Token grant_shared(KeyState& state, std::string_view owner, std::uint64_t lease_ms,
                     std::uint16_t limit, ClientId client, TimeNs now);
  // Removes the holder carrying `token`; false when there is none.
  bool remove_holder(KeyState& state, Token token);
  // Removes every holder of `e` whose lease has ended at `now` (telling an
  // indexed one's client first); returns how many.
  std::size_t drop_expired_holders(KeyEntry& e, TimeNs now);
  // Whether a live holder (lease not ended at `now`) blocks an `A`, and how
  // many live shared holders count against an `S`'s limit.
  static bool has_live_holder(const KeyState& state, TimeNs now);
  static bool has_live_exclusive(const KeyState& state, TimeNs now);
  static std::size_t live_shared(const KeyState& state, TimeNs now);
  // §5b: the limit the key's live shared holders or queued `S` waiters carry.
  static std::optional<std::uint16_t> limit_in_force(const KeyState& state, TimeNs now);
  // Whether `w` could be granted now by the holders still registered (the
  // caller has dropped the expired ones).
  static bool can_grant(const KeyState& state, const Waiter& w);
  // After a holder or the front waiter left: drops expired holders, grants
  // from the front while the front can be granted (§5b "Hand-off"), arms
  // the new holders' lease deadlines if waiters remain, and deletes the key
  // when it has neither holders nor waiters.
  void settle(KeyMap::iterator it, TimeNs now, HandoffCause cause, std::vector<Delivery>& out);
  // Deletes a key (keeping the shared counters right).
  void erase_key(KeyMap::iterator it);
  // Arms a lease deadline for every holder (the key just got waiters).
  void arm_holder_deadlines(std::string_view key, const KeyState& state);
  // Frees `extra` once it carries nothing (no waiters, not shared).
  static void drop_extra_if_unused(KeyState& state);
  // Removes waiter `ref` from its queue (index, counters, empty queue).
  void unlink_waiter(std::unordered_map<WaiterId, WaiterRef>::iterator ref);
  void push_deadline(Deadline d);
  bool deadline_is_live(const Deadline& d) const;
  void compact_deadlines_if_needed();
  void drop_empty_queue(KeyState& state);
  void changed(std::string_view key) {
    if (observer_ != nullptr) observer_->key_changed(key);
  }

  // The lease-end wheel (track_lost_leases): kLeaseSlots lists of keys, one
  // per tick (kLeaseTickShift above), a key in the slot of its lease end's
  // tick; a bit per non-empty slot.
  static constexpr std::size_t kLeaseSlots = 16384;  // ~17 s a turn
  static std::uint64_t tick_of(TimeNs t) { return static_cast<std::uint64_t>(t) >> kLeaseTickShift; }
  // Indexes `e`'s exclusive holder if it is to be told (moves it if listed).
  void lease_index(KeyEntry& e, TimeNs now);
  // Drops `s` from the wheel, if listed.
  void lease_unindex(KeyState& s);
  // `e`'s exclusive holder leaves with its lease ended: its client is told
  // now if it was still to be.
  void tell_lost(KeyEntry& e);
  // The first tick at or after lease_done_tick_ whose slot's bit is set.
  std::optional<std::uint64_t> first_listed_tick() const;

  Limits limits_;
  Limits invariant_limits_;  // the largest caps ever in force: what check_invariants() bounds
  Token next_token_;
  NodePool node_pool_;  // before keys_: it outlives the map's nodes
  KeyMap keys_{0, StringHash{}, std::equal_to<>{}, PoolAllocator<KeyEntry>(&node_pool_)};
  std::unordered_map<WaiterId, WaiterRef> waiter_index_;
  std::vector<Deadline> deadlines_;  // min-heap on at_ns
  std::size_t keys_with_waiters_ = 0;
  std::size_t shared_keys_ = 0;     // keys whose holders are shared
  std::size_t shared_holders_ = 0;  // holders of those keys
  std::size_t sweep_cursor_ = 0;  // next bucket of the pass under way
  std::vector<std::string_view> sweep_scratch_;  // keys to erase in a slice
  LockStats stats_;
  KeyObserver* observer_ = nullptr;  // the watch index, if any (v1.3)
  LostObserver* lost_ = nullptr;     // single mode's `X`; null: no wheel
  std::vector<KeyEntry*> lease_slots_;      // kLeaseSlots heads, once tracking
  std::vector<std::uint64_t> lease_bits_;   // kLeaseSlots bits: may be non-empty
  std::uint64_t lease_done_tick_ = 0;       // every tick before this one was run
  std::size_t lease_indexed_ = 0;
  // next_lost_check()'s answer (a tick), while known: it changes only when
  // the wheel runs, its start jumps or a key is indexed before it.
  mutable std::uint64_t lease_check_tick_ = 0;
  mutable bool lease_check_known_ = false;
};

}  // namespace lockd::locks
