// protocol.md §11a on the client port, against a real lockd over real TCP:
// connections before authentication are bounded in count and time (issue
// 35 item 1), per source address, in TLS handshakes, and in the output a
// non-reader can pin; keepalive is on; refused requests feed no /v1/top.
#include <arpa/inet.h>
#include <fcntl.h>
#include <signal.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <openssl/bio.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "eventually.h"
#include "http_get.h"
#include "lockd/auth/credentials.h"
#include "lockd_cluster.h"
#include "lockd_process.h"
#include "metric.h"
#include "run_program.h"
#include "temp_dir.h"
#include "tls_client.h"

namespace lockd::testing {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

// A credentials file (billing, ops) written 0600, in its own directory.
struct Credentials {
  fs::path dir;
  Credentials() {
    static int n = 0;
    dir = fs::path(test_pki_dir()) / ("hardening-" + std::to_string(::getpid()) + "-" +
                                      std::to_string(n++));
    fs::create_directories(dir);
    const fs::path file = dir / "credentials.toml";
    {
      std::ofstream out(file);
      for (const auto& [identity, credential] :
           std::vector<std::pair<std::string, std::string>>{{"billing", "billing-token"},
                                                            {"ops", "ops-token"}}) {
        out << "[[credential]]\nidentity = \"" << identity << "\"\nhash = \""
            << auth::credential_hash(credential, auth::random_bytes(16)) << "\"\n";
      }
    }
    fs::permissions(file, fs::perms::owner_read | fs::perms::owner_write);
  }
  ~Credentials() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  std::string file() const { return (dir / "credentials.toml").string(); }
};

std::string get(std::uint16_t admin_port, const std::string& target,
                const std::string& bearer = "ops-token") {
  return http_raw(admin_port, "GET " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                              "Authorization: Bearer " + bearer + "\r\nConnection: close\r\n\r\n")
      .body;
}

double closed_for(std::uint16_t admin_port, const std::string& reason) {
  return metric(get(admin_port, "/metrics"),
                "lockd_client_connections_closed_total{reason=\"" + reason + "\"}");
}

// Issue 35 item 1: with the connection cap lowered to 200, 250 idle
// connections that never send `H` used to fill every slot and lock out a
// client with a valid credential. Now at most --max-unauthenticated of them
// stay open (each new one closes the oldest), so a client that
// authenticates at once gets in; an authenticated connection is never
// closed to make room.
TEST(HardeningTest, IdleUnauthenticatedFloodDoesNotLockOutAClientThatAuthenticates) {
  Credentials creds;
  LockdProcess lockd({"--auth", "token", "--credentials", creds.file(), "--admin", "127.0.0.1:0",
                      "--max-connections", "200", "--max-unauthenticated", "100"});
  LineClient early(lockd.port());
  ASSERT_EQ(early.call("H ops-token"), "H ops");
  std::vector<std::unique_ptr<LineClient>> idle;
  for (int i = 0; i < 250; ++i) {
    idle.push_back(std::make_unique<LineClient>(lockd.port()));
    ASSERT_TRUE(idle.back()->connected());
  }
  // Every idle one was accepted (some closed to make room) before the
  // client below connects.
  ASSERT_TRUE(eventually([&] {
    return metric(get(lockd.admin_port(), "/metrics"), "lockd_connections_accepted_total") >= 251;
  }));
  LineClient c(lockd.port());
  EXPECT_EQ(c.call("H billing-token"), "H billing");
  EXPECT_EQ(fields(c.call("A b k1 60000"))[0], "A");
  EXPECT_EQ(fields(early.call("A o k2 60000"))[0], "A");  // never closed to make room
  const std::string m = get(lockd.admin_port(), "/metrics");
  EXPECT_GE(metric(m, "lockd_client_connections_closed_total{reason=\"max_unauthenticated\"}"), 150);
  EXPECT_LE(metric(m, "lockd_connections_unauthenticated"), 100);
  // The oldest went first: the first idle connection is closed, the last is not.
  EXPECT_TRUE(idle.front()->wait_closed(20s));
  EXPECT_EQ(idle.back()->call("A x k3 1000"), "E unauthenticated x k3");
}

// A connection that does not authenticate within --auth-timeout-ms is
// closed and counted; an authenticated one stays. Many timing out together
// are closed a few per loop turn (so they never hold a reply up), all of
// them.
TEST(HardeningTest, AuthTimeoutClosesAConnectionThatNeverAuthenticates) {
  Credentials creds;
  LockdProcess lockd({"--auth", "token", "--credentials", creds.file(), "--admin", "127.0.0.1:0",
                      "--auth-timeout-ms", "300"});
  LineClient authed(lockd.port());
  ASSERT_EQ(authed.call("H billing-token"), "H billing");
  LineClient idle(lockd.port());
  LineClient chatty(lockd.port());  // refused requests do not extend its time
  EXPECT_EQ(chatty.call("A a k 1000"), "E unauthenticated a k");
  std::vector<std::unique_ptr<LineClient>> crowd;  // more than one turn closes
  for (int i = 0; i < 60; ++i) crowd.push_back(std::make_unique<LineClient>(lockd.port()));
  EXPECT_TRUE(idle.wait_closed(20s));
  EXPECT_TRUE(chatty.wait_closed(20s));
  for (auto& c : crowd) EXPECT_TRUE(c->wait_closed(20s));
  EXPECT_GE(closed_for(lockd.admin_port(), "auth_timeout"), 62);
  EXPECT_EQ(fields(authed.call("A b k 60000"))[0], "A");
}

// Authentication off: no deadline for `H`.
TEST(HardeningTest, NoAuthTimeoutWithAuthOff) {
  LockdProcess lockd({"--auth-timeout-ms", "100"});
  LineClient c(lockd.port());
  EXPECT_FALSE(c.wait_closed(1s));
  EXPECT_EQ(fields(c.call("A a k 1000"))[0], "A");
}

// --max-connections-per-ip: one more from the same address is closed at
// once, whatever the auth mode; a closed one frees its slot.
TEST(HardeningTest, PerAddressCap) {
  LockdProcess lockd({"--max-connections-per-ip", "3", "--admin", "127.0.0.1:0"});
  std::vector<std::unique_ptr<LineClient>> cs;
  for (int i = 0; i < 3; ++i) {
    cs.push_back(std::make_unique<LineClient>(lockd.port()));
    EXPECT_EQ(fields(cs.back()->call("A a k" + std::to_string(i) + " 60000"))[0], "A");
  }
  LineClient over(lockd.port());
  EXPECT_TRUE(over.wait_closed(20s));
  EXPECT_EQ(closed_for(lockd.admin_port(), "max_connections_per_ip"), 1);
  cs.front()->close();
  EXPECT_TRUE(eventually([&] {
    LineClient again(lockd.port());
    again.send("A a k9 1000\n");
    const auto line = again.read_line();
    return line && fields(*line)[0] == "A";
  }));
  // Another source address (127.0.0.2 is loopback too) has its own count.
  LineClient other(lockd.port(), "127.0.0.2");
  if (other.connected()) {
    EXPECT_EQ(fields(other.call("A a k10 1000"))[0], "A");
  }
}

// Issue 35 item 1's variant: a client that sends refused requests and
// never reads its replies used to pin ~300 KiB of `E unauthenticated`
// output for as long as it stayed. Now it is closed once 64 KiB are unsent.
TEST(HardeningTest, UnauthenticatedNonReaderIsClosed) {
  Credentials creds;
  LockdProcess lockd({"--auth", "token", "--credentials", creds.file(), "--admin", "127.0.0.1:0"});
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  const int small = 4096;  // fills sooner: the server's unsent output grows sooner
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(lockd.port());
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ::fcntl(fd, F_SETFL, O_NONBLOCK);
  std::string chunk;
  while (chunk.size() < 16 * 1024) chunk += "A a k\n";
  bool reset = false;
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (!reset && std::chrono::steady_clock::now() < deadline) {
    const ssize_t n = ::send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, 100);
      if ((p.revents & (POLLERR | POLLHUP)) != 0) reset = true;
      if (closed_for(lockd.admin_port(), "unauthenticated_output") >= 1) reset = true;
    } else if (n < 0) {
      reset = true;  // EPIPE / ECONNRESET: the server closed it
    }
  }
  ::close(fd);
  EXPECT_TRUE(reset);
  EXPECT_EQ(closed_for(lockd.admin_port(), "unauthenticated_output"), 1);
}

