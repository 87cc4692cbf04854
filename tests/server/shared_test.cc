// `S` (protocol.md §5b, v1.2) against a real lockd over real TCP: every
// row of the table, the one FIFO queue, hand-off of runs of readers, per
// holder R/K, expiry, and the admin views of shared keys.
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

using namespace std::chrono;
using namespace std::chrono_literals;
using json = nlohmann::json;

// The token of an `S token owner key` (or `A ...`) reply.
std::string token_of(const std::string& reply, const std::string& verb = "S") {
  auto f = fields(reply);
  EXPECT_EQ(f.size(), 4u) << reply;
  EXPECT_EQ(f.empty() ? "" : f[0], verb) << reply;
  return f.size() == 4 ? f[1] : "";
}

// Queues `line` (a waiting acquire on held `key`) and returns once the
// server has processed it: the probe after it is answered `T`.
void enqueue(LineClient& c, const std::string& line, const std::string& key) {
  c.send(line + "\nA probe " + key + "\n");
  EXPECT_EQ(c.read_line(), "T probe " + key);
}

TEST(SharedTest, RepliesPerRowOfSection5b) {
  LockdProcess lockd({"--max-waiters-per-key", "1", "--max-keys", "3"});
  LineClient c(lockd.port());
  // Not registered: registered shared, new token.
  const std::string t1 = token_of(c.call("S r1 k 2 60000"));
  EXPECT_EQ(c.call("S r1 k 2 60000").substr(0, 2), "S ");  // owner is no authority: a second holder
  // Same limit, full, nobody queued, wait 0: T.
  EXPECT_EQ(c.call("S r3 k 2 60000"), "T r3 k");
  // Another limit while live holders carry 2.
  EXPECT_EQ(c.call("S r3 k 3 60000 1000"), "E limit_mismatch r3 k");
  EXPECT_EQ(c.call("S r3 k 0"), "E limit_mismatch r3 k");
  // Full, wait > 0: queued (answered later); a full queue: B.
  enqueue(c, "S r3 k 2 60000 60000", "k");
  EXPECT_EQ(c.call("S r4 k 2 60000 60000"), "B r4 k");
  // Held exclusively: T; semaphore of one, read lock.
  ASSERT_EQ(c.call("A w x 60000").substr(0, 2), "A ");
  EXPECT_EQ(c.call("S r x 0"), "T r x");
  EXPECT_EQ(c.call("S r x 5"), "T r x");
  // --max-keys counts keys: a third key, then B for a fourth.
  EXPECT_EQ(c.call("S r y 0").substr(0, 2), "S ");
  EXPECT_EQ(c.call("S r z 0"), "B r z");
  // An `A` on a shared key with live holders: T.
  EXPECT_EQ(c.call("A w y"), "T w y");
  // Malformed: errors without echo, checked owner, key, limit, lease, wait.
  EXPECT_EQ(c.call("S r k"), "E bad_arity");
  EXPECT_EQ(c.call("S r k 1 1 1 1"), "E bad_arity");
  EXPECT_EQ(c.call("S r k 65536"), "E bad_limit r k");
  EXPECT_EQ(c.call("S r k -1 0"), "E bad_limit r k");
  EXPECT_EQ(c.call("S r k 1 0"), "E bad_lease r k");
  EXPECT_EQ(c.call("S r k 1 1 300001"), "E bad_wait r k");
  EXPECT_EQ(c.call("S " + std::string(65, 'o') + " k x"), "E bad_owner");
  EXPECT_EQ(c.call("s r k 1"), "E unknown_command");
  // The connection stayed usable through all of it; R of the first holder.
  EXPECT_EQ(c.call("R " + t1 + " k"), "R " + t1 + " k");
}

