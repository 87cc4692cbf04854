// The codec: round trips, the CRC, and hostile input (random bytes,
// truncations, bit flips) that must come back as errors, never crashes.
#include <gtest/gtest.h>

#include <limits>
#include <random>

#include "lockd/cluster/lock_command.h"
#include "lockd/cluster/lock_state_machine.h"
#include "lockd/raft/codec.h"

namespace lockd::raft {
namespace {

Message sample_append() {
  Message m;
  m.type = MessageType::kAppend;
  m.from = 1;
  m.to = 2;
  m.term = 7;
  m.log_term = 6;
  m.index = 41;
  m.commit = 40;
  for (Index i = 42; i < 45; ++i) m.entries.push_back(Entry{7, i, EntryType::kCommand, "cmd" + std::to_string(i)});
  m.entries.push_back(Entry{7, 45, EntryType::kNoop, ""});
  return m;
}

Message sample_snapshot() {
  Message m;
  m.type = MessageType::kSnapshot;
  m.from = 3;
  m.to = 1;
  m.term = 9;
  m.snapshot = SnapshotMeta{100, 8};
  m.offset = 4096;
  m.total_bytes = 5000;
  m.chunk = std::string(904, 'x');
  m.done = true;
  return m;
}

TEST(Crc32c, KnownVector) {
  // The standard check value of CRC-32C.
  EXPECT_EQ(crc32c(std::string_view("123456789")), 0xE3069283u);
  EXPECT_EQ(crc32c(std::string_view("")), 0u);
}

TEST(Crc32c, Chains) {
  std::string_view all("hello, world");
  EXPECT_EQ(crc32c(all.substr(5), crc32c(all.substr(0, 5))), crc32c(all));
}

TEST(Codec, MessageRoundTrips) {
  for (const Message& m : {sample_append(), sample_snapshot()}) {
    std::string bytes;
    encode_message(m, bytes);
    Message back;
    ASSERT_EQ(decode_message(bytes, back), DecodeError::kOk);
    EXPECT_EQ(back, m);
    EXPECT_EQ(frame_size(bytes), bytes.size());
  }
}

TEST(Codec, EveryMessageTypeRoundTrips) {
  for (std::uint8_t t = 1; t <= kMaxMessageType; ++t) {
    Message m;
    m.type = static_cast<MessageType>(t);
    m.from = 2;
    m.to = 3;
    m.term = t;
    m.reject = t % 2 == 0;
    m.transfer = t % 3 == 0;
    std::string bytes;
    encode_message(m, bytes);
    Message back;
    ASSERT_EQ(decode_message(bytes, back), DecodeError::kOk) << int(t);
    EXPECT_EQ(back, m);
  }
}

TEST(Codec, EntryRoundTrips) {
  Entry e{3, 17, EntryType::kCommand, std::string("\0binary\xff", 8)};
  std::string bytes;
  encode_entry(e, bytes);
  Entry back;
  ASSERT_EQ(decode_entry(bytes, back), DecodeError::kOk);
  EXPECT_EQ(back, e);
  // A message frame is not an entry record and vice versa.
  Message m;
  EXPECT_EQ(decode_message(bytes, m), DecodeError::kBadKind);
  std::string msg;
  encode_message(sample_append(), msg);
  EXPECT_EQ(decode_entry(msg, back), DecodeError::kBadKind);
}

// A newer version's entry type: a message keeps it (the node stops naming
// it, cluster_node.cc), a WAL record refuses it, the core never takes it.
TEST(Codec, UnknownEntryTypeIsKeptInAMessageOnly) {
  Message m = sample_append();
  m.entries.back().type = static_cast<EntryType>(7);
  std::string bytes;
  encode_message(m, bytes);
  Message back;
  ASSERT_EQ(decode_message(bytes, back), DecodeError::kOk);
  EXPECT_EQ(static_cast<int>(back.entries.back().type), 7);
  EXPECT_FALSE(known_entry_type(7));
  EXPECT_TRUE(known_entry_type(static_cast<std::uint8_t>(EntryType::kConfChange)));
  std::string record;
  encode_entry(m.entries.back(), record);
  Entry e;
  EXPECT_EQ(decode_entry(record, e), DecodeError::kBadField);
}

TEST(Codec, RejectsEveryTruncation) {
  std::string bytes;
  encode_message(sample_append(), bytes);
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    Message m;
    EXPECT_NE(decode_message(std::string_view(bytes).substr(0, n), m), DecodeError::kOk) << n;
  }
  Message m;
  EXPECT_EQ(decode_message(bytes + "x", m), DecodeError::kTrailingBytes);
}

TEST(Codec, RejectsEveryBitFlip) {
  std::string bytes;
  encode_message(sample_snapshot(), bytes);
  bytes.resize(bytes.size());
  std::string clean = bytes;
  for (std::size_t bit = 0; bit < clean.size() * 8; bit += 7) {
    std::string b = clean;
    b[bit / 8] = static_cast<char>(b[bit / 8] ^ (1 << (bit % 8)));
    Message m;
    EXPECT_NE(decode_message(b, m), DecodeError::kOk) << "bit " << bit;
  }
}

TEST(Codec, BadVersionAndKindAreNamed) {
  std::string bytes;
  encode_message(sample_append(), bytes);
  // Rewrite the version byte and fix the CRC so only the version is wrong.
  std::string body = bytes.substr(4, bytes.size() - 8);
  body[0] = 3;  // 1 and 2 (a message carrying a configuration) are known
  std::string framed = bytes.substr(0, 4) + body;
  std::uint32_t crc = crc32c(body);
  for (int i = 0; i < 4; ++i) framed.push_back(static_cast<char>(crc >> (8 * i)));
  Message m;
  EXPECT_EQ(decode_message(framed, m), DecodeError::kBadVersion);
  body[0] = kCodecVersion;
  body[1] = 99;
  framed = bytes.substr(0, 4) + body;
  crc = crc32c(body);
  for (int i = 0; i < 4; ++i) framed.push_back(static_cast<char>(crc >> (8 * i)));
  EXPECT_EQ(decode_message(framed, m), DecodeError::kBadKind);
}

TEST(Codec, HugeLengthIsRefusedBeforeAllocating) {
  std::string bytes("\xff\xff\xff\x7f", 4);
  Message m;
  EXPECT_EQ(decode_message(bytes, m), DecodeError::kTooLarge);
  EXPECT_EQ(frame_size(bytes), SIZE_MAX);
}

TEST(Codec, RandomGarbageNeverCrashes) {
  std::mt19937_64 rng(12345);
  std::string valid;
  encode_message(sample_append(), valid);
  int accepted = 0;         // frames that decoded
  int accepted_random = 0;  // ... of them pure noise
  for (int i = 0; i < 20000; ++i) {
    std::string b;
    if (i % 2 == 0) {
      b.resize(rng() % 200);
      for (char& c : b) c = static_cast<char>(rng());
    } else {
      // Valid frame with random bytes overwritten, CRC recomputed, so the
      // field decoders (not just the checksum) see the garbage.
      b = valid;
      for (int k = 0; k < 4; ++k) b[4 + rng() % (b.size() - 8)] = static_cast<char>(rng());
      std::string body = b.substr(4, b.size() - 8);
      std::uint32_t crc = crc32c(body);
      for (int k = 0; k < 4; ++k) b[b.size() - 4 + static_cast<std::size_t>(k)] = static_cast<char>(crc >> (8 * k));
    }
    Message m;
    if (decode_message(b, m) == DecodeError::kOk) {
      ++accepted;
      if (i % 2 == 0) ++accepted_random;
      // Whatever the decoder accepts, the encoder writes back in a form
      // that decodes to the same message (compared by its encoding).
      std::string again;
      encode_message(m, again);
      Message m2;
      ASSERT_EQ(decode_message(again, m2), DecodeError::kOk) << i;
      std::string twice;
      encode_message(m2, twice);
      ASSERT_EQ(twice, again) << i;
    }
    Entry e;
    (void)decode_entry(b, e);
  }
  // Pure noise never passes the length, CRC and version checks; corrupted
  // fields of a valid frame sometimes still decode and sometimes do not,
  // so both paths ran.
  EXPECT_EQ(accepted_random, 0);
  EXPECT_GT(accepted, 0);
  EXPECT_LT(accepted, 10000);
}

TEST(LockCommand, RoundTripsAndRejectsGarbage) {
  cluster::LockCommand c;
  c.type = cluster::LockCommandType::kAcquire;
  c.now_ns = 123456789;
  c.owner = "alice";
  c.key = "k1";
  c.lease_ms = 1000;
  c.wait_ms = 50;
  c.client = 7;
  c.waiter = 9;
  std::string b = cluster::encode_lock_command(c);
  cluster::LockCommand back;
  ASSERT_EQ(cluster::decode_lock_command(b, back), cluster::LockCommandError::kOk);
  EXPECT_EQ(back, c);
  for (std::size_t n = 0; n < b.size(); ++n) {
    EXPECT_NE(cluster::decode_lock_command(std::string_view(b).substr(0, n), back), cluster::LockCommandError::kOk);
  }
  EXPECT_EQ(cluster::decode_lock_command(b + "z", back), cluster::LockCommandError::kTrailing);
  std::mt19937_64 rng(7);
  for (int i = 0; i < 5000; ++i) {
    std::string g(rng() % 64, '\0');
    for (char& ch : g) ch = static_cast<char>(rng());
    (void)cluster::decode_lock_command(g, back);
  }
}

TEST(LockCommand, RejectsWhatTheLockTableWouldRefuse) {
  cluster::LockCommand good;
  good.type = cluster::LockCommandType::kAcquire;
  good.owner = "alice";
  good.key = "k1";
  good.lease_ms = 1000;
  auto decode = [](const cluster::LockCommand& c) {
    cluster::LockCommand back;
    return cluster::decode_lock_command(cluster::encode_lock_command(c), back);
  };
  EXPECT_EQ(decode(good), cluster::LockCommandError::kOk);
  auto bad = good;
  bad.lease_ms = 0;
  EXPECT_EQ(decode(bad), cluster::LockCommandError::kBadField);
  bad = good;
  bad.lease_ms = cluster::kMaxLockCommandMs + 1;
  EXPECT_EQ(decode(bad), cluster::LockCommandError::kBadField);
  bad = good;
  bad.wait_ms = ~0ull;
  EXPECT_EQ(decode(bad), cluster::LockCommandError::kBadField);
  bad = good;
  bad.key = std::string(251, 'k');
  EXPECT_EQ(decode(bad), cluster::LockCommandError::kBadField);
  bad = good;
  bad.key.clear();
  EXPECT_EQ(decode(bad), cluster::LockCommandError::kBadField);
  bad = good;
  bad.owner = std::string(65, 'o');
  EXPECT_EQ(decode(bad), cluster::LockCommandError::kBadField);
  bad = good;
  bad.type = cluster::LockCommandType::kRelease;
  bad.key = std::string(300, 'k');
  EXPECT_EQ(decode(bad), cluster::LockCommandError::kBadField);
}

// Whatever decodes can be applied: commands with fields drawn from the
// edges (empty, at and past each limit, extreme clocks), encoded, decoded
// and applied through the daemon's state machine, never trip a lock-table
// check.
TEST(LockCommand, EveryDecodedCommandApplies) {
  cluster::LockStateMachine sm({100, 10, 100});
  Index index = 0;
  cluster::LockCommand start;
  start.type = cluster::LockCommandType::kLeaderStart;
  start.token_base = cluster::kMinTokenBase;
  sm.apply(Entry{1, ++index, EntryType::kCommand, cluster::encode_lock_command(start)});
  std::mt19937_64 rng(11);
  const std::size_t key_sizes[] = {0, 1, 39, 40, 250, 251, 300};
  const std::size_t owner_sizes[] = {0, 1, 64, 65};
  const std::uint64_t millis[] = {0, 1, 1000, cluster::kMaxLockCommandMs,
                                  cluster::kMaxLockCommandMs + 1, ~0ull};
  const TimeNs clocks[] = {0, 1'000'000'000, -1, TimeNs{1} << 62, (TimeNs{1} << 62) + 1,
                           std::numeric_limits<TimeNs>::max()};
  auto pick = [&](const auto& options) { return options[rng() % std::size(options)]; };
  std::size_t applied = 0;
  for (int i = 0; i < 20000; ++i) {
    cluster::LockCommand c;
    c.type = static_cast<cluster::LockCommandType>(1 + rng() % 5);
    c.now_ns = pick(clocks);
    c.key = std::string(pick(key_sizes), static_cast<char>('a' + rng() % 3));
    c.owner = std::string(pick(owner_sizes), 'o');
    c.lease_ms = pick(millis);
    c.wait_ms = pick(millis);
    c.waiter = static_cast<locks::WaiterId>(i + 1);  // unique, as a leader assigns
    c.token = rng() % 50;
    cluster::LockCommand back;
    if (cluster::decode_lock_command(cluster::encode_lock_command(c), back) !=
        cluster::LockCommandError::kOk) {
      continue;
    }
    sm.apply(Entry{1, ++index, EntryType::kCommand, cluster::encode_lock_command(back)});
    sm.table().check_invariants();
    ++applied;
  }
  EXPECT_GT(applied, 1000u);
}

}  // namespace
}  // namespace lockd::raft
