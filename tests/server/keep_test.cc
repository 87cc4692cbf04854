// `K` (protocol.md §6a, v1.1) against a real lockd over real TCP, with real
// timing. Time bounds are one-sided where it matters: a server decision
// made after the client sent a line happens at or after the client's clock
// reading taken before sending, so "not before X" checks cannot be fooled
// by a slow machine; the upper bounds are generous.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <chrono>
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
using json = nlohmann::json;

std::uint64_t token_of(const std::string& reply) {
  auto f = fields(reply);
  EXPECT_EQ(f.size(), 4u) << reply;
  EXPECT_EQ(f.empty() ? "" : f[0], "A") << reply;
  return f.size() == 4 ? std::stoull(f[1]) : 0;
}

std::int64_t ms_since(steady_clock::time_point t) {
  return duration_cast<milliseconds>(steady_clock::now() - t).count();
}

// Queues `line` (a waiting acquire on held `key`) and returns once the
// server has processed it: the probe after it is answered `T`.
void enqueue(LineClient& w, const std::string& line, const std::string& key) {
  w.send(line + "\nA probe " + key + "\n");
  EXPECT_EQ(w.read_line(), "T probe " + key);
}

// Acquires `key` for `owner`, retrying until granted or `deadline`; returns
// the reply time, or nullopt.
std::optional<steady_clock::time_point> poll_acquire(LineClient& c, const std::string& owner,
                                                     const std::string& key,
                                                     steady_clock::time_point deadline) {
  while (steady_clock::now() < deadline) {
    const std::string r = call_skip_x(c, "A " + owner + " " + key + " 1000");
    if (!r.empty() && r[0] == 'A') return steady_clock::now();
    EXPECT_EQ(r, "T " + owner + " " + key);
    std::this_thread::sleep_for(10ms);
  }
  return std::nullopt;
}

TEST(KeepTest, RepliesPerRowOfSection6a) {
  LockdProcess lockd({"--sweep-interval-ms", "60000"});
  LineClient c(lockd.port());
  const auto t = token_of(call_skip_x(c, "A alice k 60000"));
  const std::string ts = std::to_string(t);
  EXPECT_EQ(call_skip_x(c, "K " + ts + " k 30000"), "K " + ts + " k");            // live
  EXPECT_EQ(call_skip_x(c, "K " + std::to_string(t + 1) + " k 30000"),           // mismatch
            "N " + std::to_string(t + 1) + " k");
  EXPECT_EQ(call_skip_x(c, "K " + ts + " other 30000"), "N " + ts + " other");     // unknown key
  EXPECT_EQ(call_skip_x(c, "K 0001 k 30000"), "N 1 k");  // the echo is the token's value
  // Ended but not swept: N for a keep, while a release still matches (§8).
  const auto e = token_of(call_skip_x(c, "A alice ended 50"));
  std::this_thread::sleep_for(150ms);
  EXPECT_EQ(call_skip_x(c, "K " + std::to_string(e) + " ended 30000"), "N " + std::to_string(e) + " ended");
  EXPECT_EQ(call_skip_x(c, "R " + std::to_string(e) + " ended"), "R " + std::to_string(e) + " ended");
  // Released: gone.
  EXPECT_EQ(call_skip_x(c, "R " + ts + " k"), "R " + ts + " k");
  EXPECT_EQ(call_skip_x(c, "K " + ts + " k 30000"), "N " + ts + " k");
}

TEST(KeepTest, MalformedKeepsGetTheirErrorAndTheConnectionStaysOpen) {
  LockdProcess lockd({"--max-lease-ms", "5000", "--default-lease-ms", "1000"});
  LineClient c(lockd.port());
  EXPECT_EQ(call_skip_x(c, "K"), "E bad_arity");
  EXPECT_EQ(call_skip_x(c, "K 1 k"), "E bad_arity");
  EXPECT_EQ(call_skip_x(c, "K 1 k 100 5"), "E bad_arity");
  EXPECT_EQ(call_skip_x(c, "K 0 k 100"), "E bad_token");
  EXPECT_EQ(call_skip_x(c, "K x " + std::string(251, 'k') + " 0"), "E bad_token");
  EXPECT_EQ(call_skip_x(c, "K 1 " + std::string(251, 'k') + " 0"), "E bad_key");
  EXPECT_EQ(call_skip_x(c, "K 1 k 0"), "E bad_lease 1 k");
  EXPECT_EQ(call_skip_x(c, "K 1 k 5001"), "E bad_lease 1 k");  // the configured max lease
  EXPECT_EQ(call_skip_x(c, "k 1 k 100"), "E unknown_command");
  EXPECT_EQ(call_skip_x(c, "K 1 k 5000"), "N 1 k");
}

