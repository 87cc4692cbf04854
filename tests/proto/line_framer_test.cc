// Line framing (§1): partial input, pipelining, CRLF, the 1024-byte limit.
#include "lockd/proto/line_framer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace lockd::proto {
namespace {

// Feeds `input` in pieces of `chunk` bytes; collects lines until too long.
std::vector<std::string> frame(const std::string& input, std::size_t chunk, bool* too_long) {
  LineFramer f;
  std::vector<std::string> lines;
  *too_long = false;
  for (std::size_t i = 0; i < input.size(); i += chunk) {
    f.feed(std::string_view(input).substr(i, chunk));
    std::string_view line;
    for (;;) {
      auto st = f.next(line);
      if (st == LineFramer::Status::kNeedMore) break;
      if (st == LineFramer::Status::kTooLong) {
        *too_long = true;
        return lines;
      }
      lines.emplace_back(line);
    }
  }
  return lines;
}

TEST(LineFramerTest, PipelinedLinesInOneRead) {
  bool tl;
  auto lines = frame("A a k\nR 1 k\n\nA b k\r\n", 1 << 20, &tl);
  EXPECT_FALSE(tl);
  EXPECT_EQ(lines, (std::vector<std::string>{"A a k", "R 1 k", "", "A b k\r"}));
}

TEST(LineFramerTest, ByteByByteGivesSameLines) {
  const std::string input = "A alice key1 100 5\nR 123 key1\r\nA " + std::string(200, 'x') + " k\n";
  bool tl1, tl2;
  EXPECT_EQ(frame(input, 1, &tl1), frame(input, 1 << 20, &tl2));
  EXPECT_EQ(frame(input, 7, &tl1), frame(input, 1 << 20, &tl2));
  EXPECT_FALSE(tl1);
}

TEST(LineFramerTest, IncompleteTailWaits) {
  bool tl;
  auto lines = frame("A a k\nA b", 3, &tl);
  EXPECT_EQ(lines, (std::vector<std::string>{"A a k"}));
  EXPECT_FALSE(tl);
}

TEST(LineFramerTest, LineOf1024BytesWithTerminatorIsAccepted) {
  const std::string line(1023, 'x');
  for (std::size_t chunk : {1ul, 100ul, 5000ul}) {
    bool tl;
    auto lines = frame(line + "\n", chunk, &tl);
    EXPECT_FALSE(tl) << chunk;
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_EQ(lines[0].size(), 1023u);
  }
}

TEST(LineFramerTest, LineOf1025BytesWithTerminatorIsTooLong) {
  const std::string line(1024, 'x');
  for (std::size_t chunk : {1ul, 100ul, 5000ul}) {
    bool tl;
    frame(line + "\n", chunk, &tl);
    EXPECT_TRUE(tl) << chunk;
  }
}

TEST(LineFramerTest, CrlfCountsTowardsTheLimit) {
  bool tl;
  frame(std::string(1022, 'x') + "\r\n", 10, &tl);
  EXPECT_FALSE(tl);
  frame(std::string(1023, 'x') + "\r\n", 10, &tl);
  EXPECT_TRUE(tl);
}

TEST(LineFramerTest, EndlessLineIsDetectedWithoutBufferingIt) {
  LineFramer f;
  std::string chunk(512, 'y');
  std::string_view line;
  f.feed(chunk);
  EXPECT_EQ(f.next(line), LineFramer::Status::kNeedMore);
  f.feed(chunk);
  EXPECT_EQ(f.next(line), LineFramer::Status::kTooLong);
  EXPECT_LT(f.pending_bytes(), 1024u);
}

}  // namespace
}  // namespace lockd::proto
