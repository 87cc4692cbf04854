// The lock table's lease-end index (LockTable::track_lost_leases: single
// mode's lost notice `X`, protocol §5c) and the NodePool its nodes live in.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "lockd/locks/lock_table.h"
#include "lockd/locks/node_pool.h"

namespace lockd::locks {
namespace {

constexpr TimeNs kMs = kNsPerMs;
// A lease is told within a tick of its end when run_lost_leases() is
// called at least that often.
constexpr TimeNs kTick = LockTable::kLeaseTickNs;

struct Told {
  ClientId client;
  Token token;
  std::string key;
  TimeNs at;
};

class Recorder final : public LostObserver {
 public:
  void lease_lost(ClientId client, Token token, std::string_view key) override {
    told.push_back({client, token, std::string(key), now});
  }
  std::vector<Told> told;
  TimeNs now = 0;
};

class LostLeaseTest : public ::testing::Test {
 protected:
  LostLeaseTest() : table_({}, 1) { table_.track_lost_leases(&rec_); }

  Token acquire(std::string_view key, std::uint64_t lease_ms, ClientId client, std::uint64_t wait_ms = 0,
                bool shared = false) {
    auto r = table_.acquire(now_, {"o", key, lease_ms, wait_ms, client, next_waiter_++, shared, 0});
    table_.check_invariants();
    return r.outcome == AcquireOutcome::kGranted ? r.token : 0;
  }
  void at(TimeNs t) {
    now_ = t;
    rec_.now = t;
  }
  void run(TimeNs t) {
    at(t);
    table_.run_lost_leases(now_);
    table_.check_invariants();
  }

