// ReplicatedLockService; see replicated_lock_service.h.
#include "lockd/cluster/replicated_lock_service.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "lockd/common/check.h"
#include "lockd/proto/reply.h"

namespace lockd::cluster {

namespace {

// Heaps are rebuilt without stale entries once they hold this many more
// than the live ones.
constexpr std::size_t kHeapSlack = 1024;

// Buckets of the lock table a lease-heap scan walks per step (about one
// cache miss each: a few ms at most, see start_lease_scan()).
constexpr std::size_t kLeaseScanBucketsPerStep = 4096;

// `A` and `S` echo the same fields: `<owner> <key>`.
proto::Request acquire_echo(std::string_view owner, std::string_view key) {
  proto::Request r{};
  r.verb = proto::Verb::kAcquire;
  r.owner = owner;
  r.key = key;
  return r;
}

// `R` and `K` echo the same fields: `<token> <key>`.
proto::Request release_echo(locks::Token token, std::string_view key) {
  proto::Request r{};
  r.verb = proto::Verb::kRelease;
  r.token = token;
  r.key = key;
  return r;
}

}  // namespace

ReplicatedLockService::ReplicatedLockService(raft::Raft& raft, ReplicatedServiceOptions options)
    : raft_(raft), options_(std::move(options)), sm_(options_.limits) {}

std::uint16_t ReplicatedLockService::entry_version() const {
  // The newest encoding every member applies; lockd 1.1's (which every
  // member of a group formed since applies) when a member is unheard of.
  for (std::uint16_t v = kEntryVersionMax; v > kEntryVersionMin; --v) {
    if (cluster_supports(v)) return v;
  }
  return kEntryVersionMin;
}

bool ReplicatedLockService::cluster_supports(std::uint16_t v) const {
  if (v < kEntryVersionMin || v > kEntryVersionMax) return false;
  return !options_.cluster_supports || options_.cluster_supports(v);
}

bool ReplicatedLockService::shared_entries_allowed() const {
  // kAcquireShared needs entry version 4 (kEntryVersionShared): a member of
  // an older build cannot apply it, so it is proposed only once every
  // member's handshake says it applies that version.
  return cluster_supports(kEntryVersionShared);
}

bool ReplicatedLockService::is_leader() const {
  return leader_term_ != 0 && leader_start_proposed_ && raft_.role() == raft::Role::kLeader &&
         raft_.term() == leader_term_;
}

bool ReplicatedLockService::handle(locks::ClientId client, const proto::Request& req,
                                   TimeNs now_ns, std::string& out, server::ServerStats& stats) {
  if (floor_pending_ && is_leader() && accepting_) {
    // Our --token-floor's Config is not proposed yet (retried each turn):
    // nothing may be proposed before it. Not processed: the client retries.
    stats.count(server::ReplyKind::kError);
    proto::append_error_echo(out, "no_leader", req);
    return true;
  }
  if (!is_leader() || !accepting_) {
    // After a hand-over the node we handed to (raft.h leader_hint).
    const raft::NodeId leader = raft_.leader_hint();
    auto addr = options_.client_addrs.find(leader);
    if (accepting_ && leader != raft::kNoNode && leader != raft_.id() &&
        addr != options_.client_addrs.end()) {
      stats.count(server::ReplyKind::kMoved);
      proto::append_moved(out, addr->second, req);
    } else {
      stats.count(server::ReplyKind::kError);
      proto::append_error_echo(out, "no_leader", req);
    }
    return true;
  }
  LockCommand c;
  c.now_ns = now_ns;
  c.key.assign(req.key);
  c.client = client;
  Pending p;
  p.client = client;
  p.key.assign(req.key);
  if (req.verb == proto::Verb::kShared && !shared_entries_allowed()) {
    // Some member could not apply it: refuse before anything is proposed
    // (not processed, so the client retries; docs/cluster.md "A versioned log").
    if (!shared_refusal_logged_) {
      spdlog::warn("S is answered E no_leader until every member applies log entry version {} "
                   "(a member runs an older lockd: finish the rolling upgrade)",
                   kEntryVersionShared);
      shared_refusal_logged_ = true;
    }
    stats.count(server::ReplyKind::kError);
    proto::append_error_echo(out, "no_leader", req);
    return true;
  }
  if (req.echoes_owner()) {
    const bool shared = req.verb == proto::Verb::kShared;
    c.type = shared ? LockCommandType::kAcquireShared : LockCommandType::kAcquire;
    c.owner.assign(req.owner);
    c.lease_ms = req.lease_ms;
    c.wait_ms = req.wait_ms;
    c.limit = req.limit;
    p.kind = PendingKind::kAcquire;
    p.shared = shared;
    p.owner.assign(req.owner);
    p.wait_deadline_ns = now_ns + ms_to_ns(req.wait_ms);
  } else if (req.verb == proto::Verb::kKeep) {
    c.type = LockCommandType::kKeep;
    c.token = req.token;
    c.lease_ms = req.lease_ms;
    p.kind = PendingKind::kKeep;
    p.token = req.token;
  } else {
    c.type = LockCommandType::kRelease;
    c.token = req.token;
    p.kind = PendingKind::kRelease;
    p.token = req.token;
  }
  const raft::ProposeResult r = propose(std::move(c), std::move(p));
  switch (r.error) {
    case raft::ProposeError::kOk:
      last_proposal_ns_ = now_ns;
      return false;
    case raft::ProposeError::kTooManyUncommitted:
      // Overload. An `A` is refused like any full cap (`B`, nothing
      // enqueued). `R` and `K` have no busy reply in the protocol: they get
      // `E indeterminate`, true as far as it goes (not proposed, so it did
      // not take effect) and what a client already retries on.
      if (req.echoes_owner()) {
        stats.count(server::ReplyKind::kBusy);
        proto::append_busy(out, req.owner, req.key);
      } else {
        ++stats_.indeterminate;
        stats.count(server::ReplyKind::kError);
        proto::append_error_echo(out, "indeterminate", req);
      }
      return true;
    case raft::ProposeError::kNotLeader:
    case raft::ProposeError::kTransferring:
    case raft::ProposeError::kTooLarge:  // cannot happen: keys and owners are short
    case raft::ProposeError::kChangeInProgress:  // the four: configuration changes only
    case raft::ProposeError::kTermNotCommitted:
    case raft::ProposeError::kBadChange:
    case raft::ProposeError::kNotCaughtUp:
      stats.count(server::ReplyKind::kError);
      proto::append_error_echo(out, "no_leader", req);
      return true;
  }
  return true;
}

raft::ProposeResult ReplicatedLockService::propose(LockCommand c, Pending p) {
  const std::uint16_t version = entry_version();
  if (version != stats_.entry_version) {
    spdlog::info("leader writes log entries in encoding version {}: the newest every member "
                 "applies", version);
    stats_.entry_version = version;
  }
  const raft::ProposeResult r = raft_.propose(encode_lock_command(c, version));
  if (r.error != raft::ProposeError::kOk) {
    ++stats_.proposals_refused;
    return r;
  }
  ++stats_.proposals;
  p.term = r.term;
  pending_.emplace(r.index, std::move(p));
  return r;
}

void ReplicatedLockService::client_closed(locks::ClientId client) {
  auto it = client_waiters_.find(client);
  if (it != client_waiters_.end()) {
    for (const locks::WaiterId w : it->second) {
      auto wit = waiters_.find(w);
      if (wit == waiters_.end()) continue;
      wit->second.client = 0;  // nobody to answer any more
      if (!wit->second.cancel_proposed) to_cancel_.push_back(w);
    }
    client_waiters_.erase(it);
  }
  // Acquires still in flight: cancel them if they end up queued.
  for (auto& [index, p] : pending_) {
    if (p.client == client) p.client_gone = true;
  }
}

void ReplicatedLockService::reply_indeterminate(locks::ClientId client,
                                                const proto::Request& echo) {
  if (replies_ == nullptr || client == 0) return;
  std::string* out = replies_->reply_buffer(client, server::ReplyKind::kError);
  if (out == nullptr) return;
  ++stats_.indeterminate;
  proto::append_error_echo(*out, "indeterminate", echo);
  replies_->reply_queued(client);
}

void ReplicatedLockService::attach_watches(server::WatchHub& hub, server::PushOutput& push) {
  watches_ = &hub;
  push_ = &push;
  sm_.set_observer(&hub);
  hub.set_rev(sm_.applied());
}

void ReplicatedLockService::apply(const raft::Entry& e) {
  // The changes this entry makes carry its index as their rev (§5c).
  if (watches_ != nullptr) watches_->set_rev(e.index);
  const EntryResult& r = sm_.apply(e);
  // Not applied: the node stops (cluster_node.h) before anything else.
  if (r.undecodable) return;
  if (config_index_ != 0 && e.index >= config_index_) config_index_ = 0;
  auto pit = pending_.find(e.index);
  if (pit != pending_.end()) {
    Pending p = std::move(pit->second);
    pending_.erase(pit);
    if (p.term == e.term) {
      answer_pending(p, r, e.index);
    } else if (p.kind == PendingKind::kAcquire && !p.client_gone) {
      // Another leader's entry replaced ours: it never happened.
      reply_indeterminate(p.client, acquire_echo(p.owner, p.key));
    } else if ((p.kind == PendingKind::kRelease || p.kind == PendingKind::kKeep) &&
               !p.client_gone) {
      reply_indeterminate(p.client, release_echo(p.token, p.key));
    }
  }
  if (!r.command) return;
  for (const locks::Delivery& d : r.deliveries) deliver(d);
  if (!granted_by_.empty() && r.changed) {
    if (r.cmd.type == LockCommandType::kRelease) {
      granted_by_.erase(r.cmd.token);  // no `X` for a release
    } else if (r.cmd.type == LockCommandType::kExpire) {
      send_lost_notice(r.cmd.token, r.cmd.key);
    }
  }
  if (r.cmd.type == LockCommandType::kLeaderStart) {
    if (r.rebased) {
      spdlog::info("restored group's first leader applied: new tokens start above {} (its wall clock), "
                   "above every token the old group granted (docs/operations.md)",
                   sm_.next_token_lower_bound() - 1);
    }
    // Every waiter queued through an earlier leader is gone from the table;
    // ours were answered `E indeterminate` when we lost leadership.
    if (e.term == leader_term_ && e.index == leader_start_index_ && is_leader()) {
      leader_ready_ = true;
      start_lease_scan();
      spdlog::info("leader of term {} serving requests ({} waiters queued through the previous "
                   "leader dropped)",
                   e.term, r.waiters_dropped);
      spdlog::debug("leader of term {}: table time offset {} ns", e.term, sm_.offset_ns());
    }
    return;
  }
  if (!leader_ready_) return;
  if (r.granted != 0) watch_lease(r.cmd.key, r.granted);
  if (r.cmd.type == LockCommandType::kKeep && r.changed) {
    watch_lease(r.cmd.key, r.cmd.token);  // a keep moved the deadline: the heap follows
  }
  for (const locks::Delivery& d : r.deliveries) {
    if (d.kind == locks::DeliveryKind::kGranted) watch_lease(d.key, d.token);
  }
}

bool ReplicatedLockService::install(const raft::Snapshot& snapshot, std::string& error,
                                    std::unique_ptr<LockStateMachine> decoded) {
  if (decoded) {
    sm_.adopt(std::move(*decoded));
  } else if (!sm_.restore(snapshot.data, snapshot.meta.index, error)) {
    return false;
  }
  if (watches_ != nullptr) {
    // A new table: every watched key may have changed, as of its index.
    sm_.set_observer(watches_);
    watches_->set_rev(snapshot.meta.index);
    watches_->all_changed();
  }
  granted_by_.clear();
  // Only a follower installs a leader's snapshot; anything it had pending
  // as a former leader was answered when it lost leadership.
  for (auto& [index, p] : pending_) {
    if (p.client_gone) continue;
    if (p.kind == PendingKind::kAcquire) reply_indeterminate(p.client, acquire_echo(p.owner, p.key));
    if (p.kind == PendingKind::kRelease || p.kind == PendingKind::kKeep) {
      reply_indeterminate(p.client, release_echo(p.token, p.key));
    }
  }
  pending_.clear();
  waiters_.clear();
  client_waiters_.clear();
  if (leader_ready_) start_lease_scan();
  return true;
}

void ReplicatedLockService::answer_pending(const Pending& p, const EntryResult& r,
                                           raft::Index index) {
  switch (p.kind) {
    case PendingKind::kAcquire: {
      if (r.skipped || !r.command) {
        if (!p.client_gone) reply_indeterminate(p.client, acquire_echo(p.owner, p.key));
        return;
      }
      if (r.acquire == locks::AcquireOutcome::kQueued && leader_term_ != p.term) {
        // Applied after we lost that leadership (lose_leadership kept it,
        // committed): a waiter is served by a leader, and the next one
        // drops every waiter queued before it (LeaderStart).
        if (!p.client_gone) reply_indeterminate(p.client, acquire_echo(p.owner, p.key));
        return;
      }
      if (r.acquire == locks::AcquireOutcome::kQueued) {
        const locks::WaiterId w = index;
        // Client 0 means "nobody to answer" and nothing else: a pending
        // acquire exists only while we lead, and our LeaderStart (an
        // earlier index) is applied before it, so a live client's waiter
        // is always registered with its client and answered at the end
        // (A, T, or E indeterminate when leadership is lost).
        if (p.client_gone) {
          waiters_.emplace(w, Waiter{0, p.owner, p.key, p.wait_deadline_ns, false, p.shared});
          to_cancel_.push_back(w);
          return;
        }
        waiters_.emplace(w, Waiter{p.client, p.owner, p.key, p.wait_deadline_ns, false, p.shared});
        client_waiters_[p.client].insert(w);
        wait_heap_.push({p.wait_deadline_ns, w});
        return;
      }
      if (p.client_gone) {
        // Not leading any more: the next leader's lease expiry frees it.
        if (r.acquire == locks::AcquireOutcome::kGranted && leader_term_ != 0) {
          release_orphan(r.granted, p.key);
        }
        return;
      }
      if (replies_ == nullptr) return;
      using server::ServerStats;
      server::ReplyKind kind = ServerStats::held(p.shared);
      if (r.acquire == locks::AcquireOutcome::kGranted) kind = ServerStats::granted(p.shared);
      if (r.acquire == locks::AcquireOutcome::kBusy) kind = ServerStats::busy(p.shared);
      if (r.acquire == locks::AcquireOutcome::kLimitMismatch) kind = server::ReplyKind::kError;
      std::string* out = replies_->reply_buffer(p.client, kind);
      if (out == nullptr) return;
      switch (r.acquire) {
        case locks::AcquireOutcome::kGranted:
          granted_by_.emplace(r.granted, p.client);
          if (p.shared) {
            proto::append_shared(*out, r.granted, p.owner, p.key);
          } else {
            proto::append_acquired(*out, r.granted, p.owner, p.key);
          }
          break;
        case locks::AcquireOutcome::kBusy: proto::append_busy(*out, p.owner, p.key); break;
        case locks::AcquireOutcome::kLimitMismatch:
          proto::append_error_echo(*out, "limit_mismatch", acquire_echo(p.owner, p.key));
          break;
        default: proto::append_held(*out, p.owner, p.key); break;
      }
      replies_->reply_queued(p.client);
      return;
    }
    case PendingKind::kRelease: {
      if (p.client_gone || replies_ == nullptr) return;
      if (r.skipped || !r.command) {
        reply_indeterminate(p.client, release_echo(p.token, p.key));
        return;
      }
      const auto kind = r.changed ? server::ReplyKind::kReleased : server::ReplyKind::kNotReleased;
      std::string* out = replies_->reply_buffer(p.client, kind);
      if (out == nullptr) return;
      if (r.changed) {
        proto::append_released(*out, p.token, p.key);
      } else {
        proto::append_not_released(*out, p.token, p.key);
      }
      replies_->reply_queued(p.client);
      return;
    }
    case PendingKind::kKeep: {
      if (p.client_gone || replies_ == nullptr) return;
      if (r.skipped || !r.command) {
        reply_indeterminate(p.client, release_echo(p.token, p.key));
        return;
      }
      const auto kind = r.changed ? server::ReplyKind::kKept : server::ReplyKind::kNotKept;
      std::string* out = replies_->reply_buffer(p.client, kind);
      if (out == nullptr) return;
      if (r.changed) {
        proto::append_kept(*out, p.token, p.key);
      } else {
        proto::append_not_released(*out, p.token, p.key);
      }
      replies_->reply_queued(p.client);
      return;
    }
    case PendingKind::kTimeoutCancel: {
      auto wit = waiters_.find(r.cmd.waiter);
      if (wit == waiters_.end()) return;  // served by a hand-off first
      Waiter w = std::move(wit->second);
      waiters_.erase(wit);
      if (w.client == 0) return;
      auto cw = client_waiters_.find(w.client);
      if (cw != client_waiters_.end()) cw->second.erase(r.cmd.waiter);
      // `T` only when the cancel took the waiter out of the queue: had a
      // hand-off come first, the waiter holds the key (and got `A`).
      if (!r.changed || replies_ == nullptr) return;
      std::string* out = replies_->reply_buffer(w.client, server::ServerStats::held(w.shared));
      if (out == nullptr) return;
      proto::append_held(*out, w.owner, w.key);
      replies_->reply_queued(w.client);
      return;
    }
    case PendingKind::kInternal:
      if (r.command && r.cmd.type == LockCommandType::kCancelWaiter) waiters_.erase(r.cmd.waiter);
      if (r.command && r.cmd.type == LockCommandType::kCancelWaiters) {
        for (const locks::WaiterId w : r.cmd.waiters) waiters_.erase(w);
      }
      return;
  }
}

void ReplicatedLockService::deliver(const locks::Delivery& d) {
  auto wit = waiters_.find(d.waiter);
  if (wit == waiters_.end()) return;  // queued through another leader (or already answered)
  Waiter w = std::move(wit->second);
  waiters_.erase(wit);
  const bool granted = d.kind == locks::DeliveryKind::kGranted;
  if (w.client == 0) {
    // Its client left and the cancel lost the race with this hand-off.
    if (granted) release_orphan(d.token, d.key);
    return;
  }
  if (replies_ == nullptr) return;
  auto cw = client_waiters_.find(w.client);
  if (cw != client_waiters_.end()) cw->second.erase(d.waiter);
  std::string* out = replies_->reply_buffer(
      w.client, granted ? server::ServerStats::granted(d.shared) : server::ServerStats::held(d.shared));
  if (out == nullptr) return;
  if (granted) granted_by_.emplace(d.token, w.client);
  if (granted && d.shared) {
    proto::append_shared(*out, d.token, d.owner, d.key);
  } else if (granted) {
    proto::append_acquired(*out, d.token, d.owner, d.key);
  } else {
    proto::append_held(*out, d.owner, d.key);
  }
  replies_->reply_queued(w.client);
}

void ReplicatedLockService::send_lost_notice(locks::Token token, std::string_view key) {
  auto g = granted_by_.find(token);
  if (g == granted_by_.end()) return;
  const locks::ClientId client = g->second;
  granted_by_.erase(g);
  if (push_ == nullptr) return;
  std::string* out = push_->push_buffer(client);
  if (out == nullptr) return;  // the granting connection closed: nobody to tell
  proto::append_lost(*out, token, key);
  ++lost_notices_;
  push_->push_queued(client);
}

void ReplicatedLockService::release_orphan(locks::Token token, std::string_view key) {
  if (!leader_ready_) return;  // a follower: the leader releases it
  ++stats_.orphans_released;
  to_release_.push_back(Orphan{token, std::string(key)});
}

void ReplicatedLockService::watch_lease(std::string_view key, locks::Token token) {
  const locks::KeyState* s = sm_.table().find(key);
  if (s == nullptr) return;
  const locks::Holder* h = s->holder_with(token);
  if (h == nullptr) return;
  lease_heap_.push({h->expires_at_ns, token, locks::KeyString(key)});
}

void ReplicatedLockService::start_lease_scan() {
  lease_heap_ = {};
  lease_scan_active_ = true;
  lease_scan_bucket_ = 0;
  lease_scan_buckets_ = sm_.table().bucket_count();
  lease_scan_step();
}

void ReplicatedLockService::lease_scan_step() {
  if (!lease_scan_active_) return;
  const locks::LockTable& table = sm_.table();
  if (table.bucket_count() != lease_scan_buckets_) {
    // A rehash moved keys between buckets: walk again from the start
    // (what is in the heap stays; a duplicate is skipped when it pops).
    lease_scan_bucket_ = 0;
    lease_scan_buckets_ = table.bucket_count();
  }
  const std::size_t last = std::min(lease_scan_bucket_ + kLeaseScanBucketsPerStep, lease_scan_buckets_);
  // One entry per holder: each shared holder's lease ends on its own.
  table.for_each_in_buckets(lease_scan_bucket_, last, [this](std::string_view key, const locks::KeyState& s) {
    s.for_each_holder([&](const locks::Holder& h) { lease_heap_.push({h.expires_at_ns, h.token, locks::KeyString(key)}); });
  });
  lease_scan_bucket_ = last;
  if (lease_scan_bucket_ >= lease_scan_buckets_) lease_scan_active_ = false;
}

void ReplicatedLockService::compact_heaps() {
  if (!lease_scan_active_ && lease_heap_.size() > 2 * sm_.table().holder_count() + kHeapSlack) {
    start_lease_scan();
  }
  if (wait_heap_.size() > 2 * waiters_.size() + kHeapSlack) {
    wait_heap_ = {};
    for (const auto& [id, w] : waiters_) {
      if (w.client != 0 && !w.cancel_proposed) wait_heap_.push({w.wait_deadline_ns, id});
    }
  }
}

void ReplicatedLockService::lose_leadership() {
  // No `X` after a leader change for grants this node answered (§5c).
  granted_by_.clear();
  // A request whose entry is already committed in our log, at the term we
  // proposed it, is decided: the apply that follows (this node applies its
  // committed log as any member does) answers it with what it did. Every
  // other one is answered indeterminate now, in index order, then waiters.
  const raft::Index committed = raft_.commit();
  std::size_t decided = 0;
  std::size_t answered = 0;
  for (auto it = pending_.begin(); it != pending_.end();) {
    const auto& [index, p] = *it;
    const std::optional<raft::Term> t = raft_.term_at(index);
    if (index <= committed && t && *t == p.term) {
      ++decided;
      ++it;
      continue;
    }
    if (!p.client_gone) {
      ++answered;
      if (p.kind == PendingKind::kAcquire) reply_indeterminate(p.client, acquire_echo(p.owner, p.key));
      if (p.kind == PendingKind::kRelease || p.kind == PendingKind::kKeep) {
        reply_indeterminate(p.client, release_echo(p.token, p.key));
      }
    }
    it = pending_.erase(it);
  }
  spdlog::warn("leadership of term {} lost: {} requests and {} waiters answered indeterminate "
               "({} committed ones answered as they apply)",
               leader_term_, answered, waiters_.size(), decided);
  for (auto& [id, w] : waiters_) {
    if (w.client != 0) reply_indeterminate(w.client, acquire_echo(w.owner, w.key));
  }
  waiters_.clear();
  client_waiters_.clear();
  to_cancel_.clear();
  to_release_.clear();  // the next leader's lease expiry frees them
  wait_heap_ = {};
  lease_heap_ = {};
  lease_scan_active_ = false;
  leader_term_ = 0;
  leader_start_proposed_ = false;
  leader_start_index_ = 0;
  leader_ready_ = false;
  config_index_ = 0;
  floor_pending_ = false;
}

void ReplicatedLockService::maybe_propose_config(TimeNs now_ns) {
  if (!leader_ready_ || config_index_ != 0 || !cluster_supports(kEntryVersionConfig)) return;
  const locks::Limits& want = options_.limits;
  const locks::Limits& have = sm_.caps();
  const bool caps_differ = want.max_keys != have.max_keys ||
                           want.max_waiters_per_key != have.max_waiters_per_key ||
                           want.max_waiters != have.max_waiters;
  const bool floor_above = options_.token_floor != 0 &&
                           options_.token_floor >= sm_.next_token_lower_bound();
  if (!caps_differ && !floor_above) return;
  propose_config(now_ns, floor_above);
}

bool ReplicatedLockService::floor_config_due() const {
  // Our --token-floor above what the log recorded: a Config entry must
  // carry it before anything this leader proposes can grant.
  return options_.token_floor != 0 && options_.token_floor > sm_.token_floor() &&
         cluster_supports(kEntryVersionConfig);
}

bool ReplicatedLockService::propose_config(TimeNs now_ns, bool floor_above) {
  const locks::Limits& want = options_.limits;
  LockCommand c;
  c.type = LockCommandType::kConfig;
  c.now_ns = now_ns;
  c.max_keys = std::min<std::uint64_t>(want.max_keys, kMaxConfigCap);
  c.max_waiters_per_key = std::min<std::uint64_t>(want.max_waiters_per_key, kMaxConfigCap);
  c.max_waiters = std::min<std::uint64_t>(want.max_waiters, kMaxConfigCap);
  c.token_floor = std::max(options_.token_floor, sm_.token_floor());
  const raft::ProposeResult r = propose(std::move(c), Pending{});
  if (r.error != raft::ProposeError::kOk) return false;  // retried next turn
  config_index_ = r.index;
  spdlog::info("leader proposes the cluster configuration: caps {}/{}/{} (keys/waiters per key/"
               "waiters){}",
               want.max_keys, want.max_waiters_per_key, want.max_waiters,
               floor_above ? ", token floor " + std::to_string(options_.token_floor) : "");
  return true;
}

void ReplicatedLockService::sync(TimeNs now_ns) {
  const bool raft_leads = raft_.role() == raft::Role::kLeader;
  if (leader_term_ != 0 && (!raft_leads || raft_.term() != leader_term_)) lose_leadership();
  if (raft_leads && leader_term_ == 0) {
    leader_term_ = raft_.term();
    spdlog::warn("node {} became leader of term {}", raft_.id(), leader_term_);
  }
  if (leader_term_ == 0) return;
  if (!leader_start_proposed_) {
    LockCommand c;
    c.type = LockCommandType::kLeaderStart;
    c.now_ns = now_ns;
    // Only the first leader's base is used (the state machine keeps it).
    const TimeNs wall = options_.wall_clock_ns ? options_.wall_clock_ns() : 0;
    c.token_base = static_cast<std::uint64_t>(std::max<TimeNs>(wall, 0));
    // --token-floor: above every token handed out before (single mode, an
    // earlier cluster), whatever this host's clock says.
    if (options_.token_floor != 0 && c.token_base <= options_.token_floor) {
      c.token_base = options_.token_floor + 1;
    }
    if (c.token_base < kMinTokenBase) c.token_base = kMinTokenBase;
    if (c.token_base > kMaxTokenBase) c.token_base = kMaxTokenBase;
    const raft::ProposeResult r = propose(std::move(c), Pending{});
    if (r.error != raft::ProposeError::kOk) return;  // retried next turn
    ++stats_.leaderships;
    leader_start_proposed_ = true;
    leader_start_index_ = r.index;
    last_proposal_ns_ = now_ns;
    // --token-floor raised (this node restarted with a higher one): the
    // Config entry carrying it goes right after the LeaderStart, before
    // any request of ours, so every token this leader grants is above it
    // on every replica (the state machine rebases at the Config's index).
    floor_pending_ = floor_config_due();
  }
  if (floor_pending_ && (!floor_config_due() || propose_config(now_ns, true))) floor_pending_ = false;
  // Waiters whose client left: take them out of the queue, no reply.
  propose_cancels(now_ns);
  // Grants nobody heard of: release them (the token check makes a late or
  // repeated release harmless).
  std::size_t done = 0;
  for (; done < to_release_.size(); ++done) {
    LockCommand c;
    c.type = LockCommandType::kRelease;
    c.now_ns = now_ns;
    c.key = to_release_[done].key;
    c.token = to_release_[done].token;
    if (propose(std::move(c), Pending{}).error != raft::ProposeError::kOk) break;
  }
  to_release_.erase(to_release_.begin(), to_release_.begin() + static_cast<std::ptrdiff_t>(done));
  maybe_propose_config(now_ns);
  compact_heaps();
}

void ReplicatedLockService::propose_cancels(TimeNs now_ns) {
  // Every waiter of a departing client in one kCancelWaiters entry (as
  // single mode cancels them together): cancelled one entry at a time, the
  // first cancel could hand the key to the departed client's next waiter,
  // which then holds it until the leader releases it (or for a whole
  // lease across a leader change). A member that does not apply entry
  // version 5 yet: one kCancelWaiter each, as lockd 1.2 does.
  const bool together = cluster_supports(kEntryVersionCancelWaiters);
  std::size_t done = 0;
  std::vector<locks::WaiterId> ids;
  while (done < to_cancel_.size()) {
    ids.clear();
    std::size_t end = done;
    for (; end < to_cancel_.size() && ids.size() < (together ? kMaxCancelWaiters : 1); ++end) {
      const locks::WaiterId w = to_cancel_[end];
      auto wit = waiters_.find(w);
      if (wit != waiters_.end() && wit->second.cancel_proposed) continue;
      if (std::find(ids.begin(), ids.end(), w) != ids.end()) continue;
      ids.push_back(w);
    }
    if (ids.empty()) {
      done = end;
      continue;
    }
    LockCommand c;
    c.now_ns = now_ns;
    if (ids.size() == 1) {
      c.type = LockCommandType::kCancelWaiter;
      c.waiter = ids.front();
    } else {
      c.type = LockCommandType::kCancelWaiters;
      c.waiters = ids;
    }
    if (propose(std::move(c), Pending{}).error != raft::ProposeError::kOk) break;  // retried next turn
    for (const locks::WaiterId w : ids) {
      auto wit = waiters_.find(w);
      if (wit != waiters_.end()) wit->second.cancel_proposed = true;
    }
    done = end;
  }
  to_cancel_.erase(to_cancel_.begin(), to_cancel_.begin() + static_cast<std::ptrdiff_t>(done));
}

void ReplicatedLockService::on_time(TimeNs now_ns) {
  if (!leader_ready_ || !is_leader()) return;
  lease_scan_step();  // one slice per timer: next_deadline() is "now" while a walk is under way
  std::size_t budget = kMaxTimedProposalsPerTurn;
  // Waits that ran out: propose their removal; `T` follows the commit.
  while (budget > 0 && !wait_heap_.empty() && wait_heap_.top().at_ns <= now_ns) {
    const TimedWaiter t = wait_heap_.top();
    wait_heap_.pop();
    auto wit = waiters_.find(t.waiter);
    if (wit == waiters_.end() || wit->second.cancel_proposed || wit->second.client == 0) continue;
    LockCommand c;
    c.type = LockCommandType::kCancelWaiter;
    c.now_ns = now_ns;
    c.waiter = t.waiter;
    Pending p;
    p.kind = PendingKind::kTimeoutCancel;
    if (propose(std::move(c), std::move(p)).error != raft::ProposeError::kOk) {
      wait_heap_.push({now_ns + kRetryDelayNs, t.waiter});
      break;
    }
    wit->second.cancel_proposed = true;
    ++stats_.wait_timeouts_proposed;
    last_proposal_ns_ = now_ns;
    --budget;
  }
  // Leases that ran out on our clock: propose Expire; the key changes
  // when it commits.
  const TimeNs table_now = sm_.to_table_ns(now_ns);
  while (budget > 0 && !lease_heap_.empty() && lease_heap_.top().at_table_ns <= table_now) {
    TimedLease t = lease_heap_.top();
    lease_heap_.pop();
    const locks::KeyState* s = sm_.table().find(t.key);
    const locks::Holder* h = s == nullptr ? nullptr : s->holder_with(t.token);
    if (h == nullptr) continue;             // released or handed on
    if (h->expires_at_ns > table_now) {     // moved later: watch again
      if (h->expires_at_ns != t.at_table_ns) lease_heap_.push({h->expires_at_ns, t.token, t.key});
      continue;
    }
    LockCommand c;
    c.type = LockCommandType::kExpire;
    c.now_ns = now_ns;
    c.key = std::string(t.key.view());
    c.token = t.token;
    if (propose(std::move(c), Pending{}).error != raft::ProposeError::kOk) {
      lease_heap_.push({table_now + kRetryDelayNs, t.token, std::move(t.key)});
      break;
    }
    // Watched again in case this proposal is lost; a second Expire of the
    // same token is harmless (it changes nothing).
    lease_heap_.push({table_now + kRetryDelayNs * 100, t.token, std::move(t.key)});
    ++stats_.expiries_proposed;
    last_proposal_ns_ = now_ns;
    --budget;
  }
  // An idle leader with locks stamps its clock into the log, so that a
  // successor knows a recent reading (§8: a lease grows by about the
  // leader change, not by however long the leader was idle).
  if (sm_.table().key_count() > 0 && now_ns - last_proposal_ns_ >= options_.clock_interval_ns &&
      now_ns >= clock_retry_at_ns_) {
    LockCommand c;
    c.type = LockCommandType::kClock;
    c.now_ns = now_ns;
    if (propose(std::move(c), Pending{}).error == raft::ProposeError::kOk) {
      last_proposal_ns_ = now_ns;
    } else {
      // Back-pressure (the log is full of uncommitted entries): try again
      // a little later, not on the very next timer (it would spin).
      ++stats_.clock_retries;
      clock_retry_at_ns_ = now_ns + kRetryDelayNs;
    }
  }
}

std::optional<TimeNs> ReplicatedLockService::next_deadline(TimeNs now_ns) const {
  if (!leader_ready_) return std::nullopt;
  std::optional<TimeNs> next;
  auto consider = [&next](TimeNs t) {
    if (!next || t < *next) next = t;
  };
  if (!wait_heap_.empty()) consider(wait_heap_.top().at_ns);
  if (!lease_heap_.empty()) consider(sm_.to_leader_ns(lease_heap_.top().at_table_ns));
  if (lease_scan_active_) consider(now_ns);  // the next slice, on the next turn
  if (sm_.table().key_count() > 0) {
    consider(std::max(last_proposal_ns_ + options_.clock_interval_ns, clock_retry_at_ns_));
  }
  if (next && *next < now_ns) next = now_ns;
  return next;
}

}  // namespace lockd::cluster
