// LockStateMachine; see lock_state_machine.h.
#include "lockd/cluster/lock_state_machine.h"

#include <algorithm>

#include "lockd/common/byte_io.h"
#include "lockd/common/check.h"
#include "lockd/locks/lock_table_snapshot.h"

namespace lockd::cluster {

namespace {

constexpr std::uint8_t kHeaderVersion = 1;

std::string encode_snapshot(const locks::LockTable& table, raft::Index applied, std::uint64_t base,
                            TimeNs offset, TimeNs floor, raft::Term clock_term) {
  std::string header;
  ByteWriter w(header);
  w.u8(kHeaderVersion);
  w.u64(applied);
  w.u64(base);
  w.u64(static_cast<std::uint64_t>(offset));
  w.u64(static_cast<std::uint64_t>(floor));
  w.u64(clock_term);
  return locks::serialize(table, header);
}

}  // namespace

LockStateMachine::LockStateMachine(locks::Limits limits)
    : limits_(limits), table_(std::make_unique<locks::LockTable>(limits, 1)) {}

std::string LockStateMachine::snapshot() const {
  return encode_snapshot(*table_, applied_, token_base_, offset_ns_, floor_ns_, clock_term_);
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
  auto fresh = std::make_unique<locks::LockTable>(limits_, 1);
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
  if (r.error() != E::kOk || r.remaining() != 0 || version != kHeaderVersion) {
    error = "snapshot: bad state machine header";
    return false;
  }
  if (applied != index) {
    error = "snapshot: taken at index " + std::to_string(applied) + ", labelled " +
            std::to_string(index);
    return false;
  }
  if (base != 0 && (base < kMinTokenBase || base > kMaxTokenBase)) {
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
  table_ = std::move(fresh);
  applied_ = applied;
  token_base_ = base;
  offset_ns_ = offset;
  floor_ns_ = floor;
  clock_term_ = clock_term;
  return true;
}

bool LockStateMachine::check_snapshot(std::string_view bytes, raft::Index index,
                                      std::string& error) const {
  LockStateMachine scratch(limits_);
  return scratch.restore(bytes, index, error);
}

const EntryResult& LockStateMachine::apply(const raft::Entry& e) {
  LOCKD_CHECK(e.index == applied_ + 1);
  applied_ = e.index;
  result_ = EntryResult{};
  if (e.type != raft::EntryType::kCommand) return result_;
  LockCommand c;
  if (decode_lock_command(e.data, c) != LockCommandError::kOk) {
    // Every replica skips the same bytes, so they stay equal.
    ++undecodable_;
    return result_;
  }
  result_.command = true;
  if (c.type == LockCommandType::kLeaderStart) {
    if (token_base_ == 0) token_base_ = c.token_base;
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
    case LockCommandType::kLeaderStart:
    case LockCommandType::kClock:
      LOCKD_CHECK(false);  // handled above
  }
  result_.cmd = std::move(c);
  return result_;
}

}  // namespace lockd::cluster
