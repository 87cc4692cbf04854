// The client side of lockd's protocol: request bytes and reply decoding,
// including replies split across reads.
#include "lockd_codec.h"

#include <gtest/gtest.h>

#include <string>

namespace lockbench {
namespace {

TEST(LockdCodecTest, EncodeAcquire) {
  std::string out;
  encode_lockd_acquire(out, "alice", "k1", 5000, 0);
  encode_lockd_acquire(out, "bob", "k2", 100, 250);
  EXPECT_EQ(out, "A alice k1 5000\nA bob k2 100 250\n");
}

TEST(LockdCodecTest, EncodeRelease) {
  std::string out;
  encode_lockd_release(out, 18446744073709551615ULL, "k");
  EXPECT_EQ(out, "R 18446744073709551615 k\n");
}

TEST(LockdCodecTest, EncodeKeep) {
  std::string out;
  encode_lockd_keep(out, 18446744073709551615ULL, "k", 30000);
  EXPECT_EQ(out, "K 18446744073709551615 k 30000\n");
}

LockdReply decode_one(std::string_view line) {
  LockdReply r;
  std::size_t consumed = 0;
  EXPECT_EQ(decode_lockd_reply(line, consumed, r), DecodeStatus::kReply) << line;
  EXPECT_EQ(consumed, line.size());
  return r;
}

TEST(LockdCodecTest, DecodeEveryReplyKind) {
  LockdReply r = decode_one("A 17 alice k1\n");
  EXPECT_EQ(r.kind, LockdReplyKind::kAcquired);
  EXPECT_EQ(r.token, 17u);
  EXPECT_EQ(r.owner, "alice");
  EXPECT_EQ(r.key, "k1");

  r = decode_one("T alice k1\n");
  EXPECT_EQ(r.kind, LockdReplyKind::kHeld);
  EXPECT_EQ(r.owner, "alice");

  EXPECT_EQ(decode_one("B alice k1\n").kind, LockdReplyKind::kBusy);

  r = decode_one("R 17 k1\n");
  EXPECT_EQ(r.kind, LockdReplyKind::kReleased);
  EXPECT_EQ(r.token, 17u);
  EXPECT_EQ(r.key, "k1");

  EXPECT_EQ(decode_one("N 9 k1\n").kind, LockdReplyKind::kNotReleased);

  r = decode_one("K 17 k1\n");
  EXPECT_EQ(r.kind, LockdReplyKind::kKept);
  EXPECT_EQ(r.token, 17u);
  EXPECT_EQ(r.key, "k1");

  r = decode_one("E bad_arity\n");
  EXPECT_EQ(r.kind, LockdReplyKind::kError);
  EXPECT_EQ(r.code, "bad_arity");
  EXPECT_TRUE(r.key.empty());

  r = decode_one("E no_leader alice k1\n");
  EXPECT_EQ(r.code, "no_leader");
  EXPECT_EQ(r.owner, "alice");
  EXPECT_EQ(r.key, "k1");

  r = decode_one("M 10.0.0.2:7070 5 k1\n");
  EXPECT_EQ(r.kind, LockdReplyKind::kMoved);
  EXPECT_EQ(r.code, "10.0.0.2:7070");
  EXPECT_EQ(r.token, 5u);
}

TEST(LockdCodecTest, CarriageReturnIgnored) {
  EXPECT_EQ(decode_one("R 3 k\r\n").key, "k");
}

TEST(LockdCodecTest, PartialInputNeedsMore) {
  const std::string wire = "A 1 alice k1\nR 1 k1\n";
  // Every prefix that ends before the first '\n' needs more.
  for (std::size_t n = 0; n < 13; ++n) {
    LockdReply r;
    std::size_t consumed = 0;
    EXPECT_EQ(decode_lockd_reply(std::string_view(wire).substr(0, n), consumed, r),
              DecodeStatus::kNeedMore)
        << n;
  }
  // Pipelined replies decode one at a time.
  LockdReply r;
  std::size_t consumed = 0;
  ASSERT_EQ(decode_lockd_reply(wire, consumed, r), DecodeStatus::kReply);
  EXPECT_EQ(r.kind, LockdReplyKind::kAcquired);
  ASSERT_EQ(consumed, 13u);
  ASSERT_EQ(decode_lockd_reply(std::string_view(wire).substr(consumed), consumed, r),
            DecodeStatus::kReply);
  EXPECT_EQ(r.kind, LockdReplyKind::kReleased);
}

// V and X are pushes (protocol.md §5c), never replies: a holder's lease
// that ends pushes X on its connection, between any two replies.
TEST(LockdCodecTest, PushesAreSkipped) {
  const std::string wire = "X 7 k1\nV k1 9 free\nR 7 k1\nX 8 k2\n";
  LockdReply r;
  std::size_t consumed = 0;
  ASSERT_EQ(decode_lockd_reply(wire, consumed, r), DecodeStatus::kReply);
  EXPECT_EQ(r.kind, LockdReplyKind::kReleased);
  EXPECT_EQ(consumed, wire.size() - 7);
  EXPECT_EQ(decode_lockd_reply(std::string_view(wire).substr(consumed), consumed, r),
            DecodeStatus::kNeedMore);
}

TEST(LockdCodecTest, MalformedReplies) {
  for (std::string_view bad :
       {"Q 1 k\n", "A alice k1\n", "A 0 alice k1\n", "A x alice k1\n", "R k1\n", "T a b c\n",
        "\n", "+OK\r\n", "-ERR unknown command 'A'\r\n", "HTTP/1.1 400 Bad Request\r\n",
        "AA 1 a k\n", "E\n", "E code a\n"}) {
    LockdReply r;
    std::size_t consumed = 0;
    EXPECT_EQ(decode_lockd_reply(bad, consumed, r), DecodeStatus::kMalformed) << bad;
  }
}

TEST(LockdCodecTest, OverlongLineIsMalformedWithoutNewline) {
  const std::string junk(kMaxLockdReplyBytes, 'x');
  LockdReply r;
  std::size_t consumed = 0;
  EXPECT_EQ(decode_lockd_reply(junk, consumed, r), DecodeStatus::kMalformed);
}

}  // namespace
}  // namespace lockbench