// Client sockets have TCP keepalive with a short idle time, so a vanished
// host's connection is reaped in minutes: `ss -o` shows the keepalive timer
// of the server's socket, e.g. `timer:(keepalive,59sec,0)`. (libevent's
// listener already turns keepalive on, with the kernel's 2 h idle time:
// `timer:(keepalive,119min,0)`.)
TEST(HardeningTest, ClientSocketsUseKeepalive) {
  LockdProcess lockd;
  LineClient c(lockd.port());
  EXPECT_EQ(fields(c.call("A a k 1000"))[0], "A");
  const RunResult r = run_program(
      {"/bin/sh", "-c",
       "ss -tnoH state established '( sport = :" + std::to_string(lockd.port()) + " )'"});
  ASSERT_EQ(r.status, 0) << r.err;
  const auto at = r.out.find("timer:(keepalive,");
  ASSERT_NE(at, std::string::npos) << r.out;
  const std::string timer = r.out.substr(at + 17, r.out.find(',', at + 17) - at - 17);
  ASSERT_TRUE(timer.ends_with("sec")) << r.out;  // not "119min"
  EXPECT_LE(std::stoi(timer), 60) << r.out;
}

// A TLS 1.3 ClientHello as a real client sends it (OpenSSL through memory).
std::string client_hello() {
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  SSL* ssl = SSL_new(ctx);
  BIO* in = BIO_new(BIO_s_mem());
  BIO* out = BIO_new(BIO_s_mem());
  SSL_set_bio(ssl, in, out);
  SSL_connect(ssl);  // wants to read: the ClientHello is in `out`
  char* data = nullptr;
  const long n = BIO_get_mem_data(out, &data);
  std::string hello(data, static_cast<std::size_t>(n));
  SSL_free(ssl);
  SSL_CTX_free(ctx);
  return hello;
}

