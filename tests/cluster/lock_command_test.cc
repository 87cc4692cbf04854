// The Raft log's Keep command (v1.1): codec, validation, and its apply on
// the daemon's state machine.
#include "lockd/cluster/lock_command.h"
#include "lockd/cluster/lock_state_machine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

namespace lockd::cluster {
namespace {

LockCommand acquire(TimeNs now_ns, std::string key, std::uint64_t lease_ms,
                    std::uint64_t wait_ms = 0, locks::WaiterId waiter = 0) {
  LockCommand c;
  c.type = LockCommandType::kAcquire;
  c.now_ns = now_ns;
  c.owner = "alice";
  c.key = std::move(key);
  c.lease_ms = lease_ms;
  c.wait_ms = wait_ms;
  c.client = 1;
  c.waiter = waiter;
  return c;
}

LockCommand keep(TimeNs now_ns, locks::Token token, std::string key, std::uint64_t lease_ms) {
  LockCommand c;
  c.type = LockCommandType::kKeep;
  c.now_ns = now_ns;
  c.key = std::move(key);
  c.token = token;
  c.lease_ms = lease_ms;
  return c;
}

LockCommandError decode(const LockCommand& c) {
  LockCommand back;
  return decode_lock_command(encode_lock_command(c), back);
}

TEST(LockCommandKeep, RoundTrips) {
  const LockCommand c = keep(123'456'789, 42, "orders/42", 5000);
  const std::string bytes = encode_lock_command(c);
  LockCommand back;
  ASSERT_EQ(decode_lock_command(bytes, back), LockCommandError::kOk);
  EXPECT_EQ(back, c);
  EXPECT_EQ(back.type, LockCommandType::kKeep);
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_NE(decode_lock_command(std::string_view(bytes).substr(0, n), back),
              LockCommandError::kOk);
  }
}

TEST(LockCommandKeep, RejectsWhatTheLockTableWouldRefuse) {
  const LockCommand good = keep(1, 42, "k", 1000);
  EXPECT_EQ(decode(good), LockCommandError::kOk);
  auto bad = good;
  bad.lease_ms = 0;
  EXPECT_EQ(decode(bad), LockCommandError::kBadField);
  bad = good;
  bad.lease_ms = kMaxLockCommandMs + 1;
  EXPECT_EQ(decode(bad), LockCommandError::kBadField);
  bad = good;
  bad.key.clear();
  EXPECT_EQ(decode(bad), LockCommandError::kBadField);
  bad = good;
  bad.key = std::string(251, 'k');
  EXPECT_EQ(decode(bad), LockCommandError::kBadField);
  bad = good;
  bad.now_ns = -1;
  EXPECT_EQ(decode(bad), LockCommandError::kBadField);
  // A type past the last one (Clock) is still unknown.
  std::string bytes = encode_lock_command(good);
  bytes[1] = static_cast<char>(kMaxLockCommandType + 1);
  LockCommand back;
  EXPECT_EQ(decode_lock_command(bytes, back), LockCommandError::kBadType);
}

// kCancelWaiters (entry version 5): a departing client's waiter ids, in
// order; refused under an older version, empty, over the cap, or cut short.
TEST(LockCommandCancelWaiters, RoundTripsAndIsRefusedWhereInvalid) {
  LockCommand c;
  c.type = LockCommandType::kCancelWaiters;
  c.now_ns = 5;
  c.waiters = {12, 7, 40};
  const std::string bytes = encode_lock_command(c, kEntryVersionCancelWaiters);
  LockCommand back;
  ASSERT_EQ(decode_lock_command(bytes, back), LockCommandError::kOk);
  EXPECT_EQ(back, c);
  // Version 4 does not know kind 10.
  std::string old = bytes;
  old[0] = static_cast<char>(kEntryVersionShared);
  EXPECT_EQ(decode_lock_command(old, back), LockCommandError::kBadType);
  EXPECT_EQ(decode_lock_command(bytes.substr(0, bytes.size() - 1), back), LockCommandError::kTruncated);
  EXPECT_EQ(decode_lock_command(bytes + "x", back), LockCommandError::kTrailing);
  // The count word sits right before the ids: 0 and a huge count are refused.
  std::string none = bytes.substr(0, bytes.size() - 3 * 8 - 4) + std::string(4, '\0');
  EXPECT_EQ(decode_lock_command(none, back), LockCommandError::kBadField);
  std::string huge = bytes;
  huge[huge.size() - 3 * 8 - 1] = static_cast<char>(0x7f);
  EXPECT_EQ(decode_lock_command(huge, back), LockCommandError::kBadField);
  // Other kinds carry no ids: their bytes are unchanged.
  LockCommand plain = acquire(5, "k", 1000);
  EXPECT_EQ(encode_lock_command(plain, kEntryVersionCancelWaiters).substr(1),
            encode_lock_command(plain, kEntryVersionShared).substr(1));
}

// The daemon's apply path: entries through a LockStateMachine whose first
// entry is a LeaderStart at leader time t0, so table time = leader time - t0.
struct Machine {
  LockStateMachine sm{locks::Limits{100, 10, 100}};
  raft::Index index = 0;
  explicit Machine(TimeNs t0) {
    LockCommand start;
    start.type = LockCommandType::kLeaderStart;
    start.token_base = kMinTokenBase;
    start.now_ns = t0;
    apply(start);
  }
  const EntryResult& apply(const LockCommand& c, raft::Term term = 1) {
    return sm.apply(raft::Entry{term, ++index, raft::EntryType::kCommand, encode_lock_command(c)});
  }
};

// issue 36 item 8: one entry (a writer's release) hands the key to three
// queued readers: three tokens from one index. The largest token granted
// (a backup's floor) covers all three, and the first token after a
// leader change (a new LeaderStart, then an acquire) is above them.
TEST(LockStateMachineTokens, AHandOffToReadersAndALeaderChangeKeepTokensGrowing) {
  const TimeNs t0 = 1'000 * kNsPerMs;
  Machine m(t0);
  const auto apply = [&](const LockCommand& c, raft::Term term = 1) -> const EntryResult& {
    return m.sm.apply(raft::Entry{term, ++m.index, raft::EntryType::kCommand,
                                  encode_lock_command(c, kEntryVersionShared)});
  };
  const locks::Token writer = apply(acquire(t0, "k", 60000)).granted;
  ASSERT_NE(writer, 0u);
  for (int i = 0; i < 3; ++i) {
    LockCommand r = acquire(t0, "k", 60000, 30000, m.index + 1);
    r.type = LockCommandType::kAcquireShared;
    r.owner = "reader" + std::to_string(i);
    EXPECT_EQ(apply(r).acquire, locks::AcquireOutcome::kQueued);
  }
  LockCommand rel;
  rel.type = LockCommandType::kRelease;
  rel.now_ns = t0;
  rel.key = "k";
  rel.token = writer;
  const EntryResult& handed = apply(rel);
  ASSERT_EQ(handed.deliveries.size(), 3u);
  locks::Token last = 0;
  for (const locks::Delivery& d : handed.deliveries) last = std::max(last, d.token);
  EXPECT_EQ(last, kMinTokenBase + m.index + 2);  // base + index, + 1, + 2
  EXPECT_EQ(m.sm.largest_token_granted(), last);
  EXPECT_GT(m.sm.largest_token_granted(), m.sm.token_base() + m.sm.applied());
  // A new leader: its LeaderStart, then its first grant.
  LockCommand start;
  start.type = LockCommandType::kLeaderStart;
  start.token_base = kMinTokenBase + 999;  // ignored: the base is set
  start.now_ns = t0;
  apply(start, 2);
  EXPECT_EQ(m.sm.largest_token_granted(), last);
  EXPECT_GT(apply(acquire(t0, "other", 1000), 2).granted, last);
  m.sm.table().check_invariants();
}

TEST(LockCommandKeep, AppliesPerSection6a) {
  const TimeNs t0 = 1'000 * kNsPerMs;
  Machine m(t0);
  const locks::Token token = m.apply(acquire(t0, "k", 1000)).granted;
  ASSERT_NE(token, 0u);

  const EntryResult& k = m.apply(keep(t0 + 500 * kNsPerMs, token, "k", 2000));
  EXPECT_TRUE(k.changed);
  EXPECT_EQ(k.granted, 0u);
  EXPECT_TRUE(k.deliveries.empty());
  EXPECT_EQ(m.sm.table().find("k")->expires_at_ns, 2500 * kNsPerMs);

  EXPECT_FALSE(m.apply(keep(t0, token + 1, "k", 2000)).changed);
  EXPECT_FALSE(m.apply(keep(t0, token, "other", 2000)).changed);
  // Ended at 2500 ms: never revived.
  EXPECT_FALSE(m.apply(keep(t0 + 2500 * kNsPerMs, token, "k", 2000)).changed);
  m.sm.table().check_invariants();
}

TEST(LockCommandKeep, AppliesAtTheFloorNotAnOlderLeadersClock) {
  const TimeNs t0 = 1'000 * kNsPerMs;
  Machine m(t0);
  const locks::Token token = m.apply(acquire(t0, "k", 1000)).granted;
  m.apply(acquire(t0 + 1000 * kNsPerMs, "other", 1000));  // the replicated time reaches 1000 ms
  // Stamped before the lease ended, applied after it ended on the
  // replicated clock: an ended lease is not revived.
  EXPECT_FALSE(m.apply(keep(t0 + 100 * kNsPerMs, token, "k", 5000)).changed);
  EXPECT_EQ(m.sm.table().find("k")->expires_at_ns, 1000 * kNsPerMs);
}

TEST(LockCommandKeep, ReplicasApplyingTheSameKeepsAgree) {
  const TimeNs t0 = 1'000 * kNsPerMs;
  Machine a(t0);
  Machine b(t0);
  std::vector<LockCommand> log;
  log.push_back(acquire(t0, "k", 1000));
  log.push_back(acquire(t0 + 1, "k", 700, 60'000));  // queued behind
  log.push_back(keep(t0 + 300 * kNsPerMs + 17, kMinTokenBase + 2, "k", 4000));
  for (const LockCommand& c : log) {
    const EntryResult x = a.apply(c);
    const EntryResult& y = b.apply(c);
    EXPECT_EQ(x.acquire, y.acquire);
    EXPECT_EQ(x.granted, y.granted);
    EXPECT_EQ(x.changed, y.changed);
  }
  EXPECT_EQ(a.sm.table().find("k")->expires_at_ns, b.sm.table().find("k")->expires_at_ns);
  EXPECT_GE(a.sm.table().find("k")->expires_at_ns, 300 * kNsPerMs + 17 + 4000 * kNsPerMs);  // moved by the keep
}

}  // namespace
}  // namespace lockd::cluster
