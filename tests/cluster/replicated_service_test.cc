// The replicated lock state machine and service without sockets: a
// one-node Raft on MemoryStorage, a fake reply sink, and a clock the test
// moves by hand.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <variant>

#include "lockd/cluster/lock_state_machine.h"
#include "forged_snapshot.h"
#include "lockd/cluster/replicated_lock_service.h"
#include "lockd/proto/parser.h"
#include "lockd/raft/driver.h"

namespace lockd::cluster {
namespace {

constexpr std::uint64_t kWall = 1'800'000'000'000'000'000ull;  // 2027, in ns

raft::Entry entry(raft::Term term, raft::Index index, const LockCommand& c) {
  return raft::Entry{term, index, raft::EntryType::kCommand, encode_lock_command(c)};
}

LockCommand leader_start(TimeNs now) {
  LockCommand c;
  c.type = LockCommandType::kLeaderStart;
  c.now_ns = now;
  c.token_base = kWall;
  return c;
}

LockCommand acquire(TimeNs now, std::string owner, std::string key, std::uint64_t lease_ms,
                    std::uint64_t wait_ms = 0) {
  LockCommand c;
  c.type = LockCommandType::kAcquire;
  c.now_ns = now;
  c.owner = std::move(owner);
  c.key = std::move(key);
  c.lease_ms = lease_ms;
  c.wait_ms = wait_ms;
  return c;
}

LockCommand expire(TimeNs now, std::string key, locks::Token token) {
  LockCommand c;
  c.type = LockCommandType::kExpire;
  c.now_ns = now;
  c.key = std::move(key);
  c.token = token;
  return c;
}

constexpr TimeNs kSec = 1'000'000'000;

TEST(LockStateMachine, TokensComeFromTheLogAboveTheWallClockBase) {
  LockStateMachine sm({});
  EXPECT_EQ(sm.apply(raft::Entry{1, 1, raft::EntryType::kNoop, {}}).command, false);
  // Nothing is granted before the base is set.
  EXPECT_TRUE(sm.apply(entry(1, 2, acquire(10 * kSec, "a", "k0", 1000))).skipped);
  sm.apply(entry(1, 3, leader_start(10 * kSec)));
  EXPECT_EQ(sm.token_base(), kWall);
  const EntryResult& r = sm.apply(entry(1, 4, acquire(10 * kSec, "a", "k", 1000)));
  EXPECT_EQ(r.granted, kWall + 4);
  // A later leader's base is ignored: tokens keep growing from the first.
  LockCommand ls = leader_start(3 * kSec);
  ls.token_base = kWall + 1'000'000;
  sm.apply(entry(2, 5, ls));
  EXPECT_EQ(sm.token_base(), kWall);
  EXPECT_EQ(sm.apply(entry(2, 6, acquire(3 * kSec, "b", "k2", 1000))).granted, kWall + 6);
}

// §8: a new leader maps its clock onto the latest old-leader reading, so a
// lease is never ended early and is extended by about the change's length.
TEST(LockStateMachine, LeaderChangeNeverEndsALeaseEarly) {
  LockStateMachine sm({});
  sm.apply(entry(1, 1, leader_start(100 * kSec)));
  const locks::Token t = sm.apply(entry(1, 2, acquire(100 * kSec, "a", "k", 1000))).granted;
  LockCommand clock;
  clock.type = LockCommandType::kClock;
  clock.now_ns = 100 * kSec + 400'000'000;  // the old leader's last reading: +0.4 s
  sm.apply(entry(1, 3, clock));
  // New leader, a different clock entirely (5 s).
  sm.apply(entry(2, 4, leader_start(5 * kSec)));
  // 0.5 s later on its clock is 0.9 s into the lease: not over.
  EXPECT_FALSE(sm.apply(entry(2, 5, expire(5 * kSec + 500'000'000, "k", t))).changed);
  ASSERT_NE(sm.table().find("k"), nullptr);
  EXPECT_TRUE(sm.apply(entry(2, 6, expire(5 * kSec + 600'000'000, "k", t))).changed);
  EXPECT_EQ(sm.table().find("k"), nullptr);
}

TEST(LockStateMachine, CommandsOfAStaleTermApplyAtTheFloor) {
  LockStateMachine sm({});
  sm.apply(entry(1, 1, leader_start(100 * kSec)));
  const locks::Token t = sm.apply(entry(1, 2, acquire(100 * kSec, "a", "k", 1000))).granted;
  // Term 2 never wrote a LeaderStart: its clock cannot be trusted here.
  EXPECT_FALSE(sm.apply(entry(2, 3, expire(1000 * kSec, "k", t))).changed);
}

TEST(LockStateMachine, LeaderStartDropsEveryWaiter) {
  LockStateMachine sm({});
  sm.apply(entry(1, 1, leader_start(kSec)));
  sm.apply(entry(1, 2, acquire(kSec, "a", "k", 1000)));
  EXPECT_EQ(sm.apply(entry(1, 3, acquire(kSec, "b", "k", 1000, 5000))).acquire,
            locks::AcquireOutcome::kQueued);
  EXPECT_EQ(sm.table().waiter_count(), 1u);
  EXPECT_EQ(sm.apply(entry(2, 4, leader_start(kSec))).waiters_dropped, 1u);
  EXPECT_EQ(sm.table().waiter_count(), 0u);
}

TEST(LockStateMachine, SnapshotRestoresEverythingTheNextEntryNeeds) {
  LockStateMachine sm({});
  sm.apply(entry(1, 1, leader_start(100 * kSec)));
  const locks::Token t = sm.apply(entry(1, 2, acquire(100 * kSec, "a", "k", 1000))).granted;
  sm.apply(entry(1, 3, acquire(100 * kSec, "b", "k", 1000, 5000)));
  LockStateMachine copy({});
  std::string error;
  ASSERT_TRUE(copy.restore(sm.snapshot(), 3, error)) << error;
  EXPECT_EQ(copy.token_base(), sm.token_base());
  EXPECT_EQ(copy.offset_ns(), sm.offset_ns());
  EXPECT_EQ(copy.floor_ns(), sm.floor_ns());
  // The same next entry does the same thing on both: hand-off to `b`
  // with the token of entry 4.
  const raft::Entry e = entry(1, 4, expire(101 * kSec, "k", t));
  const EntryResult& r1 = sm.apply(e);
  ASSERT_EQ(r1.deliveries.size(), 1u);
  const locks::Token handed = r1.deliveries[0].token;
  const EntryResult& r2 = copy.apply(e);
  ASSERT_EQ(r2.deliveries.size(), 1u);
  EXPECT_EQ(r2.deliveries[0].token, handed);
  EXPECT_EQ(handed, kWall + 4);
  // Labelled with the wrong index, or garbage: refused, machine unchanged.
  LockStateMachine other({});
  EXPECT_FALSE(other.restore(sm.snapshot(), 7, error));
  EXPECT_FALSE(other.restore("garbage", 4, error));
  EXPECT_EQ(other.applied(), 0u);
}

// A restore (cluster/restore.h) makes a new group: a new cluster id at
// once, kept through the seeded snapshot (header 3) and later ones; the
// first LeaderStart raises the token base to its leader's wall clock; a
// later leader's base is ignored again.
TEST(LockStateMachine, RestoredGroupGetsANewIdAndItsFirstLeaderRaisesTheBase) {
  LockStateMachine old({});
  old.apply(entry(1, 1, leader_start(100 * kSec)));
  const locks::Token t = old.apply(entry(1, 2, acquire(100 * kSec, "a", "k", 600'000))).granted;
  LockStateMachine seeded({});
  std::string error;
  ASSERT_TRUE(seeded.restore(old.snapshot(), 2, error)) << error;
  seeded.start_restored_group(0x1234);
  EXPECT_NE(seeded.cluster_id(), old.cluster_id());
  EXPECT_NE(seeded.cluster_id(), 0u);
  EXPECT_TRUE(seeded.rebase_pending());
  LockStateMachine node({});  // what a member starts from: the seeded snapshot
  ASSERT_TRUE(node.restore(seeded.snapshot(), 2, error)) << error;
  EXPECT_EQ(node.cluster_id(), seeded.cluster_id());
  EXPECT_TRUE(node.rebase_pending());
  // The first leader of the restored group, a year later by its wall clock.
  constexpr std::uint64_t kYear = 365ull * 24 * 3600 * kSec;
  LockCommand ls = leader_start(7 * kSec);
  ls.token_base = kWall + kYear;
  EXPECT_TRUE(node.apply(entry(2, 3, ls)).rebased);
  EXPECT_FALSE(node.rebase_pending());
  EXPECT_EQ(node.token_base(), kWall + kYear);
  EXPECT_EQ(node.cluster_id(), seeded.cluster_id());
  EXPECT_EQ(node.table().find("k")->token, t);  // held with its token
  EXPECT_EQ(node.apply(entry(2, 4, acquire(7 * kSec, "b", "k2", 1000))).granted, kWall + kYear + 4);
  // A later leader changes nothing; later snapshots keep the id, no rebase.
  ls.token_base = kWall + 2 * kYear;
  EXPECT_FALSE(node.apply(entry(3, 5, ls)).rebased);
  EXPECT_EQ(node.token_base(), kWall + kYear);
  LockStateMachine later({});
  ASSERT_TRUE(later.restore(node.snapshot(), 5, error)) << error;
  EXPECT_EQ(later.cluster_id(), seeded.cluster_id());
  EXPECT_FALSE(later.rebase_pending());
  // The same file seeds the same id on every member.
  LockStateMachine again({});
  ASSERT_TRUE(again.restore(old.snapshot(), 2, error)) << error;
  again.start_restored_group(0x1234);
  EXPECT_EQ(again.cluster_id(), seeded.cluster_id());
  // A file from before any leader (no base, nothing held): the id is kept
  // when the first LeaderStart sets the base.
  LockStateMachine empty({});
  empty.start_restored_group(0x99);
  const std::uint64_t id = empty.cluster_id();
  EXPECT_FALSE(empty.rebase_pending());
  empty.apply(entry(1, 1, leader_start(kSec)));
  EXPECT_EQ(empty.cluster_id(), id);
  EXPECT_EQ(empty.token_base(), kWall);
}

// issue 21: a waiter id beyond the snapshot's index collides with the
// acquire applied at that index later. Refused by restore() and by
// check_snapshot(), which Raft asks before storing anything.
TEST(LockStateMachine, SnapshotWithAWaiterIdBeyondItsIndexIsRefused) {
  LockStateMachine sm({});
  std::string error;
  EXPECT_TRUE(sm.check_snapshot(testing::snapshot_with_waiter(5, 5), 5, error)) << error;
  EXPECT_FALSE(sm.check_snapshot(testing::snapshot_with_waiter(5, 6), 5, error));
  EXPECT_NE(error.find("waiter id 6 is beyond its index 5"), std::string::npos) << error;
  EXPECT_FALSE(sm.restore(testing::snapshot_with_waiter(5, 6), 5, error));
  EXPECT_EQ(sm.applied(), 0u);
  // check_snapshot() changes nothing even when the bytes are good.
  EXPECT_TRUE(sm.check_snapshot(testing::snapshot_with_waiter(5, 4), 5, error)) << error;
  EXPECT_EQ(sm.applied(), 0u);
  EXPECT_EQ(sm.table().key_count(), 0u);
  // The restoring node's own flags never refuse one (issue 19: a snapshot
  // is the leader's state; the caps are the cluster's, carried inside it).
  locks::Limits tight;
  tight.max_waiters_per_key = 0;
  EXPECT_TRUE(LockStateMachine(tight).check_snapshot(testing::snapshot_with_waiter(5, 4), 5, error))
      << error;
  EXPECT_FALSE(sm.check_snapshot("garbage", 5, error));
}

// A follower installs a leader's snapshot from the machine decoded when it
// was checked (one decode instead of two): the same state as restore().
TEST(LockStateMachine, ADecodedSnapshotAdoptedIsTheSameAsOneRestored) {
  const std::string bytes = testing::snapshot_with_waiter(5, 4);
  LockStateMachine restored({});
  std::string error;
  ASSERT_TRUE(restored.restore(bytes, 5, error)) << error;
  LockStateMachine adopted({});
  std::unique_ptr<LockStateMachine> decoded = adopted.decode_snapshot(bytes, 5, error);
  ASSERT_NE(decoded, nullptr) << error;
  EXPECT_EQ(adopted.applied(), 0u);  // decoding changes nothing
  adopted.adopt(std::move(*decoded));
  EXPECT_EQ(adopted.applied(), 5u);
  EXPECT_EQ(adopted.table().key_count(), restored.table().key_count());
  EXPECT_EQ(adopted.snapshot(), restored.snapshot());
  // What restore() refuses, decode_snapshot() refuses with the same line.
  EXPECT_EQ(adopted.decode_snapshot(testing::snapshot_with_waiter(5, 6), 5, error), nullptr);
  EXPECT_NE(error.find("waiter id 6 is beyond its index 5"), std::string::npos) << error;
}

TEST(LockCommandCodec, NewTypesDecodeStrictly) {
  LockCommand ls = leader_start(kSec);
  LockCommand back;
  EXPECT_EQ(decode_lock_command(encode_lock_command(ls), back), LockCommandError::kOk);
  EXPECT_EQ(back, ls);
  LockCommand bad = ls;
  bad.token_base = 5;  // not a wall clock
  EXPECT_EQ(decode_lock_command(encode_lock_command(bad), back), LockCommandError::kBadField);
  bad = ls;
  bad.key = "k";
  EXPECT_EQ(decode_lock_command(encode_lock_command(bad), back), LockCommandError::kBadField);
  std::string bytes = encode_lock_command(ls);
  bytes[1] = 9;
  EXPECT_EQ(decode_lock_command(bytes, back), LockCommandError::kBadType);
}

LockCommand config(TimeNs now, locks::Limits caps, std::uint64_t token_floor = 0) {
  LockCommand c;
  c.type = LockCommandType::kConfig;
  c.now_ns = now;
  c.max_keys = caps.max_keys;
  c.max_waiters_per_key = caps.max_waiters_per_key;
  c.max_waiters = caps.max_waiters;
  c.token_floor = token_floor;
  return c;
}

raft::Entry entry_v(raft::Term term, raft::Index index, const LockCommand& c, std::uint16_t v) {
  return raft::Entry{term, index, raft::EntryType::kCommand, encode_lock_command(c, v)};
}

TEST(LockCommandCodec, ConfigIsVersionThreeAndVersionsOutsideTheRangeAreRefused) {
  const LockCommand c = config(kSec, {7, 2, 9}, 12345);
  LockCommand back;
  const std::string v3 = encode_lock_command(c, kEntryVersionConfig);
  EXPECT_EQ(lock_command_version(v3), 3);
  ASSERT_EQ(decode_lock_command(v3, back), LockCommandError::kOk);
  EXPECT_EQ(back, c);
  for (std::size_t n = 0; n < v3.size(); ++n) {
    EXPECT_NE(decode_lock_command(std::string_view(v3).substr(0, n), back), LockCommandError::kOk);
  }
  // Version 2 (lockd 1.1) has no kConfig.
  std::string as_v2 = v3;
  as_v2[0] = 2;
  EXPECT_EQ(decode_lock_command(as_v2, back), LockCommandError::kBadType);
  // The same acquire in 2 and 3 means the same thing.
  const LockCommand a = acquire(kSec, "o", "k", 1000);
  EXPECT_EQ(decode_lock_command(encode_lock_command(a, 2), back), LockCommandError::kOk);
  EXPECT_EQ(back, a);
  EXPECT_EQ(decode_lock_command(encode_lock_command(a, 3), back), LockCommandError::kOk);
  EXPECT_EQ(back, a);
  std::string future = encode_lock_command(a, 3);
  future[0] = static_cast<char>(kEntryVersionMax + 1);
  EXPECT_EQ(decode_lock_command(future, back), LockCommandError::kBadVersion);
  future[0] = 1;
  EXPECT_EQ(decode_lock_command(future, back), LockCommandError::kBadVersion);
  LockCommand zero_cap = c;
  zero_cap.max_waiters = 0;
  EXPECT_EQ(decode_lock_command(encode_lock_command(zero_cap, 3), back), LockCommandError::kBadField);
}

// Only the log decides: two replicas whose own flags differ apply one log
// identically, with the caps the log carries (before any kConfig: the
// documented defaults, on both).
TEST(LockStateMachine, CapsComeFromTheLogNotFromTheReplicasFlags) {
  LockStateMachine high({1'000'000, 10'000, 1'000'000});
  LockStateMachine low({5, 1, 2});
  std::vector<raft::Entry> log;
  log.push_back(entry(1, 1, leader_start(kSec)));
  for (int k = 0; k < 8; ++k) {
    log.push_back(entry(1, static_cast<raft::Index>(log.size() + 1),
                        acquire(kSec, "a", "k" + std::to_string(k), 60000)));
  }
  log.push_back(entry_v(1, log.size() + 1, config(kSec, {12, 2, 3}), 3));
  for (int k = 8; k < 14; ++k) {
    log.push_back(entry(1, static_cast<raft::Index>(log.size() + 1),
                        acquire(kSec, "a", "k" + std::to_string(k), 60000)));
  }
  for (int w = 0; w < 3; ++w) {
    log.push_back(entry(1, static_cast<raft::Index>(log.size() + 1),
                        acquire(kSec, "w" + std::to_string(w), "k0", 60000, 60000)));
  }
  for (const raft::Entry& e : log) {
    const EntryResult& a = high.apply(e);
    const auto oa = std::make_pair(a.acquire, a.granted);
    const EntryResult& b = low.apply(e);
    EXPECT_EQ(oa, std::make_pair(b.acquire, b.granted)) << "entry " << e.index;
  }
  // 8 keys granted under the defaults, 4 more up to the log's 12, then `B`;
  // two waiters per key allowed: the third is `B`.
  EXPECT_EQ(high.table().key_count(), 12u);
  EXPECT_EQ(low.table().key_count(), 12u);
  // The cluster id is the first LeaderStart's, the same on both.
  EXPECT_NE(high.cluster_id(), 0u);
  EXPECT_EQ(high.cluster_id(), low.cluster_id());
  const std::uint64_t id = low.cluster_id();
  EXPECT_EQ(low.caps().max_keys, 12u);
  EXPECT_EQ(low.table().waiter_count(), 2u);
  // A later kConfig or LeaderStart changes the caps, never the cluster id.
  low.apply(entry_v(1, log.size() + 1, config(kSec, {100, 10, 100}, kWall * 2), 3));
  LockCommand later = leader_start(kSec);
  later.token_base = kWall + 77;
  low.apply(entry(2, log.size() + 2, later));
  EXPECT_EQ(low.cluster_id(), id);
  EXPECT_EQ(low.caps().max_keys, 100u);
}

// A snapshot is the leader's state: a replica installs it whatever its own
// flags, and it carries the configuration.
TEST(LockStateMachine, SnapshotInstallsWhateverTheLocalLimitsAndKeepsTheConfig) {
  LockStateMachine leader({});
  raft::Index i = 0;
  leader.apply(entry(1, ++i, leader_start(kSec)));
  leader.apply(entry_v(1, ++i, config(kSec, {50, 5, 50}, kWall + 1000), 3));
  for (int k = 0; k < 20; ++k) leader.apply(entry(1, ++i, acquire(kSec, "a", "k" + std::to_string(k), 60000)));
  LockStateMachine tiny({1, 1, 1});
  std::string error;
  ASSERT_TRUE(tiny.restore(leader.snapshot(), i, error)) << error;
  EXPECT_EQ(tiny.table().key_count(), 20u);
  EXPECT_EQ(tiny.cluster_id(), leader.cluster_id());
  EXPECT_NE(tiny.cluster_id(), 0u);
  EXPECT_EQ(tiny.caps().max_keys, 50u);
  EXPECT_EQ(tiny.token_floor(), kWall + 1000);
  // And goes on exactly like the leader.
  const raft::Entry next = entry(1, ++i, acquire(kSec, "b", "new", 60000));
  const locks::Token t1 = leader.apply(next).granted;
  EXPECT_EQ(tiny.apply(next).granted, t1);
  EXPECT_GT(t1, kWall + 1000);
}

// A committed entry that does not decode is never skipped: the machine
// applies nothing from it on, and says which entry and which version.
TEST(LockStateMachine, UndecodableEntryStopsTheMachine) {
  LockStateMachine sm({});
  sm.apply(entry(1, 1, leader_start(kSec)));
  std::string future = encode_lock_command(acquire(kSec, "a", "k", 1000), 3);
  future[0] = static_cast<char>(kEntryVersionMax + 1);
  const EntryResult& r = sm.apply(raft::Entry{1, 2, raft::EntryType::kCommand, future});
  EXPECT_TRUE(r.undecodable);
  EXPECT_EQ(r.version, kEntryVersionMax + 1);
  EXPECT_EQ(sm.undecodable(), 2u);
  EXPECT_EQ(sm.applied(), 1u);
  EXPECT_EQ(sm.table().key_count(), 0u);
  // Nothing after it applies either.
  EXPECT_TRUE(sm.apply(entry(1, 2, acquire(kSec, "a", "k", 1000))).undecodable);
  EXPECT_EQ(sm.table().key_count(), 0u);
}

// --token-floor: the first leader's base is above it whatever its clock;
// a floor raised later (a kConfig) moves the next tokens above it too.
TEST(LockStateMachine, TokensStayAboveTheFloor) {
  LockStateMachine sm({});
  raft::Index i = 0;
  LockCommand ls = leader_start(kSec);
  ls.token_base = kWall;  // a clock behind the floor
  // The leader's service raises its base to floor + 1; the machine also
  // keeps the floor a kConfig set before.
  sm.apply(entry(1, ++i, ls));
  const locks::Token t0 = sm.apply(entry(1, ++i, acquire(kSec, "a", "k0", 60000))).granted;
  EXPECT_EQ(t0, kWall + 2);
  const std::uint64_t floor = kWall + 5'000'000;
  sm.apply(entry_v(1, ++i, config(kSec, {}, floor), 3));
  const locks::Token t1 = sm.apply(entry(1, ++i, acquire(kSec, "a", "k1", 60000))).granted;
  EXPECT_GT(t1, floor);
  EXPECT_EQ(t1, floor + 2);  // base = floor - 3 + 1, entry 4
  // Survives a snapshot.
  LockStateMachine copy({});
  std::string error;
  ASSERT_TRUE(copy.restore(sm.snapshot(), i, error)) << error;
  EXPECT_EQ(copy.apply(entry(1, i + 1, acquire(kSec, "a", "k2", 60000))).granted, floor + 3);
}

// `S` travels as its own type (9, entry version 4 and later) with the limit
// after the common fields; every other type's bytes are as before.
TEST(LockCommandCodec, SharedAcquireCarriesItsLimit) {
  LockCommand c;
  c.type = LockCommandType::kAcquireShared;
  c.now_ns = kSec;
  c.owner = "reader";
  c.key = "cfg";
  c.lease_ms = 1000;
  c.wait_ms = 50;
  c.client = 3;
  c.limit = 65535;
  LockCommand back;
  const std::string bytes = encode_lock_command(c, kEntryVersionShared);
  EXPECT_EQ(lock_command_version(bytes), 4);
  ASSERT_EQ(decode_lock_command(bytes, back), LockCommandError::kOk);
  EXPECT_EQ(back, c);
  LockCommand plain = c;
  plain.type = LockCommandType::kAcquire;
  plain.limit = 0;
  EXPECT_EQ(encode_lock_command(plain, kEntryVersionShared).size() + 4, bytes.size());
  // A limit past 65535, or a missing one: refused.
  std::string big = bytes;
  big[big.size() - 2] = 1;  // 0x0001FFFF
  EXPECT_EQ(decode_lock_command(big, back), LockCommandError::kBadField);
  EXPECT_EQ(decode_lock_command(bytes.substr(0, bytes.size() - 1), back), LockCommandError::kTruncated);
  // An exclusive acquire with trailing limit bytes is not an `S`.
  EXPECT_EQ(decode_lock_command(encode_lock_command(plain, kEntryVersionShared) + std::string(4, '\0'), back),
            LockCommandError::kTrailing);
  // Versions 2 and 3 have no kAcquireShared: a node of those builds never
  // takes one for something else.
  for (char v : {2, 3}) {
    std::string old = bytes;
    old[0] = v;
    EXPECT_EQ(decode_lock_command(old, back), LockCommandError::kBadType);
  }
}

// --- the service on a one-node Raft ---

class FakeReplies final : public server::ClientReplies {
 public:
  std::string* reply_buffer(locks::ClientId client, server::ReplyKind) override {
    if (gone.contains(client)) {
      ++to_gone[client];  // the server's own writer would drop it too
      return nullptr;
    }
    return &out[client];
  }
  void reply_queued(locks::ClientId) override {}
  std::string take(locks::ClientId client) {
    std::string s = std::move(out[client]);
    out[client].clear();
    return s;
  }
  std::map<locks::ClientId, std::string> out;
  std::set<locks::ClientId> gone;
  std::map<locks::ClientId, int> to_gone;  // replies attempted after the client left
};

class Node final : public raft::ReadyHandler {
 public:
  explicit Node(ReplicatedServiceOptions o = options()) : raft_(config(), storage_), svc_(raft_, std::move(o)) {
    svc_.attach(replies_);
    raft_.campaign();
    settle();
  }

  static raft::Config config() {
    raft::Config c;
    c.id = 1;
    c.voters = {1};
    return c;
  }
  static ReplicatedServiceOptions options() {
    ReplicatedServiceOptions o;
    o.client_addrs[1] = "127.0.0.1:7070";
    o.wall_clock_ns = [] { return static_cast<TimeNs>(kWall); };
    return o;
  }

  void send(std::vector<raft::Message>&) override {}
  raft::StorageStatus persist(const raft::Ready& rd) override {
    return raft::persist_ready(storage_, rd);
  }
  void install(const raft::Snapshot&) override { FAIL(); }
  void apply(const raft::Entry& e) override { svc_.apply(e); }

  // Runs Ready cycles until nothing is left, as ClusterNode::after_turn.
  void settle() {
    for (int i = 0; i < 50; ++i) {
      svc_.sync(now);
      if (!raft_.has_ready()) break;
      ASSERT_TRUE(raft::drive_ready(raft_, *this, 1).ok());
    }
  }
  // One request line from `client`: the immediate reply, or "" if it waits.
  std::string request(locks::ClientId client, const std::string& line) {
    const proto::ParseResult p = proto::parse_line(line, proto::ParseLimits{});
    const auto* req = std::get_if<proto::Request>(&p);
    EXPECT_NE(req, nullptr) << line;
    std::string out;
    if (svc_.handle(client, *req, now, out, stats_)) return out;
    return "";
  }
  // A leader of a higher term appears (node 2's heartbeat): this node
  // follows it and loses its leadership.
  void follow_a_higher_term() {
    raft::Message m;
    m.type = raft::MessageType::kHeartbeat;
    m.from = 2;
    m.to = 1;
    m.term = raft_.term() + 1;
    ASSERT_EQ(raft_.step(std::move(m)), raft::StepError::kOk);
    settle();
  }
  void tick_to(TimeNs t) {
    now = t;
    svc_.on_time(now);
    settle();
  }

  TimeNs now = 50 * kSec;
  // One for the node's life, as the daemon's: its RecentKeys is 1 MB,
  // which a ServerStats per request zeroed 20,000 times in the big-table
  // test (~90% of this file's run time; ~55 s of it under ASan).
  server::ServerStats stats_;
  raft::MemoryStorage storage_;
  raft::Raft raft_;
  ReplicatedLockService svc_;
  FakeReplies replies_;
};

TEST(ReplicatedLockService, AnswersWhenTheEntryIsApplied) {
  Node n;
  ASSERT_TRUE(n.svc_.serving());
  EXPECT_EQ(n.request(7, "A alice k1 1000"), "");  // proposed, not yet applied
  EXPECT_EQ(n.replies_.take(7), "");
  n.settle();
  const std::string r = n.replies_.take(7);
  ASSERT_EQ(r.substr(0, 2), "A ") << r;
  EXPECT_GT(std::stoull(r.substr(2)), kWall);
  n.request(8, "A bob k1");
  n.settle();
  EXPECT_EQ(n.replies_.take(8), "T bob k1\n");
}

TEST(ReplicatedLockService, WaitTimeoutIsAnsweredAfterTheCancelCommits) {
  Node n;
  n.request(7, "A alice k1 60000");
  n.settle();
  n.replies_.take(7);
  n.request(8, "A bob k1 60000 100");
  n.settle();
  EXPECT_EQ(n.replies_.take(8), "");  // queued
  EXPECT_EQ(n.svc_.table().waiter_count(), 1u);
  // The wait runs out: on_time proposes the cancel; T only once applied.
  n.now += 101'000'000;
  n.svc_.on_time(n.now);
  EXPECT_EQ(n.replies_.take(8), "");
  EXPECT_EQ(n.svc_.table().waiter_count(), 1u);
  n.settle();
  EXPECT_EQ(n.replies_.take(8), "T bob k1\n");
  EXPECT_EQ(n.svc_.table().waiter_count(), 0u);
}

// Leadership lost with requests in flight: one whose entry is already
// committed gets what it did (a removed leader never hears of its entries
// again, so this is its only chance to say), one not yet committed gets
// E indeterminate, and a committed acquire that queued gets E
// indeterminate too (only a leader serves waiters).
TEST(ReplicatedLockService, CommittedRequestsAreAnsweredAfterLeadershipIsLost) {
  Node n;
  n.request(9, "A carol busy 60000");
  n.settle();
  ASSERT_EQ(n.replies_.take(9).substr(0, 2), "A ");
  EXPECT_EQ(n.request(7, "A alice k1 1000"), "");
  EXPECT_EQ(n.request(8, "A bob busy 60000 5000"), "");
  // One Ready cycle: both are persisted, and so committed by this
  // one-node group, but applied only in the next cycle.
  n.svc_.sync(n.now);
  ASSERT_TRUE(raft::drive_ready(n.raft_, n, 1).ok());
  const raft::Index committed = n.raft_.commit();
  ASSERT_EQ(committed, n.raft_.last_index());
  EXPECT_EQ(n.replies_.take(7), "");
  // One more, not committed, then a leader of a higher term appears.
  EXPECT_EQ(n.request(10, "A dave k2 1000"), "");
  n.follow_a_higher_term();
  ASSERT_FALSE(n.svc_.serving());
  const std::string granted = n.replies_.take(7);
  EXPECT_EQ(granted.substr(0, 2), "A ") << granted;
  EXPECT_NE(granted.find(" alice k1"), std::string::npos) << granted;
  EXPECT_EQ(n.replies_.take(8), "E indeterminate bob busy\n");
  EXPECT_EQ(n.replies_.take(10), "E indeterminate dave k2\n");
  EXPECT_NE(n.svc_.table().find("k1"), nullptr);  // the grant stands
}

TEST(ReplicatedLockService, ExpiryThroughTheLogHandsTheKeyOn) {
  Node n;
  n.request(7, "A alice k1 200");
  n.settle();
  const std::string first = n.replies_.take(7);
  n.request(8, "A bob k1 60000 5000");
  n.settle();
  EXPECT_EQ(n.replies_.take(8), "");
  n.tick_to(n.now + 150'000'000);
  EXPECT_EQ(n.replies_.take(8), "");  // lease not over yet
  n.tick_to(n.now + 60'000'000);
  const std::string handed = n.replies_.take(8);
  ASSERT_EQ(handed.substr(0, 2), "A ") << handed;
  EXPECT_GT(std::stoull(handed.substr(2)), std::stoull(first.substr(2)));
}

// A new leader watches the table's leases in bounded slices, one per
// timer, not in one walk: a leader of a 1 M-lock table spent over a second
// rebuilding its lease heap before serving, past the election timeout, and
// the group kept changing leaders. Every lease still ends.
TEST(ReplicatedLockService, NewLeaderWatchesABigTableInSlices) {
  Node n;
  // Enough keys for more than two slices of buckets (> 8192).
  constexpr std::size_t kKeys = 20'000;
  for (std::size_t i = 0; i < kKeys; ++i) {
    n.request(7, "A alice k" + std::to_string(i) + " 1000");
    if (i % 500 == 499) n.settle();
  }
  n.settle();
  ASSERT_EQ(n.svc_.table().holder_count(), kKeys);
  ASSERT_GT(n.svc_.table().bucket_count(), 8192u);
  // A leader of a higher term appears (this node follows it), then this
  // node wins again: a new term, a new LeaderStart.
  n.follow_a_higher_term();
  ASSERT_FALSE(n.svc_.serving());
  EXPECT_EQ(n.svc_.leases_watched(), 0u);
  n.raft_.campaign();
  n.settle();
  ASSERT_TRUE(n.svc_.serving());
  EXPECT_TRUE(n.svc_.lease_scan_active());
  EXPECT_LT(n.svc_.leases_watched(), kKeys / 2);  // one slice, not the table
  EXPECT_EQ(n.svc_.next_deadline(n.now), n.now);  // the next slice is due at once
  for (int i = 0; i < 100 && n.svc_.lease_scan_active(); ++i) n.tick_to(n.now + 1'000'000);
  EXPECT_FALSE(n.svc_.lease_scan_active());
  EXPECT_GE(n.svc_.leases_watched(), kKeys);
  // Past the leases: every one is proposed, committed and applied.
  n.now += 2 * kSec;
  for (int i = 0; i < 10'000 && n.svc_.table().holder_count() > 0; ++i) n.tick_to(n.now + 1'000'000);
  EXPECT_EQ(n.svc_.table().holder_count(), 0u);
}

// K moves the deadline the leader's expiry heap follows.
TEST(ReplicatedLockService, KeepMovesTheExpiry) {
  Node n;
  n.request(7, "A alice k1 200");
  n.settle();
  const std::string granted = n.replies_.take(7);
  const std::string token = granted.substr(2, granted.find(' ', 2) - 2);
  n.request(7, "K " + token + " k1 1000");
  n.settle();
  EXPECT_EQ(n.replies_.take(7), "K " + token + " k1\n");
  n.request(8, "A bob k1 60000 5000");
  n.settle();
  n.tick_to(n.now + 300'000'000);  // past the first lease, not the kept one
  EXPECT_EQ(n.replies_.take(8), "");
  ASSERT_NE(n.svc_.table().find("k1"), nullptr);
  n.tick_to(n.now + 800'000'000);
  EXPECT_EQ(n.replies_.take(8).substr(0, 2), "A ");
  n.request(9, "K " + token + " k1 1000");
  n.settle();
  EXPECT_EQ(n.replies_.take(9), "N " + token + " k1\n");
}

TEST(ReplicatedLockService, DisconnectCancelsQueuedWaitersWithoutReply) {
  Node n;
  n.request(7, "A alice k1 60000");
  n.settle();
  n.request(8, "A bob k1 60000 5000");
  n.settle();
  EXPECT_EQ(n.svc_.table().waiter_count(), 1u);
  EXPECT_EQ(n.replies_.take(8), "");
  n.replies_.gone.insert(8);
  n.svc_.client_closed(8);
  n.settle();
  EXPECT_EQ(n.svc_.table().waiter_count(), 0u);
  // Taken out of the queue without a reply: not `T`, not `E`, not attempted.
  EXPECT_EQ(n.replies_.to_gone[8], 0);
  // And the key is not handed to it when alice lets go.
  n.replies_.gone.erase(8);
  const std::string a = n.replies_.take(7);
  ASSERT_EQ(a.substr(0, 2), "A ") << a;
  const std::string token = a.substr(2, a.find(' ', 2) - 2);
  EXPECT_EQ(n.request(7, "R " + token + " k1"), "");
  n.settle();
  EXPECT_EQ(n.replies_.take(7), "R " + token + " k1\n");
  EXPECT_EQ(n.replies_.take(8), "");
  EXPECT_EQ(n.svc_.table().key_count(), 0u);
}

TEST(ReplicatedLockService, OverloadRefusesAcquireWithBusy) {
  Node n;
  // No settle: proposals pile up uncommitted until Raft's cap.
  std::string last;
  for (std::size_t i = 0; i <= raft::kDefaultMaxUncommittedEntries + 1; ++i) {
    last = n.request(7, "A a k" + std::to_string(i) + " 1000");
    if (!last.empty()) break;
  }
  EXPECT_EQ(last.substr(0, 2), "B ") << last;
  EXPECT_EQ(n.request(7, "R 5 k1").substr(0, 15), "E indeterminate");
  EXPECT_EQ(n.request(7, "K 5 k1 100"), "E indeterminate 5 k1\n");
}

// A hand-off that commits before a disconnected waiter's cancel: the grant
// reaches nobody, so it is released through the log at once instead of
// holding the key for the whole lease (issue 19, "Why" 5).
TEST(ReplicatedLockService, HandOffToAWaiterWhoseClientLeftIsReleased) {
  Node n;
  n.request(7, "A alice k1 60000");
  n.settle();
  const std::string a = n.replies_.take(7);
  const std::string token = a.substr(2, a.find(' ', 2) - 2);
  n.request(8, "A bob k1 60000 30000");
  n.settle();
  ASSERT_EQ(n.svc_.table().waiter_count(), 1u);
  // alice's release is proposed first, then bob leaves: the release (and
  // its hand-off to bob) commits before bob's cancel.
  EXPECT_EQ(n.request(7, "R " + token + " k1"), "");
  n.replies_.gone.insert(8);
  n.svc_.client_closed(8);
  n.settle();
  EXPECT_EQ(n.replies_.take(7), "R " + token + " k1\n");
  EXPECT_EQ(n.replies_.to_gone[8], 0);
  EXPECT_EQ(n.svc_.table().find("k1"), nullptr) << "the orphaned grant still holds the key";
  EXPECT_EQ(n.svc_.stats().orphans_released, 1u);
  // The next acquire gets the key at once.
  n.request(9, "A carol k1 60000");
  n.settle();
  EXPECT_EQ(n.replies_.take(9).substr(0, 2), "A ");
}

// An acquire whose client leaves while it is still being committed: if it
// is granted, nobody hears of it, and it is released through the log.
TEST(ReplicatedLockService, GrantToAClientThatLeftWhileCommittingIsReleased) {
  Node n;
  EXPECT_EQ(n.request(8, "A bob k1 60000"), "");
  n.replies_.gone.insert(8);
  n.svc_.client_closed(8);
  n.settle();
  EXPECT_EQ(n.replies_.to_gone[8], 0);
  EXPECT_EQ(n.svc_.table().find("k1"), nullptr);
  // Queued instead (someone holds the key): taken out of the queue.
  n.request(7, "A alice k2 60000");
  n.settle();
  EXPECT_EQ(n.request(8, "A bob k2 60000 30000"), "");
  n.svc_.client_closed(8);
  n.settle();
  EXPECT_EQ(n.svc_.table().waiter_count(), 0u);
}

// A clock entry refused by back-pressure is retried a little later: the
// service's next deadline is not "now" (the timer would spin).
TEST(ReplicatedLockService, RefusedClockEntryBacksOff) {
  Node n;
  n.request(7, "A alice k1 60000");
  n.settle();
  n.replies_.take(7);
  // No settle: proposals pile up uncommitted until Raft refuses more.
  for (std::size_t i = 0; i <= raft::kDefaultMaxUncommittedEntries + 1; ++i) {
    if (!n.request(7, "A a x" + std::to_string(i) + " 1000").empty()) break;
  }
  n.now += ReplicatedServiceOptions{}.clock_interval_ns + 1;
  n.svc_.on_time(n.now);
  EXPECT_EQ(n.svc_.stats().clock_retries, 1u);
  const std::optional<TimeNs> next = n.svc_.next_deadline(n.now);
  ASSERT_TRUE(next.has_value());
  EXPECT_GT(*next, n.now) << "a refused clock entry is retried on the very next timer";
  // Once the log drains, the clock entry goes in.
  n.settle();
  n.now = *next;
  const std::uint64_t before = n.svc_.stats().proposals;
  n.svc_.on_time(n.now);
  EXPECT_EQ(n.svc_.stats().proposals, before + 1);
}

// `S` needs entry version 4: while a member's handshake says it applies
// less (a rolling upgrade from a 1.2 build before `S`), it is not proposed
// and gets E no_leader (not processed: the client retries), while every
// other verb keeps working; once every member applies 4, it is.
TEST(ReplicatedLockService, SharedIsProposedOnlyOnceEveryMemberAppliesVersionFour) {
  std::uint16_t newest = kEntryVersionConfig;  // what "every member" applies
  ReplicatedServiceOptions o = Node::options();
  o.cluster_supports = [&newest](std::uint16_t v) { return v <= newest; };
  Node n(std::move(o));
  ASSERT_TRUE(n.svc_.serving());
  const raft::Index before = n.raft_.last_index();
  EXPECT_EQ(n.request(7, "S reader cfg 0 1000"), "E no_leader reader cfg\n");
  EXPECT_EQ(n.raft_.last_index(), before);  // nothing proposed
  EXPECT_EQ(n.request(7, "A writer k 1000"), "");
  n.settle();
  EXPECT_EQ(n.replies_.take(7).substr(0, 2), "A ");
  newest = kEntryVersionShared;
  EXPECT_EQ(n.request(7, "S reader cfg 0 1000"), "");
  n.settle();
  EXPECT_EQ(n.replies_.take(7).substr(0, 2), "S ");
  ASSERT_FALSE(n.storage_.entries().empty());
  EXPECT_EQ(lock_command_version(n.storage_.entries().back().data), kEntryVersionShared);
}

// issue 36 item 7: a departing client's waiters leave in one entry. Here a
// reader holds k, the client's writer waits at the front and its reader
// behind it. One cancel at a time would take the writer out first and hand
// k to the departed client's reader (granted, then released as an orphan);
// together, nobody is granted anything and both are simply gone.
TEST(ReplicatedLockService, DepartingClientsWaitersAreCancelledInOneEntry) {
  Node n;
  n.request(7, "S alice k 0 60000");
  n.settle();
  EXPECT_EQ(n.replies_.take(7).substr(0, 2), "S ");
  EXPECT_EQ(n.request(8, "A bob-w k 60000 30000"), "");
  EXPECT_EQ(n.request(8, "S bob-r k 0 60000 30000"), "");
  EXPECT_EQ(n.request(8, "A bob-x other 60000 30000"), "");  // other is free: granted
  n.settle();
  ASSERT_EQ(n.svc_.table().waiter_count(), 2u);
  const raft::Index before = n.raft_.last_index();
  n.replies_.gone.insert(8);
  n.svc_.client_closed(8);
  n.settle();
  EXPECT_EQ(n.raft_.last_index(), before + 1) << "one entry for both waiters";
  LockCommand c;
  ASSERT_EQ(decode_lock_command(n.storage_.entries().back().data, c), LockCommandError::kOk);
  EXPECT_EQ(c.type, LockCommandType::kCancelWaiters);
  EXPECT_EQ(c.waiters.size(), 2u);
  EXPECT_EQ(lock_command_version(n.storage_.entries().back().data), kEntryVersionCancelWaiters);
  EXPECT_EQ(n.svc_.table().waiter_count(), 0u);
  EXPECT_EQ(n.svc_.stats().orphans_released, 0u) << "the departed client's reader was granted k";
  EXPECT_EQ(n.svc_.table().stats().waiters_cancelled, 2u);
  EXPECT_EQ(n.replies_.to_gone[8], 0);
}

// With a member that applies only version 4 (a rolling upgrade from 1.2),
// the leader falls back to one kCancelWaiter entry per waiter.
TEST(ReplicatedLockService, DepartingClientsWaitersOneEntryEachBeforeVersionFive) {
  ReplicatedServiceOptions o = Node::options();
  o.cluster_supports = [](std::uint16_t v) { return v <= kEntryVersionShared; };
  Node n(std::move(o));
  n.request(7, "A alice k1 60000");
  n.request(7, "A alice k2 60000");
  n.settle();
  n.replies_.take(7);
  EXPECT_EQ(n.request(8, "A bob k1 60000 30000"), "");
  EXPECT_EQ(n.request(8, "A bob k2 60000 30000"), "");
  n.settle();
  ASSERT_EQ(n.svc_.table().waiter_count(), 2u);
  const raft::Index before = n.raft_.last_index();
  n.replies_.gone.insert(8);
  n.svc_.client_closed(8);
  n.settle();
  EXPECT_EQ(n.raft_.last_index(), before + 2);
  for (std::size_t i = 1; i <= 2; ++i) {
    const auto& e = n.storage_.entries()[n.storage_.entries().size() - i];
    LockCommand c;
    ASSERT_EQ(decode_lock_command(e.data, c), LockCommandError::kOk);
    EXPECT_EQ(c.type, LockCommandType::kCancelWaiter);
    EXPECT_LE(lock_command_version(e.data), kEntryVersionShared);
  }
  EXPECT_EQ(n.svc_.table().waiter_count(), 0u);
}

}  // namespace
}  // namespace lockd::cluster