// --max-tls-handshakes: past it, a new TLS connection closes the oldest
// handshake in progress (counted), so silent sockets that never send a
// ClientHello cannot keep a real TLS client out (before, the new one was
// closed at once: two silent sockets locked out every client until their
// handshake timeout).
TEST(HardeningTest, TlsHandshakesInProgressAreCappedAndTheOldestMakesRoom) {
  LockdProcess lockd({"--client-tls", "--tls-cert", pki("server.pem"), "--tls-key",
                      pki("server.key"), "--max-tls-handshakes", "2", "--admin", "127.0.0.1:0"});
  // Two connections that never send a ClientHello hold both slots.
  LineClient silent1(lockd.port());
  ASSERT_TRUE(eventually([&] {
    return metric(get(lockd.admin_port(), "/metrics"), "lockd_connections") == 1;
  }));
  LineClient silent2(lockd.port());
  ASSERT_TRUE(eventually([&] {
    return metric(get(lockd.admin_port(), "/metrics"), "lockd_connections") == 2;
  }));
  // A real client gets in at once; the oldest silent one made room for it.
  TlsLineClient c(lockd.port(), {});
  ASSERT_TRUE(c.handshake_ok());
  EXPECT_EQ(fields(c.call("A a k 1000"))[0], "A");
  EXPECT_TRUE(silent1.wait_closed(20s));
  EXPECT_EQ(closed_for(lockd.admin_port(), "max_tls_handshakes"), 1);
  // The other silent one still holds its slot (the cap is 2, one in use).
  EXPECT_FALSE(silent2.wait_closed(0ms));
}

