// LockTable snapshots: a restored table behaves exactly like the original.
// The command mix is the lock-table fuzz target's (tests/fuzz/
// fuzz_lock_table.cc): acquire with and without waiting, release of seen
// and garbage tokens, time passing, cancel, sweep, expire, keep. Each history is
// cut at several points; the table is serialized there, restored into a
// fresh one, and the rest of the history runs through both, comparing
// every outcome, every delivery and the tables' views after each command.
#include "lockd/locks/lock_table_snapshot.h"

#include <gtest/gtest.h>

#include <random>
#include <map>
#include <sstream>

namespace lockd::locks {
namespace {

const Limits kLimits{8, 3, 10};

// One command stream, drawn from bytes like the fuzz target.
struct Command {
  std::uint8_t op, key, a, b, c, d;
};

std::vector<Command> random_history(std::uint64_t seed, std::size_t n) {
  std::mt19937_64 rng(seed);
  std::vector<Command> cmds(n);
  for (Command& c : cmds) {
    c = Command{static_cast<std::uint8_t>(rng()), static_cast<std::uint8_t>(rng()),
                static_cast<std::uint8_t>(rng()), static_cast<std::uint8_t>(rng()),
                static_cast<std::uint8_t>(rng()), static_cast<std::uint8_t>(rng())};
  }
  return cmds;
}

// Applies commands to one table and writes every observable outcome.
class Runner {
 public:
  explicit Runner(LockTable& t) : t_(t) {}
  // State the runner itself carries (the client's view): copied along with
  // the table when a history is forked at a snapshot.
  TimeNs now = 0;
  WaiterId next_waiter = 1;
  std::vector<WaiterId> waiters;
  std::vector<Token> tokens;

  std::string apply(const Command& c) {
    std::ostringstream o;
    std::vector<Delivery> out;
    const std::string key = "k" + std::to_string(c.key % 10);
    switch (c.op % 7) {
      case 0: {
        const std::uint64_t lease = 1 + c.a % 50;
        const std::uint64_t wait = c.b % 3 == 0 ? 0 : c.c % 100;
        const WaiterId w = next_waiter++;
        // One in three is an `S` (v1.2), with limit 0, 1 or 2.
        const bool shared = c.d % 3 == 2;
        const auto limit = static_cast<std::uint16_t>(c.a % 3);
        const auto r = t_.acquire(now, {"o" + std::to_string(c.d % 3), key, lease, wait, c.d, w, shared, limit});
        o << "acquire " << static_cast<int>(r.outcome) << " " << r.token;
        if (r.outcome == AcquireOutcome::kGranted) tokens.push_back(r.token);
        if (r.outcome == AcquireOutcome::kQueued) waiters.push_back(w);
        break;
      }
      case 1: {
        const Token tok = tokens.empty() || c.a % 4 == 0 ? c.b : tokens[c.c % tokens.size()];
        o << "release " << static_cast<int>(t_.release(now, tok, key, out));
        break;
      }
      case 2:
        now += static_cast<TimeNs>(c.a % 8) * kNsPerMs;  // smaller steps than the fuzz: queues build up
        t_.advance(now, out);
        o << "advance";
        break;
      case 3:
        if (!waiters.empty()) o << "cancel " << t_.cancel_waiter(now, waiters[c.a % waiters.size()], out);
        break;
      case 4:
        o << "sweep " << t_.sweep(now);
        break;
      case 5: {
        const KeyState* s = t_.find(key);
        if (s != nullptr) o << "expire " << t_.expire(now, key, s->oldest().token, out);
        break;
      }
      case 6: {  // keep (K): moves a live lease's expiry, earlier or later
        const Token tok = tokens.empty() ? c.b : tokens[c.c % tokens.size()];
        o << "keep " << static_cast<int>(t_.keep(now, tok, key, 1 + c.a % 60));
        break;
      }
    }
    for (const Delivery& d : out) {
      o << " | delivery " << d.client << " " << d.waiter << " " << static_cast<int>(d.kind) << " " << d.token
        << " " << d.owner << " " << d.key << " " << d.shared;
      if (d.kind == DeliveryKind::kGranted) tokens.push_back(d.token);
    }
    t_.check_invariants();
    o << " || keys " << t_.key_count() << " waiters " << t_.waiter_count() << " next " << t_.next_token()
      << " deadline " << t_.next_deadline().value_or(-1) << " ::" << describe();
    return o.str();
  }

  // Every key's full state, in key order.
  std::string describe() const {
    std::map<std::string, std::string> keys;
    t_.for_each([&](std::string_view k, const KeyState& s) {
      std::ostringstream o;
      o << (s.shared() ? "shared/" : "exclusive/") << s.limit();
      s.for_each_holder([&](const Holder& h) {
        o << " " << h.owner << "/" << h.token << "/" << h.expires_at_ns << "/" << h.lease_ms;
      });
      if (const std::list<Waiter>* queue = s.waiters()) {
        for (const Waiter& w : *queue) {
          o << " [" << w.id << " " << w.client << " " << w.owner << " " << w.lease_ms << " " << w.wait_deadline_ns
            << " " << w.shared << " " << w.limit << "]";
        }
      }
      keys[std::string(k)] = o.str();
    });
    std::string all;
    for (const auto& [k, v] : keys) all += " " + k + "=" + v;
    return all;
  }

