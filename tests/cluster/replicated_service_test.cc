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
  // Each limit of the restoring node holds too (here --max-waiters-per-key 0).
  locks::Limits tight;
  tight.max_waiters_per_key = 0;
  EXPECT_FALSE(LockStateMachine(tight).check_snapshot(testing::snapshot_with_waiter(5, 4), 5, error));
  EXPECT_FALSE(sm.check_snapshot("garbage", 5, error));
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

// `S` travels as its own type (8) with the limit after the common fields;
// every other type's bytes are as before, so an older build still decodes
// them.
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
  const std::string bytes = encode_lock_command(c);
  ASSERT_EQ(decode_lock_command(bytes, back), LockCommandError::kOk);
  EXPECT_EQ(back, c);
  LockCommand plain = c;
  plain.type = LockCommandType::kAcquire;
  plain.limit = 0;
  EXPECT_EQ(encode_lock_command(plain).size() + 4, bytes.size());
  // A limit past 65535, or a missing one: refused.
  std::string big = bytes;
  big[big.size() - 2] = 1;  // 0x0001FFFF
  EXPECT_EQ(decode_lock_command(big, back), LockCommandError::kBadField);
  EXPECT_EQ(decode_lock_command(bytes.substr(0, bytes.size() - 1), back), LockCommandError::kTruncated);
  // An exclusive acquire with trailing limit bytes is not an `S`.
  EXPECT_EQ(decode_lock_command(encode_lock_command(plain) + std::string(4, '\0'), back),
            LockCommandError::kTrailing);
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
  Node() : raft_(config(), storage_), svc_(raft_, options()) {
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
    server::ServerStats stats;
    if (svc_.handle(client, *req, now, out, stats)) return out;
    return "";
  }
  void tick_to(TimeNs t) {
    now = t;
    svc_.on_time(now);
    settle();
  }

  TimeNs now = 50 * kSec;
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

}  // namespace
}  // namespace lockd::cluster
