#include "lockd/locks/lock_table.h"

#include <algorithm>
#include <unordered_set>
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

Token LockTable::grant(KeyState& state, std::string_view owner, std::uint64_t lease_ms,
                       TimeNs now) {
  LOCKD_CHECK(next_token_ != 0);  // wrapped past 2^64: cannot happen in practice
  state.owner.assign(owner);
  state.token = next_token_++;
  state.lease_ms = lease_ms;
  state.expires_at_ns = now + ms_to_ns(lease_ms);
  ++stats_.grants;
  return state.token;
}

AcquireResult LockTable::acquire(TimeNs now, const AcquireRequest& req) {
  LOCKD_CHECK(req.lease_ms > 0);
  auto it = keys_.find(req.key);
  if (it == keys_.end()) {
    if (keys_.size() >= limits_.max_keys) return {AcquireOutcome::kBusy};
    it = keys_.emplace(KeyString(req.key), KeyState{}).first;
    return {AcquireOutcome::kGranted, grant(it->second, req.owner, req.lease_ms, now)};
  }
  KeyState& state = it->second;
  if (state.expires_at_ns <= now) {
    // Lazy takeover: the newcomer goes ahead of any queue (spec §9).
    ++stats_.takeovers;
    ++stats_.expirations;
    const Token token = grant(state, req.owner, req.lease_ms, now);
    if (state.waiter_count() > 0) {
      push_deadline({state.expires_at_ns, Deadline::Kind::kLease, token, std::string(it->first.view())});
    }
    return {AcquireOutcome::kGranted, token};
  }
  if (req.wait_ms == 0) return {AcquireOutcome::kHeld};
  if (state.waiter_count() >= limits_.max_waiters_per_key ||
      waiter_index_.size() >= limits_.max_waiters) {
    return {AcquireOutcome::kBusy};
  }
  LOCKD_CHECK(!waiter_index_.contains(req.waiter));
  if (!state.waiters) {
    state.waiters = std::make_unique<std::list<Waiter>>();
  }
  const bool first_waiter = state.waiters->empty();
  if (first_waiter) ++keys_with_waiters_;
  const TimeNs wait_deadline = now + ms_to_ns(req.wait_ms);
  state.waiters->push_back(
      Waiter{req.waiter, req.client, std::string(req.owner), req.lease_ms, wait_deadline});
  waiter_index_.emplace(req.waiter, WaiterRef{&*it, std::prev(state.waiters->end())});
  // Deadlines only once the waiter is in: a push may compact the heap, and
  // a lease entry is live only while its key has waiters (pushed before,
  // the compaction it set off dropped it and the hand-off never came).
  if (first_waiter) {
    // The holder's lease end now matters before the next sweep.
    push_deadline({state.expires_at_ns, Deadline::Kind::kLease, state.token, std::string(it->first.view())});
  }
  push_deadline({wait_deadline, Deadline::Kind::kWait, req.waiter, {}});
  return {AcquireOutcome::kQueued};
}

ReleaseOutcome LockTable::release(TimeNs now, Token token, std::string_view key,
                                  std::vector<Delivery>& out) {
  auto it = keys_.find(key);
  if (it == keys_.end() || it->second.token != token) return ReleaseOutcome::kNotReleased;
  hand_off_or_delete(it, now, HandoffCause::kRelease, out);
  return ReleaseOutcome::kReleased;
}

KeepOutcome LockTable::keep(TimeNs now, Token token, std::string_view key,
                           std::uint64_t lease_ms) {
  LOCKD_CHECK(lease_ms > 0);
  auto it = keys_.find(key);
  if (it == keys_.end() || it->second.token != token) return KeepOutcome::kNotKept;
  KeyState& state = it->second;
  // An ended lease stays ended: between its end and the sweep (or a
  // takeover) someone may already have acted on it being free.
  if (state.expires_at_ns <= now) return KeepOutcome::kNotKept;
  const TimeNs granted_at_ns = state.expires_at_ns - ms_to_ns(state.lease_ms);
  const TimeNs span_ns = now + ms_to_ns(lease_ms) - granted_at_ns;
  // Rounded up to whole milliseconds; at least 1 ms even if a caller's
  // clock went back past the grant.
  const TimeNs total_ms = std::max<TimeNs>(1, (span_ns + kNsPerMs - 1) / kNsPerMs);
  const TimeNs old_expiry_ns = state.expires_at_ns;
  state.lease_ms = static_cast<std::uint64_t>(total_ms);
  state.expires_at_ns = granted_at_ns + ms_to_ns(state.lease_ms);
  ++stats_.keeps;
  // With waiters, the hand-off must follow the new expiry, earlier or
  // later: the entry armed for the old one turns stale (its time no longer
  // matches) and this one takes over. Same expiry: the entry already in
  // the heap stays live, and pushing another would only add a duplicate.
  if (state.waiter_count() > 0 && state.expires_at_ns != old_expiry_ns) {
    push_deadline({state.expires_at_ns, Deadline::Kind::kLease, token, std::string(it->first.view())});
  }
  return KeepOutcome::kKept;
}

bool LockTable::expire(TimeNs now, std::string_view key, Token token,
                       std::vector<Delivery>& out) {
  auto it = keys_.find(key);
  if (it == keys_.end() || it->second.token != token || it->second.expires_at_ns > now) {
    return false;
  }
  ++stats_.expirations;
  hand_off_or_delete(it, now, HandoffCause::kExpiry, out);
  return true;
}

