// The real lockd over real TCP against protocol.md, end to end.
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "eventually.h"
#include "http_get.h"
#include "lockd_process.h"

namespace lockd::testing {
namespace {

// Sends `line` and returns its reply, passing over `X` pushes: since v1.3
// (§5c) a connection whose lease ran out is told `X <token> <key>`, at a
// moment these tests (about other rows) do not pin down.
std::string call_skip_x(LineClient& c, const std::string& line) {
  c.send(line + "\n");
  for (;;) {
    const auto r = c.read_line();
    if (!r || !r->starts_with("X ")) return r.value_or("");
  }
}

using namespace std::chrono;
using namespace std::chrono_literals;

std::uint64_t token_of(const std::string& reply) {
  auto f = fields(reply);
  EXPECT_EQ(f.size(), 4u) << reply;
  EXPECT_EQ(f.empty() ? "" : f[0], "A") << reply;
  return f.size() == 4 ? std::stoull(f[1]) : 0;
}

// `/v1/status` of a lockd started with `--admin 127.0.0.1:0`: how a test
// sees that the server finished something no client is told about.
nlohmann::json status(LockdProcess& lockd) {
  const HttpReply r = http(lockd.admin_port(), "/v1/status");
  EXPECT_EQ(r.status, 200) << r.body;
  return nlohmann::json::parse(r.body, nullptr, false);
}

// Polls `/v1/status` until `field` equals `want`.
bool status_becomes(LockdProcess& lockd, const char* field, int want) {
  return eventually([&] {
    const nlohmann::json s = status(lockd);
    return s.is_object() && s.value(field, -1) == want;
  });
}

// Sends a waiting acquire on `w` for the held `key` and returns once the
// server has queued it: a `T` for a probe sent after it on the same
// connection proves the server processed the line before it.
void enqueue(LineClient& w, const std::string& line, const std::string& key) {
  w.send(line + "\nA probe " + key + "\n");
  EXPECT_EQ(w.read_line(), "T probe " + key);
}

TEST(ProtocolTest, AcquireHeldReleaseAndNotReleased) {
  LockdProcess lockd;
  LineClient a(lockd.port()), b(lockd.port());
  const std::string granted = call_skip_x(a, "A alice orders/42");
  const std::uint64_t t = token_of(granted);
  EXPECT_EQ(granted, "A " + std::to_string(t) + " alice orders/42");
  EXPECT_EQ(call_skip_x(b, "A bob orders/42"), "T bob orders/42");
  EXPECT_EQ(call_skip_x(b, "A alice orders/42"), "T alice orders/42");  // owner is no authority
  EXPECT_EQ(call_skip_x(b, "R " + std::to_string(t + 1) + " orders/42"),
            "N " + std::to_string(t + 1) + " orders/42");
  EXPECT_EQ(call_skip_x(b, "R " + std::to_string(t) + " orders/42"),
            "R " + std::to_string(t) + " orders/42");
  EXPECT_EQ(call_skip_x(b, "R " + std::to_string(t) + " orders/42"),
            "N " + std::to_string(t) + " orders/42");
  EXPECT_EQ(call_skip_x(b, "R 7 never-registered"), "N 7 never-registered");
  EXPECT_GT(token_of(call_skip_x(b, "A bob orders/42")), t);
}

TEST(ProtocolTest, EveryErrorCodeKeepsTheConnectionOpen) {
  LockdProcess lockd;
  LineClient c(lockd.port());
  EXPECT_EQ(call_skip_x(c, "X alice k"), "E unknown_command");
  EXPECT_EQ(call_skip_x(c, "a alice k"), "E unknown_command");
  EXPECT_EQ(call_skip_x(c, "A alice"), "E bad_arity");
  EXPECT_EQ(call_skip_x(c, "R 1"), "E bad_arity");
  EXPECT_EQ(call_skip_x(c, "A " + std::string(65, 'o') + " k"), "E bad_owner");
  EXPECT_EQ(call_skip_x(c, "A o " + std::string(251, 'k')), "E bad_key");
  EXPECT_EQ(call_skip_x(c, "A o k 0"), "E bad_lease o k");  // v1.3 §7: with the echo
  EXPECT_EQ(call_skip_x(c, "A o k 3600001"), "E bad_lease o k");
  EXPECT_EQ(call_skip_x(c, "A o k 10 300001"), "E bad_wait o k");
  EXPECT_EQ(call_skip_x(c, "R 0 k"), "E bad_token");
  EXPECT_EQ(call_skip_x(c, "R 18446744073709551616 k"), "E bad_token");
  // Blank lines get no reply; the next request still does.
  c.send("\n   \n\r\n");
  EXPECT_EQ(token_of(call_skip_x(c, "A o k")) > 0, true);
}

// v1.3 §7: among pipelined requests, a range error names the request it
// refuses by its echo, so a client can match it; fields that make no valid
// echo give the bare code.
TEST(ProtocolTest, RangeErrorsCarryTheEchoAmongPipelinedRequests) {
  LockdProcess lockd({"--max-wait-ms", "1000"});
  LineClient holder(lockd.port());
  const std::uint64_t t = token_of(holder.call("A h busy 30000"));
  LineClient c(lockd.port());
  c.send("A w1 busy 30000 900\nA w2 busy 30000 5000\nS r sem 70000\nK " +
         std::to_string(t) + " busy 0\nK 0 busy 0\nA " + std::string(65, 'o') + " k 0\n");
  EXPECT_EQ(c.read_line(), "E bad_wait w2 busy");
  EXPECT_EQ(c.read_line(), "E bad_limit r sem");
  EXPECT_EQ(c.read_line(), "E bad_lease " + std::to_string(t) + " busy");
  EXPECT_EQ(c.read_line(), "E bad_token");
  EXPECT_EQ(c.read_line(), "E bad_owner");
  EXPECT_EQ(c.read_line(), "T w1 busy");  // the valid waiter's own answer, after its wait
}

TEST(ProtocolTest, CrlfAndExtraSpacesAreAccepted) {
  LockdProcess lockd;
  LineClient c(lockd.port());
  c.send("A   alice   k1   1000\r\n");
  auto r = c.read_line();
  ASSERT_TRUE(r);
  EXPECT_EQ(fields(*r).size(), 4u);
  EXPECT_EQ(r->substr(r->size() - 8), "alice k1");
}

TEST(ProtocolTest, ThousandsOfPipelinedRequestsAnswerInOrder) {
  LockdProcess lockd;
  LineClient c(lockd.port());
  constexpr int kN = 5000;
  std::string batch;
  for (int i = 0; i < kN; ++i) batch += "A o key" + std::to_string(i) + " 60000\n";
  c.send(batch);
  std::string releases;
  for (int i = 0; i < kN; ++i) {
    auto r = c.read_line();
    ASSERT_TRUE(r) << i;
    auto f = fields(*r);
    ASSERT_EQ(f.size(), 4u) << *r;
    ASSERT_EQ(f[3], "key" + std::to_string(i));
    releases += "R " + f[1] + " key" + std::to_string(i) + "\n";
  }
  c.send(releases);
  for (int i = 0; i < kN; ++i) {
    auto r = c.read_line();
    ASSERT_TRUE(r) << i;
    ASSERT_EQ(r->substr(0, 2), "R ") << *r;
    ASSERT_EQ(fields(*r)[2], "key" + std::to_string(i));
  }
}

TEST(ProtocolTest, WaitingAcquireIsOvertakenByAnImmediateOne) {
  LockdProcess lockd;
  LineClient holder(lockd.port()), c(lockd.port());
  const auto t = token_of(call_skip_x(holder, "A h busy"));
  c.send("A w busy 1000 5000\nA w free\n");  // same connection: ordered
  auto first = c.read_line();
  ASSERT_TRUE(first);
  EXPECT_EQ(fields(*first)[3], "free");  // the immediate one first
  EXPECT_EQ(call_skip_x(holder, "R " + std::to_string(t) + " busy"), "R " + std::to_string(t) + " busy");
  auto second = c.read_line();
  ASSERT_TRUE(second);
  EXPECT_GT(token_of(*second), t);
  EXPECT_EQ(fields(*second)[3], "busy");
}

TEST(ProtocolTest, HandOffOnReleaseIsFifo) {
  LockdProcess lockd;
  LineClient holder(lockd.port());
  auto t = token_of(call_skip_x(holder, "A h k"));
  std::vector<std::unique_ptr<LineClient>> waiters;
  for (int i = 0; i < 20; ++i) {
    waiters.push_back(std::make_unique<LineClient>(lockd.port()));
    enqueue(*waiters.back(), "A w" + std::to_string(i) + " k 10000 20000", "k");
  }
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(call_skip_x(holder, "R " + std::to_string(t) + " k"), "R " + std::to_string(t) + " k");
    auto r = waiters[static_cast<std::size_t>(i)]->read_line();
    ASSERT_TRUE(r) << i;
    EXPECT_EQ(fields(*r)[2], "w" + std::to_string(i));
    t = token_of(*r);
  }
}

TEST(ProtocolTest, DisconnectCancelsWaitersButKeepsHeldLocks) {
  LockdProcess lockd({"--admin", "127.0.0.1:0"});
  LineClient holder(lockd.port()), next(lockd.port());
  const auto t = token_of(call_skip_x(holder, "A h k"));
  {
    LineClient gone(lockd.port());
    enqueue(gone, "A gone k 10000 20000", "k");
    // `gone` also holds a lock of its own, which survives its disconnect.
    EXPECT_GT(token_of(call_skip_x(gone, "A gone other 60000")), 0u);
  }
  // The server has seen `gone` close once its waiter is gone.
  ASSERT_TRUE(status_becomes(lockd, "waiters", 0));
  EXPECT_EQ(status(lockd)["connections"], 2);
  enqueue(next, "A next k 10000 20000", "k");
  call_skip_x(holder, "R " + std::to_string(t) + " k");
  auto r = next.read_line();
  ASSERT_TRUE(r);
  EXPECT_EQ(fields(*r)[2], "next");  // the cancelled waiter was skipped
  EXPECT_EQ(call_skip_x(holder, "A probe other"), "T probe other");
}

TEST(ProtocolTest, WaitRunsOutWithT) {
  LockdProcess lockd;
  LineClient holder(lockd.port()), c(lockd.port());
  token_of(call_skip_x(holder, "A h k 60000"));
  const auto start = steady_clock::now();
  c.send("A w k 1000 300\n");
  auto r = c.read_line(20s);
  const auto took = duration_cast<milliseconds>(steady_clock::now() - start);
  ASSERT_TRUE(r);
  EXPECT_EQ(*r, "T w k");
  EXPECT_GE(took.count(), 290);
  // Its own timer, not the sweep (every 5 s by default), ended the wait;
  // the slack is for a loaded sanitizer run.
  EXPECT_LT(took.count(), 4000);
}

TEST(ProtocolTest, ExpiryHandsKeyToWaiterLongBeforeTheSweep) {
  LockdProcess lockd({"--sweep-interval-ms", "60000"});
  LineClient holder(lockd.port()), c(lockd.port());
  const auto t = token_of(call_skip_x(holder, "A h k 200"));
  const auto start = steady_clock::now();
  c.send("A w k 5000 10000\n");
  auto r = c.read_line(20s);
  const auto took = duration_cast<milliseconds>(steady_clock::now() - start);
  ASSERT_TRUE(r);
  EXPECT_GT(token_of(*r), t);
  EXPECT_LT(took.count(), 10'000);  // the sweep would take 60 s
  // The old holder's token no longer releases.
  EXPECT_EQ(call_skip_x(holder, "R " + std::to_string(t) + " k"), "N " + std::to_string(t) + " k");
}

TEST(ProtocolTest, ExpiredKeyIsTakenOverAndReleasableUntilSwept) {
  LockdProcess lockd({"--sweep-interval-ms", "60000"});
  LineClient c(lockd.port());
  const auto t1 = token_of(call_skip_x(c, "A a k1 50"));
  const auto t2 = token_of(call_skip_x(c, "A a k2 50"));
  std::this_thread::sleep_for(120ms);
  const auto t3 = token_of(call_skip_x(c, "A b k1 1000"));  // lazy takeover
  EXPECT_GT(t3, t2);
  EXPECT_EQ(call_skip_x(c, "R " + std::to_string(t1) + " k1"), "N " + std::to_string(t1) + " k1");
  // Expired but not swept: the release still matches.
  EXPECT_EQ(call_skip_x(c, "R " + std::to_string(t2) + " k2"), "R " + std::to_string(t2) + " k2");
}

TEST(ProtocolTest, SweepDeletesExpiredKeys) {
  LockdProcess lockd({"--sweep-interval-ms", "100", "--admin", "127.0.0.1:0"});
  LineClient c(lockd.port());
  const auto t = token_of(call_skip_x(c, "A a k 20"));
  // A release would still match an expired key the sweep has not reached
  // (see above), so wait for the sweep itself: the key count drops to 0.
  ASSERT_TRUE(status_becomes(lockd, "keys", 0));
  EXPECT_EQ(call_skip_x(c, "R " + std::to_string(t) + " k"), "N " + std::to_string(t) + " k");
}

TEST(ProtocolTest, CapsAnswerBusy) {
  LockdProcess lockd(
      {"--max-keys", "2", "--max-waiters-per-key", "1", "--max-waiters", "2"});
  LineClient c(lockd.port()), w(lockd.port());
  token_of(call_skip_x(c, "A o k1"));
  token_of(call_skip_x(c, "A o k2"));
  EXPECT_EQ(call_skip_x(c, "A o k3"), "B o k3");  // key table full
  enqueue(w, "A w k1 1000 10000", "k1");
  EXPECT_EQ(call_skip_x(c, "A x k1 1000 10000"), "B x k1");  // k1's queue is full (1)
  enqueue(w, "A w k2 1000 10000", "k2");
  EXPECT_EQ(call_skip_x(c, "A y k2 1000 10000"), "B y k2");  // k2's queue is full too
}

TEST(ProtocolTest, TotalWaitersCapAnswersBusy) {
  LockdProcess lockd({"--max-waiters", "2"});
  LineClient c(lockd.port()), w(lockd.port());
  token_of(call_skip_x(c, "A o k1"));
  token_of(call_skip_x(c, "A o k2"));
  enqueue(w, "A w k1 1000 10000", "k1");
  enqueue(w, "A w k2 1000 10000", "k2");
  EXPECT_EQ(call_skip_x(c, "A y k1 1000 10000"), "B y k1");
}

TEST(ProtocolTest, MaxConnectionsClosesTheExtraOne) {
  LockdProcess lockd({"--max-connections", "2", "--admin", "127.0.0.1:0"});
  LineClient a(lockd.port()), b(lockd.port());
  EXPECT_EQ(call_skip_x(a, "A o k1").substr(0, 2), "A ");
  EXPECT_EQ(call_skip_x(b, "A o k2").substr(0, 2), "A ");
  LineClient c(lockd.port());
  EXPECT_TRUE(c.wait_closed(kEventuallyTimeout));
  a.close();
  ASSERT_TRUE(status_becomes(lockd, "connections", 1));  // the server saw `a` close
  LineClient d(lockd.port());
  EXPECT_EQ(call_skip_x(d, "A o k3").substr(0, 2), "A ");
}

TEST(ProtocolTest, LineTooLongAnswersThenCloses) {
  LockdProcess lockd;
  LineClient c(lockd.port());
  c.send("A o before\n" + std::string(2000, 'x') + "\nA o after\n");
  auto r1 = c.read_line();
  ASSERT_TRUE(r1);
  EXPECT_EQ(fields(*r1)[3], "before");
  EXPECT_EQ(c.read_line(), "E line_too_long");
  EXPECT_TRUE(c.wait_closed(kEventuallyTimeout));
  EXPECT_EQ(c.read_line(100ms), std::nullopt);  // `after` was never processed
}

TEST(ProtocolTest, ExactlyMaxLineIsAccepted) {
  LockdProcess lockd;
  LineClient c(lockd.port());
  // "A o " + key + padding spaces + "\n" = 1024 bytes.
  std::string line = "A o " + std::string(250, 'k');
  line += std::string(1023 - line.size(), ' ');
  c.send(line + "\n");
  auto r = c.read_line();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->substr(0, 2), "A ");
}

TEST(ProtocolTest, ClientThatNeverReadsDoesNotGrowTheServer) {
  LockdProcess lockd;
  LineClient flood(lockd.port());
  const int flags = fcntl(flood.fd(), F_GETFL);
  fcntl(flood.fd(), F_SETFL, flags | O_NONBLOCK);
  const std::string req = "A flooder k-flood\n";  // `T` after the first
  std::string chunk;
  for (int i = 0; i < 4096; ++i) chunk += req;
  std::size_t sent = 0;
  const auto deadline = steady_clock::now() + 3s;
  while (steady_clock::now() < deadline) {
    const ssize_t n = ::send(flood.fd(), chunk.data(), chunk.size(), MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
    } else {
      std::this_thread::sleep_for(10ms);
    }
    if (sent > 256u << 20) break;
  }
  // The server stopped reading (TCP back-pressure) long before 256 MiB.
  EXPECT_LT(sent, 64u << 20);
  // ... and still serves others.
  LineClient other(lockd.port());
  EXPECT_EQ(call_skip_x(other, "A o other").substr(0, 2), "A ");
  std::ifstream status("/proc/" + std::to_string(lockd.process().pid()) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      EXPECT_LT(std::stoul(line.substr(6)), 200'000u) << line;  // kB
    }
  }
}

TEST(ProtocolTest, ConnectionOverItsOutputCapIsClosed) {
  LockdProcess lockd({"--max-output-bytes", "1048576"});
  LineClient holder(lockd.port()), slow(lockd.port());
  // A small receive buffer on `slow` keeps what the kernel absorbs of
  // lockd's replies small and fixed (otherwise it grows with autotuning),
  // so few requests fill the path and the hand-offs below must overflow.
  const int rcvbuf_bytes = 4096;
  ASSERT_EQ(::setsockopt(slow.fd(), SOL_SOCKET, SO_RCVBUF, &rcvbuf_bytes, sizeof rcvbuf_bytes), 0);
  // `slow` waits on 40,000 keys: their hand-offs are ~1.4 MB of replies.
  constexpr int kKeys = 40'000;
  std::string batch;
  for (int i = 0; i < kKeys; ++i) batch += "A h k" + std::to_string(i) + "\n";
  holder.send(batch);
  std::string releases;
  for (int i = 0; i < kKeys; ++i) {
    auto r = holder.read_line();
    ASSERT_TRUE(r);
    releases += "R " + fields(*r)[1] + " " + fields(*r)[3] + "\n";
  }
  batch.clear();
  for (int i = 0; i < kKeys; ++i) batch += "A slow k" + std::to_string(i) + " 1000 60000\n";
  batch.pop_back();  // enqueue() adds the newline
  enqueue(slow, batch, "k0");
  // Fill every buffer between lockd and `slow` until lockd stops reading:
  // once it pauses it never resumes (`slow` never reads), so sending has
  // then failed for a whole second. A merely slow server (ASan, a loaded
  // machine) still reads something within a second.
  const int flags = fcntl(slow.fd(), F_GETFL);
  fcntl(slow.fd(), F_SETFL, flags | O_NONBLOCK);
  std::string chunk;
  for (int i = 0; i < 1000; ++i) chunk += "A slow k0\n";
  const auto deadline = steady_clock::now() + 20s;
  auto stalled_since = steady_clock::now();
  bool paused = false;
  while (!paused && steady_clock::now() < deadline) {
    if (::send(slow.fd(), chunk.data(), chunk.size(), MSG_NOSIGNAL) > 0) {
      stalled_since = steady_clock::now();
    } else {
      std::this_thread::sleep_for(10ms);
      paused = steady_clock::now() - stalled_since >= 1s;
    }
  }
  ASSERT_TRUE(paused) << "lockd kept reading from a client that never reads";
  EXPECT_TRUE(lockd.process().stderr_text().find("unsent output") == std::string::npos)
      << "requests alone must not trip the cap: reading pauses first";
  // The hand-offs add replies that `slow` will not read: over the cap.
  holder.send(releases);
  for (int i = 0; i < kKeys; ++i) {
    auto r = holder.read_line();
    ASSERT_TRUE(r) << i;
    ASSERT_EQ(r->substr(0, 2), "R ");
  }
  EXPECT_TRUE(lockd.process().wait_for_line("unsent output over", kEventuallyTimeout).has_value());
  EXPECT_EQ(call_skip_x(holder, "A h fresh").substr(0, 2), "A ");  // the server is fine
}

// SIGTERM: stop accepting, finish the replies already decided, exit 0
// (interfaces.md). `slow` waits on many keys and reads nothing; the holder
// then releases them all, so lockd decides one hand-off reply to `slow`
// per key: ~9 MB, more than the kernel's socket buffers hold (~4 MB on
// loopback), so most of it is still in lockd's output buffer when the
// signal comes. Every one of those replies must arrive, in order, before
// the connection closes.
TEST(ProtocolTest, SigtermExitsZeroAfterFlushingDecidedReplies) {
  LockdProcess lockd({"--max-output-bytes", "67108864"});
  LineClient holder(lockd.port()), slow(lockd.port());
  constexpr int kKeys = 40'000;
  constexpr int kChunk = 2'000;  // the holder reads its replies per chunk
  const auto key = [](int i) { return "k" + std::to_string(i) + "-" + std::string(190, 'x'); };
  std::vector<std::string> tokens;
  for (int from = 0; from < kKeys; from += kChunk) {
    std::string batch;
    for (int i = from; i < from + kChunk; ++i) batch += "A h " + key(i) + " 60000\n";
    holder.send(batch);
    for (int i = from; i < from + kChunk; ++i) {
      const auto r = holder.read_line();
      ASSERT_TRUE(r) << i;
      const auto f = fields(*r);
      ASSERT_EQ(f.size(), 4u) << *r;
      ASSERT_EQ(f[0], "A") << *r;
      tokens.push_back(f[1]);
    }
  }
  std::string waits;
  for (int i = 0; i < kKeys; ++i) waits += "A slow " + key(i) + " 60000 60000\n";
  waits.pop_back();  // enqueue() adds the newline
  enqueue(slow, waits, key(0));
  // The hand-offs: decided once the holder has its `R` for every key.
  for (int from = 0; from < kKeys; from += kChunk) {
    std::string batch;
    for (int i = from; i < from + kChunk; ++i) batch += "R " + tokens[static_cast<std::size_t>(i)] + " " + key(i) + "\n";
    holder.send(batch);
    for (int i = from; i < from + kChunk; ++i) {
      const auto r = holder.read_line();
      ASSERT_TRUE(r) << i;
      ASSERT_EQ(r->substr(0, 2), "R ") << *r;
    }
  }
  lockd.process().signal(SIGTERM);
  int got = 0;
  while (const auto r = slow.read_line()) {
    if (r->starts_with("X ")) continue;  // a 1 s lease that ended while it read (v1.3)
    const auto f = fields(*r);
    ASSERT_EQ(f.size(), 4u) << *r;
    ASSERT_EQ(f[0], "A") << *r;
    ASSERT_EQ(f[3], key(got)) << "reply " << got;
    ++got;
  }
  EXPECT_EQ(got, kKeys) << "decided replies lost at SIGTERM";
  EXPECT_TRUE(slow.wait_closed(kEventuallyTimeout));
  EXPECT_EQ(lockd.process().wait_exit(kEventuallyTimeout), 0);
}

TEST(ProtocolTest, TokensKeepGrowingAcrossAKill9Restart) {
  std::uint64_t before = 0;
  {
    LockdProcess lockd;
    LineClient c(lockd.port());
    for (int i = 0; i < 100; ++i) before = token_of(call_skip_x(c, "A o k" + std::to_string(i)));
    lockd.process().signal(SIGKILL);
    lockd.process().wait_exit(kEventuallyTimeout);
  }
  LockdProcess again;
  LineClient c(again.port());
  EXPECT_GT(token_of(call_skip_x(c, "A o k0")), before);
}

}  // namespace
}  // namespace lockd::testing