TEST(SharedTest, WriterReleaseGrantsTheRunOfReadersThenTheNextWriter) {
  LockdProcess lockd;
  LineClient w1(lockd.port()), r1(lockd.port()), r2(lockd.port()), r3(lockd.port()),
      w2(lockd.port()), r4(lockd.port());
  const std::string tw = token_of(w1.call("A w1 doc 60000"), "A");
  enqueue(r1, "S r1 doc 0 60000 60000", "doc");
  enqueue(r2, "S r2 doc 0 60000 60000", "doc");
  enqueue(r3, "S r3 doc 0 60000 60000", "doc");
  enqueue(w2, "A w2 doc 60000 60000", "doc");
  enqueue(r4, "S r4 doc 0 60000 60000", "doc");
  EXPECT_EQ(w1.call("R " + tw + " doc"), "R " + tw + " doc");
  std::string tr[3];
  LineClient* readers[3] = {&r1, &r2, &r3};
  for (int i = 0; i < 3; ++i) {
    auto line = readers[i]->read_line();
    ASSERT_TRUE(line.has_value());
    tr[i] = token_of(*line);
    EXPECT_EQ(*line, "S " + tr[i] + " r" + std::to_string(i + 1) + " doc");
    EXPECT_GT(std::stoull(tr[i]), std::stoull(tw));
  }
  EXPECT_LT(std::stoull(tr[0]), std::stoull(tr[1]));
  EXPECT_LT(std::stoull(tr[1]), std::stoull(tr[2]));
  // The run stopped at w2; r4, behind it, is not let in either.
  EXPECT_FALSE(w2.read_line(200ms).has_value());
  EXPECT_FALSE(r4.read_line(1ms).has_value());
  // A newcomer reader does not pass the queued writer.
  LineClient late(lockd.port());
  EXPECT_EQ(late.call("S late doc 0"), "T late doc");
  // Releasing one reader releases only it.
  EXPECT_EQ(r1.call("R " + tr[0] + " doc"), "R " + tr[0] + " doc");
  EXPECT_EQ(r1.call("R " + tr[0] + " doc"), "N " + tr[0] + " doc");
  EXPECT_FALSE(w2.read_line(100ms).has_value());
  EXPECT_EQ(r2.call("R " + tr[1] + " doc"), "R " + tr[1] + " doc");
  EXPECT_EQ(r3.call("R " + tr[2] + " doc"), "R " + tr[2] + " doc");
  auto granted = w2.read_line();
  ASSERT_TRUE(granted.has_value());
  const std::string tw2 = token_of(*granted, "A");
  EXPECT_GT(std::stoull(tw2), std::stoull(tr[2]));
  EXPECT_EQ(w2.call("R " + tw2 + " doc"), "R " + tw2 + " doc");
  auto last = r4.read_line();
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ(fields(*last)[0], "S");
}

TEST(SharedTest, SemaphoreHandsAPermitOnEachExpiryAndKeepActsPerHolder) {
  LockdProcess lockd({"--sweep-interval-ms", "60000"});
  LineClient a(lockd.port()), b(lockd.port()), w(lockd.port());
  const std::string ta = token_of(a.call("S a pool 2 300"));
  const std::string tb = token_of(b.call("S b pool 2 60000"));
  // a keeps its own lease; b's token cannot extend a's.
  EXPECT_EQ(a.call("K " + ta + " pool 600"), "K " + ta + " pool");
  const auto kept = steady_clock::now();
  enqueue(w, "S w pool 2 60000 60000", "pool");
  // The permit comes when a's (kept) lease ends, not at its first 300 ms.
  EXPECT_FALSE(w.read_line(400ms).has_value());
  auto got = w.read_line(10s);
  ASSERT_TRUE(got.has_value());
  EXPECT_GE(duration_cast<milliseconds>(steady_clock::now() - kept).count(), 600);
  const std::string tw = token_of(*got);
  // a's lease ended and was replaced by w: a was told (v1.3 §5c `X`);
  // no R, no K for it.
  EXPECT_EQ(a.read_line(), "X " + ta + " pool");
  EXPECT_EQ(a.call("K " + ta + " pool 600"), "N " + ta + " pool");
  EXPECT_EQ(b.call("R " + tb + " pool"), "R " + tb + " pool");
  EXPECT_EQ(w.call("R " + tw + " pool"), "R " + tw + " pool");
  // The last holder left and nobody waits: the key is gone.
  EXPECT_EQ(w.call("R " + tw + " pool"), "N " + tw + " pool");
}