void LockTable::hand_off_or_delete(KeyMap::iterator it, TimeNs now, HandoffCause cause,
                                   std::vector<Delivery>& out) {
  KeyState& state = it->second;
  if (state.waiter_count() == 0) {
    keys_.erase(it);
    return;
  }
  Waiter w = std::move(state.waiters->front());
  state.waiters->pop_front();
  waiter_index_.erase(w.id);
  const Token token = grant(state, w.owner, w.lease_ms, now);
  if (cause == HandoffCause::kRelease) {
    ++stats_.handoffs_release;
  } else {
    ++stats_.handoffs_expiry;
  }
  if (state.waiters->empty()) {
    drop_empty_queue(state);
  } else {
    push_deadline({state.expires_at_ns, Deadline::Kind::kLease, token, std::string(it->first.view())});
  }
  out.push_back(
      Delivery{w.client, w.id, DeliveryKind::kGranted, token, std::move(w.owner),
               std::string(it->first.view())});
}

void LockTable::drop_empty_queue(KeyState& state) {
  LOCKD_CHECK(state.waiters && state.waiters->empty());
  state.waiters.reset();
  LOCKD_CHECK(keys_with_waiters_ > 0);
  --keys_with_waiters_;
}

bool LockTable::cancel_waiter(WaiterId id) {
  auto ref = waiter_index_.find(id);
  if (ref == waiter_index_.end()) return false;
  KeyState& state = ref->second.entry->second;
  state.waiters->erase(ref->second.it);
  waiter_index_.erase(ref);
  ++stats_.waiters_cancelled;
  if (state.waiters->empty()) drop_empty_queue(state);
  return true;
}

void LockTable::set_next_token(Token next) {
  LOCKD_CHECK(next >= next_token_);
  next_token_ = next;
}

std::size_t LockTable::cancel_all_waiters() {
  std::vector<WaiterId> ids;
  ids.reserve(waiter_index_.size());
  for (const auto& [id, ref] : waiter_index_) ids.push_back(id);
  for (const WaiterId id : ids) cancel_waiter(id);
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
      // The token alone is not enough: a keep moves the expiry of the same
      // token, leaving its earlier entries behind.
      return it != keys_.end() && it->second.token == d.id && it->second.waiter_count() > 0 &&
             it->second.expires_at_ns == d.at_ns;
    }
    case Deadline::Kind::kWait: {
      auto it = waiter_index_.find(d.id);
      return it != waiter_index_.end() && it->second.it->wait_deadline_ns == d.at_ns;
    }
  }
  return false;
}

void LockTable::compact_deadlines_if_needed() {
  const std::size_t live = waiter_index_.size() + keys_with_waiters_;
  if (deadlines_.size() <= kDeadlineSlackFactor * live + kDeadlineSlackFloor) return;
  // Stale entries go, and so do copies of a live lease entry (a key whose
  // queue emptied and refilled under the same holder, or whose keeps moved
  // its expiry back to an earlier value, can have several identical live
  // entries), so a compaction leaves at most `live` entries.
  std::unordered_set<std::string_view> armed;  // views into keys_, which stay put
  std::erase_if(deadlines_, [this, &armed](const Deadline& d) {
    if (!deadline_is_live(d)) return true;
    return d.kind == Deadline::Kind::kLease && !armed.insert(keys_.find(d.key)->first.view()).second;
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
        // A live lease entry means the key exists, has waiters, this token
        // and this very expiry, so the lease has run out.
        LOCKD_CHECK(it != keys_.end() && it->second.expires_at_ns <= now);
        ++stats_.expirations;
        hand_off_or_delete(it, now, HandoffCause::kExpiry, out);
        break;
      }
      case Deadline::Kind::kWait: {
        auto ref = waiter_index_.find(d.id);
        KeyMap::value_type* entry = ref->second.entry;
        Waiter w = std::move(*ref->second.it);
        entry->second.waiters->erase(ref->second.it);
        waiter_index_.erase(ref);
        ++stats_.wait_timeouts;
        if (entry->second.waiters->empty()) drop_empty_queue(entry->second);
        out.push_back(Delivery{w.client, w.id, DeliveryKind::kTimedOut, 0, std::move(w.owner),
                               std::string(entry->first.view())});
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
      if (it->second.expires_at_ns <= now && it->second.waiter_count() == 0) {
        sweep_scratch_.push_back(it->first.view());
      }
    }
  }
  // Each view points into its own node, which only its own erase frees.
  for (const std::string_view key : sweep_scratch_) keys_.erase(keys_.find(key));
  freed += sweep_scratch_.size();
  stats_.swept_keys += sweep_scratch_.size();
  stats_.expirations += sweep_scratch_.size();
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
  for (const auto& [key, state] : keys_) {
    LOCKD_CHECK(state.token > 0 && state.token < next_token_);
    LOCKD_CHECK(!state.owner.empty());
    if (state.waiters) {
      LOCKD_CHECK(!state.waiters->empty());  // empty queues are dropped
      LOCKD_CHECK(state.waiters->size() <= invariant_limits_.max_waiters_per_key);
      ++with_waiters;
      for (const Waiter& w : *state.waiters) {
        auto ref = waiter_index_.find(w.id);
        LOCKD_CHECK(ref != waiter_index_.end());
        LOCKD_CHECK(ref->second.entry->first == key);
        LOCKD_CHECK(&*ref->second.it == &w);
        ++waiters;
      }
    }
  }
  LOCKD_CHECK(waiters == waiter_index_.size());
  LOCKD_CHECK(with_waiters == keys_with_waiters_);
  // Every key with waiters has a live lease entry at its current expiry:
  // otherwise its hand-off would wait for a later entry, or never come.
  std::unordered_set<std::string_view> armed;
  for (const Deadline& d : deadlines_) {
    if (d.kind == Deadline::Kind::kLease && deadline_is_live(d)) armed.insert(d.key);
  }
  LOCKD_CHECK(armed.size() == keys_with_waiters_);
}

}  // namespace lockd::locks
