// The Raft log's Keep command (v1.1): codec, validation and apply.
#include "lockd/cluster/lock_command.h"

#include <gtest/gtest.h>

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

TEST(LockCommandKeep, AppliesPerSection6a) {
  locks::LockTable table({100, 10, 100}, 1000);
  const TimeNs t0 = 1'000 * kNsPerMs;
  ApplyOutcome a = apply_lock_command(table, acquire(t0, "k", 1000), 0);
  ASSERT_NE(a.granted, 0u);

  ApplyOutcome k = apply_lock_command(table, keep(t0 + 500 * kNsPerMs, a.granted, "k", 2000), 0);
  EXPECT_TRUE(k.kept);
  EXPECT_EQ(k.summary, "kept");
  EXPECT_EQ(k.granted, 0u);
  EXPECT_TRUE(k.deliveries.empty());
  EXPECT_EQ(table.find("k")->expires_at_ns, t0 + 2500 * kNsPerMs);

  EXPECT_FALSE(apply_lock_command(table, keep(t0, a.granted + 1, "k", 2000), 0).kept);
  EXPECT_FALSE(apply_lock_command(table, keep(t0, a.granted, "other", 2000), 0).kept);
  // Ended at t0 + 2500 ms: never revived.
  ApplyOutcome late = apply_lock_command(table, keep(t0 + 2500 * kNsPerMs, a.granted, "k", 2000), 0);
  EXPECT_FALSE(late.kept);
  EXPECT_EQ(late.summary, "not-kept");
  table.check_invariants();
}

TEST(LockCommandKeep, AppliesAtTheFloorNotAnOlderLeadersClock) {
  locks::LockTable table({100, 10, 100}, 1000);
  const TimeNs t0 = 1'000 * kNsPerMs;
  ApplyOutcome a = apply_lock_command(table, acquire(t0, "k", 1000), 0);
  // Stamped by an old leader before the lease ended, applied after it
  // ended on this replica's clock floor: an ended lease is not revived.
  EXPECT_FALSE(
      apply_lock_command(table, keep(t0 + 100 * kNsPerMs, a.granted, "k", 5000), t0 + 1000 * kNsPerMs)
          .kept);
  EXPECT_EQ(table.find("k")->expires_at_ns, t0 + 1000 * kNsPerMs);
}

TEST(LockCommandKeep, ReplicasApplyingTheSameKeepsAgree) {
  locks::LockTable a({100, 10, 100}, 1000);
  locks::LockTable b({100, 10, 100}, 1000);
  const TimeNs t0 = 1'000 * kNsPerMs;
  std::vector<LockCommand> log;
  log.push_back(acquire(t0, "k", 1000));
  log.push_back(acquire(t0 + 1, "k", 700, 60'000, 7));  // queued behind
  log.push_back(keep(t0 + 300 * kNsPerMs + 17, 1000, "k", 4000));
  for (const LockCommand& c : log) {
    ApplyOutcome x = apply_lock_command(a, c, 0);
    ApplyOutcome y = apply_lock_command(b, c, 0);
    EXPECT_EQ(x.summary, y.summary);
  }
  EXPECT_EQ(a.find("k")->expires_at_ns, b.find("k")->expires_at_ns);
  // The hand-off follows the keep: passing the first lease's end (a stale
  // entry now) hands nothing off, and the next deadline is the new expiry.
  std::vector<locks::Delivery> out;
  a.advance(t0 + 1000 * kNsPerMs, out);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(*a.next_deadline(), a.find("k")->expires_at_ns);
  a.advance(a.find("k")->expires_at_ns, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].waiter, 7u);
}

}  // namespace
}  // namespace lockd::cluster