// Handshake steps run on a thread of their own (net/handshake_worker.h):
// clients that leave while theirs is there (reset or closed, before or
// after the server's reply, or sending more meanwhile) leave nothing
// behind, and lockd serves on. (Under ASan in CI: a step that comes back
// for a connection freed meanwhile would be a use after free.)
TEST(HardeningTest, ClientsThatLeaveMidHandshakeLeaveNothingBehind) {
  LockdProcess lockd({"--client-tls", "--tls-cert", pki("server.pem"), "--tls-key",
                      pki("server.key"), "--admin", "127.0.0.1:0"});
  const std::string hello = client_hello();
  ASSERT_GT(hello.size(), 100u);
  for (int i = 0; i < 300; ++i) {
    LineClient c(lockd.port());
    ASSERT_TRUE(c.connected());
    c.send(hello);
    if (i % 3 == 1) {
      pollfd p{c.fd(), POLLIN, 0};  // the server's first flight came back
      ASSERT_EQ(::poll(&p, 1, 20000), 1);
    }
    // More while the step runs, in the clear: never a request.
    if (i % 3 == 2) c.send("A mallory victim 60000\n");
    if (i % 2 == 0) {
      const linger reset{1, 0};  // RST on close
      ::setsockopt(c.fd(), SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
    }
  }
  TlsLineClient c(lockd.port(), {});
  ASSERT_TRUE(c.handshake_ok()) << c.error();
  EXPECT_EQ(fields(c.call("A alice victim 1000"))[0], "A");  // mallory's never ran
  EXPECT_TRUE(eventually([&] {
    return metric(get(lockd.admin_port(), "/metrics"), "lockd_connections") == 1;
  })) << get(lockd.admin_port(), "/metrics");
}

// At the cap, a socket that has sent nothing makes room before an older
// one whose ClientHello came (a real client's handshake in progress on the
// worker outlives a flood of idle sockets); with none silent, the oldest.
TEST(HardeningTest, AtTheTlsCapASilentSocketMakesRoomBeforeAHandshakeThatSpoke) {
  LockdProcess lockd({"--client-tls", "--tls-cert", pki("server.pem"), "--tls-key",
                      pki("server.key"), "--max-tls-handshakes", "2", "--admin", "127.0.0.1:0"});
  const auto connections = [&] { return metric(get(lockd.admin_port(), "/metrics"), "lockd_connections"); };
  LineClient spoke(lockd.port());  // oldest: its ClientHello is answered, it never finishes
  spoke.send(client_hello());
  pollfd p{spoke.fd(), POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 20000), 1);
  LineClient silent1(lockd.port());
  ASSERT_TRUE(eventually([&] { return connections() == 2; }));
  LineClient silent2(lockd.port());  // over the cap: silent1 goes, not the older `spoke`
  EXPECT_TRUE(silent1.wait_closed(20s));
  EXPECT_EQ(closed_for(lockd.admin_port(), "max_tls_handshakes"), 1);
  ASSERT_TRUE(eventually([&] { return connections() == 2; }));
  LineClient silent3(lockd.port());  // silent2 goes
  EXPECT_TRUE(silent2.wait_closed(20s));
  silent3.send(client_hello());  // now both spoke: the oldest goes
  pollfd p3{silent3.fd(), POLLIN, 0};  // answered: lockd has read it
  ASSERT_EQ(::poll(&p3, 1, 20000), 1);
  LineClient last(lockd.port());
  EXPECT_TRUE(spoke.wait_closed(20s));
  EXPECT_EQ(closed_for(lockd.admin_port(), "max_tls_handshakes"), 3);
}

// The body of an HTTPS GET on a --admin-tls port ("" when it fails).
std::string https_get(std::uint16_t port, const std::string& target) {
  TlsLineClient c(port, {});
  if (!c.handshake_ok()) return "";
  c.send("GET " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
  std::string out;
  while (const auto line = c.read_line(5s)) out += *line + "\n";
  return out;
}

// §11a: --max-tls-handshakes caps each port, the admin port too (before,
// the client port only: a ClientHello-less flood held admin slots until
// the 10 s first-request deadline). As on the client port, one more closes
// the oldest handshake in progress (counted), so silent sockets cannot
// keep an operator's lockctl out.
TEST(HardeningTest, AdminTlsHandshakesInProgressAreCapped) {
  LockdProcess lockd({"--admin", "127.0.0.1:0", "--admin-tls", "--tls-cert", pki("server.pem"),
                      "--tls-key", pki("server.key"), "--max-tls-handshakes", "2"});
  LineClient silent1(lockd.admin_port());
  auto silent2 = std::make_unique<LineClient>(lockd.admin_port());
  // (each accepted before the next connects: the order is the accept order)
  ASSERT_FALSE(silent1.wait_closed(200ms));
  ASSERT_FALSE(silent2->wait_closed(200ms));
  auto third = std::make_unique<LineClient>(lockd.admin_port());
  // The oldest is closed long before the first-request deadline (10 s).
  EXPECT_TRUE(silent1.wait_closed(4s));
  EXPECT_FALSE(third->wait_closed(200ms));
  silent2->close();
  third->close();
  std::string metrics;
  ASSERT_TRUE(eventually([&] {
    metrics = https_get(lockd.admin_port(), "/metrics");
    return !metrics.empty();
  }));
  EXPECT_EQ(metric(metrics, "lockd_admin_refused_total{reason=\"max_tls_handshakes\"}"), 1) << metrics;
}

// The raft port with --peer-tls: connections that never send a ClientHello
// hold at most --max-tls-handshakes slots; each one more closes the oldest
// at once, counted (before, only the pending pools' own sizes, 16 and 32,
// bounded them, for 2 s each); the group goes on serving.
TEST(HardeningTest, RaftTlsHandshakesInProgressAreCapped) {
  LockdCluster c(3, {"--peer-tls", "--tls-cert", pki("node-{ID}.pem"), "--tls-key",
                     pki("node-{ID}.key"), "--tls-ca", pki("ca.pem"), "--max-tls-handshakes", "2"});
  ASSERT_NE(c.wait_leader(), 0);
  const std::string series = "lockd_peer_refused_total{reason=\"max_tls_handshakes\"}";
  const double before = std::max(0.0, node_metric(c, 1, series));  // -1: absent
  std::vector<std::unique_ptr<LineClient>> flood;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 10; ++i) flood.push_back(std::make_unique<LineClient>(c.raft_port(1)));
  // Closed at once: well before the 2 s handshake deadline closes the rest.
  std::vector<bool> closed(flood.size(), false);
  int n_closed = 0;
  while (n_closed < 8 && std::chrono::steady_clock::now() - start < 1500ms) {
    for (std::size_t i = 0; i < flood.size(); ++i) {
      if (!closed[i] && flood[i]->wait_closed(10ms)) {
        closed[i] = true;
        n_closed += 1;
      }
    }
  }
  EXPECT_GE(n_closed, 8);
  EXPECT_TRUE(eventually([&] { return node_metric(c, 1, series) >= before + 8; }, 5s))
      << node_metric(c, 1, series);
  const std::string granted = call_leader(c, "A alice k1 10000");
  EXPECT_EQ(granted.rfind("A ", 0), 0u) << granted;
}

