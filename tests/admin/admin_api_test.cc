// The admin HTTP API of a real lockd over real TCP, against interfaces.md:
// every endpoint and field, key encoding, paging, error codes, metrics that
// move, and garbage input that must not hurt the server.
#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "http_get.h"
#include "metric.h"
#include "lockd_process.h"
#include "run_program.h"

namespace lockd::testing {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

// A lockd with its admin API on an ephemeral port.
struct Node {
  explicit Node(std::vector<std::string> extra = {}) : lockd(with_admin(std::move(extra))) {}
  static std::vector<std::string> with_admin(std::vector<std::string> f) {
    f.insert(f.end(), {"--admin", "127.0.0.1:0"});
    return f;
  }
  json get_json(const std::string& target, int want_status = 200) {
    const HttpReply r = http(lockd.admin_port(), target);
    EXPECT_EQ(r.status, want_status) << target << ": " << r.body;
    EXPECT_EQ(r.headers.at("content-type"), "application/json") << target;
    json j = json::parse(r.body, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << target << ": " << r.body;
    return j;
  }
  LockdProcess lockd;
};

std::uint64_t token_of(const std::string& reply) {
  const auto f = fields(reply);
  EXPECT_EQ(f.size(), 4u) << reply;
  return f.size() == 4 ? std::stoull(f[1]) : 0;
}

// `i` as four digits: 7 -> "0007".
std::string fmt_index(int i) {
  std::string s = std::to_string(i);
  return std::string(4 - s.size(), '0') + s;
}

TEST(AdminApiTest, HealthAndReadiness) {
  Node n;
  ASSERT_NE(n.lockd.admin_port(), 0);
  HttpReply h = http(n.lockd.admin_port(), "/healthz");
  EXPECT_EQ(h.status, 200);
  EXPECT_EQ(h.body, "ok");
  HttpReply r = http(n.lockd.admin_port(), "/readyz");
  EXPECT_EQ(r.status, 200);
  // HEAD is a GET without a body.
  EXPECT_EQ(http(n.lockd.admin_port(), "/healthz", "HEAD").status, 200);
}

TEST(AdminApiTest, StatusHasEveryField) {
  Node n;
  LineClient c(n.lockd.port());
  c.call("A alice k1");
  c.call("A alice k2");
  LineClient w(n.lockd.port());
  w.send("A bob k1 30000 10000\nA probe k1\n");
  ASSERT_EQ(w.read_line(), "T probe k1");  // bob is queued
  const json s = n.get_json("/v1/status");
  for (const char* f : {"mode", "node_id", "role", "term", "leader", "keys", "holders", "waiters",
                        "connections", "commit_index", "applied_index", "uptime_ms", "version"}) {
    EXPECT_TRUE(s.contains(f)) << f << " missing in " << s.dump();
  }
  EXPECT_EQ(s["mode"], "single");
  EXPECT_EQ(s["role"], "single");
  EXPECT_TRUE(s["leader"].is_null());
  EXPECT_EQ(s["keys"], 2);
  EXPECT_EQ(s["holders"], 2);
  EXPECT_EQ(s["waiters"], 1);
  EXPECT_EQ(s["connections"], 2);
  EXPECT_TRUE(s["uptime_ms"].is_number_integer());
  EXPECT_GE(s["uptime_ms"].get<std::int64_t>(), 0);
  EXPECT_TRUE(s["version"].is_string());
}

TEST(AdminApiTest, ListIsSortedPagedAndFilteredByPrefix) {
  Node n;
  LineClient c(n.lockd.port());
  for (const char* k : {"b/2", "a/2", "c", "a/1", "b/1", "a/3"}) c.call(std::string("A o ") + k);
  json all = n.get_json("/v1/locks");
  ASSERT_EQ(all["locks"].size(), 6u);
  EXPECT_EQ(all["truncated"], false);
  std::vector<std::string> keys;
  for (const auto& l : all["locks"]) keys.push_back(l["key"]);
  EXPECT_EQ(keys, (std::vector<std::string>{"a/1", "a/2", "a/3", "b/1", "b/2", "c"}));
  const json& first = all["locks"][0];
  for (const char* f : {"key", "owner", "token", "expires_in_ms", "waiters"}) {
    EXPECT_TRUE(first.contains(f)) << f;
  }
  EXPECT_EQ(first["owner"], "o");
  EXPECT_TRUE(first["token"].is_number_unsigned());
  EXPECT_EQ(first["waiters"], 0);
  EXPECT_GT(first["expires_in_ms"].get<std::int64_t>(), 29'000);

  json a = n.get_json("/v1/locks?prefix=a%2F&limit=2");
  ASSERT_EQ(a["locks"].size(), 2u);
  EXPECT_EQ(a["locks"][0]["key"], "a/1");
  EXPECT_EQ(a["locks"][1]["key"], "a/2");
  EXPECT_EQ(a["truncated"], true);
  json next = n.get_json("/v1/locks?prefix=a/&limit=2&after=a/2");
  ASSERT_EQ(next["locks"].size(), 1u);
  EXPECT_EQ(next["locks"][0]["key"], "a/3");
  EXPECT_EQ(next["truncated"], false);
  EXPECT_EQ(n.get_json("/v1/locks?prefix=zzz")["locks"].size(), 0u);
  EXPECT_EQ(n.get_json("/v1/locks?limit=6")["truncated"], false);
  EXPECT_EQ(n.get_json("/v1/locks?limit=5")["truncated"], true);
}

TEST(AdminApiTest, BadQueryValuesAre400WithJson) {
  Node n;
  for (const char* q : {"/v1/locks?limit=abc", "/v1/locks?limit=-1", "/v1/locks?limit=0",
                        "/v1/locks?limit=", "/v1/locks?limit=1x", "/v1/locks?prefix=%zz",
                        "/v1/locks?prefix=%4"}) {
    const json j = n.get_json(q, 400);
    EXPECT_TRUE(j["error"].is_string()) << q;
  }
}

TEST(AdminApiTest, OneKeyWithHolderTokenAndWaitersFrontFirst) {
  Node n;
  LineClient c(n.lockd.port());
  const std::uint64_t t = token_of(c.call("A alice orders/42 60000"));
  LineClient w1(n.lockd.port()), w2(n.lockd.port());
  w1.send("A bob orders/42 5000 20000\nA probe orders/42\n");
  ASSERT_EQ(w1.read_line(), "T probe orders/42");
  w2.send("A carol orders/42 7000 10000\nA probe orders/42\n");
  ASSERT_EQ(w2.read_line(), "T probe orders/42");
  const json j = n.get_json("/v1/locks/orders%2F42");
  EXPECT_EQ(j["key"], "orders/42");
  EXPECT_EQ(j["owner"], "alice");
  // Tokens are JSON numbers above 2^53: they must survive exactly.
  EXPECT_EQ(j["token"].get<std::uint64_t>(), t);
  EXPECT_GT(t, std::uint64_t{1} << 53);
  EXPECT_GT(j["expires_in_ms"].get<std::int64_t>(), 59'000);
  EXPECT_EQ(j["expired"], false);
  ASSERT_EQ(j["waiters"].size(), 2u);
  EXPECT_EQ(j["waiters"][0]["owner"], "bob");
  EXPECT_EQ(j["waiters"][0]["lease_ms"], 5000);
  EXPECT_GT(j["waiters"][0]["wait_left_ms"].get<std::int64_t>(), 19'000);
  EXPECT_LE(j["waiters"][0]["wait_left_ms"].get<std::int64_t>(), 20'000);
  EXPECT_EQ(j["waiters"][1]["owner"], "carol");
  EXPECT_EQ(j["waiters"][1]["lease_ms"], 7000);
  // The list agrees.
  EXPECT_EQ(n.get_json("/v1/locks")["locks"][0]["waiters"], 2);
  // An unencoded `/` reaches the same key.
  EXPECT_EQ(n.get_json("/v1/locks/orders/42")["owner"], "alice");
}

TEST(AdminApiTest, KeysWithSlashPercentAndQuestionMarkRoundTrip) {
  Node n;
  LineClient c(n.lockd.port());
  for (const std::string k : {"a/b/c", "50%off", "what?really", "x+y", "%2F"}) {
    c.call("A o " + k);
  }
  EXPECT_EQ(n.get_json("/v1/locks/a%2Fb%2Fc")["key"], "a/b/c");
  EXPECT_EQ(n.get_json("/v1/locks/50%25off")["key"], "50%off");
  EXPECT_EQ(n.get_json("/v1/locks/what%3Freally")["key"], "what?really");
  EXPECT_EQ(n.get_json("/v1/locks/x+y")["key"], "x+y");  // `+` is not a space
  EXPECT_EQ(n.get_json("/v1/locks/%252F")["key"], "%2F");
  // A raw `?` starts the query: the key is `what`, which is not there.
  EXPECT_EQ(n.get_json("/v1/locks/what?really", 404)["error"], "not_found");
  EXPECT_EQ(n.get_json("/v1/locks?prefix=50%25")["locks"][0]["key"], "50%off");
  EXPECT_EQ(n.get_json("/v1/locks?prefix=what%3F")["locks"][0]["key"], "what?really");
  EXPECT_EQ(n.get_json("/v1/locks/bad%zzescape", 400)["error"], "bad_key");
}

TEST(AdminApiTest, UnknownKeyPathAndMethodErrors) {
  Node n;
  EXPECT_EQ(n.get_json("/v1/locks/nope", 404)["error"], "not_found");
  EXPECT_EQ(n.get_json("/nope", 404)["error"], "not_found");
  EXPECT_EQ(n.get_json("/v1/cluster", 404)["error"], "not_found");
  for (const char* m : {"POST", "PUT", "DELETE", "PATCH"}) {
    const HttpReply r = http(n.lockd.admin_port(), "/v1/status", m);
    EXPECT_EQ(r.status, 405) << m;
    EXPECT_EQ(json::parse(r.body, nullptr, false).value("error", ""), "method_not_allowed") << m;
    EXPECT_EQ(r.headers.at("allow"), "GET, HEAD");
  }
}

TEST(AdminApiTest, ExpiresInIsNegativeOnceExpiredAndNotSwept) {
  Node n({"--sweep-interval-ms", "600000"});
  LineClient c(n.lockd.port());
  token_of(c.call("A alice short 50"));
  std::this_thread::sleep_for(120ms);
  const json j = n.get_json("/v1/locks/short");
  EXPECT_LT(j["expires_in_ms"].get<std::int64_t>(), 0);
  EXPECT_EQ(j["expired"], true);
  EXPECT_LT(n.get_json("/v1/locks")["locks"][0]["expires_in_ms"].get<std::int64_t>(), 0);
  const json s = n.get_json("/v1/status");
  EXPECT_EQ(s["keys"], 1);
  EXPECT_EQ(s["holders"], 0);  // an expired lease holds nothing
}

TEST(AdminApiTest, MetricsCountersMoveWithRequests) {
  Node n;
  const auto scrape = [&] {
    const HttpReply r = http(n.lockd.admin_port(), "/metrics");
    EXPECT_EQ(r.status, 200);
    EXPECT_TRUE(r.headers.at("content-type").starts_with("text/plain; version=0.0.4"));
    return r.body;
  };
  const std::string before = scrape();
  const std::string a_series = R"(lockd_requests_total{verb="A",result="A"})";
  const double a0 = metric(before, a_series);
  ASSERT_GE(a0, 0) << before;
  LineClient c(n.lockd.port());
  std::uint64_t last = 0;
  for (int i = 0; i < 3; ++i) last = token_of(c.call("A o k" + std::to_string(i)));
  c.call("A other k0");                        // T
  c.call("R " + std::to_string(last) + " k2");  // R
  c.call("R 1 k0");                             // N
  c.call("bogus");                              // E
  const std::string after = scrape();
  EXPECT_EQ(metric(after, a_series), a0 + 3);
  EXPECT_EQ(metric(after, R"(lockd_requests_total{verb="A",result="T"})"), 1);
  EXPECT_EQ(metric(after, R"(lockd_requests_total{verb="R",result="R"})"), 1);
  EXPECT_EQ(metric(after, R"(lockd_requests_total{verb="R",result="N"})"), 1);
  EXPECT_EQ(metric(after, R"(lockd_requests_total{verb="invalid",result="E"})"), 1);
  EXPECT_EQ(metric(after, "lockd_keys"), 2);
  EXPECT_EQ(metric(after, "lockd_holders"), 2);
  EXPECT_EQ(metric(after, "lockd_waiters"), 0);
  EXPECT_EQ(metric(after, "lockd_connections"), 1);
  EXPECT_EQ(metric(after, "lockd_request_duration_seconds_count"), 7);
  EXPECT_EQ(metric(after, R"(lockd_request_duration_seconds_bucket{le="+Inf"})"), 7);
  EXPECT_EQ(metric(after, R"(lockd_handoffs_total{cause="release"})"), 0);
  EXPECT_GT(metric(after, "process_resident_memory_bytes"), 1e5);
  EXPECT_GT(metric(after, "process_open_fds"), 2);
  EXPECT_GE(metric(after, "process_cpu_seconds_total"), 0);
  for (const char* family :
       {"lockd_handoffs_total", "lockd_expirations_total", "lockd_sweeps_total",
        "lockd_swept_keys_total", "lockd_output_overflows_total", "lockd_connections_accepted_total",
        "lockd_grants_total", "lockd_takeovers_total", "lockd_wait_timeouts_total"}) {
    EXPECT_NE(after.find(std::string("# TYPE ") + family + " counter"), std::string::npos)
        << family;
  }
  // Every line is a comment or `name{labels} value`.
  static const std::regex kSample(R"(^[a-zA-Z_:][a-zA-Z0-9_:]*(\{[^}]*\})? [-+0-9.eEInf]+$)");
  std::istringstream in(after);
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with("# HELP ") || line.starts_with("# TYPE ")) continue;
    EXPECT_TRUE(std::regex_match(line, kSample)) << line;
  }
}

TEST(AdminApiTest, HandoffsByReleaseAndExpiryAreCounted) {
  Node n;
  LineClient c(n.lockd.port()), w(n.lockd.port());
  const std::uint64_t t = token_of(c.call("A alice h 60000"));
  // bob, then carol, queue behind alice; the `T` for the probe proves both
  // are queued (same connection, in order) before alice releases.
  w.send("A bob h 80 5000\nA carol h 60000 5000\nA probe h\n");
  ASSERT_EQ(w.read_line(), "T probe h");
  c.call("R " + std::to_string(t) + " h");
  const auto bob = w.read_line();  // handed to bob on release, for 80 ms
  ASSERT_TRUE(bob.has_value());
  EXPECT_EQ(fields(*bob)[2], "bob");
  // bob's lease ends: its connection is told first (v1.3 §5c `X`), then
  // the key is handed to carol.
  EXPECT_EQ(w.read_line(10'000ms), "X " + fields(*bob)[1] + " h");
  const auto carol = w.read_line(10'000ms);  // handed to carol on bob's expiry
  ASSERT_TRUE(carol.has_value());
  EXPECT_EQ(fields(*carol)[2], "carol");
  const std::string m = http(n.lockd.admin_port(), "/metrics").body;
  EXPECT_EQ(metric(m, R"(lockd_handoffs_total{cause="release"})"), 1);
  EXPECT_EQ(metric(m, R"(lockd_handoffs_total{cause="expiry"})"), 1);
  EXPECT_GE(metric(m, "lockd_expirations_total"), 1);
}

TEST(AdminApiTest, TopShowsBusyKeysQueuesAndHolders) {
  Node n;
  LineClient c(n.lockd.port()), w(n.lockd.port());
  c.call("A alice hot 60000");
  for (int i = 0; i < 20; ++i) c.call("A other hot");
  w.send("A bob hot 1000 20000\nA probe hot\n");
  ASSERT_EQ(w.read_line(), "T probe hot");
  const json j = n.get_json("/v1/top?limit=5");
  EXPECT_EQ(j["busiest"][0]["key"], "hot");
  EXPECT_EQ(j["longest_queues"][0]["key"], "hot");
  EXPECT_EQ(j["longest_queues"][0]["waiters"], 1);
  EXPECT_EQ(j["oldest_holders"][0]["owner"], "alice");
  EXPECT_EQ(j["status"]["keys"], 1);
}

// Enough keys that listings are split across loop turns (more hash buckets
// than one slice walks), with lock traffic interleaved.
TEST(AdminApiTest, ListingsOfABigTableAreSplitAndStillExact) {
  Node n;
  constexpr int kKeys = 30'000;
  LineClient c(n.lockd.port());
  std::string batch;
  for (int i = 0; i < kKeys; ++i) batch += "A o big/" + std::to_string(100'000 + i) + " 600000\n";
  c.send(batch);
  for (int i = 0; i < kKeys; ++i) ASSERT_TRUE(c.read_line().has_value()) << i;
  LineClient w(n.lockd.port());
  w.send("A bob big/100007 1000 20000\nA probe big/100007\n");
  ASSERT_EQ(w.read_line(), "T probe big/100007");

  // Several listings at once, each paged, while requests keep flowing.
  std::vector<std::thread> readers;
  std::vector<json> pages(3);
  for (int r = 0; r < 3; ++r) {
    readers.emplace_back([&, r] {
      pages[r] = n.get_json("/v1/locks?limit=100&after=big/1" + std::to_string(r) + "0000");
    });
  }
  for (int i = 0; i < 50; ++i) EXPECT_EQ(c.call("A x other/" + std::to_string(i))[0], 'A');
  for (auto& t : readers) t.join();
  for (int r = 0; r < 3; ++r) {
    ASSERT_EQ(pages[r]["locks"].size(), 100u) << r;
    EXPECT_EQ(pages[r]["truncated"], true);
    for (int i = 0; i < 100; ++i) {
      EXPECT_EQ(pages[r]["locks"][i]["key"], "big/1" + std::to_string(r) + fmt_index(i + 1))
          << r << " " << i;
    }
  }
  const json top = n.get_json("/v1/top?limit=3");
  EXPECT_EQ(top["longest_queues"][0]["key"], "big/100007");
  EXPECT_EQ(top["status"]["holders"], kKeys + 50);
  // Clients that leave before their split listing is answered.
  for (int i = 0; i < 10; ++i) {
    LineClient quitter(n.lockd.admin_port());
    quitter.send("GET /v1/locks?limit=100 HTTP/1.1\r\nHost: x\r\n\r\n");
    quitter.close();
  }
  EXPECT_EQ(http(n.lockd.admin_port(), "/healthz").status, 200);
  const json last = n.get_json("/v1/locks?prefix=big/&after=big/129990");
  EXPECT_EQ(last["locks"].size(), 9u);
  EXPECT_EQ(last["truncated"], false);
}

TEST(AdminApiTest, GarbageHttpInputNeverHurtsTheServer) {
  Node n;
  const std::uint16_t p = n.lockd.admin_port();
  // All at once, each on its own connection: some are answered 400 at
  // once, some leave evhttp waiting (a body that never comes), and the
  // server must serve others meanwhile. Each read gives up after 10 s, so
  // running them side by side keeps the test at ~10 s instead of ~40.
  const std::vector<std::string> garbage = {
      std::string("\x00\x01\x02 garbage\r\n\r\n", 15),
      "GET\r\n\r\n",
      "GET / HTTP/9.9\r\n\r\n",
      "GET /v1/status HTTP/1.1\r\nX: " + std::string(100'000, 'a') + "\r\n\r\n",
      "POST /v1/status HTTP/1.1\r\nContent-Length: 999999999\r\n\r\nabc",
      "GET /v1/locks/" + std::string(10'000, '%') + " HTTP/1.1\r\n\r\n",
      "GET /v1/locks?" + std::string(5'000, '&') + "limit=1 HTTP/1.1\r\n\r\n",
      "GET /v1/locks?limit=99999999999999999999999 HTTP/1.1\r\n\r\n",
      "GET http://example.com/v1/status HTTP/1.1\r\n\r\n",
  };
  std::vector<std::thread> senders;
  for (const std::string& g : garbage) senders.emplace_back([p, g] { http_raw(p, g); });
  EXPECT_EQ(http(p, "/healthz").status, 200);
  LineClient c(n.lockd.port());
  EXPECT_EQ(fields(c.call("A alice still-alive"))[0], "A");
  for (std::thread& t : senders) t.join();
  EXPECT_EQ(http(p, "/healthz").status, 200);
  EXPECT_EQ(n.get_json("/v1/locks?limit=99999999999999999999999")["locks"].size(), 1u);
}

TEST(AdminApiTest, AdminAddressInUseIsAStartupError) {
  Node first;
  ChildProcess second;
  ASSERT_TRUE(second.start({lockd_binary(), "--listen", "127.0.0.1:0", "--admin",
                            "127.0.0.1:" + std::to_string(first.lockd.admin_port())}));
  EXPECT_EQ(second.wait_exit(std::chrono::seconds(10)), 2);
  EXPECT_NE(second.stderr_text().find("admin"), std::string::npos) << second.stderr_text();
  EXPECT_EQ(second.stderr_text().find("listening"), std::string::npos) << second.stderr_text();
}

TEST(AdminApiTest, AdminOffListensNowhere) {
  LockdProcess lockd;  // the harness default: --admin off
  EXPECT_EQ(lockd.admin_port(), 0);
  EXPECT_EQ(lockd.process().stderr_text().find("admin listening"), std::string::npos);
}

TEST(AdminApiTest, VersionIsTheSameInFlagStatusAndMetric) {
  // `lockd --version`: "lockd 0.1.0" or "lockd 0.1.0 (git 9c497a1)".
  const RunResult version = run_program({lockd_binary(), "--version"});
  ASSERT_EQ(version.status, 0) << version.err;
  const std::string& line = version.out;
  static const std::regex kLine(R"(lockd ([0-9]+\.[0-9]+\.[0-9]+)(?: \(git ([0-9a-f]+(-dirty)?)\))?\n)");
  std::smatch m;
  ASSERT_TRUE(std::regex_match(line, m, kLine)) << line;
  const std::string number = m[1], revision = m[2];
  std::string full = number;
  if (!revision.empty()) full += "+g" + std::regex_replace(revision, std::regex("-"), ".");

  Node n;
  EXPECT_EQ(n.get_json("/v1/status")["version"], full);
  const std::string metrics = http(n.lockd.admin_port(), "/metrics").body;
  const std::string series = "lockd_build_info{version=\"" + full + "\",revision=\"" + revision +
                             "\",mode=\"single\"}";
  EXPECT_EQ(metric(metrics, series), 1) << metrics;
}

}  // namespace
}  // namespace lockd::testing
