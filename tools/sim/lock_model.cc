// The lock contract as a reference model; see lock_model.h. Each branch
// cites the protocol.md row it implements.
#include "lock_model.h"

#include <algorithm>

namespace lockd::sim {

std::uint64_t LockModel::grant(Key& k, const std::string& owner, std::uint64_t lease_ms, TimeNs now) {
  k.owner = owner;
  k.token = next_token_++;  // §5: larger than every token granted before
  k.expires_ns = now + ms_to_ns(lease_ms);  // §5: the lease runs from the grant
  return k.token;
}

void LockModel::hand_off_or_delete(const std::string& key, TimeNs now, std::string& out) {
  Key& k = keys_.at(key);
  if (k.queue.empty()) {
    keys_.erase(key);  // §6: no waiters, delete the key
    return;
  }
  Waiter w = k.queue.front();  // §9: the one enqueued first is served first
  k.queue.pop_front();
  std::uint64_t token = grant(k, w.owner, w.lease_ms, now);
  out += " +grant " + std::to_string(token) + "/" + w.owner + "/" + key + "/" + std::to_string(w.id) + "/" +
         std::to_string(w.client);
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
  next_token_ = token_base_ + index;  // §10: the entry's index above the base
  auto it = keys_.find(c.key);
  switch (c.type) {
    case cluster::LockCommandType::kAcquire: {
      if (it == keys_.end()) {  // §5 row 1: not registered
        Key& k = keys_[c.key];
        return "granted " + std::to_string(grant(k, c.owner, c.lease_ms, now));
      }
      Key& k = it->second;
      if (k.expires_ns <= now) {  // §5 row 2: lease ended; waiters stay queued (§9)
        return "granted " + std::to_string(grant(k, c.owner, c.lease_ms, now));
      }
      if (c.wait_ms == 0) return "held";  // §5 row 3 (same owner too: owner is a label)
      // §5 row 4. The simulator never fills a cap, so never `B`.
      k.queue.push_back(Waiter{index, c.client, c.owner, c.lease_ms, now + ms_to_ns(c.wait_ms)});
      return "queued";
    }
    case cluster::LockCommandType::kRelease: {
      // §6: only the current token releases, whether or not its lease ended.
      if (it == keys_.end() || it->second.token != c.token) return "not-released";
      std::string out = "released";
      hand_off_or_delete(c.key, now, out);
      return out;
    }
    case cluster::LockCommandType::kExpire: {
      // §8 cluster mode: the leader's lease heap proposes Expire(key, token);
      // it ends the lease only if that token still holds it and has run out.
      if (it == keys_.end() || it->second.token != c.token || it->second.expires_ns > now) {
        return "not-expired";
      }
      std::string out = "expired";
      hand_off_or_delete(c.key, now, out);
      return out;
    }
    case cluster::LockCommandType::kKeep: {
      // §6a: only the current token, only while its lease has not ended (an
      // ended lease is never revived); expiry = now + lease, earlier or later.
      if (it == keys_.end() || it->second.token != c.token || it->second.expires_ns <= now) return "not-kept";
      it->second.expires_ns = now + ms_to_ns(c.lease_ms);
      return "kept";
    }
    case cluster::LockCommandType::kLeaderStart:
    case cluster::LockCommandType::kClock:
    case cluster::LockCommandType::kConfig:
      return "unreachable";  // handled above
    case cluster::LockCommandType::kAcquireShared:
      return "unmodelled";  // the simulator proposes no `S` yet
    case cluster::LockCommandType::kCancelWaiter: {
      // §9: a waiter whose connection closed leaves its queue, no reply.
      for (auto& [key, k] : keys_) {
        auto w = std::find_if(k.queue.begin(), k.queue.end(), [&](const Waiter& x) { return x.id == c.waiter; });
        if (w != k.queue.end()) {
          k.queue.erase(w);
          return "cancelled";
        }
      }
      return "not-waiting";
    }
  }
  return "unknown-command";
}

}  // namespace lockd::sim