TEST(KeepTest, PipelinedKeepsAnswerInOrder) {
  LockdProcess lockd;
  LineClient c(lockd.port());
  const auto t = token_of(call_skip_x(c, "A alice k 60000"));
  const std::string ts = std::to_string(t);
  std::string batch;
  for (int i = 0; i < 500; ++i) batch += "K " + ts + " k " + std::to_string(1000 + i) + "\n";
  batch += "R " + ts + " k\nK " + ts + " k 1000\n";
  c.send(batch);
  for (int i = 0; i < 500; ++i) ASSERT_EQ(c.read_line(), "K " + ts + " k") << i;
  EXPECT_EQ(c.read_line(), "R " + ts + " k");
  EXPECT_EQ(c.read_line(), "N " + ts + " k");
}

TEST(KeepTest, LockOutlivesItsFirstLeaseAndEndsAfterTheNewOne) {
  LockdProcess lockd({"--sweep-interval-ms", "60000"});
  LineClient holder(lockd.port()), other(lockd.port());
  const auto t = token_of(call_skip_x(holder, "A h k 1000"));
  const auto acquired = steady_clock::now();  // the first lease ends before acquired + 1000
  std::this_thread::sleep_for(300ms);
  const auto keep_sent = steady_clock::now();  // the new one ends after keep_sent + 2000
  ASSERT_EQ(call_skip_x(holder, "K " + std::to_string(t) + " k 2000"), "K " + std::to_string(t) + " k");
  std::this_thread::sleep_until(acquired + 1200ms);
  EXPECT_EQ(call_skip_x(other, "A o k 1000"), "T o k");  // past the first lease: still held
  EXPECT_LT(ms_since(keep_sent), 2000) << "machine too slow for this check";
  const auto got = poll_acquire(other, "o", "k", keep_sent + 6s);
  ASSERT_TRUE(got.has_value()) << "the kept lease never ended";
  EXPECT_GE(duration_cast<milliseconds>(*got - keep_sent).count(), 2000);
  // The old token ended with its lease: a keep cannot bring it back.
  EXPECT_EQ(call_skip_x(holder, "K " + std::to_string(t) + " k 2000"), "N " + std::to_string(t) + " k");
}

TEST(KeepTest, WaiterIsServedAtTheNewDeadlineNotTheOld) {
  LockdProcess lockd({"--sweep-interval-ms", "60000"});
  LineClient holder(lockd.port()), w(lockd.port());
  const auto t = token_of(call_skip_x(holder, "A h k 300"));
  enqueue(w, "A w k 5000 10000", "k");
  const auto keep_sent = steady_clock::now();
  ASSERT_EQ(call_skip_x(holder, "K " + std::to_string(t) + " k 1500"), "K " + std::to_string(t) + " k");
  // Nothing at the old deadline (~300 ms), nor until just before the new
  // one: the server cannot decide the hand-off before keep_sent + 1500.
  const auto quiet_until = keep_sent + 1400ms;
  EXPECT_FALSE(
      w.read_line(duration_cast<milliseconds>(quiet_until - steady_clock::now())).has_value());
  // ... the hand-off at the new one.
  auto r = w.read_line(5s);
  ASSERT_TRUE(r.has_value());
  EXPECT_GT(token_of(*r), t);
  EXPECT_GE(ms_since(keep_sent), 1500);
  EXPECT_LT(ms_since(keep_sent), 6000);
  EXPECT_EQ(call_skip_x(holder, "K " + std::to_string(t) + " k 1000"), "N " + std::to_string(t) + " k");
}

