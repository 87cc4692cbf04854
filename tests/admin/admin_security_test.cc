// The admin API with --auth (bearer credentials, client certificates) and
// --admin-tls, against a real lockd: 401 without an identity, 403 for a
// change by a non-admin, /healthz and /readyz open to all. And the v1.3
// hardening (protocol.md §11a): no admin without an ACL, no web page can
// drive it (Host, Origin, Content-Type), tokens only for whom they belong,
// a bounded number of connections that must ask something within 10 s.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "eventually.h"
#include "http_get.h"
#include "lockd/auth/credentials.h"
#include "lockd_process.h"
#include "metric.h"
#include "tls_client.h"

namespace lockd::testing {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

struct Files {
  fs::path dir = fs::path(test_pki_dir()) / "admin-auth";
  Files() {
    fs::create_directories(dir);
    std::ofstream c(dir / "credentials.toml");
    for (const auto& [identity, credential] :
         std::vector<std::pair<std::string, std::string>>{{"billing", "billing-token"}, {"ops", "ops-token"}}) {
      c << "[[credential]]\nidentity = \"" << identity << "\"\nhash = \""
        << auth::credential_hash(credential, auth::random_bytes(16)) << "\"\n";
    }
    c.close();
    // lockd refuses a credentials file that group or others may read (§11a).
    fs::permissions(dir / "credentials.toml", fs::perms::owner_read | fs::perms::owner_write);
    std::ofstream(dir / "acl.toml") << "admins = [\"ops\"]\n[[rule]]\nidentity = \"*\"\nprefix = \"\"\nverbs = [\"A\", \"R\"]\n";
  }
  std::string credentials() const { return (dir / "credentials.toml").string(); }
  std::string acl() const { return (dir / "acl.toml").string(); }
};

HttpReply request(std::uint16_t port, const std::string& method, const std::string& target,
                  const std::string& bearer = "") {
  std::string raw = method + " " + target + " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n";
  if (!bearer.empty()) raw += "Authorization: Bearer " + bearer + "\r\n";
  if (method == "POST") raw += "Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}";
  else raw += "\r\n";
  return http_raw(port, raw);
}

TEST(AdminSecurityTest, BearerCredentialsAndAdminIdentity) {
  Files f;
  LockdProcess lockd({"--admin", "127.0.0.1:0", "--auth", "token", "--credentials", f.credentials(),
                      "--acl", f.acl()});
  const auto port = lockd.admin_port();
  EXPECT_EQ(request(port, "GET", "/healthz").status, 200);
  EXPECT_EQ(request(port, "GET", "/readyz").status, 200);
  const HttpReply anon = request(port, "GET", "/v1/status");
  EXPECT_EQ(anon.status, 401);
  EXPECT_NE(anon.body.find("unauthenticated"), std::string::npos);
  EXPECT_EQ(anon.headers.count("www-authenticate"), 1u);
  EXPECT_EQ(request(port, "GET", "/v1/locks").status, 401);
  EXPECT_EQ(request(port, "GET", "/metrics").status, 401);
  EXPECT_EQ(request(port, "GET", "/no-such-path").status, 401);  // says nothing about paths
  EXPECT_EQ(request(port, "GET", "/v1/status", "wrong-token").status, 401);
  EXPECT_EQ(request(port, "GET", "/v1/status", "billing-token").status, 200);
  EXPECT_EQ(request(port, "GET", "/v1/locks", "billing-token").status, 200);
  // Changes and the snapshot need an admin: 403 for billing, through for ops.
  for (const auto& [method, target] : std::vector<std::pair<std::string, std::string>>{
           {"POST", "/v1/cluster/leader"}, {"POST", "/v1/cluster/members"},
           {"DELETE", "/v1/cluster/members/2"}, {"GET", "/v1/snapshot"}}) {
    EXPECT_EQ(request(port, method, target).status, 401) << target;
    EXPECT_EQ(request(port, method, target, "billing-token").status, 403) << target;
    const int as_ops = request(port, method, target, "ops-token").status;
    EXPECT_NE(as_ops, 401) << target;
    EXPECT_NE(as_ops, 403) << target;
  }
}

// RFC 7235 §2.1: the auth-scheme is case-insensitive, so `bearer` and
// `BEARER` are `Bearer`; another scheme is no identity (401).
TEST(AdminSecurityTest, BearerSchemeIsCaseInsensitive) {
  Files f;
  LockdProcess lockd({"--admin", "127.0.0.1:0", "--auth", "token", "--credentials", f.credentials(),
                      "--acl", f.acl()});
  const auto status_with = [&](const std::string& authorization) {
    return http_raw(lockd.admin_port(), "GET /v1/status HTTP/1.1\r\nHost: localhost\r\n"
                                        "Connection: close\r\nAuthorization: " +
                                            authorization + "\r\n\r\n")
        .status;
  };
  for (const char* scheme : {"Bearer", "bearer", "BEARER", "bEaReR"}) {
    EXPECT_EQ(status_with(std::string(scheme) + " billing-token"), 200) << scheme;
    EXPECT_EQ(status_with(std::string(scheme) + "  billing-token"), 200) << scheme;  // 1*SP
    EXPECT_EQ(status_with(std::string(scheme) + " wrong-token"), 401) << scheme;
  }
  EXPECT_EQ(status_with("Basic billing-token"), 401);
  EXPECT_EQ(status_with("Bearerbilling-token"), 401);
  EXPECT_EQ(status_with("Bearer"), 401);
}

std::string https_status_line(std::uint16_t port, const TlsClientFiles& files, const std::string& target,
                              const std::string& bearer = "") {
  TlsLineClient c(port, files);
  if (!c.handshake_ok()) return "handshake failed";
  std::string raw = "GET " + target + " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n";
  if (!bearer.empty()) raw += "Authorization: Bearer " + bearer + "\r\n";
  c.send(raw + "\r\n");
  auto line = c.read_line();
  if (!line) return "closed";
  if (!line->empty() && line->back() == '\r') line->pop_back();
  return *line;
}

// This test once "hung" now and then: the stranger's request below was
// written (write(2), SIGPIPE not ignored) to a connection lockd had just
// refused, SIGPIPE killed the test, and its orphaned lockd kept ctest's
// pipe open until the timeout. TlsLineClient now ignores SIGPIPE and a
// test's lockd dies with it (PR_SET_PDEATHSIG).
TEST(AdminSecurityTest, HttpsWithClientCertificates) {
  Files f;
  LockdProcess lockd({"--admin", "127.0.0.1:0", "--admin-tls", "--tls-cert", pki("server.pem"),
                      "--tls-key", pki("server.key"), "--tls-ca", pki("ca.pem"), "--auth", "any",
                      "--credentials", f.credentials(), "--acl", f.acl()});
  const auto port = lockd.admin_port();
  // Plain HTTP on the HTTPS port: no HTTP reply at all.
  EXPECT_EQ(http(port, "/healthz").status, 0);
  EXPECT_EQ(https_status_line(port, {}, "/healthz"), "HTTP/1.1 200 OK");
  EXPECT_EQ(https_status_line(port, {}, "/v1/status"), "HTTP/1.1 401 Unauthorized");
  EXPECT_EQ(https_status_line(port, {}, "/v1/status", "billing-token"), "HTTP/1.1 200 OK");
  const TlsClientFiles billing{pki("ca.pem"), pki("client-billing.pem"), pki("client-billing.key")};
  const TlsClientFiles ops{pki("ca.pem"), pki("client-ops.pem"), pki("client-ops.key")};
  EXPECT_EQ(https_status_line(port, billing, "/v1/status"), "HTTP/1.1 200 OK");
  EXPECT_EQ(https_status_line(port, billing, "/v1/snapshot"), "HTTP/1.1 403 Forbidden");
  EXPECT_NE(https_status_line(port, ops, "/v1/snapshot").substr(0, 12), "HTTP/1.1 403");
  // A certificate from another CA is no identity: the handshake fails (with
  // TLS 1.3 the client learns it only when it reads), no request is read.
  const TlsClientFiles stranger{pki("ca.pem"), pki("stranger.pem"), pki("stranger.key")};
  const std::string refused = https_status_line(port, stranger, "/v1/status");
  EXPECT_TRUE(refused == "closed" || refused == "handshake failed") << refused;
  // And lockd goes on serving.
  EXPECT_EQ(https_status_line(port, ops, "/healthz"), "HTTP/1.1 200 OK");
}

// Credentials for more identities, and an ACL of tenants (v1.3 tests).
struct TenantFiles {
  fs::path dir = fs::path(test_pki_dir()) / "admin-tenants";
  TenantFiles() {
    fs::create_directories(dir);
    std::ofstream c(dir / "credentials.toml");
    for (const char* identity : {"billing", "ops", "auditor", "orders"}) {
      c << "[[credential]]\nidentity = \"" << identity << "\"\nhash = \""
        << auth::credential_hash(std::string(identity) + "-token", auth::random_bytes(16)) << "\"\n";
    }
    c.flush();
    // lockd refuses a credentials file others may read (§11a).
    fs::permissions(dir / "credentials.toml", fs::perms::owner_read | fs::perms::owner_write);
    std::ofstream a(dir / "acl.toml");
    // billing: everything on billing/; auditor: may take billing/ keys but
    // not release them (no R: it sees billing/ keys, not their tokens);
    // orders: only orders/. ops: admin.
    a << "admins = [\"ops\"]\n"
         "[[rule]]\nidentity = \"billing\"\nprefix = \"billing/\"\nverbs = [\"A\", \"S\", \"R\", \"K\"]\n"
         "[[rule]]\nidentity = \"auditor\"\nprefix = \"billing/\"\nverbs = [\"A\"]\n"
         "[[rule]]\nidentity = \"orders\"\nprefix = \"orders/\"\nverbs = [\"A\", \"R\"]\n";
  }
  std::string credentials() const { return (dir / "credentials.toml").string(); }
  std::string acl() const { return (dir / "acl.toml").string(); }
};

std::string metrics_text(std::uint16_t port, const std::string& bearer = "") {
  return request(port, "GET", "/metrics", bearer).body;
}

// §11a: with authentication on and no --acl, every identity may use every
// verb on every key, and none is an admin.
TEST(AdminSecurityTest, WithoutAnAclNoIdentityIsAdmin) {
  TenantFiles f;
  LockdProcess lockd({"--admin", "127.0.0.1:0", "--auth", "token", "--credentials",
                      f.credentials()});
  const auto port = lockd.admin_port();
  LineClient client(lockd.port());
  ASSERT_EQ(client.call("H billing-token"), "H billing");
  const std::string granted = client.call("A alice orders/1 60000");
  ASSERT_EQ(granted.rfind("A ", 0), 0u) << granted;  // every verb on every key
  for (const char* who : {"billing-token", "ops-token"}) {
    EXPECT_EQ(request(port, "GET", "/v1/status", who).status, 200) << who;
    EXPECT_EQ(request(port, "GET", "/v1/snapshot", who).status, 403) << who;
    EXPECT_EQ(request(port, "POST", "/v1/cluster/leader", who).status, 403) << who;
    EXPECT_EQ(request(port, "DELETE", "/v1/cluster/members/2", who).status, 403) << who;
    // Every token is shown: without an ACL there is nothing to hide.
    EXPECT_NE(request(port, "GET", "/v1/locks/orders%2F1", who).body.find(fields(granted)[1]),
              std::string::npos);
  }
}

// A raw request with the given headers (each "Name: value\r\n") and body.
HttpReply with_headers(std::uint16_t port, const std::string& method, const std::string& target,
                       const std::string& headers, const std::string& body = "") {
  std::string raw = method + " " + target + " HTTP/1.1\r\nConnection: close\r\n" + headers;
  if (!body.empty() || method == "POST") {
    raw += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  }
  return http_raw(port, raw + "\r\n" + body);
}

// §11a: a changing request and the snapshot need a Host naming the admin
// API and, with a body, Content-Type: application/json; a browser's
// Origin must be the admin API's own. With authentication off (a web page
// on the operator's host is the attacker) and on.
TEST(AdminSecurityTest, AWebPageCannotDriveTheAdminApi) {
  LockdProcess lockd({"--admin", "127.0.0.1:0"});
  const auto port = lockd.admin_port();
  const std::string p = std::to_string(port);
  const std::string json = "Content-Type: application/json\r\n";
  // Single mode: a changing request that passes the checks gets 404 (no
  // cluster), one that does not gets 403 before anything is looked at.
  const auto leader = [&](const std::string& headers, const std::string& body = "{}") {
    return with_headers(port, "POST", "/v1/cluster/leader", headers, body).status;
  };
  EXPECT_EQ(leader("Host: 127.0.0.1:" + p + "\r\n" + json), 404);
  EXPECT_EQ(leader("Host: localhost:" + p + "\r\n" + json), 404);
  EXPECT_EQ(leader("Host: LOCALHOST\r\n" + json), 404);
  EXPECT_EQ(leader("Host: [::1]:" + p + "\r\n" + json), 404);
  EXPECT_EQ(leader("Host: 127.0.0.2:" + p + "\r\n" + json), 404);  // loopback
  // DNS rebinding: the page's own name resolves to 127.0.0.1.
  EXPECT_EQ(leader("Host: attacker.example:" + p + "\r\n" + json), 403);
  EXPECT_EQ(leader("Host: localhost.attacker.example\r\n" + json), 403);
  EXPECT_EQ(leader("Host: 10.1.2.3:" + p + "\r\n" + json), 403);
  EXPECT_EQ(leader(json), 403);  // no Host at all
  // CSRF: a form post (no preflight) cannot say application/json.
  EXPECT_EQ(leader("Host: localhost\r\nContent-Type: text/plain\r\n"), 403);
  EXPECT_EQ(leader("Host: localhost\r\nContent-Type: application/x-www-form-urlencoded\r\n"), 403);
  EXPECT_EQ(leader("Host: localhost\r\n"), 403);  // a body without a type
  EXPECT_EQ(leader("Host: localhost\r\nContent-Type: Application/JSON; charset=utf-8\r\n"), 404);
  EXPECT_EQ(leader("Host: localhost\r\nContent-Type: text/plain\r\n", ""), 403);
  EXPECT_EQ(leader("Host: localhost\r\n", ""), 404);  // no body, no type: lockctl-style
  // A browser's request names its page: another site is refused, the
  // admin API's own origin is not.
  EXPECT_EQ(leader("Host: localhost\r\nOrigin: http://attacker.example\r\n" + json), 403);
  EXPECT_EQ(leader("Host: localhost\r\nOrigin: null\r\n", ""), 403);
  EXPECT_EQ(leader("Host: localhost\r\nOrigin: http://127.0.0.1:" + p + "\r\n" + json), 404);
  // The snapshot too; reads are not changed.
  EXPECT_EQ(with_headers(port, "GET", "/v1/snapshot", "Host: attacker.example\r\n").status, 403);
  EXPECT_EQ(with_headers(port, "GET", "/v1/snapshot", "Host: 127.0.0.1:" + p + "\r\n").status, 200);
  EXPECT_EQ(with_headers(port, "GET", "/v1/status", "Host: attacker.example\r\n").status, 200);
  // Counted by reason.
  const std::string m = metrics_text(port);
  EXPECT_GE(metric(m, "lockd_admin_refused_total{reason=\"host\"}"), 5);
  EXPECT_GE(metric(m, "lockd_admin_refused_total{reason=\"content_type\"}"), 4);
  EXPECT_GE(metric(m, "lockd_admin_refused_total{reason=\"origin\"}"), 2);

  // With authentication on, an admin's credential does not make a
  // rebinding page's request acceptable.
  Files f;
  LockdProcess secured({"--admin", "127.0.0.1:0", "--auth", "token", "--credentials",
                        f.credentials(), "--acl", f.acl()});
  const std::string ops = "Authorization: Bearer ops-token\r\n";
  EXPECT_EQ(with_headers(secured.admin_port(), "GET", "/v1/snapshot",
                         "Host: attacker.example\r\n" + ops).status, 403);
  EXPECT_EQ(with_headers(secured.admin_port(), "GET", "/v1/snapshot", "Host: localhost\r\n" + ops)
                .status, 200);
}

// §11a: with ACLs on, /v1/locks and /v1/locks/KEY list only keys under a
// prefix the identity holds some verb on, and show a token only where it
// may R the key; admins see all.
TEST(AdminSecurityTest, TokensAreShownOnlyToWhomTheyBelong) {
  TenantFiles f;
  LockdProcess lockd({"--admin", "127.0.0.1:0", "--auth", "token", "--credentials",
                      f.credentials(), "--acl", f.acl()});
  const auto port = lockd.admin_port();
  LineClient billing(lockd.port());
  ASSERT_EQ(billing.call("H billing-token"), "H billing");
  const std::string b = billing.call("A alice billing/invoice-7 60000");
  ASSERT_EQ(b.rfind("A ", 0), 0u) << b;
  const std::string btoken = fields(b)[1];
  LineClient orders(lockd.port());
  ASSERT_EQ(orders.call("H orders-token"), "H orders");
  const std::string o = orders.call("A bob orders/42 60000");
  ASSERT_EQ(o.rfind("A ", 0), 0u) << o;
  const std::string otoken = fields(o)[1];

  const auto list = [&](const std::string& who) { return request(port, "GET", "/v1/locks", who); };
  // billing: its own key with its token, not the other tenant's key.
  HttpReply r = list("billing-token");
  EXPECT_EQ(r.status, 200);
  EXPECT_NE(r.body.find("billing/invoice-7"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find(btoken), std::string::npos) << r.body;
  EXPECT_EQ(r.body.find("orders/42"), std::string::npos) << r.body;
  EXPECT_EQ(r.body.find(otoken), std::string::npos) << r.body;
  EXPECT_EQ(request(port, "GET", "/v1/locks/orders%2F42", "billing-token").status, 404);
  r = request(port, "GET", "/v1/locks/billing%2Finvoice-7", "billing-token");
  EXPECT_EQ(r.status, 200);
  EXPECT_NE(r.body.find(btoken), std::string::npos) << r.body;
  // auditor: A but no R on billing/: the key, its owner, no token.
  r = list("auditor-token");
  EXPECT_NE(r.body.find("billing/invoice-7"), std::string::npos) << r.body;
  EXPECT_EQ(r.body.find(btoken), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("\"token\":null"), std::string::npos) << r.body;
  EXPECT_EQ(r.body.find("orders/42"), std::string::npos) << r.body;
  r = request(port, "GET", "/v1/locks/billing%2Finvoice-7", "auditor-token");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body.find(btoken), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("\"owner\":\"alice\""), std::string::npos) << r.body;
  // orders: the mirror image.
  r = list("orders-token");
  EXPECT_NE(r.body.find(otoken), std::string::npos) << r.body;
  EXPECT_EQ(r.body.find("billing/"), std::string::npos) << r.body;
  EXPECT_EQ(request(port, "GET", "/v1/locks/billing%2Finvoice-7", "orders-token").status, 404);
  // ops (admin, no rule of its own): everything.
  r = list("ops-token");
  EXPECT_NE(r.body.find(btoken), std::string::npos) << r.body;
  EXPECT_NE(r.body.find(otoken), std::string::npos) << r.body;
  // A prefix query does not get around it.
  r = request(port, "GET", "/v1/locks?prefix=orders%2F", "billing-token");
  EXPECT_EQ(r.body.find("orders/42"), std::string::npos) << r.body;
}

// §11a for /v1/top (issue 35): as /v1/locks, the busiest keys, longest
// queues and oldest holders name only keys under a prefix the identity
// holds some verb on (no tokens are ever in it); admins see all. Before,
// every tenant saw every other tenant's key names and owners here.
TEST(AdminSecurityTest, TopNamesOnlyKeysTheIdentityMaySee) {
  TenantFiles f;
  LockdProcess lockd({"--admin", "127.0.0.1:0", "--auth", "token", "--credentials",
                      f.credentials(), "--acl", f.acl()});
  const auto port = lockd.admin_port();
  LineClient billing(lockd.port());
  ASSERT_EQ(billing.call("H billing-token"), "H billing");
  ASSERT_EQ(billing.call("A alice billing/invoice-7 60000").rfind("A ", 0), 0u);
  LineClient orders(lockd.port());
  ASSERT_EQ(orders.call("H orders-token"), "H orders");
  ASSERT_EQ(orders.call("A bob orders/42 60000").rfind("A ", 0), 0u);
  // A waiter on each key, so each is in longest_queues too.
  LineClient billing2(lockd.port());
  ASSERT_EQ(billing2.call("H billing-token"), "H billing");
  billing2.send("A carol billing/invoice-7 60000 60000\n");
  LineClient orders2(lockd.port());
  ASSERT_EQ(orders2.call("H orders-token"), "H orders");
  orders2.send("A dave orders/42 60000 60000\n");
  const auto top = [&](const std::string& who) { return request(port, "GET", "/v1/top", who); };
  // ops (admin) sees both in every list once the waiters are queued.
  HttpReply r;
  ASSERT_TRUE(eventually([&] {
    r = top("ops-token");
    return r.body.find("\"longest_queues\":[{") != std::string::npos &&
           r.body.find("orders/42") != std::string::npos &&
           r.body.find("billing/invoice-7") != std::string::npos;
  })) << r.body;
  r = top("billing-token");
  EXPECT_EQ(r.status, 200);
  EXPECT_NE(r.body.find("billing/invoice-7"), std::string::npos) << r.body;
  EXPECT_EQ(r.body.find("orders/"), std::string::npos) << r.body;
  EXPECT_EQ(r.body.find("\"bob\""), std::string::npos) << r.body;
  r = top("orders-token");
  EXPECT_NE(r.body.find("orders/42"), std::string::npos) << r.body;
  EXPECT_EQ(r.body.find("billing/"), std::string::npos) << r.body;
  EXPECT_EQ(r.body.find("\"alice\""), std::string::npos) << r.body;
  // auditor (A on billing/, no R): billing/ keys, nothing of orders/.
  r = top("auditor-token");
  EXPECT_NE(r.body.find("billing/invoice-7"), std::string::npos) << r.body;
  EXPECT_EQ(r.body.find("orders/"), std::string::npos) << r.body;
}

// §11a: at most --admin-max-connections connections, each must send its
// first request within 10 s; the node serves throughout, and both
// refusals are counted. At the cap, a new connection closes the oldest
// one that has not sent a request yet (silent sockets cannot keep an
// operator out); when every open one has sent one, the new one is closed.
TEST(AdminSecurityTest, AdminConnectionsAreBoundedInCountAndTime) {
  LockdProcess lockd({"--admin", "127.0.0.1:0", "--admin-max-connections", "4"});
  const auto port = lockd.admin_port();
  std::vector<std::unique_ptr<LineClient>> idle;
  for (int i = 0; i < 4; ++i) {
    idle.push_back(std::make_unique<LineClient>(port));
    ASSERT_FALSE(idle.back()->wait_closed(std::chrono::milliseconds(100)));  // accepted, in order
  }
  // An operator's request gets in at once: the oldest silent one made
  // room, well before the 10 s first-request deadline would close it (so
  // an off-by-one cap fails).
  EXPECT_EQ(http(port, "/healthz").status, 200);
  EXPECT_TRUE(idle.front()->wait_closed(std::chrono::milliseconds(5'000)));
  EXPECT_FALSE(idle.back()->wait_closed(std::chrono::milliseconds(0)));
  idle.erase(idle.begin());
  // Lock requests are served meanwhile.
  LineClient client(lockd.port());
  EXPECT_EQ(client.call("A alice k1 60000").rfind("A ", 0), 0u);
  // The silent ones are closed 10 s after their accept.
  const auto start = std::chrono::steady_clock::now();
  for (auto& c : idle) EXPECT_TRUE(c->wait_closed(std::chrono::milliseconds(20'000)));
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(5'000));
  // Connections that sent a request (kept alive) are never closed to make
  // room: with all four slots held by them, a new one is closed at once.
  std::vector<std::unique_ptr<LineClient>> busy;
  for (int i = 0; i < 4; ++i) {
    busy.push_back(std::make_unique<LineClient>(port));
    busy.back()->send("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    const std::optional<std::string> status = busy.back()->read_line();
    ASSERT_TRUE(status.has_value());
    EXPECT_EQ(status->rfind("HTTP/1.1 200", 0), 0u) << *status;
  }
  LineClient extra(port);
  ASSERT_TRUE(extra.connected());
  EXPECT_TRUE(extra.wait_closed(std::chrono::milliseconds(5'000)));
  for (auto& b : busy) EXPECT_FALSE(b->wait_closed(std::chrono::milliseconds(0)));
  busy.clear();
  std::string m;
  ASSERT_TRUE(eventually([&] {
    m = metrics_text(port);
    return !m.empty();
  }));
  EXPECT_GE(metric(m, "lockd_admin_refused_total{reason=\"max_connections\"}"), 2);
  EXPECT_GE(metric(m, "lockd_admin_refused_total{reason=\"first_request_timeout\"}"), 3);
  EXPECT_EQ(client.call("A bob k2 60000").rfind("A ", 0), 0u);
}

}  // namespace
}  // namespace lockd::testing