// A TCP connection to 127.0.0.1:`port` from source address `from` (any
// 127/8 address is this host's loopback): a stranger when `from` is not a
// member's host. Sends nothing.
class RawConn {
 public:
  RawConn(std::uint16_t port, const std::string& from) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in src{};
    src.sin_family = AF_INET;
    inet_pton(AF_INET, from.c_str(), &src.sin_addr);
    sockaddr_in dst{};
    dst.sin_family = AF_INET;
    dst.sin_port = htons(port);
    inet_pton(AF_INET, "127.0.0.1", &dst.sin_addr);
    ok_ = fd_ >= 0 && ::bind(fd_, reinterpret_cast<sockaddr*>(&src), sizeof src) == 0 &&
          ::connect(fd_, reinterpret_cast<sockaddr*>(&dst), sizeof dst) == 0;
  }
  ~RawConn() {
    if (fd_ >= 0) ::close(fd_);
  }
  RawConn(const RawConn&) = delete;
  RawConn& operator=(const RawConn&) = delete;
  bool connected() const { return ok_; }
  // True once the server closed it (EOF or reset) within `timeout`.
  bool wait_closed(std::chrono::milliseconds timeout) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return false;
    char b[64];
    const ssize_t n = ::recv(fd_, b, sizeof b, 0);
    return n == 0 || (n < 0 && errno != EAGAIN);
  }

 private:
  int fd_ = -1;
  bool ok_ = false;
};

// Room on the raft port is never made for a stranger at a member's cost:
// a connection from a member's host (127.0.0.1) closes the oldest
// handshake from elsewhere (127.0.0.2, loopback too); with every slot held
// from members' hosts, a stranger's new connection is the one closed.
// (Each step is well inside the 2 s handshake deadline; the counts tell an
// eviction from a deadline, which is counted as handshake_timeout.)
TEST(HardeningTest, RaftTlsHandshakeCapNeverLetsAStrangerPushOutAMember) {
  LockdCluster c(3, {"--peer-tls", "--tls-cert", pki("node-{ID}.pem"), "--tls-key",
                     pki("node-{ID}.key"), "--tls-ca", pki("ca.pem"), "--max-tls-handshakes", "2"});
  ASSERT_NE(c.wait_leader(), 0);
  const std::string series = "lockd_peer_refused_total{reason=\"max_tls_handshakes\"}";
  const double before = std::max(0.0, node_metric(c, 1, series));
  RawConn stranger1(c.raft_port(1), "127.0.0.2");
  ASSERT_TRUE(stranger1.connected());
  ASSERT_FALSE(stranger1.wait_closed(100ms));
  RawConn stranger2(c.raft_port(1), "127.0.0.2");
  ASSERT_FALSE(stranger2.wait_closed(100ms));
  RawConn member1(c.raft_port(1), "127.0.0.1");
  EXPECT_TRUE(stranger1.wait_closed(1000ms)) << "the oldest stranger makes room";
  EXPECT_FALSE(stranger2.wait_closed(0ms));
  RawConn member2(c.raft_port(1), "127.0.0.1");
  EXPECT_TRUE(stranger2.wait_closed(1000ms));
  RawConn stranger3(c.raft_port(1), "127.0.0.2");
  EXPECT_TRUE(stranger3.wait_closed(1000ms)) << "no member's handshake makes room for a stranger";
  EXPECT_FALSE(member1.wait_closed(0ms));
  EXPECT_FALSE(member2.wait_closed(0ms));
  EXPECT_TRUE(eventually([&] { return node_metric(c, 1, series) == before + 3; }, 5s))
      << node_metric(c, 1, series);
}