 private:
  LockTable& t_;
};

TEST(LockTableSnapshot, RestoredTableBehavesExactlyLikeTheOriginal) {
  // Sanitizer builds (about 10x slower) check the same paths on fewer seeds.
#if defined(__SANITIZE_ADDRESS__)
  constexpr std::uint64_t kSeeds = 40;
#else
  constexpr std::uint64_t kSeeds = 120;
#endif
  std::size_t cuts_with_waiters = 0;
  std::size_t cuts_with_shared = 0;
  std::size_t cuts_with_many_readers = 0;
  for (std::uint64_t seed = 1; seed <= kSeeds; ++seed) {
    const std::vector<Command> history = random_history(seed, 400);
    for (std::size_t cut : {0ul, 1ul, 17ul, 100ul, 250ul}) {
      LockTable original(kLimits, 1);
      Runner a(original);
      for (std::size_t i = 0; i < cut; ++i) a.apply(history[i]);
      if (original.waiter_count() > 0) ++cuts_with_waiters;
      bool any_shared = false;
      original.for_each([&](std::string_view, const KeyState& s) { any_shared = any_shared || s.shared(); });
      if (any_shared) ++cuts_with_shared;
      if (original.holder_count() > original.key_count()) ++cuts_with_many_readers;
      const std::string bytes = serialize(original, "app header " + std::to_string(seed));
      LockTable restored(kLimits, 1);
      std::string header, error;
      ASSERT_TRUE(restore(bytes, restored, header, error)) << error;
      EXPECT_EQ(header, "app header " + std::to_string(seed));
      restored.check_invariants();
      Runner b(restored);
      b.now = a.now;
      b.next_waiter = a.next_waiter;
      b.waiters = a.waiters;
      b.tokens = a.tokens;
      ASSERT_EQ(b.describe(), a.describe());
      for (std::size_t i = cut; i < history.size(); ++i) {
        ASSERT_EQ(b.apply(history[i]), a.apply(history[i])) << "seed " << seed << " cut " << cut << " command " << i;
      }
    }
  }
  // The histories must reach the interesting states (queues at the cut).
  // Of 5 cuts per seed about 1 in 6 has a queue (24 of 150 at 30 seeds).
  EXPECT_GT(cuts_with_waiters, kSeeds * 2 / 3) << "of " << kSeeds * 5 << " cuts";
  EXPECT_GT(cuts_with_shared, kSeeds * 5 / 3);
  EXPECT_GT(cuts_with_many_readers, kSeeds / 24);  // keys with several shared holders
}

// A table with nothing shared is written as version 1, which a v1.1 node
// reads; a shared key makes it version 2. Both load.
TEST(LockTableSnapshot, VersionOneUnlessSomethingIsShared) {
  LockTable t(kLimits, 100);
  ASSERT_EQ(t.acquire(5, {"a", "x", 1000, 0, 1, 1}).outcome, AcquireOutcome::kGranted);
  ASSERT_EQ(t.acquire(5, {"b", "x", 1000, 50, 1, 2}).outcome, AcquireOutcome::kQueued);
  std::string bytes = serialize(t);
  EXPECT_EQ(bytes[0], 1);
  // A queued `S` alone needs version 2.
  ASSERT_EQ(t.acquire(5, {"c", "x", 1000, 50, 1, 3, true, 4}).outcome, AcquireOutcome::kQueued);
  EXPECT_EQ(serialize(t)[0], 2);
  ASSERT_EQ(t.acquire(5, {"r", "y", 1000, 0, 1, 4, true, 0}).outcome, AcquireOutcome::kGranted);
  ASSERT_EQ(t.acquire(5, {"r2", "y", 1000, 0, 1, 5, true, 0}).outcome, AcquireOutcome::kGranted);
  bytes = serialize(t);
  EXPECT_EQ(bytes[0], 2);
  LockTable r(kLimits, 1);
  std::string header, error;
  ASSERT_TRUE(restore(bytes, r, header, error)) << error;
  r.check_invariants();
  EXPECT_EQ(r.holder_count(), 3u);
  EXPECT_TRUE(r.find("y")->shared());
  EXPECT_EQ(r.find("x")->limit(), 4);
  EXPECT_TRUE(r.find("x")->waiters()->back().shared);
}

TEST(LockTableSnapshot, EmptyTableRoundTripsItsTokenCounter) {
  LockTable t(kLimits, 12345);
  LockTable r(kLimits, 1);
  std::string header, error;
  ASSERT_TRUE(restore(serialize(t), r, header, error)) << error;
  EXPECT_EQ(r.next_token(), 12345u);
  EXPECT_EQ(header, "");
}

// A snapshot is input: every corruption is a false with a message, never a
// crash, and leaves the table empty.
TEST(LockTableSnapshot, DamagedBytesAreRefused) {
  LockTable t(kLimits, 1);
  Runner run(t);
  // Stop where the table holds keys and waiters, so every field is covered.
  for (const Command& c : random_history(7, 2000)) {
    run.apply(c);
    if (t.key_count() > 2 && t.waiter_count() > 1) break;
  }
  ASSERT_GT(t.waiter_count(), 1u);
  const std::string bytes = serialize(t, "hdr");
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    std::string bad = bytes;
    bad[i] = static_cast<char>(bad[i] ^ 0x10);
    LockTable r(kLimits, 1);
    std::string header, error;
    EXPECT_FALSE(restore(bad, r, header, error)) << "byte " << i;
    EXPECT_EQ(error, "lock table snapshot: bad checksum");
    EXPECT_EQ(r.key_count(), 0u);
  }
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    LockTable r(kLimits, 1);
    std::string header, error;
    EXPECT_FALSE(restore(std::string_view(bytes).substr(0, n), r, header, error));
  }
  // Tighter limits than the snapshot needs: refused, not silently trimmed.
  LockTable small(Limits{1, 3, 10}, 1);
  std::string header, error;
  if (t.key_count() > 1) {
    EXPECT_FALSE(restore(bytes, small, header, error));
    EXPECT_EQ(error, "lock table snapshot: more keys than --max-keys allows");
  }
}

}  // namespace
}  // namespace lockd::locks