TEST(KeepTest, ShortenedLeaseHandsOffEarlier) {
  LockdProcess lockd({"--sweep-interval-ms", "60000"});
  LineClient holder(lockd.port()), w(lockd.port());
  const auto t = token_of(call_skip_x(holder, "A h k 30000"));
  enqueue(w, "A w k 5000 20000", "k");
  const auto keep_sent = steady_clock::now();
  ASSERT_EQ(call_skip_x(holder, "K " + std::to_string(t) + " k 300"), "K " + std::to_string(t) + " k");
  auto r = w.read_line(10s);
  ASSERT_TRUE(r.has_value());
  const auto t2 = token_of(*r);
  EXPECT_GT(t2, t);
  EXPECT_GE(ms_since(keep_sent), 300);
  EXPECT_LT(ms_since(keep_sent), 10'000);  // not the 30 s of the first lease
  // Keep after the hand-off: the old token is N, the waiter's token works.
  EXPECT_EQ(call_skip_x(holder, "K " + std::to_string(t) + " k 1000"), "N " + std::to_string(t) + " k");
  EXPECT_EQ(call_skip_x(w, "K " + std::to_string(t2) + " k 1000"), "K " + std::to_string(t2) + " k");
}

TEST(KeepTest, KeepAfterReleaseHandOffWithTheOldTokenIsN) {
  LockdProcess lockd;
  LineClient holder(lockd.port()), w(lockd.port());
  const auto t = token_of(call_skip_x(holder, "A h k 30000"));
  enqueue(w, "A w k 5000 20000", "k");
  ASSERT_EQ(call_skip_x(holder, "R " + std::to_string(t) + " k"), "R " + std::to_string(t) + " k");
  auto r = w.read_line();
  ASSERT_TRUE(r.has_value());
  const auto t2 = token_of(*r);
  EXPECT_EQ(call_skip_x(holder, "K " + std::to_string(t) + " k 1000"), "N " + std::to_string(t) + " k");
  EXPECT_EQ(call_skip_x(holder, "K " + std::to_string(t2) + " k 1000"),  // the token is the authority,
            "K " + std::to_string(t2) + " k");                    // not the connection
}

TEST(KeepTest, SweepRespectsTheExtendedExpiry) {
  LockdProcess lockd({"--sweep-interval-ms", "50", "--admin", "127.0.0.1:0"});
  LineClient c(lockd.port());
  // Sweeps completed so far, from /metrics: how the test knows sweeps ran
  // (a loaded machine may delay them far past their interval).
  const auto sweeps = [&] {
    const std::string m = http(lockd.admin_port(), "/metrics").body;
    const std::string name = "\nlockd_sweeps_total ";
    const auto at = m.find(name);
    return at == std::string::npos ? -1.0 : std::stod(m.substr(at + name.size()));
  };
  const auto t = token_of(call_skip_x(c, "A a k 100"));
  ASSERT_EQ(call_skip_x(c, "K " + std::to_string(t) + " k 60000"), "K " + std::to_string(t) + " k");
  std::this_thread::sleep_for(150ms);  // past the first lease
  const double after_first_lease = sweeps();
  ASSERT_GE(after_first_lease, 0);
  ASSERT_TRUE(eventually([&] { return sweeps() >= after_first_lease + 3; }));
  EXPECT_EQ(call_skip_x(c, "R " + std::to_string(t) + " k"), "R " + std::to_string(t) + " k");
  // Shortened: swept soon after the new end (the key is gone).
  const auto t2 = token_of(call_skip_x(c, "A a k2 60000"));
  ASSERT_EQ(call_skip_x(c, "K " + std::to_string(t2) + " k2 50"), "K " + std::to_string(t2) + " k2");
  ASSERT_TRUE(eventually([&] { return http(lockd.admin_port(), "/v1/locks/k2").status == 404; }));
  // The holder was told at the new end (v1.3 §5c `X`), once.
  EXPECT_EQ(c.read_line(), "X " + std::to_string(t2) + " k2");
  EXPECT_EQ(call_skip_x(c, "R " + std::to_string(t2) + " k2"), "N " + std::to_string(t2) + " k2");
}

TEST(KeepTest, AdminViewsAndMetricsShowTheKeep) {
  LockdProcess lockd({"--admin", "127.0.0.1:0"});
  ASSERT_NE(lockd.admin_port(), 0);
  LineClient c(lockd.port());
  const auto t = token_of(call_skip_x(c, "A alice k 1000"));
  ASSERT_EQ(call_skip_x(c, "K " + std::to_string(t) + " k 600000"), "K " + std::to_string(t) + " k");
  EXPECT_EQ(call_skip_x(c, "K " + std::to_string(t + 1) + " k 600000"),
            "N " + std::to_string(t + 1) + " k");

  const HttpReply one = http(lockd.admin_port(), "/v1/locks/k");
  ASSERT_EQ(one.status, 200);
  const json j = json::parse(one.body);
  EXPECT_EQ(j["token"].get<std::uint64_t>(), t);
  EXPECT_GT(j["expires_in_ms"].get<std::int64_t>(), 590'000);  // the kept expiry, not ~1000
  EXPECT_FALSE(j["expired"].get<bool>());
  EXPECT_GE(j["lease_ms"].get<std::int64_t>(), 600'000);  // counted from the grant
  EXPECT_LT(j["held_ms"].get<std::int64_t>(), 10'000);    // since the grant, not the keep

  const HttpReply list = http(lockd.admin_port(), "/v1/locks");
  ASSERT_EQ(list.status, 200);
  EXPECT_GT(json::parse(list.body)["locks"][0]["expires_in_ms"].get<std::int64_t>(), 590'000);

  const HttpReply metrics = http(lockd.admin_port(), "/metrics");
  ASSERT_EQ(metrics.status, 200);
  EXPECT_NE(metrics.body.find("lockd_requests_total{verb=\"K\",result=\"K\"} 1\n"),
            std::string::npos);
  EXPECT_NE(metrics.body.find("lockd_requests_total{verb=\"K\",result=\"N\"} 1\n"),
            std::string::npos);
  EXPECT_NE(metrics.body.find("lockd_requests_received_total{verb=\"K\"} 2\n"),
            std::string::npos);
  EXPECT_NE(metrics.body.find("lockd_keeps_total 1\n"), std::string::npos);
}

}  // namespace
}  // namespace lockd::testing
