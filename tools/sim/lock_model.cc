// The lock contract as a reference model; see lock_model.h. Each branch
// cites the protocol.md row it implements.
#include "lock_model.h"

#include <algorithm>

namespace lockd::sim {

std::uint64_t LockModel::grant(Key& k, const std::string& owner, std::uint64_t lease_ms, bool shared,
                               std::uint16_t limit, TimeNs now) {
  k.shared = shared;
  if (shared) {
    k.limit = limit;
    ++shared_grants_;
  }
  const std::uint64_t token = next_token_++;  // §5: larger than every token granted before
  k.holders[token] = Holder{owner, now + ms_to_ns(lease_ms)};  // §5: the lease runs from the grant
  return token;
}

bool LockModel::has_live(const Key& k, TimeNs now) { return live_count(k, now) > 0; }

std::size_t LockModel::live_count(const Key& k, TimeNs now) {
  std::size_t n = 0;
  for (const auto& [t, h] : k.holders) n += h.expires_ns > now ? 1 : 0;
  return n;
}

int LockModel::limit_in_force(const Key& k, TimeNs now) {
  for (const Waiter& w : k.queue) {
    if (w.shared) return w.limit;
  }
  return k.shared && has_live(k, now) ? k.limit : -1;
}

void LockModel::drop_ended(Key& k, TimeNs now) {
  std::erase_if(k.holders, [now](const auto& e) { return e.second.expires_ns <= now; });
}

void LockModel::hand_off(const std::string& key, TimeNs now, std::string& out) {
  Key& k = keys_.at(key);
  if (!k.queue.empty()) {
    // §5b: holders whose lease has ended do not count.
    drop_ended(k, now);
    // §5b "Hand-off": from the front, while the front can be granted: an
    // `A` once no holder is left, an `S` while the key is shared (or free)
    // and not full. §9: the one enqueued first is served first.
    std::size_t shared_run = 0;
    for (;;) {
      if (k.queue.empty()) break;
      const Waiter& w = k.queue.front();
      const bool free = k.holders.empty();
      const bool room = w.shared && k.shared && (w.limit == 0 || k.holders.size() < w.limit);
      if (!free && !room) break;
      Waiter taken = w;
      k.queue.pop_front();
      const std::uint64_t token = grant(k, taken.owner, taken.lease_ms, taken.shared, taken.limit, now);
      shared_run += taken.shared ? 1 : 0;
      out += " +grant " + std::to_string(token) + "/" + taken.owner + "/" + key + "/" + std::to_string(taken.id) +
             "/" + std::to_string(taken.client);
    }
    if (shared_run >= 2) ++shared_runs_;
  }
  // §6 / §5b: the key is deleted when its last holder has left and nobody
  // waits (a free key's front is always grantable, so nobody does).
  if (k.holders.empty()) keys_.erase(key);
}

std::string LockModel::apply(const cluster::LockCommand& c, std::uint64_t index, std::uint64_t term) {
  if (c.type == cluster::LockCommandType::kLeaderStart) {
    // §10: tokens start above the wall clock when the cluster first formed.
    if (token_base_ == 0) token_base_ = c.token_base;
    // §8: the new leader's now is mapped onto the latest time seen.
    leader_diff_ns_ = clock_ns_ - c.now_ns;
    clock_term_ = term;
    // §10: the first entry drops every waiter queued through the old leader.
    std::size_t dropped = 0;
    for (auto& [key, k] : keys_) {
      dropped += k.queue.size();
      k.queue.clear();
    }
    return "leader-start dropped " + std::to_string(dropped);
  }
  // Configuration moves no clock and no lock (the simulator proposes none).
  if (c.type == cluster::LockCommandType::kConfig) return "config";
  const TimeNs now = term == clock_term_ ? std::max(clock_ns_, c.now_ns + leader_diff_ns_) : clock_ns_;
  clock_ns_ = now;
  if (c.type == cluster::LockCommandType::kClock) return "clock";
  if (token_base_ == 0) return "skipped";
  // §10: the entry's index above the base, and never a token granted before
  // (an earlier entry may have granted a run of readers several).
  next_token_ = std::max(next_token_, token_base_ + index);
  auto it = keys_.find(c.key);
  switch (c.type) {
    case cluster::LockCommandType::kAcquire: {
      if (it == keys_.end()) {  // §5 row 1: not registered
        Key& k = keys_[c.key];
        return "granted " + std::to_string(grant(k, c.owner, c.lease_ms, false, 0, now));
      }
      Key& k = it->second;
      if (!has_live(k, now)) {  // §5 row 2 (§5b: every holder's lease ended); waiters stay queued (§9)
        k.holders.clear();
        return "granted " + std::to_string(grant(k, c.owner, c.lease_ms, false, 0, now));
      }
      if (c.wait_ms == 0) return "held";  // §5 row 3 (same owner too: owner is a label)
      // §5 row 4. The simulator never fills a cap, so never `B`.
      k.queue.push_back(Waiter{index, c.client, c.owner, c.lease_ms, now + ms_to_ns(c.wait_ms), false, 0});
      return "queued";
    }
    case cluster::LockCommandType::kAcquireShared: {
      if (it == keys_.end()) {  // §5b row 1: register it shared with this limit
        Key& k = keys_[c.key];
        return "granted " + std::to_string(grant(k, c.owner, c.lease_ms, true, c.limit, now));
      }
      Key& k = it->second;
      // §5b: the key's limit is the one its live shared holders and queued
      // `S` waiters carry; with none of either, any limit is accepted.
      if (const int in_force = limit_in_force(k, now); in_force >= 0) {
        if (in_force != c.limit) {
          ++limit_mismatches_;
          return "limit-mismatch";
        }
      }
      // §5b row 2: nobody queued, no live exclusive holder, fewer live
      // holders than the limit. Ended holders do not count (and go).
      const bool live_exclusive = !k.shared && has_live(k, now);
      if (k.queue.empty() && !live_exclusive && (c.limit == 0 || live_count(k, now) < c.limit)) {
        drop_ended(k, now);
        return "granted " + std::to_string(grant(k, c.owner, c.lease_ms, true, c.limit, now));
      }
      if (c.wait_ms == 0) return "held";  // §5b: held exclusively, full, or somebody queued
      k.queue.push_back(Waiter{index, c.client, c.owner, c.lease_ms, now + ms_to_ns(c.wait_ms), true, c.limit});
      return "queued";
    }
    case cluster::LockCommandType::kRelease: {
      // §6, §5b "Per holder": the one holder whose token matches, whether
      // or not its lease ended.
      if (it == keys_.end() || it->second.holders.erase(c.token) == 0) return "not-released";
      std::string out = "released";
      hand_off(c.key, now, out);
      return out;
    }
    case cluster::LockCommandType::kExpire: {
      // §8 cluster mode: the leader's lease heap proposes Expire(key, token);
      // it ends that holder's lease only if it is still registered and has run out.
      if (it == keys_.end()) return "not-expired";
      auto h = it->second.holders.find(c.token);
      if (h == it->second.holders.end() || h->second.expires_ns > now) return "not-expired";
      it->second.holders.erase(h);
      std::string out = "expired";
      hand_off(c.key, now, out);
      return out;
    }
    case cluster::LockCommandType::kKeep: {
      // §6a: only a registered holder's token, only while its lease has not
      // ended (an ended lease is never revived); expiry = now + lease.
      if (it == keys_.end()) return "not-kept";
      auto h = it->second.holders.find(c.token);
      if (h == it->second.holders.end() || h->second.expires_ns <= now) return "not-kept";
      h->second.expires_ns = now + ms_to_ns(c.lease_ms);
      return "kept";
    }
    case cluster::LockCommandType::kLeaderStart:
    case cluster::LockCommandType::kClock:
    case cluster::LockCommandType::kConfig:
      return "unreachable";  // handled above
    case cluster::LockCommandType::kCancelWaiter: {
      // §9: a waiter whose connection closed leaves its queue, no reply.
      // §5b: if it was the front, the new front may be grantable now.
      for (auto& [key, k] : keys_) {
        auto w = std::find_if(k.queue.begin(), k.queue.end(), [&](const Waiter& x) { return x.id == c.waiter; });
        if (w != k.queue.end()) {
          const bool front = w == k.queue.begin();
          k.queue.erase(w);
          std::string out = "cancelled";
          if (front && !k.queue.empty()) hand_off(std::string(key), now, out);
          return out;
        }
      }
      return "not-waiting";
    }
    case cluster::LockCommandType::kCancelWaiters: {
      // A departing client's waiters (entry version 5): every one leaves
      // first, then each key whose front left may hand off (§5b, §9).
      std::vector<std::string> fronts;
      bool any = false;
      for (const locks::WaiterId id : c.waiters) {
        for (auto& [key, k] : keys_) {
          auto w = std::find_if(k.queue.begin(), k.queue.end(), [&](const Waiter& x) { return x.id == id; });
          if (w == k.queue.end()) continue;
          if (w == k.queue.begin()) fronts.emplace_back(key);
          k.queue.erase(w);
          any = true;
          break;
        }
      }
      std::string out = any ? "cancelled" : "not-waiting";
      for (const std::string& key : fronts) {
        auto k = keys_.find(key);
        if (k != keys_.end() && !k->second.queue.empty()) hand_off(key, now, out);
      }
      return out;
    }
  }
  return "unknown-command";
}

}  // namespace lockd::sim
