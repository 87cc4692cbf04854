// RESP2: command encoding and incremental decoding, partial input included.
#include "resp_codec.h"

#include <gtest/gtest.h>

#include <string>

#include "backend.h"

namespace lockbench {
namespace {

TEST(RespCodecTest, EncodeCommand) {
  std::string out;
  encode_resp_command(out, {"SET", "k", "v"});
  EXPECT_EQ(out, "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n");
}

TEST(RespCodecTest, EncodeIntegerArgument) {
  std::string out;
  append_resp_array_header(out, 1);
  append_resp_bulk(out, std::uint64_t{30000});
  EXPECT_EQ(out, "*1\r\n$5\r\n30000\r\n");
}

RespValue decode_one(std::string_view wire) {
  RespValue v;
  std::size_t consumed = 0;
  EXPECT_EQ(decode_resp(wire, consumed, v), DecodeStatus::kReply) << wire;
  EXPECT_EQ(consumed, wire.size()) << wire;
  return v;
}

TEST(RespCodecTest, DecodeTypes) {
  RespValue v = decode_one("+OK\r\n");
  EXPECT_EQ(v.type, RespType::kSimple);
  EXPECT_EQ(v.text, "OK");
  v = decode_one("-NOSCRIPT No matching script\r\n");
  EXPECT_EQ(v.type, RespType::kError);
  EXPECT_EQ(v.text, "NOSCRIPT No matching script");
  v = decode_one(":1\r\n");
  EXPECT_EQ(v.type, RespType::kInteger);
  EXPECT_EQ(v.integer, 1);
  EXPECT_EQ(decode_one(":-7\r\n").integer, -7);
  EXPECT_EQ(decode_one("$-1\r\n").type, RespType::kNull);
  EXPECT_EQ(decode_one("*-1\r\n").type, RespType::kNull);
  v = decode_one("$5\r\nab\r\nc\r\n");  // binary-safe: the length rules
  EXPECT_EQ(v.type, RespType::kBulk);
  EXPECT_EQ(v.text, "ab\r\nc");
  EXPECT_EQ(decode_one("$0\r\n\r\n").text, "");
  v = decode_one("*2\r\n");
  EXPECT_EQ(v.type, RespType::kArray);
  EXPECT_EQ(v.integer, 2);
}

TEST(RespCodecTest, EveryPrefixOfAReplyNeedsMore) {
  const std::string sha = "$40\r\n" + std::string(40, 'a') + "\r\n";
  for (std::string_view wire : {std::string_view("+OK\r\n"), std::string_view(":1\r\n"),
                                std::string_view("$-1\r\n"), std::string_view(sha)}) {
    for (std::size_t n = 0; n < wire.size(); ++n) {
      RespValue v;
      std::size_t consumed = 0;
      EXPECT_EQ(decode_resp(wire.substr(0, n), consumed, v), DecodeStatus::kNeedMore)
          << wire << " cut at " << n;
    }
  }
}

TEST(RespCodecTest, PipelinedRepliesDecodeInOrder) {
  const std::string wire = "+OK\r\n$-1\r\n:0\r\n";
  std::string_view in = wire;
  RespType want[] = {RespType::kSimple, RespType::kNull, RespType::kInteger};
  for (RespType t : want) {
    RespValue v;
    std::size_t consumed = 0;
    ASSERT_EQ(decode_resp(in, consumed, v), DecodeStatus::kReply);
    EXPECT_EQ(v.type, t);
    in.remove_prefix(consumed);
  }
  EXPECT_TRUE(in.empty());
}

TEST(RespCodecTest, Malformed) {
  for (std::string_view bad : {"A 1 alice k\n\r\n", ":x\r\n", "$-2\r\n", "$3\r\nabcd\r\n",
                               "$99999999999\r\n", "*-5\r\n"}) {
    RespValue v;
    std::size_t consumed = 0;
    EXPECT_EQ(decode_resp(bad, consumed, v), DecodeStatus::kMalformed) << bad;
  }
  // A lockd reply is refused at its first byte, before any line end.
  for (std::string_view lockd : {"E unknown_command\n", "A 1 o k\n", "E"}) {
    RespValue v;
    std::size_t consumed = 0;
    EXPECT_EQ(decode_resp(lockd, consumed, v), DecodeStatus::kMalformed) << lockd;
  }
  // A line that never ends is not RESP once it is long enough.
  const std::string junk = "+" + std::string(kMaxRespLineBytes, 'A');
  RespValue v;
  std::size_t consumed = 0;
  EXPECT_EQ(decode_resp(junk, consumed, v), DecodeStatus::kMalformed);
}

TEST(RespCodecTest, RedisBackendReadsRepliesByRequestKind) {
  auto redis = make_backend(BackendKind::kRedis);
  Reply r;
  std::size_t consumed = 0;
  ASSERT_EQ(redis->decode("+OK\r\n", consumed, ReqKind::kAcquire, Flavor::kPlain, r), DecodeStatus::kReply);
  EXPECT_EQ(r.outcome, Outcome::kGranted);
  redis->decode("$-1\r\n", consumed, ReqKind::kAcquire, Flavor::kPlain, r);
  EXPECT_EQ(r.outcome, Outcome::kNotGranted);
  redis->decode(":1\r\n", consumed, ReqKind::kRelease, Flavor::kPlain, r);
  EXPECT_EQ(r.outcome, Outcome::kReleased);
  redis->decode(":0\r\n", consumed, ReqKind::kRelease, Flavor::kPlain, r);
  EXPECT_EQ(r.outcome, Outcome::kNotReleased);
  redis->decode(":1\r\n", consumed, ReqKind::kAcquire, Flavor::kPlain, r);
  EXPECT_EQ(r.outcome, Outcome::kError);
  redis->decode("-NOSCRIPT x\r\n", consumed, ReqKind::kRelease, Flavor::kPlain, r);
  EXPECT_EQ(r.outcome, Outcome::kError);
  redis->decode(":1\r\n", consumed, ReqKind::kKeep, Flavor::kPlain, r);
  EXPECT_EQ(r.outcome, Outcome::kKept);
  redis->decode(":0\r\n", consumed, ReqKind::kKeep, Flavor::kPlain, r);
  EXPECT_EQ(r.outcome, Outcome::kNotReleased);
}

TEST(RespCodecTest, RedisBackendEncodesTheStandardLock) {
  auto redis = make_backend(BackendKind::kRedis);
  redis->on_handshake(0, "0123456789abcdef0123456789abcdef01234567");
  redis->on_handshake(1, "89abcdef0123456789abcdef0123456789abcdef");
  std::string out;
  redis->encode_acquire(out, "me", "k", 30000, 500);
  EXPECT_EQ(out, "*6\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\nme\r\n$2\r\nNX\r\n$2\r\nPX\r\n$5\r\n30000\r\n");
  out.clear();
  redis->encode_release(out, 0, "me", "k");
  EXPECT_EQ(out,
            "*5\r\n$7\r\nEVALSHA\r\n$40\r\n0123456789abcdef0123456789abcdef01234567\r\n"
            "$1\r\n1\r\n$1\r\nk\r\n$2\r\nme\r\n");
  out.clear();
  redis->encode_keep(out, 0, "me", "k", 30000);
  EXPECT_EQ(out,
            "*6\r\n$7\r\nEVALSHA\r\n$40\r\n89abcdef0123456789abcdef0123456789abcdef\r\n"
            "$1\r\n1\r\n$1\r\nk\r\n$2\r\nme\r\n$5\r\n30000\r\n");
  out.clear();
  std::string handshake;
  redis->encode_handshake(handshake, 1);
  EXPECT_NE(handshake.find("pexpire"), std::string::npos);  // the keep script
}

}  // namespace
}  // namespace lockbench
