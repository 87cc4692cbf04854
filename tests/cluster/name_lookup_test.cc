// §11a "name lookups never block the event loop" (issue 35 case 8): a
// member whose raft address is a name the resolver never answers must not
// delay lock replies or heartbeats on the others. Real processes; the
// resolver is pointed at a local UDP socket that reads nothing
// ($LOCKD_RESOLV_CONF, net/resolver.h). Before the fix every dial and
// every accepted raft connection ran getaddrinfo on the loop: each lookup
// stalled its node for the resolver's whole timeout, and the cluster lost
// its leader over and over (checked with /etc/resolv.conf bind-mounted to
// such a server, see docs/security.md "Peer port").
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eventually.h"
#include "http_get.h"
#include "lockd_cluster.h"
#include "temp_dir.h"

namespace lockd::testing {
namespace {

using std::chrono::milliseconds;
using json = nlohmann::json;

// A UDP socket on 127.0.0.1 that is never read: a DNS server that never
// answers.
class SilentDnsServer {
 public:
  SilentDnsServer() {
    fd_ = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
    socklen_t len = sizeof sa;
    getsockname(fd_, reinterpret_cast<sockaddr*>(&sa), &len);
    port_ = ntohs(sa.sin_port);
  }
  ~SilentDnsServer() { ::close(fd_); }
  SilentDnsServer(const SilentDnsServer&) = delete;
  SilentDnsServer& operator=(const SilentDnsServer&) = delete;
  std::uint16_t port() const { return port_; }

 private:
  int fd_ = -1;
  std::uint16_t port_ = 0;
};

HttpReply admin_post(std::uint16_t port, const std::string& target, const std::string& body) {
  const std::string raw = "POST " + target +
                          " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                          "Content-Type: application/json\r\nContent-Length: " +
                          std::to_string(body.size()) + "\r\n\r\n" + body;
  return http_raw(port, raw);
}

std::uint64_t term_of(LockdCluster& c, int id) {
  const json j = json::parse(c.status_json(id), nullptr, false);
  if (!j.is_object() || !j.contains("term")) return 0;
  return j["term"].get<std::uint64_t>();
}

// One connection to a node's raft port that says nothing: the node
// accepts it (and, before the fix, looked up every member's name).
int connect_raft(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  return fd;
}

TEST(NameLookup, AMemberWhoseNameNeverResolvesDelaysNothing) {
  SilentDnsServer dns;
  TempDir dir("lockd-resolv");
  const std::string conf = dir.sub("resolv.conf");
  {
    std::ofstream f(conf);
    // timeout:2 attempts:1: a blocking lookup would hold a loop 2 s, far
    // past the 1 s election timeout below.
    f << "nameserver 127.0.0.1:" << dns.port() << "\noptions timeout:2 attempts:1\n";
  }
  LockdCluster c(3, {"--election-timeout-ms", "1000", "--heartbeat-ms", "100"},
                 {"/usr/bin/env", "LOCKD_RESOLV_CONF=" + conf});
  const int leader = c.wait_leader(milliseconds(20000));
  ASSERT_NE(leader, 0);
  // Member 4 at a name only the silent server could answer. Every member
  // now dials it (a learner gets the leader's appends).
  const std::string body =
      json{{"id", 4}, {"client_addr", "127.0.0.1:1"}, {"raft_addr", "never-answers.lockd.test:7999"}}
          .dump();
  const HttpReply add = admin_post(c.admin_port(leader), "/v1/cluster/members", body);
  ASSERT_EQ(add.status, 200) << add.body;

  std::vector<std::uint64_t> terms;
  for (int id = 1; id <= 3; ++id) terms.push_back(term_of(c, id));
  // Accepted raft connections on every node while the lookups hang.
  std::vector<int> fds;
  // Lock replies for 6 s (three lookup timeouts): each within 500 ms.
  const auto end = std::chrono::steady_clock::now() + milliseconds(6000);
  long worst_ms = 0;
  int replies = 0;
  for (int i = 0; std::chrono::steady_clock::now() < end; ++i) {
    if (i % 10 == 0) {
      for (int id = 1; id <= 3; ++id) fds.push_back(connect_raft(c.raft_port(id)));
    }
    const auto t0 = std::chrono::steady_clock::now();
    const std::string key = "k" + std::to_string(i % 20);
    const std::string reply = call_once(c.client_port(leader), "A alice " + key + " 1000",
                                        milliseconds(5000));
    const auto t1 = std::chrono::steady_clock::now();
    worst_ms = std::max<long>(worst_ms, std::chrono::duration_cast<milliseconds>(t1 - t0).count());
    ASSERT_EQ(reply.rfind("A ", 0), 0u) << "request " << i << ": " << reply;
    const std::string token = reply.substr(2, reply.find(' ', 2) - 2);
    ASSERT_EQ(call_once(c.client_port(leader), "R " + token + " " + key, milliseconds(5000)),
              "R " + token + " " + key);
    replies += 1;
  }
  for (int fd : fds) ::close(fd);
  EXPECT_GT(replies, 20);
  EXPECT_LT(worst_ms, 500) << "a lock reply waited " << worst_ms << " ms";
  // No heartbeat was late enough for an election anywhere.
  for (int id = 1; id <= 3; ++id) EXPECT_EQ(term_of(c, id), terms[id - 1]) << "node " << id;
  // The name failed (counted, retried with back-off), and is logged once
  // however often it failed.
  const std::string series = "lockd_peer_resolve_failures_total{peer=\"4\"}";
  ASSERT_TRUE(eventually([&] { return node_metric(c, leader, series) >= 2; }, milliseconds(20000)));
  ChildProcess& p = c.process(leader);
  ASSERT_TRUE(p.wait_for_line("cannot resolve 'never-answers.lockd.test'", milliseconds(5000)));
  p.wait_for_line("a line that never comes", milliseconds(300));  // read what is there
  const std::string& log = p.stderr_text();
  std::size_t lines = 0;
  for (std::size_t at = 0; (at = log.find("cannot resolve 'never-answers", at)) != std::string::npos;
       ++at) {
    lines += 1;
  }
  EXPECT_EQ(lines, 1u) << log;
}

}  // namespace
}  // namespace lockd::testing