  Recorder rec_;
  LockTable table_;
  TimeNs now_ = 1'000'000 * kMs;  // far from 0, as a monotonic clock is
  WaiterId next_waiter_ = 1;
  std::vector<Delivery> out_;
};

TEST_F(LostLeaseTest, AnEndedLeaseIsToldOnceWithinATickOfItsEnd) {
  at(now_);
  const Token t = acquire("k", 100, 7);
  EXPECT_EQ(table_.lost_leases_indexed(), 1u);
  const TimeNs end = now_ + 100 * kMs;
  const auto check = table_.next_lost_check();
  ASSERT_TRUE(check.has_value());
  EXPECT_GT(*check, end);             // the end's tick is over then...
  EXPECT_LE(*check, end + kTick);     // ...and not later
  run(end - 1);
  EXPECT_TRUE(rec_.told.empty());
  run(*check);
  ASSERT_EQ(rec_.told.size(), 1u);
  EXPECT_EQ(rec_.told[0].client, 7u);
  EXPECT_EQ(rec_.told[0].token, t);
  EXPECT_EQ(rec_.told[0].key, "k");
  EXPECT_EQ(table_.lost_leases_indexed(), 0u);
  EXPECT_EQ(table_.find("k")->token, t);  // still registered until swept or taken over
  run(*check + 100 * kTick);
  EXPECT_EQ(rec_.told.size(), 1u);  // once
  EXPECT_FALSE(table_.next_lost_check().has_value());
}

TEST_F(LostLeaseTest, AReleaseOrAKeepMovesOrDropsTheEntry) {
  const Token released = acquire("r", 100, 1);
  EXPECT_EQ(table_.release(now_, released, "r", out_), ReleaseOutcome::kReleased);
  const Token later = acquire("later", 100, 2);
  const Token earlier = acquire("earlier", 500, 3);
  const TimeNs start = now_;
  EXPECT_EQ(table_.keep(now_ + 50 * kMs, later, "later", 1'000), KeepOutcome::kKept);
  EXPECT_EQ(table_.keep(now_ + 50 * kMs, earlier, "earlier", 10), KeepOutcome::kKept);
  table_.check_invariants();
  run(start + 200 * kMs);  // past the first end of `later`, past the new end of `earlier`
  ASSERT_EQ(rec_.told.size(), 1u);
  EXPECT_EQ(rec_.told[0].token, earlier);
  run(start + 1'100 * kMs);
  ASSERT_EQ(rec_.told.size(), 2u);
  EXPECT_EQ(rec_.told[1].token, later);
  EXPECT_GE(rec_.told[1].at, start + 1'050 * kMs);
}

TEST_F(LostLeaseTest, ATakeoverTellsTheEndedHolderBeforeItIsReplaced) {
  const Token old = acquire("k", 10, 4);
  at(now_ + 10 * kMs);  // ended, its tick not over: nothing ran yet
  EXPECT_TRUE(rec_.told.empty());
  const Token fresh = acquire("k", 1'000, 5);
  ASSERT_NE(fresh, 0u);
  ASSERT_EQ(rec_.told.size(), 1u);
  EXPECT_EQ(rec_.told[0].token, old);
  EXPECT_EQ(rec_.told[0].client, 4u);
  EXPECT_EQ(table_.lost_leases_indexed(), 1u);  // the new holding
  run(now_ + 10 * kTick);
  EXPECT_EQ(rec_.told.size(), 1u);
}

TEST_F(LostLeaseTest, AHandOffAtLeaseEndAndASweepTellTheEndedHolder) {
  const Token a = acquire("queued", 10, 1);
  EXPECT_EQ(acquire("queued", 1'000, 2, 60'000), 0u);  // waits
  const Token b = acquire("alone", 10, 3);
  at(now_ + 10 * kMs);
  table_.advance(now_, out_);  // hands "queued" to client 2
  table_.check_invariants();
  ASSERT_EQ(out_.size(), 1u);
  ASSERT_EQ(rec_.told.size(), 1u);
  EXPECT_EQ(rec_.told[0].token, a);
  std::size_t freed = 0;
  while (!table_.sweep_step(now_, 1'000, freed)) {
  }
  table_.check_invariants();
  EXPECT_EQ(freed, 1u);
  ASSERT_EQ(rec_.told.size(), 2u);
  EXPECT_EQ(rec_.told[1].token, b);
  EXPECT_EQ(table_.lost_leases_indexed(), 1u);  // client 2's holding
}

TEST_F(LostLeaseTest, SharedHoldingsAndUnknownClientsAreNotIndexed) {
  acquire("s", 10, 1, 0, /*shared=*/true);
  acquire("nobody", 10, /*client=*/0);
  EXPECT_EQ(table_.lost_leases_indexed(), 0u);
  run(now_ + 100 * kTick);
  EXPECT_TRUE(rec_.told.empty());
}

// Lease ends more than a turn of the wheel (~17 s) away wait in their slot
// through the turns before theirs.
TEST_F(LostLeaseTest, ALeaseLongerThanATurnOfTheWheelIsToldOnlyAtItsEnd) {
  const TimeNs start = now_;
  const Token t = acquire("long", 60'000, 9);
  for (TimeNs s = start; s < start + 60'000 * kMs; s += 997 * kMs) run(s);
  EXPECT_TRUE(rec_.told.empty());
  run(start + 60'000 * kMs + kTick);
  ASSERT_EQ(rec_.told.size(), 1u);
  EXPECT_EQ(rec_.told[0].token, t);
}

// A model of every holding against random grants, keeps, releases,
// takeovers, hand-offs and sweeps, with time moving in random steps: every
// holding whose lease ended is told exactly once, with its client, no
// earlier than its end and within a tick of the first run after it; a
// released one never. check_invariants() after every step.
TEST_F(LostLeaseTest, RandomHistoriesTellEveryEndedHoldingOnce) {
  std::mt19937_64 rng(20261207);
  struct Holding {
    std::string key;
    ClientId client;
    TimeNs end;
    bool released = false;
    bool told = false;
  };
  std::map<Token, Holding> model;
  std::unordered_map<std::string, Token> holder_of;
  std::size_t told_seen = 0;
  auto learn_grants = [&] {
    for (const Delivery& d : out_) {
      if (d.kind != DeliveryKind::kGranted) continue;
      model[d.token] = {d.key, d.client, table_.find(d.key)->expires_at_ns};
      holder_of[d.key] = d.token;
    }
    out_.clear();
  };
  auto check_told = [&] {
    for (; told_seen < rec_.told.size(); ++told_seen) {
      const Told& t = rec_.told[told_seen];
      auto it = model.find(t.token);
      ASSERT_NE(it, model.end());
      Holding& h = it->second;
      EXPECT_FALSE(h.released) << t.token;
      EXPECT_FALSE(h.told) << "told twice: " << t.token;
      EXPECT_EQ(t.client, h.client);
      EXPECT_EQ(t.key, h.key);
      EXPECT_LE(h.end, t.at) << "told before its end: " << t.token;
      h.told = true;
    }
  };
  for (int step = 0; step < 20'000; ++step) {
    const std::string key = "k" + std::to_string(rng() % 40);
    const ClientId client = 1 + rng() % 5;
    switch (rng() % 6) {
      case 0:
      case 1: {  // A, sometimes waiting
        const std::uint64_t lease = 1 + rng() % 300;
        const Token t = acquire(key, lease, client, rng() % 3 == 0 ? 500 : 0);
        if (t != 0) {
          model[t] = {key, client, now_ + static_cast<TimeNs>(lease) * kMs};
          holder_of[key] = t;
        }
        break;
      }
      case 2: {  // R of the current holder
        auto it = holder_of.find(key);
        if (it != holder_of.end() && table_.release(now_, it->second, key, out_) == ReleaseOutcome::kReleased) {
          if (!model[it->second].told) model[it->second].released = true;
          holder_of.erase(it);
        }
        learn_grants();
        break;
      }
      case 3: {  // K, earlier or later
        auto it = holder_of.find(key);
        if (it != holder_of.end() &&
            table_.keep(now_, it->second, key, 1 + rng() % 400) == KeepOutcome::kKept) {
          model[it->second].end = table_.find(key)->expires_at_ns;
        }
        break;
      }
      case 4: {  // time passes: hand-offs, waits, the index
        at(now_ + static_cast<TimeNs>(rng() % (5 * kMs)));
        table_.advance(now_, out_);
        learn_grants();
        table_.run_lost_leases(now_);
        check_told();
        // Within a tick: every holding whose lease ended in a tick that is
        // over has been told (or was released first); and the next check
        // the server would arm its timer for is no later than the end of
        // the tick any holding still to be told ends in.
        const auto check = table_.next_lost_check();
        for (const auto& [token, h] : model) {
          if (h.released || h.told) continue;
          const std::uint64_t tick = h.end >> LockTable::kLeaseTickShift;
          if (tick < static_cast<std::uint64_t>(now_ >> LockTable::kLeaseTickShift)) {
            ADD_FAILURE() << "not told in time: " << token << " ended " << (now_ - h.end) / kMs << " ms ago";
          }
          if (!check || *check > static_cast<TimeNs>((tick + 1) << LockTable::kLeaseTickShift)) {
            ADD_FAILURE() << "the next check comes after " << token << "'s tick";
          }
        }
        break;
      }
      case 5: {  // a sweep slice
        std::size_t freed = 0;
        table_.sweep_step(now_, 8, freed);
        break;
      }
    }
    table_.check_invariants();
    check_told();
  }
  // Every ended holding not released was told by a run after its tick.
  run(now_ + 400 * kMs + kTick);
  check_told();
  for (const auto& [token, h] : model) {
    if (h.released) continue;
    EXPECT_TRUE(h.told) << "never told: " << token << " (" << h.key << ")";
  }
  EXPECT_EQ(table_.lost_leases_indexed(), 0u);
}

TEST(NodePoolTest, BlocksOfTheNodeSizeAreReusedAndOthersGoToNew) {
  NodePool pool;
  void* a = pool.allocate(120, 8);  // fixes the block size: 128
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(pool.block_bytes(), 128u);
  EXPECT_EQ(pool.allocate(200, 8), nullptr);  // another size: not the pool's
  EXPECT_EQ(pool.allocate(32, 8), nullptr);   // too small to be a node
  void* b = pool.allocate(128, 16);
  EXPECT_NE(a, b);
  EXPECT_EQ(static_cast<char*>(b) - static_cast<char*>(a), 128);  // packed: no per-block header
  EXPECT_EQ(pool.blocks_in_use(), 2u);
  EXPECT_TRUE(pool.deallocate(a, 120));
  EXPECT_EQ(pool.allocate(128, 8), a);  // reused
  EXPECT_FALSE(pool.deallocate(b, 64));  // not its size: the caller's to free
  EXPECT_TRUE(pool.deallocate(b, 128));
  for (int i = 0; i < 2'000; ++i) ASSERT_NE(pool.allocate(128, 8), nullptr);
  EXPECT_EQ(pool.slab_count(), (2'001 * 128 + NodePool::kSlabBytes - 1) / NodePool::kSlabBytes);
}

TEST(NodePoolTest, TheTablesNodesComeFromItsPool) {
  LockTable table({}, 1);
  for (int i = 0; i < 1'000; ++i) {
    table.acquire(0, {"o", "key-" + std::to_string(i), 1'000, 0, 1, static_cast<WaiterId>(i + 1)});
  }
  EXPECT_EQ(table.node_pool().blocks_in_use(), 1'000u);
  EXPECT_EQ(table.node_pool().block_bytes(), 128u);  // KeyString 40 + KeyState 72 + next + hash
  EXPECT_EQ(table.sweep(2'000 * kMs), 1'000u);
  EXPECT_EQ(table.node_pool().blocks_in_use(), 0u);
}

}  // namespace
}  // namespace lockd::locks