// /v1/top counts the keys of decided requests only: a stranger's refused
// requests neither show which keys it probed nor push real keys out.
TEST(HardeningTest, TopDoesNotCountRefusedRequests) {
  Credentials creds;
  LockdProcess lockd({"--auth", "token", "--credentials", creds.file(), "--admin", "127.0.0.1:0"});
  LineClient stranger(lockd.port());
  EXPECT_EQ(stranger.call("A x probed/key 1000"), "E unauthenticated x probed/key");
  LineClient c(lockd.port());
  ASSERT_EQ(c.call("H billing-token"), "H billing");
  EXPECT_EQ(fields(c.call("A b real/key 1000"))[0], "A");
  const std::string top = get(lockd.admin_port(), "/v1/top");
  EXPECT_NE(top.find("real/key"), std::string::npos) << top;
  EXPECT_EQ(top.find("probed/key"), std::string::npos) << top;
}

// §11a: SIGHUP applies the TLS, credentials and ACL files together or not
// at all. Deleting the credentials file fails the reload: the old
// credentials stay valid, and the new ACL and certificate written beside
// it are not applied either (before, each file reloaded on its own).
TEST(HardeningTest, SighupAppliesTlsCredentialsAndAclTogetherOrNotAtAll) {
  Credentials creds;
  TempDir dir("lockd-reload");
  const std::string cert = dir.sub("server.pem");
  const std::string key = dir.sub("server.key");
  const std::string acl = dir.sub("acl.toml");
  fs::copy_file(pki("server.pem"), cert);
  fs::copy_file(pki("server.key"), key);
  std::ofstream(acl) << "[[rule]]\nidentity = \"billing\"\nprefix = \"billing/\"\nverbs = [\"A\"]\n";
  LockdProcess lockd({"--client-tls", "--tls-cert", cert, "--tls-key", key, "--tls-ca", pki("ca.pem"),
                      "--auth", "token", "--credentials", creds.file(), "--acl", acl});
  TlsLineClient before(lockd.port(), {});
  ASSERT_TRUE(before.handshake_ok()) << before.error();
  const std::string old_serial = before.server_serial();
  EXPECT_EQ(before.call("H billing-token"), "H billing");
  EXPECT_EQ(before.call("A b orders/1 1000"), "E forbidden b orders/1");

  // A new certificate and a new ACL, and the credentials file deleted.
  fs::copy_file(pki("server2.pem"), cert, fs::copy_options::overwrite_existing);
  fs::copy_file(pki("server2.key"), key, fs::copy_options::overwrite_existing);
  std::ofstream(acl) << "[[rule]]\nidentity = \"billing\"\nprefix = \"\"\nverbs = [\"A\"]\n";
  fs::remove(creds.file());
  lockd.process().signal(SIGHUP);
  const auto line = lockd.process().wait_for_line("SIGHUP: reload failed", 20s);
  ASSERT_TRUE(line);
  EXPECT_NE(line->find(creds.file()), std::string::npos) << *line;
  TlsLineClient after(lockd.port(), {});
  ASSERT_TRUE(after.handshake_ok()) << after.error();
  EXPECT_EQ(after.server_serial(), old_serial);                   // the old certificate
  EXPECT_EQ(after.call("H billing-token"), "H billing");          // the old credentials
  EXPECT_EQ(after.call("A b orders/1 1000"), "E forbidden b orders/1");  // the old ACL

  // Every file good again: all three apply together.
  {
    Credentials fresh;
    fs::copy_file(fresh.file(), creds.file());
  }
  fs::permissions(creds.file(), fs::perms::owner_read | fs::perms::owner_write);
  lockd.process().signal(SIGHUP);
  ASSERT_TRUE(lockd.process().wait_for_line("files reloaded", 20s));
  TlsLineClient renewed(lockd.port(), {});
  ASSERT_TRUE(renewed.handshake_ok()) << renewed.error();
  EXPECT_NE(renewed.server_serial(), old_serial);
  EXPECT_EQ(renewed.call("H billing-token"), "H billing");
  EXPECT_EQ(fields(renewed.call("A b orders/1 1000"))[0], "A");
}