TEST(SharedTest, FrontWriterLeavingLetsTheReadersBehindIn) {
  LockdProcess lockd;
  LineClient r1(lockd.port()), wt(lockd.port()), wc(lockd.port()), r2(lockd.port()),
      r3(lockd.port());
  token_of(r1.call("S r1 k 0 60000"));
  token_of(r1.call("S r1 j 0 60000"));
  // A writer whose wait runs out: T, then the reader behind it gets in.
  enqueue(wt, "A wt k 60000 300", "k");
  enqueue(r2, "S r2 k 0 60000 60000", "k");
  EXPECT_EQ(wt.read_line(), "T wt k");
  auto got = r2.read_line();
  ASSERT_TRUE(got.has_value());
  token_of(*got);
  // A writer whose connection closes: the same, without a reply to it.
  enqueue(wc, "A wc j 60000 60000", "j");
  enqueue(r3, "S r3 j 0 60000 60000", "j");
  EXPECT_FALSE(r3.read_line(100ms).has_value());
  wc.close();
  got = r3.read_line();
  ASSERT_TRUE(got.has_value());
  token_of(*got);
}

TEST(SharedTest, AdminViewsShowEveryHolderAndEachWaitersMode) {
  LockdProcess lockd({"--admin", "127.0.0.1:0"});
  LineClient c(lockd.port()), q(lockd.port());
  const std::string t1 = token_of(c.call("S alice cfg 3 60000"));
  const std::string t2 = token_of(c.call("S bob cfg 3 60000"));
  token_of(c.call("A carol excl 60000"), "A");
  enqueue(q, "A writer cfg 60000 60000", "cfg");
  enqueue(q, "S reader cfg 3 60000 60000", "cfg");
  const std::uint16_t admin = lockd.admin_port();
  auto one = http(admin, "/v1/locks/cfg");
  ASSERT_EQ(one.status, 200) << one.body;
  const json j = json::parse(one.body);
  EXPECT_EQ(j["mode"], "shared");
  EXPECT_EQ(j["limit"], 3);
  EXPECT_EQ(j["owner"], "alice");  // the oldest holder
  EXPECT_EQ(std::to_string(j["token"].get<std::uint64_t>()), t1);
  ASSERT_EQ(j["holders"].size(), 2u);
  EXPECT_EQ(j["holders"][0]["owner"], "alice");
  EXPECT_EQ(j["holders"][1]["owner"], "bob");
  EXPECT_EQ(std::to_string(j["holders"][1]["token"].get<std::uint64_t>()), t2);
  EXPECT_GT(j["holders"][1]["expires_in_ms"].get<std::int64_t>(), 50'000);
  ASSERT_EQ(j["waiters"].size(), 2u);
  EXPECT_EQ(j["waiters"][0]["owner"], "writer");
  EXPECT_EQ(j["waiters"][0]["mode"], "exclusive");
  EXPECT_EQ(j["waiters"][1]["mode"], "shared");
  auto list = http(admin, "/v1/locks");
  ASSERT_EQ(list.status, 200);
  const json l = json::parse(list.body);
  ASSERT_EQ(l["locks"].size(), 2u);
  EXPECT_EQ(l["locks"][0]["key"], "cfg");
  EXPECT_EQ(l["locks"][0]["mode"], "shared");
  EXPECT_EQ(l["locks"][0]["holders"].size(), 2u);
  EXPECT_EQ(l["locks"][0]["waiters"], 2);
  EXPECT_EQ(l["locks"][1]["mode"], "exclusive");
  EXPECT_FALSE(l["locks"][1].contains("limit"));
  EXPECT_EQ(l["locks"][1]["holders"].size(), 1u);
  // Every shared holder counts as one holder.
  const json st = json::parse(http(admin, "/v1/status").body);
  EXPECT_EQ(st["holders"], 3);
  EXPECT_EQ(st["keys"], 2);
  EXPECT_EQ(st["waiters"], 2);
  const std::string metrics = http(admin, "/metrics").body;
  EXPECT_NE(metrics.find("lockd_requests_total{verb=\"S\",result=\"S\"} 2"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("lockd_holders 3"), std::string::npos);
}

}  // namespace
}  // namespace lockd::testing
