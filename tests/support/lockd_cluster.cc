#include "lockd_cluster.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>
#include <set>
#include <utility>
#include <thread>

#include "eventually.h"
#include "http_get.h"
#include "metric.h"

namespace lockd::testing {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

namespace {

// The kernel's range for ephemeral ports (outgoing connections' source
// ports, and bind to port 0).
std::pair<int, int> ephemeral_range() {
  int lo = 32768, hi = 60999;
  if (FILE* f = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
    if (std::fscanf(f, "%d %d", &lo, &hi) != 2) lo = 32768, hi = 60999;
    std::fclose(f);
  }
  return {lo, hi};
}

bool bindable(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  ::inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0;
  ::close(fd);
  return ok;
}

}  // namespace

bool lock_port_byte(int fd, std::uint16_t port) {
  struct flock lk{};
  lk.l_type = F_WRLCK;
  lk.l_whence = SEEK_SET;
  lk.l_start = port;
  lk.l_len = 1;
  return ::fcntl(fd, F_OFD_SETLK, &lk) == 0;
}

std::string test_port_lock_path() {
  const char* tmp = std::getenv("TMPDIR");
  return std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/lockd-test-ports.lock";
}

namespace {

// Reserves `port` for the rest of this process's life, against every
// other test process on the host: an exclusive lock on byte `port` of one
// shared file. A check that a port is bindable says nothing a moment
// later: while a test's node is down (killed, not started yet) its port
// is free, and a parallel ctest job could pick it and bind it first. The
// lock goes with the process (OFD lock, released when the kernel closes
// the file), so a crashed test leaves nothing behind. The Python and Go
// test helpers take the same locks (tools/chaos/lockd_chaos/ports.py).
bool reserve(std::uint16_t port) {
  static const int fd = ::open(test_port_lock_path().c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) return true;  // no shared file: the bind check alone
  return lock_port_byte(fd, port);
}

}  // namespace

// A port below the ephemeral range that nobody holds right now. Ports from
// bind(0) come from the ephemeral range, where the nodes' own outgoing
// connections (peer dials, clients) can take one between its choice and
// the node's bind; below it only another test's explicit choice can.
// It stays reserved for this process (reserve()). LOCKD_TEST_PORTS=LO-HI
// narrows the choice to LO..HI (a machine shared with other jobs that own
// some ports).
std::uint16_t free_port() {
  static std::mt19937 rng(static_cast<std::uint32_t>(::getpid()) ^
                          static_cast<std::uint32_t>(steady_clock::now().time_since_epoch().count()));
  int lo = 10000;
  int hi = ephemeral_range().first - 1;
  if (const char* range = std::getenv("LOCKD_TEST_PORTS")) {
    int from = 0, to = 0;
    if (std::sscanf(range, "%d-%d", &from, &to) == 2 && 0 < from && from < to && to <= 65535) {
      lo = from;
      hi = to;
    }
  }
  // Never the same port twice in a process: a cluster picks all its
  // nodes' ports before any node binds one, so a repeated pick passed
  // bindable() too and made a node fail to listen.
  static std::set<std::uint16_t> handed_out;
  for (int attempt = 0; hi > lo && attempt < 200; ++attempt) {
    const auto port = static_cast<std::uint16_t>(lo + static_cast<int>(rng() % static_cast<unsigned>(hi - lo)));
    if (!handed_out.contains(port) && reserve(port) && bindable(port)) {
      handed_out.insert(port);
      return port;
    }
  }
  // No room below the range: let the kernel choose.
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  ::inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
  std::uint16_t port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0) {
    socklen_t len = sizeof sa;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
    port = ntohs(sa.sin_port);
  }
  ::close(fd);
  return port;
}

