#include "lockd/locks/lock_table.h"

#include <algorithm>
#include <bit>
#include <set>
#include <utility>

#include "lockd/common/check.h"

namespace lockd::locks {

namespace {

// The deadline index is rebuilt without its stale entries once it holds
// more than this many times the live ones (plus a floor, so that small
// tables never bother). Keeps memory bounded under waiter churn.
constexpr std::size_t kDeadlineSlackFactor = 2;
constexpr std::size_t kDeadlineSlackFloor = 1024;

}  // namespace

LockTable::LockTable(Limits limits, Token first_token)
    : limits_(limits), invariant_limits_(limits), next_token_(first_token) {
  LOCKD_CHECK(first_token > 0);
}

Token LockTable::grant(Holder& holder, std::string_view owner, std::uint64_t lease_ms,
                       ClientId client, TimeNs now) {
  LOCKD_CHECK(next_token_ != 0);  // wrapped past 2^64: cannot happen in practice
  holder.owner.assign(owner);
  holder.granted_to = client;
  holder.token = next_token_++;
  holder.lease_ms = lease_ms;
  holder.expires_at_ns = now + ms_to_ns(lease_ms);
  ++stats_.grants;
  return holder.token;
}

Token LockTable::grant_exclusive(KeyState& state, std::string_view owner, std::uint64_t lease_ms,
                                 ClientId client, TimeNs now) {
  LOCKD_CHECK(state.holder_count() == 0);
  if (state.shared()) {
    state.extra->shared = false;
    --shared_keys_;
  }
  return grant(state, owner, lease_ms, client, now);
}

Token LockTable::grant_shared(KeyState& state, std::string_view owner, std::uint64_t lease_ms,
                              std::uint16_t limit, ClientId client, TimeNs now) {
  if (!state.extra) state.extra = std::make_unique<KeyExtra>();
  KeyExtra& x = *state.extra;
  if (!x.shared) {
    LOCKD_CHECK(state.token == 0);  // an exclusive holder left first
    x.shared = true;
    ++shared_keys_;
  }
  x.limit = limit;
  Holder h;
  const Token token = grant(h, owner, lease_ms, client, now);
  // Tokens only grow, so the newest grant always goes last.
  x.holders.emplace_hint(x.holders.end(), token, std::move(h));
  ++shared_holders_;
  ++stats_.shared_grants;
  return token;
}

bool LockTable::remove_holder(KeyState& state, Token token) {
  if (state.shared()) {
    if (state.extra->holders.erase(token) == 0) return false;
    --shared_holders_;
    return true;
  }
  if (state.token != token || token == 0) return false;
  lease_unindex(state);
  state.token = 0;
  state.owner.clear();
  state.expires_at_ns = 0;
  state.lease_ms = 0;
  state.granted_to = 0;
  return true;
}

std::size_t LockTable::drop_expired_holders(KeyEntry& e, TimeNs now) {
  KeyState& state = e.second;
  std::size_t n = 0;
  if (state.shared()) {
    n = std::erase_if(state.extra->holders,
                      [now](const auto& entry) { return entry.second.expires_at_ns <= now; });
    shared_holders_ -= n;
  } else if (state.token != 0 && state.expires_at_ns <= now) {
    tell_lost(e);
    remove_holder(state, state.token);
    n = 1;
  }
  stats_.expirations += n;
  return n;
}

bool LockTable::has_live_exclusive(const KeyState& state, TimeNs now) {
  return !state.shared() && state.token != 0 && state.expires_at_ns > now;
}

bool LockTable::has_live_holder(const KeyState& state, TimeNs now) {
  if (!state.shared()) return has_live_exclusive(state, now);
  for (const auto& [t, h] : state.extra->holders) {
    if (h.expires_at_ns > now) return true;
  }
  return false;
}

std::size_t LockTable::live_shared(const KeyState& state, TimeNs now) {
  if (!state.shared()) return 0;
  std::size_t n = 0;
  for (const auto& [t, h] : state.extra->holders) n += h.expires_at_ns > now ? 1 : 0;
  return n;
}

std::optional<std::uint16_t> LockTable::limit_in_force(const KeyState& state, TimeNs now) {
  if (!state.extra) return std::nullopt;
  if (state.extra->queued_shared > 0 || (state.shared() && has_live_holder(state, now))) {
    return state.extra->limit;
  }
  return std::nullopt;
}

bool LockTable::can_grant(const KeyState& state, const Waiter& w) {
  if (state.holder_count() == 0) return true;
  if (!w.shared || !state.shared()) return false;
  return w.limit == 0 || state.extra->holders.size() < w.limit;
}

void LockTable::drop_extra_if_unused(KeyState& state) {
  if (state.extra && !state.extra->shared && state.extra->waiters.empty()) state.extra.reset();
}

void LockTable::arm_holder_deadlines(std::string_view key, const KeyState& state) {
  state.for_each_holder([&](const Holder& h) {
    push_deadline({h.expires_at_ns, Deadline::Kind::kLease, h.token, std::string(key)});
  });
}

AcquireResult LockTable::acquire(TimeNs now, const AcquireRequest& req) {
  LOCKD_CHECK(req.lease_ms > 0);
  auto it = keys_.find(req.key);
  if (it == keys_.end()) {
    if (keys_.size() >= limits_.max_keys) return {AcquireOutcome::kBusy};
    it = keys_.emplace(KeyString(req.key), KeyState{}).first;
    const Token token = req.shared
                            ? grant_shared(it->second, req.owner, req.lease_ms, req.limit, req.client, now)
                            : grant_exclusive(it->second, req.owner, req.lease_ms, req.client, now);
    if (!req.shared) lease_index(*it, now);
    changed(req.key);
    return {AcquireOutcome::kGranted, token};
  }
  KeyState& state = it->second;
  if (req.shared) {
    // §5b: the limit of the live shared holders and queued `S` waiters rules.
    if (const auto limit = limit_in_force(state, now); limit && *limit != req.limit) {
      ++stats_.limit_mismatches;
      return {AcquireOutcome::kLimitMismatch};
    }
    // Never past a queued waiter; ended leases do not count (and are
    // replaced by this grant).
    if (state.waiter_count() == 0 && !has_live_exclusive(state, now) &&
        (req.limit == 0 || live_shared(state, now) < req.limit)) {
      if (drop_expired_holders(*it, now) > 0 && state.holder_count() == 0) ++stats_.takeovers;
      const Token token = grant_shared(state, req.owner, req.lease_ms, req.limit, req.client, now);
      changed(req.key);
      return {AcquireOutcome::kGranted, token};
    }
  } else if (!has_live_holder(state, now)) {
    // Lazy takeover: the newcomer goes ahead of any queue (spec §9).
    ++stats_.takeovers;
    drop_expired_holders(*it, now);
    const Token token = grant_exclusive(state, req.owner, req.lease_ms, req.client, now);
    lease_index(*it, now);
    if (state.waiter_count() > 0) {
      push_deadline({state.expires_at_ns, Deadline::Kind::kLease, token, std::string(it->first.view())});
    }
    drop_extra_if_unused(state);
    changed(req.key);
    return {AcquireOutcome::kGranted, token};
  }
  if (req.wait_ms == 0) return {AcquireOutcome::kHeld};
  if (state.waiter_count() >= limits_.max_waiters_per_key ||
      waiter_index_.size() >= limits_.max_waiters) {
    return {AcquireOutcome::kBusy};
  }
  LOCKD_CHECK(!waiter_index_.contains(req.waiter));
  if (!state.extra) state.extra = std::make_unique<KeyExtra>();
  KeyExtra& x = *state.extra;
  const bool first_waiter = x.waiters.empty();
  const TimeNs wait_deadline = now + ms_to_ns(req.wait_ms);
  x.waiters.push_back(Waiter{req.waiter, req.client, std::string(req.owner), req.lease_ms,
                             wait_deadline, req.shared, req.shared ? req.limit : std::uint16_t{0}});
  if (req.shared) {
    ++x.queued_shared;
    x.limit = req.limit;
  }
  waiter_index_.emplace(req.waiter, WaiterRef{&*it, std::prev(x.waiters.end())});
  if (first_waiter) {
    ++keys_with_waiters_;
    // The holders' lease ends now matter before the next sweep. Armed with
    // the waiter already queued, so that a compaction keeps them.
    arm_holder_deadlines(it->first.view(), state);
  }
  push_deadline({wait_deadline, Deadline::Kind::kWait, req.waiter, {}});
  return {AcquireOutcome::kQueued};
}

ReleaseOutcome LockTable::release(TimeNs now, Token token, std::string_view key,
                                  std::vector<Delivery>& out) {
  auto it = keys_.find(key);
  if (it == keys_.end() || !remove_holder(it->second, token)) return ReleaseOutcome::kNotReleased;
  settle(it, now, HandoffCause::kRelease, out);
  changed(key);
  return ReleaseOutcome::kReleased;
}

KeepOutcome LockTable::keep(TimeNs now, Token token, std::string_view key,
                           std::uint64_t lease_ms, KeptLease* kept) {
  LOCKD_CHECK(lease_ms > 0);
  auto it = keys_.find(key);
  if (it == keys_.end()) return KeepOutcome::kNotKept;
  KeyState& state = it->second;
  auto* holder = const_cast<Holder*>(state.holder_with(token));
  if (holder == nullptr) return KeepOutcome::kNotKept;
  // An ended lease stays ended: between its end and the sweep (or a
  // takeover) someone may already have acted on it being free.
  if (holder->expires_at_ns <= now) return KeepOutcome::kNotKept;
  const TimeNs granted_at_ns = holder->expires_at_ns - ms_to_ns(holder->lease_ms);
  const TimeNs span_ns = now + ms_to_ns(lease_ms) - granted_at_ns;
  // Rounded up to whole milliseconds; at least 1 ms even if a caller's
  // clock went back past the grant.
  const TimeNs total_ms = std::max<TimeNs>(1, (span_ns + kNsPerMs - 1) / kNsPerMs);
  const TimeNs old_expiry_ns = holder->expires_at_ns;
  holder->lease_ms = static_cast<std::uint64_t>(total_ms);
  holder->expires_at_ns = granted_at_ns + ms_to_ns(holder->lease_ms);
  ++stats_.keeps;
  // With waiters, the hand-off must follow the new expiry, earlier or
  // later: the entry armed for the old one turns stale (its time no longer
  // matches) and this one takes over. Same expiry: the entry already in
  // the heap stays live, and pushing another would only add a duplicate.
  if (state.waiter_count() > 0 && holder->expires_at_ns != old_expiry_ns) {
    push_deadline({holder->expires_at_ns, Deadline::Kind::kLease, token, std::string(it->first.view())});
  }
  if (state.lease_pprev != nullptr && holder->expires_at_ns != old_expiry_ns) lease_index(*it, now);
  if (kept != nullptr) *kept = {holder, old_expiry_ns, state.shared()};
  return KeepOutcome::kKept;
}

bool LockTable::expire(TimeNs now, std::string_view key, Token token,
                       std::vector<Delivery>& out) {
  auto it = keys_.find(key);
  if (it == keys_.end()) return false;
  const Holder* holder = it->second.holder_with(token);
  if (holder == nullptr || holder->expires_at_ns > now) return false;
  if (!it->second.shared()) tell_lost(*it);
  remove_holder(it->second, token);
  ++stats_.expirations;
  settle(it, now, HandoffCause::kExpiry, out);
  changed(key);
  return true;
}

void LockTable::settle(KeyMap::iterator it, TimeNs now, HandoffCause cause,
                       std::vector<Delivery>& out) {
  KeyState& state = it->second;
  if (state.waiter_count() > 0) {
    // Holders whose lease has ended do not count (§5b); they are replaced.
    drop_expired_holders(*it, now);
    KeyExtra& x = *state.extra;
    const std::size_t first_grant = out.size();
    while (!x.waiters.empty() && can_grant(state, x.waiters.front())) {
      Waiter w = std::move(x.waiters.front());
      x.waiters.pop_front();
      waiter_index_.erase(w.id);
      if (w.shared) --x.queued_shared;
      const Token token = w.shared ? grant_shared(state, w.owner, w.lease_ms, w.limit, w.client, now)
                                   : grant_exclusive(state, w.owner, w.lease_ms, w.client, now);
      if (!w.shared) lease_index(*it, now);
      switch (cause) {
        case HandoffCause::kRelease: ++stats_.handoffs_release; break;
        case HandoffCause::kExpiry: ++stats_.handoffs_expiry; break;
        case HandoffCause::kQueue: ++stats_.handoffs_queue; break;
      }
      out.push_back(Delivery{w.client, w.id, DeliveryKind::kGranted, token, std::move(w.owner),
                             std::string(it->first.view()), w.shared});
    }
    if (x.waiters.empty()) {
      drop_empty_queue(state);
    } else {
      for (std::size_t i = first_grant; i < out.size(); ++i) {
        const Holder* h = state.holder_with(out[i].token);
        push_deadline({h->expires_at_ns, Deadline::Kind::kLease, out[i].token, out[i].key});
      }
    }
  }
  if (state.holder_count() == 0) {
    // Nobody holds it and (the front being grantable to anyone) nobody waits.
    LOCKD_CHECK(state.waiter_count() == 0);
    erase_key(it);
    return;
  }
  drop_extra_if_unused(state);
}

void LockTable::erase_key(KeyMap::iterator it) {
  LOCKD_CHECK(it->second.lease_pprev == nullptr);  // its holder left, and the index with it
  if (it->second.shared()) {
    --shared_keys_;
    shared_holders_ -= it->second.extra->holders.size();
  }
  keys_.erase(it);
}

void LockTable::drop_empty_queue(KeyState& state) {
  LOCKD_CHECK(state.extra && state.extra->waiters.empty());
  LOCKD_CHECK(state.extra->queued_shared == 0);
  LOCKD_CHECK(keys_with_waiters_ > 0);
  --keys_with_waiters_;
}

void LockTable::unlink_waiter(std::unordered_map<WaiterId, WaiterRef>::iterator ref) {
  KeyState& state = ref->second.entry->second;
  KeyExtra& x = *state.extra;
  if (ref->second.it->shared) --x.queued_shared;
  x.waiters.erase(ref->second.it);
  waiter_index_.erase(ref);
  if (x.waiters.empty()) {
    drop_empty_queue(state);
    drop_extra_if_unused(state);
  }
}

bool LockTable::cancel_waiter(TimeNs now, WaiterId id, std::vector<Delivery>& out) {
  return cancel_waiters(now, std::span<const WaiterId>(&id, 1), out) == 1;
}

std::size_t LockTable::cancel_waiters(TimeNs now, std::span<const WaiterId> ids,
                                      std::vector<Delivery>& out) {
  std::size_t cancelled = 0;
  std::vector<std::string> fronts;  // keys whose front left
  for (const WaiterId id : ids) {
    auto ref = waiter_index_.find(id);
    if (ref == waiter_index_.end()) continue;
    KeyMap::value_type* entry = ref->second.entry;
    if (ref->second.it == entry->second.extra->waiters.begin()) fronts.emplace_back(entry->first.view());
    unlink_waiter(ref);
    ++stats_.waiters_cancelled;
    ++cancelled;
  }
  // The new front may be grantable now (readers queued behind a writer
  // that left).
  for (const std::string& key : fronts) {
    auto it = keys_.find(key);
    if (it != keys_.end() && it->second.waiter_count() > 0) {
      settle(it, now, HandoffCause::kQueue, out);
      changed(key);
    }
  }
  return cancelled;
}

void LockTable::set_next_token(Token next) {
  LOCKD_CHECK(next >= next_token_);
  next_token_ = next;
}

std::size_t LockTable::cancel_all_waiters() {
  std::vector<WaiterId> ids;
  ids.reserve(waiter_index_.size());
  for (const auto& [id, ref] : waiter_index_) ids.push_back(id);
  for (const WaiterId id : ids) {
    unlink_waiter(waiter_index_.find(id));
    ++stats_.waiters_cancelled;
  }
  return ids.size();
}

void LockTable::push_deadline(Deadline d) {
  deadlines_.push_back(std::move(d));
  std::push_heap(deadlines_.begin(), deadlines_.end(), DeadlineLater{});
  compact_deadlines_if_needed();
}

bool LockTable::deadline_is_live(const Deadline& d) const {
  switch (d.kind) {
    case Deadline::Kind::kLease: {
      auto it = keys_.find(d.key);
      if (it == keys_.end() || it->second.waiter_count() == 0) return false;
      // The token alone is not enough: a keep moves the expiry of the same
      // token, leaving its earlier entries behind.
      const Holder* h = it->second.holder_with(d.id);
      return h != nullptr && h->expires_at_ns == d.at_ns;
    }
    case Deadline::Kind::kWait: {
      auto it = waiter_index_.find(d.id);
      return it != waiter_index_.end() && it->second.it->wait_deadline_ns == d.at_ns;
    }
  }
  return false;
}

void LockTable::compact_deadlines_if_needed() {
  // At most one live entry per waiter and per holder of a key with
  // waiters (shared holders over-counted: all of them, not only those on
  // keys with waiters, which is a bound all the same).
  const std::size_t live = waiter_index_.size() + keys_with_waiters_ + shared_holders_;
  if (deadlines_.size() <= kDeadlineSlackFactor * live + kDeadlineSlackFloor) return;
  // Stale entries go, and so do copies of a live lease entry (a key whose
  // queue emptied and refilled under the same holder, or whose keeps moved
  // its expiry back to an earlier value, can have several identical live
  // entries), so a compaction leaves at most `live` entries.
  std::set<std::pair<std::string_view, Token>> armed;  // views into keys_, which stay put
  std::erase_if(deadlines_, [this, &armed](const Deadline& d) {
    if (!deadline_is_live(d)) return true;
    return d.kind == Deadline::Kind::kLease &&
           !armed.insert({keys_.find(d.key)->first.view(), d.id}).second;
  });
  std::make_heap(deadlines_.begin(), deadlines_.end(), DeadlineLater{});
}

void LockTable::advance(TimeNs now, std::vector<Delivery>& out) {
  while (!deadlines_.empty() && deadlines_.front().at_ns <= now) {
    std::pop_heap(deadlines_.begin(), deadlines_.end(), DeadlineLater{});
    Deadline d = std::move(deadlines_.back());
    deadlines_.pop_back();
    if (!deadline_is_live(d)) continue;
    switch (d.kind) {
      case Deadline::Kind::kLease: {
        auto it = keys_.find(d.key);
        // A live lease entry means the key exists, has waiters and a holder
        // with this token and this very expiry, so the lease has run out.
        LOCKD_CHECK(it != keys_.end() && it->second.holder_with(d.id)->expires_at_ns <= now);
        if (!it->second.shared()) tell_lost(*it);
        remove_holder(it->second, d.id);
        ++stats_.expirations;
        settle(it, now, HandoffCause::kExpiry, out);
        changed(d.key);
        break;
      }
      case Deadline::Kind::kWait: {
        auto ref = waiter_index_.find(d.id);
        KeyMap::value_type* entry = ref->second.entry;
        const bool was_front = ref->second.it == entry->second.extra->waiters.begin();
        Waiter w = *ref->second.it;
        unlink_waiter(ref);
        ++stats_.wait_timeouts;
        out.push_back(Delivery{w.client, w.id, DeliveryKind::kTimedOut, 0, std::move(w.owner),
                               std::string(entry->first.view()), w.shared});
        // The front left: whoever is behind it may be grantable now.
        if (was_front && entry->second.waiter_count() > 0) {
          // The key outlives settle() (a waiter remains or a holder does),
          // but its name is copied first all the same.
          const std::string key(entry->first.view());
          settle(keys_.find(key), now, HandoffCause::kQueue, out);
          changed(key);
        }
        break;
      }
    }
  }
}

std::optional<TimeNs> LockTable::next_deadline() const {
  if (deadlines_.empty()) return std::nullopt;
  return deadlines_.front().at_ns;
}

std::size_t LockTable::sweep(TimeNs now) {
  std::size_t freed = 0;
  sweep_cursor_ = 0;
  while (!sweep_step(now, keys_.bucket_count(), freed)) {
  }
  return freed;
}

bool LockTable::sweep_step(TimeNs now, std::size_t max_buckets, std::size_t& freed) {
  const std::size_t buckets = keys_.bucket_count();
  const std::size_t end = std::min(buckets, sweep_cursor_ + max_buckets);
  sweep_scratch_.clear();
  for (std::size_t b = sweep_cursor_; b < end; ++b) {
    for (auto it = keys_.cbegin(b); it != keys_.cend(b); ++it) {
      const KeyState& s = it->second;
      if (s.waiter_count() != 0) continue;  // its deadlines hand it off
      if (s.shared() ? live_shared(s, now) < s.holder_count() : s.expires_at_ns <= now) {
        sweep_scratch_.push_back(it->first.view());
      }
    }
  }
  // Each view points into its own node, which only its own erase frees.
  std::size_t erased = 0;
  for (const std::string_view key : sweep_scratch_) {
    auto it = keys_.find(key);
    const bool dropped = drop_expired_holders(*it, now) > 0;  // per holder: a shared key may keep some
    if (observer_ != nullptr && dropped) {
      // Told before the erase frees the node `key` points into.
      observer_->key_changed(key);
    }
    if (it->second.holder_count() == 0) {
      erase_key(it);
      ++erased;
    }
  }
  freed += erased;
  stats_.swept_keys += erased;
  sweep_cursor_ = end;
  if (end < buckets) return false;
  sweep_cursor_ = 0;
  ++stats_.sweeps;
  return true;
}

const KeyState* LockTable::find(std::string_view key) const {
  auto it = keys_.find(key);
  return it == keys_.end() ? nullptr : &it->second;
}

ClientId LockTable::take_granted_to(std::string_view key, Token token) {
  auto it = keys_.find(key);
  if (it == keys_.end() || token == 0) return 0;
  KeyState& s = it->second;
  Holder* h = nullptr;
  if (!s.shared()) {
    if (s.token == token) h = &s;
  } else if (auto hit = s.extra->holders.find(token); hit != s.extra->holders.end()) {
    h = &hit->second;
  }
  if (h == nullptr) return 0;
  if (h == &s) lease_unindex(s);  // told by the caller: nothing left to tell
  return std::exchange(h->granted_to, 0);
}

void LockTable::track_lost_leases(LostObserver* o) {
  LOCKD_CHECK(o != nullptr && lost_ == nullptr && keys_.empty());
  lost_ = o;
  lease_slots_.assign(kLeaseSlots, nullptr);
  lease_bits_.assign(kLeaseSlots / 64, 0);
}

void LockTable::lease_index(KeyEntry& e, TimeNs now) {
  if (lost_ == nullptr) return;
  KeyState& s = e.second;
  lease_unindex(s);
  // With nothing indexed, the ticks up to now hold nothing to run: start
  // there (so next_lost_check() is exact, however long nothing was held).
  if (lease_indexed_ == 0 && tick_of(now) > lease_done_tick_) {
    lease_done_tick_ = tick_of(now);
    lease_check_known_ = false;
  }
  if (s.shared() || s.token == 0 || s.granted_to == 0) return;
  // A lease end in a tick already run (cannot happen: a lease is at least
  // 1 ms from a `now` no earlier than the last run) goes in the next one.
  const std::uint64_t tick = std::max(tick_of(s.expires_at_ns), lease_done_tick_);
  const std::size_t slot = tick & (kLeaseSlots - 1);
  KeyEntry*& head = lease_slots_[slot];
  s.lease_next = head;
  if (head != nullptr) head->second.lease_pprev = &s.lease_next;
  head = &e;
  s.lease_pprev = &head;
  lease_bits_[slot / 64] |= std::uint64_t{1} << (slot % 64);
  ++lease_indexed_;
  if (lease_check_known_ && tick < lease_check_tick_) lease_check_tick_ = tick;
}

void LockTable::lease_unindex(KeyState& s) {
  if (s.lease_pprev == nullptr) return;
  *s.lease_pprev = s.lease_next;
  if (s.lease_next != nullptr) s.lease_next->second.lease_pprev = s.lease_pprev;
  s.lease_next = nullptr;
  s.lease_pprev = nullptr;
  --lease_indexed_;
}

void LockTable::tell_lost(KeyEntry& e) {
  KeyState& s = e.second;
  if (s.lease_pprev == nullptr) return;  // not indexed, or told already
  lease_unindex(s);
  const ClientId client = std::exchange(s.granted_to, 0);
  lost_->lease_lost(client, s.token, e.first.view());
}

void LockTable::run_lost_leases(TimeNs now) {
  lease_check_known_ = false;  // bits may clear and the start moves
  const std::uint64_t now_tick = tick_of(now);
  if (lost_ == nullptr || now_tick <= lease_done_tick_) return;
  // Every tick before now_tick is over: a key listed in its slot whose
  // lease ends in it (or before) has ended. Keys in the slot whose end is
  // a later turn of the wheel stay. After a long pause, each slot once.
  std::uint64_t t = std::max(lease_done_tick_, now_tick > kLeaseSlots ? now_tick - kLeaseSlots : 0);
  for (; t < now_tick && lease_indexed_ > 0; ++t) {
    const std::size_t slot = t & (kLeaseSlots - 1);
    std::uint64_t& word = lease_bits_[slot / 64];
    const std::uint64_t bit = std::uint64_t{1} << (slot % 64);
    if ((word & bit) == 0) continue;
    for (KeyEntry* e = lease_slots_[slot]; e != nullptr;) {
      KeyEntry* next = e->second.lease_next;
      if (tick_of(e->second.expires_at_ns) <= t) tell_lost(*e);
      e = next;
    }
    if (lease_slots_[slot] == nullptr) word &= ~bit;
  }
  lease_done_tick_ = now_tick;
}

std::optional<TimeNs> LockTable::next_lost_check() const {
  if (lease_indexed_ == 0) return std::nullopt;
  // Asked at the end of every loop turn: the scan runs once per run of the
  // wheel (or after a jump of its start), and a key indexed meanwhile can
  // only move the answer earlier. Unindexing leaves it: early is allowed.
  if (!lease_check_known_) {
    const std::optional<std::uint64_t> tick = first_listed_tick();
    if (!tick) return std::nullopt;
    lease_check_tick_ = *tick;
    lease_check_known_ = true;
  }
  return static_cast<TimeNs>((lease_check_tick_ + 1) << kLeaseTickShift);  // when that tick is over
}

std::optional<std::uint64_t> LockTable::first_listed_tick() const {
  // The first slot at or after the next tick to run whose bit is set (a
  // bit may outlive its keys: then the check comes early and finds nothing).
  constexpr std::size_t kWords = kLeaseSlots / 64;
  const std::size_t start = lease_done_tick_ & (kLeaseSlots - 1);
  for (std::size_t k = 0; k <= kWords; ++k) {
    const std::size_t w = (start / 64 + k) % kWords;
    std::uint64_t bits = lease_bits_[w];
    if (k == 0) bits &= ~std::uint64_t{0} << (start % 64);  // from start on
    if (k == kWords) bits &= (std::uint64_t{1} << (start % 64)) - 1;  // wrapped: below start
    if (bits != 0) {
      const std::size_t slot = w * 64 + static_cast<std::size_t>(std::countr_zero(bits));
      return lease_done_tick_ + ((slot - start) & (kLeaseSlots - 1));
    }
  }
  return std::nullopt;
}

void LockTable::set_limits(Limits limits) {
  limits_ = limits;
  invariant_limits_.max_keys = std::max(invariant_limits_.max_keys, limits.max_keys);
  invariant_limits_.max_waiters_per_key =
      std::max(invariant_limits_.max_waiters_per_key, limits.max_waiters_per_key);
  invariant_limits_.max_waiters = std::max(invariant_limits_.max_waiters, limits.max_waiters);
}

void LockTable::check_invariants() const {
  LOCKD_CHECK(keys_.size() <= invariant_limits_.max_keys);
  LOCKD_CHECK(waiter_index_.size() <= invariant_limits_.max_waiters);
  std::size_t waiters = 0;
  std::size_t with_waiters = 0;
  std::size_t shared_keys = 0;
  std::size_t shared_holders = 0;
  std::size_t armed_wanted = 0;
  for (const auto& [key, state] : keys_) {
    // Every key has a holder; an exclusive key exactly one, a shared one
    // only `S` holders (its own slot empty), oldest first.
    LOCKD_CHECK(state.holder_count() >= 1);
    if (state.shared()) {
      ++shared_keys;
      shared_holders += state.extra->holders.size();
      LOCKD_CHECK(state.token == 0 && state.owner.empty());
      for (const auto& [t, h] : state.extra->holders) {
        LOCKD_CHECK(t == h.token && t > 0 && t < next_token_ && !h.owner.empty());
      }
    } else {
      LOCKD_CHECK(state.token > 0 && state.token < next_token_);
      LOCKD_CHECK(!state.owner.empty());
      if (state.extra) LOCKD_CHECK(state.extra->holders.empty());
    }
    if (state.extra) {
      // Allocated only while needed.
      LOCKD_CHECK(state.extra->shared || !state.extra->waiters.empty());
    }
    if (state.waiter_count() > 0) {
      const KeyExtra& x = *state.extra;
      LOCKD_CHECK(x.waiters.size() <= invariant_limits_.max_waiters_per_key);
      ++with_waiters;
      armed_wanted += state.holder_count();
      // Hand-off ran as far as it could: the front cannot be granted by
      // the holders still registered (§5b).
      LOCKD_CHECK(!can_grant(state, x.waiters.front()));
      std::uint32_t queued_shared = 0;
      for (const Waiter& w : x.waiters) {
        auto ref = waiter_index_.find(w.id);
        LOCKD_CHECK(ref != waiter_index_.end());
        LOCKD_CHECK(ref->second.entry->first == key);
        LOCKD_CHECK(&*ref->second.it == &w);
        if (w.shared) {
          ++queued_shared;
          LOCKD_CHECK(w.limit == x.limit);  // one limit per key (§5b)
        }
        ++waiters;
      }
      LOCKD_CHECK(queued_shared == x.queued_shared);
    }
  }
  LOCKD_CHECK(waiters == waiter_index_.size());
  LOCKD_CHECK(with_waiters == keys_with_waiters_);
  LOCKD_CHECK(shared_keys == shared_keys_);
  LOCKD_CHECK(shared_holders == shared_holders_);
  // Every holder of a key with waiters has a live lease entry at its
  // current expiry: otherwise its hand-off would wait for a later entry,
  // or never come.
  std::set<std::pair<std::string_view, Token>> armed;
  for (const Deadline& d : deadlines_) {
    if (d.kind == Deadline::Kind::kLease && deadline_is_live(d)) {
      armed.insert({keys_.find(d.key)->first.view(), d.id});
    }
  }
  LOCKD_CHECK(armed.size() == armed_wanted);
  // The lease-end index lists exactly the exclusive holdings still to be
  // told, each in the slot of its lease end, with links that agree.
  std::size_t listed = 0;
  for (std::size_t slot = 0; slot < lease_slots_.size(); ++slot) {
    KeyEntry* const* pp = &lease_slots_[slot];
    for (const KeyEntry* e = *pp; e != nullptr; e = e->second.lease_next) {
      const KeyState& s = e->second;
      LOCKD_CHECK(s.lease_pprev == pp);
      LOCKD_CHECK(!s.shared() && s.token != 0 && s.granted_to != 0);
      const std::uint64_t tick = std::max(tick_of(s.expires_at_ns), lease_done_tick_);
      LOCKD_CHECK((tick & (kLeaseSlots - 1)) == slot || tick_of(s.expires_at_ns) < lease_done_tick_);
      LOCKD_CHECK((lease_bits_[slot / 64] >> (slot % 64) & 1) != 0);
      pp = &s.lease_next;
      ++listed;
    }
  }
  LOCKD_CHECK(listed == lease_indexed_);
  // A cached next check is never later than the scan's answer.
  if (lease_check_known_ && lease_indexed_ > 0) {
    const std::optional<std::uint64_t> first = first_listed_tick();
    LOCKD_CHECK(first && lease_check_tick_ <= *first && lease_check_tick_ >= lease_done_tick_);
  }
  std::size_t to_tell = 0;
  for (const auto& [key, state] : keys_) {
    if (lost_ != nullptr && !state.shared() && state.token != 0 && state.granted_to != 0) ++to_tell;
    if (lost_ == nullptr) LOCKD_CHECK(state.lease_pprev == nullptr);
  }
  LOCKD_CHECK(to_tell == lease_indexed_);
}

}  // namespace lockd::locks
