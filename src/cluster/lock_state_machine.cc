// LockStateMachine; see lock_state_machine.h.
#include "lockd/cluster/lock_state_machine.h"

#include <algorithm>

#include "lockd/common/check.h"

namespace lockd::cluster {

LockStateMachine::LockStateMachine(locks::Limits limits) : table_(limits, 1) {}

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
    result_.waiters_dropped = table_.cancel_all_waiters();
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
  table_.set_next_token(token_base_ + e.index);
  switch (c.type) {
    case LockCommandType::kAcquire: {
      const locks::AcquireResult r = table_.acquire(
          now, {c.owner, c.key, c.lease_ms, c.wait_ms, c.client, static_cast<locks::WaiterId>(e.index)});
      result_.acquire = r.outcome;
      result_.granted = r.token;
      break;
    }
    case LockCommandType::kRelease:
      result_.changed = table_.release(now, c.token, c.key, result_.deliveries) ==
                        locks::ReleaseOutcome::kReleased;
      break;
    case LockCommandType::kKeep:
      result_.changed =
          table_.keep(now, c.token, c.key, c.lease_ms) == locks::KeepOutcome::kKept;
      break;
    case LockCommandType::kExpire:
      result_.changed = table_.expire(now, c.key, c.token, result_.deliveries);
      break;
    case LockCommandType::kCancelWaiter:
      result_.changed = table_.cancel_waiter(c.waiter);
      break;
    case LockCommandType::kLeaderStart:
    case LockCommandType::kClock:
      LOCKD_CHECK(false);  // handled above
  }
  result_.cmd = std::move(c);
  return result_;
}

}  // namespace lockd::cluster