LockdCluster::LockdCluster(int n, std::vector<std::string> extra_flags,
                           std::vector<std::string> env_prefix, int formed, bool init)
    : extra_flags_(std::move(extra_flags)), env_prefix_(std::move(env_prefix)) {
  nodes_.resize(static_cast<std::size_t>(n));
  for (int i = 1; i <= n; ++i) {
    Node& nd = node(i);
    nd.client_port = free_port();
    nd.raft_port = free_port();
    nd.admin_port = free_port();
    nd.data_dir = root_dir_.sub("node" + std::to_string(i));
    std::filesystem::create_directories(nd.data_dir);
  }
  // §11a: cluster mode needs peer authentication. Unless the test chose
  // (--peer-tls, its own --peer-secret-file, or --insecure-peers), the
  // nodes share a secret made here, readable by its owner only.
  peer_secret_ = root_dir_.sub("peer-secret");
  {
    std::ofstream out(peer_secret_);
    out << "lockd-test-peer-secret-0123456789abcdefghijklmnopqrstuvwxyz\n";
  }
  std::filesystem::permissions(peer_secret_, std::filesystem::perms::owner_read |
                                                 std::filesystem::perms::owner_write);
  if (formed > 0) {
    std::vector<int> group;
    for (int i = 1; i <= formed; ++i) group.push_back(i);
    for (int i = 1; i <= formed; ++i) node(i).peers = group;
  }
  try {
    for (int i = 1; i <= (formed > 0 ? formed : n); ++i) start(i);
    if (init) {
      const HttpReply r = init_group(1);
      if (r.status != 200) {
        throw std::runtime_error("POST /v1/cluster/init to node 1: HTTP " + std::to_string(r.status) +
                                 " " + r.body);
      }
      // Init answers once every founder acknowledged the group's first
      // entries (or 10 s after they committed, if one did not); a
      // follower may not have applied them or heard who leads yet. Tests
      // start from a group whose every started node knows the leader
      // (v1.2's starts) and holds the group's first entries. A founder
      // killed before that waits at its restart for every voter's word
      // that it never took part (docs/cluster.md "The start gate"), which
      // a test that then wipes another member would never get. (No
      // failure here: a test that starts a founder that cannot join
      // checks that itself.)
      const int founders = formed > 0 ? formed : n;
      const auto deadline = steady_clock::now() + milliseconds(20000);  // both waits together
      const auto left = [&] {
        return std::max(milliseconds(0), std::chrono::duration_cast<milliseconds>(deadline - steady_clock::now()));
      };
      const auto all = [&](auto&& ready) {
        for (int i = 1; i <= founders; ++i) {
          if (!ready(i)) return false;
        }
        return true;
      };
      eventually([&] { return all([&](int i) { return status_json(i).find("\"leader\":\"") != std::string::npos; }); },
                 left(), milliseconds(20));
      std::uint64_t first = 0;
      for (int i = 1; i <= founders; ++i) first = std::max(first, status_number(i, "commit_index"));
      eventually([&] { return all([&](int i) { return status_number(i, "applied_index") >= first; }); },
                 left(), milliseconds(20));
    }
  } catch (...) {
    nodes_.clear();  // kills what started; root_dir_ removes the data dirs
    throw;
  }
}

LockdCluster::~LockdCluster() {
  for (int i = 1; i <= size(); ++i) {
    if (running(i)) kill9(i);
  }
  // root_dir_ removes the data dirs, after the nodes are gone.
}

std::string LockdCluster::client_addr(int id) const {
  return "127.0.0.1:" + std::to_string(client_port(id));
}

std::string LockdCluster::raft_addr(int id) const {
  return "127.0.0.1:" + std::to_string(raft_port(id));
}

void LockdCluster::start(int id) {
  Node& nd = node(id);
  std::vector<std::string> argv{nd.binary.empty() ? lockd_binary() : nd.binary,
                                "--mode", "cluster",
                                "--node-id", std::to_string(id),
                                "--data-dir", nd.data_dir,
                                "--admin", "127.0.0.1:" + std::to_string(nd.admin_port)};
  // The short test timings, unless the test sets its own.
  for (const auto& [flag, value] : {std::pair<std::string, std::string>{"--election-timeout-ms", "150"},
                                    {"--heartbeat-ms", "30"}}) {
    if (std::find(extra_flags_.begin(), extra_flags_.end(), flag) == extra_flags_.end()) {
      argv.push_back(flag);
      argv.push_back(value);
    }
  }
  for (int i = 1; i <= size(); ++i) {
    if (!nd.peers.empty() && std::find(nd.peers.begin(), nd.peers.end(), i) == nd.peers.end()) {
      continue;
    }
    argv.push_back("--peer");
    argv.push_back(std::to_string(i) + "=127.0.0.1:" + std::to_string(node(i).client_port) +
                   "/127.0.0.1:" + std::to_string(node(i).raft_port));
  }
  const auto chose_peer_auth = [&](const std::vector<std::string>& flags) {
    return std::any_of(flags.begin(), flags.end(), [](const std::string& f) {
      return f == "--peer-tls" || f == "--peer-secret-file" || f == "--insecure-peers" ||
             f.starts_with("--peer-secret-file=");
    });
  };
  if (!chose_peer_auth(extra_flags_) && !chose_peer_auth(nd.flags)) {
    argv.push_back("--peer-secret-file");
    argv.push_back(peer_secret_);
  }
  for (std::string flag : extra_flags_) {
    // "{ID}" names the node: per-node files such as --tls-cert node-{ID}.pem.
    for (auto at = flag.find("{ID}"); at != std::string::npos; at = flag.find("{ID}")) {
      flag.replace(at, 4, std::to_string(id));
    }
    argv.push_back(std::move(flag));
  }
  argv.insert(argv.end(), nd.flags.begin(), nd.flags.end());
  std::vector<std::string> prefix = env_prefix_;
  for (std::string& p : prefix) {
    for (const auto& [from, to] : {std::pair<std::string, std::string>{"{DIR}", nd.data_dir},
                                   {"{ID}", std::to_string(id)}}) {
      for (auto at = p.find(from); at != std::string::npos; at = p.find(from)) p.replace(at, from.size(), to);
    }
  }
  argv.insert(argv.begin(), prefix.begin(), prefix.end());
  nd.proc = std::make_unique<ChildProcess>();
  // A node that does not come up ends the test here (gtest reports the
  // exception), not in a confusing failure later with a node missing.
  if (!nd.proc->start(argv)) throw std::runtime_error("node " + std::to_string(id) + ": cannot start lockd");
  if (!nd.proc->wait_for_line("listening on", std::chrono::seconds(10))) {
    throw std::runtime_error("node " + std::to_string(id) + " did not start: " + nd.proc->stderr_text());
  }
}

