// LockStateMachine; see lock_state_machine.h.
#include "lockd/cluster/lock_state_machine.h"

#include <algorithm>

#include "lockd/common/byte_io.h"
#include "lockd/common/check.h"
#include "lockd/locks/lock_table_snapshot.h"

namespace lockd::cluster {

namespace {

// Header 1: lockd 1.1. Header 2 adds the replicated configuration; written
// only once a kConfig applied (so every member already runs 1.2 and can
// install it), or in a restored group (every member runs a binary that
// restores). Header 3 is header 2 plus one flags byte, written only while
// a restored group waits for its first LeaderStart (kRebasePending): in
// practice only the snapshot a restore seeds.
constexpr std::uint8_t kHeaderVersion1 = 1;
constexpr std::uint8_t kHeaderVersion2 = 2;
constexpr std::uint8_t kHeaderVersion3 = 3;
constexpr std::uint8_t kRebasePending = 0x01;

// A snapshot is restored with no caps at all: it is the leader's state,
// which every replica must take as it is (a local limit never refuses it).
constexpr locks::Limits kUnbounded{SIZE_MAX, SIZE_MAX, SIZE_MAX};

// The cluster id of a token base: splitmix64's finalizer (every bit of
// the base moves every bit of the id), never 0.
std::uint64_t cluster_id_of(std::uint64_t base) {
  std::uint64_t z = base + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return z == 0 ? 1 : z;
}

// The replicated configuration a header-2 (or 3) snapshot carries.
struct SnapshotConfig {
  std::uint64_t cluster_id = 0;
  locks::Limits caps;
  std::uint64_t token_floor = 0;
  bool rebase_pending = false;  // header 3
};

std::string encode_snapshot(const locks::LockTable& table, raft::Index applied, std::uint64_t base,
                            TimeNs offset, TimeNs floor, raft::Term clock_term,
                            const SnapshotConfig* config = nullptr) {
  std::string header;
  ByteWriter w(header);
  w.u8(config == nullptr ? kHeaderVersion1 : config->rebase_pending ? kHeaderVersion3 : kHeaderVersion2);
  w.u64(applied);
  w.u64(base);
  w.u64(static_cast<std::uint64_t>(offset));
  w.u64(static_cast<std::uint64_t>(floor));
  w.u64(clock_term);
  if (config != nullptr) {
    w.u64(config->cluster_id);
    w.u64(config->caps.max_keys);
    w.u64(config->caps.max_waiters_per_key);
    w.u64(config->caps.max_waiters);
    w.u64(config->token_floor);
    if (config->rebase_pending) w.u8(kRebasePending);
  }
  return locks::serialize(table, header);
}

}  // namespace

LockStateMachine::LockStateMachine(locks::Limits local)
    : local_(local), table_(std::make_unique<locks::LockTable>(caps_, 1)) {}

std::string LockStateMachine::snapshot() const {
  if (!config_applied_) {
    return encode_snapshot(*table_, applied_, token_base_, offset_ns_, floor_ns_, clock_term_);
  }
  const SnapshotConfig config{cluster_id_, caps_, token_floor_, rebase_pending_};
  return encode_snapshot(*table_, applied_, token_base_, offset_ns_, floor_ns_, clock_term_, &config);
}

std::string LockStateMachine::single_mode_snapshot(const locks::LockTable& table, TimeNs now_ns) {
  // Index 1: the next entry (2) grants base + 2 = next_token + 1 at the
  // earliest, above every single-mode token. Clock term 0: no command of
  // the old life is placed on the clock; table time resumes at now_ns.
  const std::uint64_t base = table.next_token() - 1;
  LOCKD_CHECK(base >= kMinTokenBase && base <= kMaxTokenBase);
  return encode_snapshot(table, 1, base, 0, now_ns, 0);
}

bool LockStateMachine::restore(std::string_view bytes, raft::Index index, std::string& error) {
  auto fresh = std::make_unique<locks::LockTable>(kUnbounded, 1);
  std::string header;
  if (!locks::restore(bytes, *fresh, header, error)) return false;
  // Header decoding: ByteReader reports truncation through its error value.
  enum class E { kOk, kShort };
  ByteReader<E> r(header, E::kOk, E::kShort);
  const std::uint8_t version = r.u8();
  const raft::Index applied = r.u64();
  const std::uint64_t base = r.u64();
  const auto offset = static_cast<TimeNs>(r.u64());
  const auto floor = static_cast<TimeNs>(r.u64());
  const raft::Term clock_term = r.u64();
  std::uint64_t cluster_id = base == 0 ? 0 : cluster_id_of(base);
  std::uint64_t token_floor = 0;
  locks::Limits caps;
  std::uint8_t flags = 0;
  const bool has_config = version == kHeaderVersion2 || version == kHeaderVersion3;
  if (has_config) {
    cluster_id = r.u64();
    caps.max_keys = r.u64();
    caps.max_waiters_per_key = r.u64();
    caps.max_waiters = r.u64();
    token_floor = r.u64();
  }
  if (version == kHeaderVersion3) flags = r.u8();
  if (r.error() != E::kOk || r.remaining() != 0 ||
      (version != kHeaderVersion1 && !has_config) ||
      (version == kHeaderVersion3 && flags != kRebasePending)) {
    error = "snapshot: bad state machine header";
    return false;
  }
  if (has_config &&
      (cluster_id == 0 || caps.max_keys < 1 || caps.max_keys > kMaxConfigCap ||
       caps.max_waiters_per_key < 1 || caps.max_waiters_per_key > kMaxConfigCap ||
       caps.max_waiters < 1 || caps.max_waiters > kMaxConfigCap)) {
    error = "snapshot: bad replicated configuration";
    return false;
  }
  if (applied != index) {
    error = "snapshot: taken at index " + std::to_string(applied) + ", labelled " +
            std::to_string(index);
    return false;
  }
  if ((base != 0 && (base < kMinTokenBase || base > kMaxTokenBase)) ||
      ((flags & kRebasePending) != 0 && base == 0)) {
    error = "snapshot: token base out of range";
    return false;
  }
  // The next entry sets the token counter to at least base + index + 1;
  // a counter past that is fine (an entry that handed a run of readers
  // several tokens), but a table without a base cannot hold any.
  if (base == 0 && fresh->key_count() != 0) {
    error = "snapshot: token counter inconsistent with the token base";
    return false;
  }
  // A waiter's id is the index of the entry that queued it, so none can be
  // beyond the snapshot's index; one that is would collide with the
  // acquire applied at that index later (an assertion in the table).
  locks::WaiterId last_waiter = 0;
  fresh->for_each([&](std::string_view, const locks::KeyState& s) {
    const std::list<locks::Waiter>* queue = s.waiters();
    if (queue == nullptr) return;
    for (const locks::Waiter& w : *queue) last_waiter = std::max(last_waiter, w.id);
  });
  if (last_waiter > index) {
    error = "snapshot: waiter id " + std::to_string(last_waiter) + " is beyond its index " +
            std::to_string(index);
    return false;
  }
  fresh->set_limits(caps);
  table_ = std::move(fresh);
  caps_ = caps;
  cluster_id_ = cluster_id;
  token_floor_ = token_floor;
  config_applied_ = has_config;
  rebase_pending_ = (flags & kRebasePending) != 0;
  undecodable_ = 0;
  applied_ = applied;
  token_base_ = base;
  offset_ns_ = offset;
  floor_ns_ = floor;
  clock_term_ = clock_term;
  return true;
}

void LockStateMachine::start_restored_group(std::uint64_t seed) {
  const std::uint64_t old = cluster_id_;
  cluster_id_ = cluster_id_of(seed ^ old);
  if (cluster_id_ == old) cluster_id_ = cluster_id_of(cluster_id_);
  config_applied_ = true;  // the id is explicit from now on (header 2/3)
  // No base yet (a file taken before its group's first leader, holding
  // nothing): the first LeaderStart sets one as in any new group.
  rebase_pending_ = token_base_ != 0;
}

bool LockStateMachine::check_snapshot(std::string_view bytes, raft::Index index,
                                      std::string& error) const {
  return decode_snapshot(bytes, index, error) != nullptr;
}

std::unique_ptr<LockStateMachine> LockStateMachine::decode_snapshot(std::string_view bytes, raft::Index index,
                                                                    std::string& error) const {
  auto scratch = std::make_unique<LockStateMachine>(local_);
  if (!scratch->restore(bytes, index, error)) return nullptr;
  return scratch;
}

void LockStateMachine::adopt(LockStateMachine&& decoded) {
  LOCKD_CHECK(decoded.local_ == local_ && decoded.table_ != nullptr);
  *this = std::move(decoded);
}

const EntryResult& LockStateMachine::apply(const raft::Entry& e) {
  LOCKD_CHECK(e.index == applied_ + 1);
  result_ = EntryResult{};
  if (undecodable_ != 0) {
    // Stopped: nothing after an entry that did not decode may apply.
    result_.undecodable = true;
    return result_;
  }
  LockCommand c;
  if (e.type == raft::EntryType::kCommand && decode_lock_command(e.data, c) != LockCommandError::kOk) {
    // Never skipped: a replica that skips an entry others apply diverges
    // from them silently. The node stops with one line instead.
    undecodable_ = e.index;
    result_.undecodable = true;
    result_.version = lock_command_version(e.data);
    return result_;
  }
  applied_ = e.index;
  if (e.type != raft::EntryType::kCommand) return result_;
  result_.command = true;
  if (c.type == LockCommandType::kConfig) {
    // Configuration: changes no lock and no table time.
    config_applied_ = true;
    caps_ = locks::Limits{c.max_keys, c.max_waiters_per_key, c.max_waiters};
    table_->set_limits(caps_);
    token_floor_ = c.token_floor;
    // Every later token is above the floor: tokens are base + index.
    if (token_base_ != 0 && token_base_ + e.index <= c.token_floor) {
      token_base_ = c.token_floor - e.index + 1;
    }
    result_.table_now_ns = floor_ns_;
    result_.cmd = std::move(c);
    return result_;
  }
  if (c.type == LockCommandType::kLeaderStart) {
    if (token_base_ == 0) {
      token_base_ = std::max(c.token_base, token_floor_ + 1);
      // (A restored group has its id already, start_restored_group().)
      if (cluster_id_ == 0) cluster_id_ = cluster_id_of(token_base_);
    } else if (rebase_pending_) {
      // The first leader of a restored group: tokens restart above its
      // wall clock, as a new group's do (the old group may have granted
      // past the file). Every held token stays below: base only grows.
      rebase_pending_ = false;
      result_.rebased = true;
      token_base_ = std::max(token_base_, c.token_base);
    }
    // The new leader's now maps to the latest table time seen: no lease
    // ends early, none gains more than the leader change took.
    offset_ns_ = floor_ns_ - c.now_ns;
    clock_term_ = e.term;
    result_.waiters_dropped = table_->cancel_all_waiters();
    result_.table_now_ns = floor_ns_;
    result_.cmd = std::move(c);
    return result_;
  }
  // A command from a leader whose LeaderStart is not the latest one cannot
  // be placed on the table's clock: it applies at the floor.
  TimeNs now = floor_ns_;
  if (e.term == clock_term_) now = std::max(floor_ns_, c.now_ns + offset_ns_);
  floor_ns_ = now;
  result_.table_now_ns = now;
  if (c.type == LockCommandType::kClock) {
    result_.cmd = std::move(c);
    return result_;
  }
  if (token_base_ == 0) {
    result_.skipped = true;
    result_.cmd = std::move(c);
    return result_;
  }
  // One entry may grant several tokens (a hand-off to a run of readers,
  // §5b): the next entry's tokens then start past them, not at base + index.
  table_->set_next_token(std::max(table_->next_token(), token_base_ + e.index));
  switch (c.type) {
    case LockCommandType::kAcquire:
    case LockCommandType::kAcquireShared: {
      const bool shared = c.type == LockCommandType::kAcquireShared;
      const locks::AcquireResult r = table_->acquire(
          now, {c.owner, c.key, c.lease_ms, c.wait_ms, c.client,
                static_cast<locks::WaiterId>(e.index), shared, c.limit});
      result_.acquire = r.outcome;
      result_.granted = r.token;
      break;
    }
    case LockCommandType::kRelease:
      result_.changed = table_->release(now, c.token, c.key, result_.deliveries) ==
                        locks::ReleaseOutcome::kReleased;
      break;
    case LockCommandType::kKeep:
      result_.changed =
          table_->keep(now, c.token, c.key, c.lease_ms) == locks::KeepOutcome::kKept;
      break;
    case LockCommandType::kExpire:
      result_.changed = table_->expire(now, c.key, c.token, result_.deliveries);
      break;
    case LockCommandType::kCancelWaiter:
      // The front leaving may hand the key on (§5b).
      result_.changed = table_->cancel_waiter(now, c.waiter, result_.deliveries);
      break;
    case LockCommandType::kCancelWaiters:
      // All of them leave before any front is settled: none is handed the
      // key another one of them gave up (as single mode cancels them).
      result_.changed = table_->cancel_waiters(now, c.waiters, result_.deliveries) != 0;
      break;
    case LockCommandType::kLeaderStart:
    case LockCommandType::kClock:
    case LockCommandType::kConfig:
      LOCKD_CHECK(false);  // handled above
  }
  result_.cmd = std::move(c);
  return result_;
}

}  // namespace lockd::cluster