// §11a: a key, secret or credentials file that group or others may read
// is refused at start: exit 2, one line naming the flag, the file and its
// mode. The same file made private starts.
TEST(HardeningTest, KeySecretAndCredentialFilesReadableByOthersAreRefused) {
  Credentials creds;
  TempDir dir("lockd-perms");
  const std::string key = dir.sub("server.key");
  fs::copy_file(pki("server.key"), key);
  const std::string secret = dir.sub("peer-secret");
  std::ofstream(secret) << "0123456789abcdef0123456789abcdef-secret\n";
  struct Case {
    std::string file;
    std::vector<std::string> flags;
  };
  const std::vector<Case> cases{
      {key, {"--client-tls", "--tls-cert", pki("server.pem"), "--tls-key", key}},
      {creds.file(), {"--auth", "token", "--credentials", creds.file()}},
      {secret, {"--mode", "cluster", "--node-id", "1", "--peer", "1=127.0.0.1:0/127.0.0.1:0",
                "--data-dir", dir.sub("data"), "--peer-secret-file", secret}},
  };
  for (const Case& c : cases) {
    for (const mode_t mode : {0640, 0604, 0644}) {
      ASSERT_EQ(::chmod(c.file.c_str(), mode), 0);
      std::vector<std::string> argv{lockd_binary(), "--admin", "off"};
      if (c.flags[0] != "--mode") argv.insert(argv.end(), {"--listen", "127.0.0.1:0"});
      argv.insert(argv.end(), c.flags.begin(), c.flags.end());
      const RunResult r = run_program(argv, 20s);
      EXPECT_EQ(r.status, 2) << c.file << " " << r.err;
      EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
      char octal[8];
      std::snprintf(octal, sizeof octal, "%04o", static_cast<unsigned>(mode));
      EXPECT_NE(r.err.find(c.file), std::string::npos) << r.err;
      EXPECT_NE(r.err.find(octal), std::string::npos) << r.err;
    }
    // Private again (0600, or 0620: written by the group is not read): no
    // complaint about it.
    ASSERT_EQ(::chmod(c.file.c_str(), 0620), 0);
    if (c.flags[0] == "--mode") continue;  // a cluster start is tested below
    ChildProcess p;
    std::vector<std::string> argv{lockd_binary(), "--admin", "off", "--listen", "127.0.0.1:0"};
    argv.insert(argv.end(), c.flags.begin(), c.flags.end());
    ASSERT_TRUE(p.start(argv));
    EXPECT_TRUE(p.wait_for_line("listening on", 20s)) << p.stderr_text();
  }
}

// §11a: the data dir is created 0700 and every file in it 0600, whatever
// the umask (here 0, which would leave 0755 and 0644 before).
TEST(HardeningTest, DataDirIsPrivateWhateverTheUmask) {
  LockdCluster c(1, {}, {"/bin/sh", "-c", "umask 0 && rmdir {DIR} && exec \"$0\" \"$@\""});
  ASSERT_NE(c.wait_leader(), 0);
  LineClient client(c.client_port(1));
  EXPECT_EQ(fields(client.call("A a k 60000"))[0], "A");
  const fs::path data = c.data_dir(1);
  struct stat st {};
  ASSERT_EQ(::stat(data.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  int files = 0;
  for (const auto& e : fs::recursive_directory_iterator(data)) {
    ASSERT_EQ(::stat(e.path().c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 077, 0u) << e.path() << " mode " << std::oct << (st.st_mode & 0777);
    ++files;
  }
  EXPECT_GE(files, 2);  // at least the lock file, the identity and a log segment
}

}  // namespace
}  // namespace lockd::testing