void LockdCluster::kill9(int id) {
  Node& nd = node(id);
  if (!nd.proc) return;
  nd.proc->signal(SIGKILL);
  nd.proc->wait_exit(milliseconds(5000));
  nd.proc.reset();
}

void LockdCluster::signal(int id, int sig) { node(id).proc->signal(sig); }

void LockdCluster::wipe(int id) {
  EXPECT_FALSE(running(id));
  std::error_code ec;
  std::filesystem::remove_all(node(id).data_dir, ec);
  std::filesystem::create_directories(node(id).data_dir);
}

int LockdCluster::wait_leader(milliseconds timeout, int except) {
  const auto deadline = steady_clock::now() + timeout;
  while (steady_clock::now() < deadline) {
    for (int i = 1; i <= size(); ++i) {
      if (!running(i) || i == except) continue;
      if (call_once(client_port(i), "R 1 lockd-probe", milliseconds(500)) == "N 1 lockd-probe") {
        return i;
      }
    }
    std::this_thread::sleep_for(milliseconds(20));
  }
  return 0;
}

HttpReply LockdCluster::init_group(int id, milliseconds timeout) {
  const auto deadline = steady_clock::now() + timeout;
  HttpReply r;
  bool timed_out = false;  // an earlier try answered 504: that init may have formed the group since
  while (true) {
    r = http_raw(admin_port(id),
                 "POST /v1/cluster/init HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                 "application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}");
    if (r.status == 409 && timed_out &&
        r.body.find("node " + std::to_string(id) + " belongs to a formed group") != std::string::npos) {
      const HttpReply v = http(admin_port(id), "/v1/cluster");
      if (v.status == 200 && v.body.find("\"leader_id\":null") == std::string::npos) return v;
    } else if ((r.status != 0 && r.status != 504 && r.status != 503) || steady_clock::now() >= deadline) {
      return r;
    }
    timed_out = timed_out || r.status == 504;
    if (steady_clock::now() >= deadline) return r;
    std::this_thread::sleep_for(milliseconds(50));
  }
}

std::string LockdCluster::status_json(int id) {
  const HttpReply r = http(admin_port(id), "/v1/status");
  return r.status == 200 ? r.body : std::string();
}

std::uint64_t LockdCluster::status_number(int id, const std::string& field) {
  const std::string json = status_json(id);
  const auto at = json.find("\"" + field + "\":");
  if (at == std::string::npos) return 0;
  return std::strtoull(json.c_str() + at + field.size() + 3, nullptr, 10);
}

std::string call_once(std::uint16_t port, const std::string& line, milliseconds timeout) {
  LineClient c(port);
  if (!c.connected()) return "<no connection>";
  c.send(line + "\n");
  return c.read_line(timeout).value_or("<no reply>");
}

std::string call_leader(LockdCluster& c, const std::string& line, int except,
                        std::chrono::milliseconds timeout) {
  const auto deadline = steady_clock::now() + timeout;
  std::string reply = "<no leader>";
  while (steady_clock::now() < deadline) {
    const int leader = c.wait_leader(std::chrono::milliseconds(10000), except);
    if (leader == 0) {
      reply = "<no leader>";
      continue;
    }
    reply = call_once(c.client_port(leader), line);
    // A redirect, an election under way, an outcome lost with a leader, or
    // a node that died mid-call ("<no reply>", "<no connection>"): again.
    if (reply.rfind("M ", 0) != 0 && reply.rfind("E no_leader", 0) != 0 &&
        reply.rfind("E indeterminate", 0) != 0 && reply.rfind("<no ", 0) != 0) {
      return reply;
    }
  }
  return reply;
}

}  // namespace lockd::testing

namespace lockd::testing {

double node_metric(LockdCluster& c, int id, const std::string& series) {
  return metric(http(c.admin_port(id), "/metrics").body, series);
}

}  // namespace lockd::testing
