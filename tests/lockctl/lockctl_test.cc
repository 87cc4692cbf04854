// lockctl against a real lockd (and against none): every command, human and
// JSON output, exit statuses 0/1/2/3, `acquire --wait` blocking, and
// `lockctl top` driven under tmux (a real pseudo-terminal).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <regex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "eventually.h"
#include "http_get.h"
#include "lockd_cluster.h"
#include "lockd_process.h"
#include "metric.h"
#include "run_program.h"
#include "temp_dir.h"

namespace lockd::testing {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

std::string lockctl_binary() { return LOCKCTL_BINARY; }

using Outcome = RunResult;

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Runs a program to completion, stdout and stderr captured.
Outcome run(const std::vector<std::string>& argv, std::chrono::milliseconds timeout = 15s) {
  return run_program(argv, timeout);
}

// A live lockd plus a lockctl pointed at it.
struct Fixture {
  Fixture() : lockd({"--admin", "127.0.0.1:0"}) {}
  Outcome ctl(std::vector<std::string> args, std::chrono::milliseconds timeout = 15s) {
    std::vector<std::string> argv{lockctl_binary(), "--addr",
                                  "127.0.0.1:" + std::to_string(lockd.port()), "--admin",
                                  "127.0.0.1:" + std::to_string(lockd.admin_port())};
    argv.insert(argv.end(), args.begin(), args.end());
    return run(argv, timeout);
  }
  LockdProcess lockd;
};

// A port with nothing listening: bind one, note it, close it.
std::string dead_addr() {
  LockdProcess l;
  const std::string a = "127.0.0.1:" + std::to_string(l.port());
  l.process().signal(SIGKILL);
  l.process().wait_exit(20s);
  return a;
}

TEST(LockctlTest, AcquireReleaseAndTheirExitStatuses) {
  Fixture f;
  Outcome a = f.ctl({"acquire", "alice", "orders/42", "--lease", "60000"});
  ASSERT_EQ(a.status, 0) << a.err;
  const auto fa = fields(a.out.substr(0, a.out.find('\n')));
  ASSERT_EQ(fa.size(), 4u) << a.out;
  EXPECT_EQ(fa[0], "A");
  EXPECT_EQ(fa[2], "alice");
  EXPECT_EQ(fa[3], "orders/42");
  const std::string token = fa[1];

  Outcome t = f.ctl({"acquire", "bob", "orders/42"});
  EXPECT_EQ(t.status, 1);
  EXPECT_EQ(t.out, "T bob orders/42\n");
  Outcome n = f.ctl({"release", "12345", "orders/42"});
  EXPECT_EQ(n.status, 1);
  EXPECT_EQ(n.out, "N 12345 orders/42\n");
  Outcome e = f.ctl({"release", "notanumber", "orders/42"});
  EXPECT_EQ(e.status, 2);
  EXPECT_EQ(e.out, "E bad_token\n");
  Outcome r = f.ctl({"release", token, "orders/42"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "R " + token + " orders/42\n");

  Outcome j = f.ctl({"--json", "acquire", "carol", "k2"});
  EXPECT_EQ(j.status, 0);
  const json jj = json::parse(j.out);
  EXPECT_EQ(jj["reply"], "A");
  EXPECT_EQ(jj["owner"], "carol");
  EXPECT_TRUE(jj["token"].is_number_unsigned());
}

// `snapshot save FILE` reports success only for a file it wrote: a FILE
// it cannot create, or cannot rename into place (a directory), is one line
// on stderr and exit 2 with nothing on stdout (it printed "…, checksum ok"
// first), and leaves no temp file behind.
TEST(LockctlTest, SnapshotSaveReportsOnlyAWrittenFile) {
  Fixture f;
  ASSERT_EQ(f.ctl({"acquire", "alice", "orders/42", "--lease", "60000"}).status, 0);
  const TempDir tmp("lockctl-snap");
  std::filesystem::create_directory(tmp.sub("a-directory"));
  for (const std::string& file : {tmp.sub("no-such-dir/x.snap"), tmp.sub("a-directory")}) {
    const Outcome o = f.ctl({"snapshot", "save", file});
    EXPECT_EQ(o.status, 2) << file << ": " << o.out << o.err;
    EXPECT_EQ(o.out, "") << file;
    EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
    EXPECT_NE(o.err.find(file), std::string::npos) << o.err;
  }
  std::vector<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator(tmp.path())) left.push_back(e.path().filename());
  EXPECT_EQ(left, std::vector<std::string>{"a-directory"});
  EXPECT_TRUE(std::filesystem::is_empty(tmp.sub("a-directory")));
  // A writable FILE: the line, then the file is there and verifies.
  const std::string good = tmp.sub("good.snap");
  const Outcome saved = f.ctl({"snapshot", "save", good});
  ASSERT_EQ(saved.status, 0) << saved.err;
  EXPECT_EQ(saved.out.rfind(good + ": single snapshot at index ", 0), 0u) << saved.out;
  EXPECT_NE(saved.out.find("checksum ok"), std::string::npos) << saved.out;
  EXPECT_EQ(f.ctl({"snapshot", "verify", good}).status, 0);
}

// `acquire --shared [--limit N]` (v1.2) and `lock KEY` with several
// holders and waiters of both modes.
TEST(LockctlTest, SharedAcquireAndLockShowEveryHolderAndWaiterMode) {
  Fixture f;
  Outcome r1 = f.ctl({"acquire", "alice", "cfg", "--shared", "--limit", "2", "--lease", "60000"});
  ASSERT_EQ(r1.status, 0) << r1.err;
  EXPECT_EQ(fields(r1.out.substr(0, r1.out.find('\n')))[0], "S");
  Outcome r2 = f.ctl({"--json", "acquire", "bob", "cfg", "--shared", "--limit", "2", "--lease", "60000"});
  ASSERT_EQ(r2.status, 0) << r2.err;
  const json j2 = json::parse(r2.out);
  EXPECT_EQ(j2["reply"], "S");
  EXPECT_EQ(j2["mode"], "shared");
  EXPECT_EQ(j2["owner"], "bob");
  const std::string bob_token = std::to_string(j2["token"].get<std::uint64_t>());
  Outcome full = f.ctl({"acquire", "carol", "cfg", "--shared", "--limit", "2"});
  EXPECT_EQ(full.status, 1);
  EXPECT_EQ(full.out, "T carol cfg\n");
  Outcome mismatch = f.ctl({"acquire", "carol", "cfg", "--shared"});
  EXPECT_EQ(mismatch.status, 1);
  EXPECT_EQ(mismatch.out, "E limit_mismatch carol cfg\n");
  Outcome usage = f.ctl({"acquire", "carol", "cfg", "--limit", "2"});
  EXPECT_EQ(usage.status, 2);
  EXPECT_NE(usage.err.find("--limit needs --shared"), std::string::npos) << usage.err;
  // Waiters of both modes, queued through the protocol.
  LineClient w(f.lockd.port());
  w.send("A writer cfg 60000 60000\nS reader cfg 2 60000 60000\nA probe cfg\n");
  ASSERT_EQ(w.read_line(), "T probe cfg");
  Outcome lock = f.ctl({"lock", "cfg"});
  ASSERT_EQ(lock.status, 0) << lock.err;
  EXPECT_NE(lock.out.find("shared (limit 2)"), std::string::npos) << lock.out;
  EXPECT_NE(lock.out.find("alice"), std::string::npos) << lock.out;
  EXPECT_NE(lock.out.find(bob_token), std::string::npos) << lock.out;
  EXPECT_NE(lock.out.find("HOLDER"), std::string::npos) << lock.out;
  EXPECT_NE(lock.out.find("writer"), std::string::npos) << lock.out;
  EXPECT_NE(lock.out.find("exclusive"), std::string::npos) << lock.out;
  const auto reader_row = lock.out.find("reader");
  ASSERT_NE(reader_row, std::string::npos) << lock.out;
  EXPECT_NE(lock.out.find("shared", reader_row), std::string::npos) << lock.out;
  // Releasing one reader releases only it.
  Outcome rel = f.ctl({"release", bob_token, "cfg"});
  EXPECT_EQ(rel.status, 0);
  Outcome again = f.ctl({"--json", "lock", "cfg"});
  EXPECT_EQ(json::parse(again.out)["holders"].size(), 1u);
}

TEST(LockctlTest, KeepExtendsTheLeaseAndMapsRepliesToExitStatuses) {
  Fixture f;
  Outcome a = f.ctl({"acquire", "alice", "orders/42", "--lease", "1000"});
  ASSERT_EQ(a.status, 0) << a.err;
  const auto fa = fields(a.out.substr(0, a.out.find('\n')));
  ASSERT_EQ(fa.size(), 4u) << a.out;
  const std::string token = fa[1];

  Outcome k = f.ctl({"keep", token, "orders/42", "--lease", "600000"});
  EXPECT_EQ(k.status, 0) << k.err;
  EXPECT_EQ(k.out, "K " + token + " orders/42\n");
  // The admin view shows the new expiry, not the acquire's 1 s.
  Outcome l = f.ctl({"--json", "lock", "orders/42"});
  ASSERT_EQ(l.status, 0) << l.err;
  EXPECT_GT(json::parse(l.out)["expires_in_ms"].get<std::int64_t>(), 590'000) << l.out;

  Outcome j = f.ctl({"--json", "keep", token, "orders/42", "--lease", "600000"});
  EXPECT_EQ(j.status, 0) << j.err;
  const json jj = json::parse(j.out);
  EXPECT_EQ(jj["reply"], "K");
  EXPECT_EQ(jj["token"].get<std::uint64_t>(), std::stoull(token));
  EXPECT_EQ(jj["key"], "orders/42");

  Outcome n = f.ctl({"keep", "12345", "orders/42", "--lease", "1000"});
  EXPECT_EQ(n.status, 1);
  EXPECT_EQ(n.out, "N 12345 orders/42\n");
  Outcome e = f.ctl({"keep", token, "orders/42", "--lease", "0"});
  EXPECT_EQ(e.status, 2);
  EXPECT_EQ(e.out, "E bad_lease " + token + " orders/42\n");
  EXPECT_EQ(f.ctl({"keep", token, "orders/42"}).status, 2);  // --lease is required
  EXPECT_EQ(f.ctl({"keep", token, "--lease", "1000"}).status, 2);
  EXPECT_EQ(f.ctl({"keep", token, "orders/42", "--lease", "x"}).status, 2);
}

TEST(LockctlTest, AcquireWaitBlocksUntilTheKeyIsHandedOver) {
  Fixture f;
  LineClient holder(f.lockd.port());
  const auto h = fields(holder.call("A alice k 60000"));
  ASSERT_EQ(h.size(), 4u);
  // Releases only once lockctl's acquire is queued (the admin API shows
  // the waiter), so the grant can only be a hand-off.
  bool queued = false;
  std::thread releaser([&] {
    queued = eventually([&] {
      const HttpReply r = http(f.lockd.admin_port(), "/v1/locks/k");
      const json j = json::parse(r.body, nullptr, false);
      return r.status == 200 && j.is_object() && j["waiters"].size() == 1;
    });
    holder.call("R " + h[1] + " k");
  });
  Outcome w = f.ctl({"acquire", "bob", "k", "--wait", "30000"}, 40s);
  releaser.join();
  EXPECT_TRUE(queued) << "lockctl's acquire never showed as a waiter";
  EXPECT_EQ(w.status, 0) << w.err;
  EXPECT_TRUE(w.out.starts_with("A ")) << w.out;
  EXPECT_NE(w.out.find(" bob k"), std::string::npos) << w.out;

  // A wait that runs out is `T`, exit 1.
  Outcome to = f.ctl({"acquire", "carol", "k", "--lease", "1000", "--wait", "200"});
  EXPECT_EQ(to.status, 1);
  EXPECT_EQ(to.out, "T carol k\n");
}

// The expiry lockctl shows on the first line containing `row` after
// `marker`, in seconds ("in 58.7s" or "in 1m00s"); -1 when absent.
double shown_expiry_s(const std::string& out, const std::string& row, const std::string& marker) {
  const auto line_at = out.find(row);
  if (line_at == std::string::npos) return -1;
  const std::string line = out.substr(line_at, out.find('\n', line_at) - line_at);
  const auto at = line.find(marker);
  if (at == std::string::npos) return -1;
  const std::string rest = line.substr(at + marker.size());
  if (rest.starts_with("1m00s")) return 60;
  return rest.empty() || !std::isdigit(static_cast<unsigned char>(rest[0])) ? -1 : std::stod(rest);
}

TEST(LockctlTest, StatusLocksAndLockHumanAndJson) {
  Fixture f;
  LineClient c(f.lockd.port());
  const auto acquired = std::chrono::steady_clock::now();
  const auto g = fields(c.call("A alice orders/42 60000"));
  // A 60 s lease shown after `elapsed`: between 60 s minus that (and a
  // rounding) and 60 s, however slow lockctl was to start.
  const auto expect_expiry = [&](double shown, const std::string& out) {
    const double elapsed_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - acquired).count();
    EXPECT_GE(shown, 60 - elapsed_s - 0.1) << out;
    EXPECT_LE(shown, 60.0) << out;
  };
  c.call("A dave a/b%c?d");
  LineClient w(f.lockd.port());
  w.send("A bob orders/42 5000 20000\nA probe orders/42\n");
  ASSERT_EQ(w.read_line(), "T probe orders/42");

  Outcome s = f.ctl({"status"});
  EXPECT_EQ(s.status, 0) << s.err;
  EXPECT_NE(s.out.find("mode "), std::string::npos) << s.out;
  EXPECT_NE(s.out.find("single"), std::string::npos);
  EXPECT_NE(s.out.find("keys           2"), std::string::npos) << s.out;
  EXPECT_NE(s.out.find("waiters        1"), std::string::npos) << s.out;

  // --json is the API's JSON unchanged.
  Outcome sj = f.ctl({"--json", "status"});
  EXPECT_EQ(sj.status, 0);
  const json st = json::parse(sj.out);
  EXPECT_EQ(st["keys"], 2);
  EXPECT_EQ(st["mode"], "single");

  Outcome l = f.ctl({"locks"});
  EXPECT_EQ(l.status, 0) << l.err;
  EXPECT_TRUE(l.out.starts_with("KEY ")) << l.out;
  EXPECT_NE(l.out.find("EXPIRES"), std::string::npos);
  EXPECT_LT(l.out.find("a/b%c?d"), l.out.find("orders/42")) << "sorted by key: " << l.out;
  EXPECT_NE(l.out.find(g[1]), std::string::npos) << "token shown: " << l.out;
  expect_expiry(shown_expiry_s(l.out, "orders/42", " in "), l.out);

  Outcome lp = f.ctl({"--json", "locks", "--prefix", "orders/", "--limit", "1"});
  EXPECT_EQ(lp.status, 0);
  const json lj = json::parse(lp.out);
  ASSERT_EQ(lj["locks"].size(), 1u);
  EXPECT_EQ(lj["locks"][0]["key"], "orders/42");
  EXPECT_EQ(lj["truncated"], false);
  Outcome trunc = f.ctl({"locks", "--limit", "1"});
  EXPECT_NE(trunc.out.find("--after a/b%c?d"), std::string::npos) << trunc.out;

  Outcome k = f.ctl({"lock", "orders/42"});
  EXPECT_EQ(k.status, 0) << k.err;
  EXPECT_NE(k.out.find("owner    alice"), std::string::npos) << k.out;
  EXPECT_NE(k.out.find("token    " + g[1]), std::string::npos) << k.out;
  expect_expiry(shown_expiry_s(k.out, "expires  ", "expires  in "), k.out);
  EXPECT_NE(k.out.find("(lease 1m00s"), std::string::npos) << k.out;
  EXPECT_NE(k.out.find("bob"), std::string::npos) << k.out;
  EXPECT_NE(k.out.find("WAIT LEFT"), std::string::npos) << k.out;

  Outcome odd = f.ctl({"--json", "lock", "a/b%c?d"});
  EXPECT_EQ(odd.status, 0) << odd.err;
  EXPECT_EQ(json::parse(odd.out)["owner"], "dave");

  Outcome missing = f.ctl({"lock", "nope"});
  EXPECT_EQ(missing.status, 1);
  EXPECT_NE(missing.err.find("nope"), std::string::npos) << missing.err;
  Outcome missing_json = f.ctl({"--json", "lock", "nope"});
  EXPECT_EQ(missing_json.status, 1);
  EXPECT_EQ(json::parse(missing_json.out)["error"], "not_found");

  Outcome cl = f.ctl({"cluster"});
  EXPECT_EQ(cl.status, 1);  // 404 in single mode
  EXPECT_EQ(std::count(cl.err.begin(), cl.err.end(), '\n'), 1) << cl.err;
}

// A stand-in for a cluster node: a thread on a free loopback port that
// reads one request (a protocol line, or an HTTP request head), answers
// with whatever `answer` returns for it, and closes. Lets the tests play
// followers that redirect, nodes that know no leader, and a leader's
// /v1/cluster, without a cluster.
class FakeNode {
 public:
  using Answer = std::function<std::string(const std::string& request)>;
  explicit FakeNode(Answer answer) : answer_(std::move(answer)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), len), 0);
    EXPECT_EQ(::listen(fd_, 16), 0);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~FakeNode() {
    stop_ = true;
    thread_.join();
    ::close(fd_);
  }
  std::string addr() const { return "127.0.0.1:" + std::to_string(port_); }
  std::vector<std::string> requests() {
    const std::lock_guard<std::mutex> g(mu_);
    return requests_;
  }

 private:
  void serve() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      std::string req;
      char buf[4096];
      const auto done = [&] {
        return req.starts_with("GET ") ? req.find("\r\n\r\n") != std::string::npos
                                       : req.find('\n') != std::string::npos;
      };
      while (!done()) {
        pollfd q{c, POLLIN, 0};
        if (::poll(&q, 1, 3000) <= 0) break;
        const ssize_t n = ::recv(c, buf, sizeof buf, 0);
        if (n <= 0) break;
        req.append(buf, static_cast<std::size_t>(n));
      }
      if (!req.starts_with("GET ") && req.find('\n') != std::string::npos) {
        req.resize(req.find('\n'));
      }
      {
        const std::lock_guard<std::mutex> g(mu_);
        requests_.push_back(req);
      }
      const std::string out = answer_(req);
      (void)!::send(c, out.data(), out.size(), MSG_NOSIGNAL);
      ::close(c);
    }
  }

  Answer answer_;
  int fd_ = -1;
  std::uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::vector<std::string> requests_;
  std::thread thread_;
};

std::string http_reply(int status, const std::string& body) {
  return "HTTP/1.1 " + std::to_string(status) +
         " X\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
}

// `A alice k` -> `alice k`, `R 5 k` -> `5 k`: the echo a cluster reply carries.
std::string echo_of(const std::string& line) {
  const auto f = fields(line);
  std::string e;
  for (std::size_t i = 1; i < f.size() && i < 3; ++i) e += (i > 1 ? " " : "") + f[i];
  return e;
}

Outcome ctl_at(const std::string& addr, std::vector<std::string> args) {
  std::vector<std::string> argv{lockctl_binary(), "--addr", addr, "--admin", addr};
  argv.insert(argv.end(), args.begin(), args.end());
  return run(argv);
}

TEST(LockctlClusterTest, AcquireReleaseKeepFollowRedirectsToTheLeader) {
  FakeNode leader([](const std::string& req) {
    const auto f = fields(req);
    if (f[0] == "A") return "A 77 " + echo_of(req) + "\n";
    if (f[0] == "R") return "R " + echo_of(req) + "\n";
    return "K " + echo_of(req) + "\n";
  });
  // Two hops: follower 1 points at follower 2, which points at the leader.
  const std::string leader_addr = leader.addr();
  FakeNode f2([&](const std::string& req) { return "M " + leader_addr + " " + echo_of(req) + "\n"; });
  const std::string f2_addr = f2.addr();
  FakeNode f1([&](const std::string& req) { return "M " + f2_addr + " " + echo_of(req) + "\n"; });

  Outcome a = ctl_at(f1.addr(), {"acquire", "alice", "k", "--lease", "5000"});
  EXPECT_EQ(a.status, 0) << a.err;
  EXPECT_EQ(a.out, "A 77 alice k\n");
  EXPECT_EQ(leader.requests(), std::vector<std::string>{"A alice k 5000"});
  EXPECT_EQ(f1.requests().size(), 1u);
  EXPECT_EQ(f2.requests().size(), 1u);

  Outcome r = ctl_at(f2.addr(), {"release", "77", "k"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "R 77 k\n");
  Outcome k = ctl_at(f1.addr(), {"--json", "keep", "77", "k", "--lease", "9000"});
  EXPECT_EQ(k.status, 0) << k.err;
  EXPECT_EQ(json::parse(k.out)["reply"], "K");
  EXPECT_EQ(leader.requests().back(), "K 77 k 9000");
}

TEST(LockctlClusterTest, RedirectToADeadLeaderSaysWhoSentUs) {
  const std::string dead = dead_addr();
  FakeNode follower([&](const std::string& req) { return "M " + dead + " " + echo_of(req) + "\n"; });
  Outcome a = ctl_at(follower.addr(), {"acquire", "alice", "k"});
  EXPECT_EQ(a.status, 3);
  EXPECT_NE(a.err.find("cannot reach the leader " + dead + " that " + follower.addr()),
            std::string::npos)
      << a.err;
  EXPECT_EQ(std::count(a.err.begin(), a.err.end(), '\n'), 1) << a.err;
}

TEST(LockctlClusterTest, GivesUpAfterThreeHops) {
  // A node that redirects to itself forever: lockctl asks it 1 + 3 times.
  std::string self;
  FakeNode loop([&](const std::string& req) { return "M " + self + " " + echo_of(req) + "\n"; });
  self = loop.addr();
  Outcome a = ctl_at(loop.addr(), {"acquire", "alice", "k"});
  EXPECT_EQ(a.status, 1);
  EXPECT_EQ(loop.requests().size(), 4u);
  EXPECT_NE(a.err.find("redirected"), std::string::npos) << a.err;
  EXPECT_EQ(std::count(a.err.begin(), a.err.end(), '\n'), 1) << a.err;
}

TEST(LockctlClusterTest, NoLeaderAndIndeterminateExitOneWithAClearLine) {
  FakeNode none([](const std::string& req) { return "E no_leader " + echo_of(req) + "\n"; });
  Outcome a = ctl_at(none.addr(), {"acquire", "alice", "k"});
  EXPECT_EQ(a.status, 1);
  EXPECT_EQ(a.out, "E no_leader alice k\n");
  EXPECT_NE(a.err.find("no leader"), std::string::npos) << a.err;
  EXPECT_EQ(std::count(a.err.begin(), a.err.end(), '\n'), 1) << a.err;
  Outcome aj = ctl_at(none.addr(), {"--json", "release", "5", "k"});
  EXPECT_EQ(aj.status, 1);
  EXPECT_EQ(json::parse(aj.out)["error"], "no_leader");

  // Redirected to a leader that then loses leadership mid-request.
  FakeNode lost([](const std::string& req) { return "E indeterminate " + echo_of(req) + "\n"; });
  const std::string lost_addr = lost.addr();
  FakeNode follower([&](const std::string& req) { return "M " + lost_addr + " " + echo_of(req) + "\n"; });
  Outcome r = ctl_at(follower.addr(), {"release", "5", "k"});
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.out, "E indeterminate 5 k\n");
  EXPECT_NE(r.err.find("may or may not"), std::string::npos) << r.err;
}

TEST(LockctlClusterTest, ClusterTableShowsRolesMatchAndLag) {
  const std::string body = R"({"node_id":1,"leader_id":1,"term":4,"commit_index":120,"members":[)"
                           R"({"id":1,"client_addr":"127.0.0.1:7001","raft_addr":"127.0.0.1:8001","role":"leader","match_index":120,"last_contact_ms":0},)"
                           R"({"id":2,"client_addr":"127.0.0.1:7002","raft_addr":"127.0.0.1:8002","role":"follower","match_index":117,"last_contact_ms":12},)"
                           R"({"id":3,"client_addr":"127.0.0.1:7003","raft_addr":"127.0.0.1:8003","role":"follower","match_index":null,"last_contact_ms":null}]})";
  FakeNode admin([&](const std::string& req) {
    return req.starts_with("GET /v1/cluster ") ? http_reply(200, body) : http_reply(404, "{}");
  });
  Outcome c = ctl_at(admin.addr(), {"cluster"});
  EXPECT_EQ(c.status, 0) << c.err;
  EXPECT_NE(c.out.find("leader 1  term 4  commit index 120"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("ID  ROLE      CLIENT          RAFT            LINK  MATCH  LAG  LAST CONTACT"),
            std::string::npos)
      << c.out;
  EXPECT_NE(c.out.find("2   follower  127.0.0.1:7002  127.0.0.1:8002  -     117    3    12ms ago"),
            std::string::npos)
      << c.out;
  EXPECT_NE(c.out.find("3   follower  127.0.0.1:7003  127.0.0.1:8003  -     -      -    -"),
            std::string::npos)
      << c.out;
  Outcome j = ctl_at(admin.addr(), {"--json", "cluster"});
  EXPECT_EQ(j.status, 0);
  EXPECT_EQ(j.out, body + "\n");  // unchanged
}

TEST(LockctlClusterTest, SingleModeClusterIsAClearOneLineExitOne) {
  Fixture f;
  Outcome cl = f.ctl({"cluster"});
  EXPECT_EQ(cl.status, 1);
  EXPECT_NE(cl.err.find("single mode"), std::string::npos) << cl.err;
  EXPECT_EQ(std::count(cl.err.begin(), cl.err.end(), '\n'), 1) << cl.err;
  Outcome j = f.ctl({"--json", "cluster"});
  EXPECT_EQ(j.status, 1);
  EXPECT_EQ(json::parse(j.out)["error"], "not_found");
}

TEST(LockctlTest, UsageErrorsExitTwo) {
  Fixture f;
  EXPECT_EQ(f.ctl({}).status, 2);
  EXPECT_EQ(f.ctl({"bogus"}).status, 2);
  EXPECT_EQ(f.ctl({"lock"}).status, 2);
  EXPECT_EQ(f.ctl({"acquire", "onlyowner"}).status, 2);
  EXPECT_EQ(f.ctl({"locks", "--limit", "abc"}).status, 2);
  EXPECT_EQ(f.ctl({"locks", "--limit", "0"}).status, 2);
  EXPECT_EQ(f.ctl({"acquire", "a", "k", "--lease", "x"}).status, 2);
  EXPECT_EQ(f.ctl({"status", "--nope"}).status, 2);
  EXPECT_EQ(run({lockctl_binary(), "--addr", "not-an-endpoint", "status"}).status, 2);
  EXPECT_EQ(run({lockctl_binary(), "--help"}).status, 0);
}

TEST(LockctlTest, NoServerExitsThreeWithOneLine) {
  const std::string dead = dead_addr();
  for (const std::vector<std::string>& cmd :
       std::vector<std::vector<std::string>>{{"status"},
                                             {"locks"},
                                             {"lock", "k"},
                                             {"cluster"},
                                             {"acquire", "a", "k"},
                                             {"release", "1", "k"},
                                             {"keep", "1", "k", "--lease", "1000"},
                                             {"top", "--iterations", "1"}}) {
    std::vector<std::string> argv{lockctl_binary(), "--addr", dead, "--admin", dead};
    argv.insert(argv.end(), cmd.begin(), cmd.end());
    const Outcome r = run(argv);
    EXPECT_EQ(r.status, 3) << cmd[0] << ": " << r.err;
    EXPECT_NE(r.err.find("cannot reach"), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

// --- addresses, environment, timeouts, wrong ports (issue 25) -------------

std::string loopback(std::uint16_t port) { return "127.0.0.1:" + std::to_string(port); }

// lockctl with extra environment variables (`NAME=value`) and no --addr.
Outcome ctl_env(const std::vector<std::string>& env, const std::vector<std::string>& args) {
  std::vector<std::string> argv{"/usr/bin/env"};
  argv.insert(argv.end(), env.begin(), env.end());
  argv.push_back(lockctl_binary());
  argv.insert(argv.end(), args.begin(), args.end());
  return run(argv);
}

TEST(LockctlTest, AddressListsAndEnvironmentAreTriedInOrder) {
  Fixture f;
  const std::string dead = dead_addr();
  const std::string live = loopback(f.lockd.port());
  const std::string admin = loopback(f.lockd.admin_port());
  Outcome a = run({lockctl_binary(), "--addr", dead + "," + live, "acquire", "alice", "k1"});
  EXPECT_EQ(a.status, 0) << a.err;
  Outcome s = run({lockctl_binary(), "--admin", dead + "," + admin, "status"});
  EXPECT_EQ(s.status, 0) << s.err;
  Outcome e = ctl_env({"LOCKD_ADDR=" + dead + "," + live, "LOCKD_ADMIN=" + admin},
                      {"acquire", "bob", "k2"});
  EXPECT_EQ(e.status, 0) << e.err;
  EXPECT_EQ(ctl_env({"LOCKD_ADMIN=" + dead + "," + admin}, {"lock", "k2"}).status, 0);
  // The flag wins over the environment.
  Outcome w = ctl_env({"LOCKD_ADDR=" + live}, {"--addr", dead, "release", "1", "k2"});
  EXPECT_EQ(w.status, 3);
  EXPECT_NE(w.err.find("cannot reach lockd at " + dead), std::string::npos) << w.err;
  // Every address dead: one line naming each.
  Outcome d = run({lockctl_binary(), "--addr", dead + "," + dead, "acquire", "a", "k"});
  EXPECT_EQ(d.status, 3);
  EXPECT_EQ(std::count(d.err.begin(), d.err.end(), '\n'), 1) << d.err;
}

TEST(LockctlTest, TheWrongKindOfPortIsNamedAtOnce) {
  Fixture f;
  const auto started = std::chrono::steady_clock::now();
  Outcome a = run({lockctl_binary(), "--addr", loopback(f.lockd.admin_port()), "acquire", "a", "k"});
  EXPECT_EQ(a.status, 2);
  EXPECT_NE(a.err.find("this looks like lockd's admin (HTTP) port"), std::string::npos) << a.err;
  Outcome s = run({lockctl_binary(), "--admin", loopback(f.lockd.port()), "status"});
  EXPECT_EQ(s.status, 2);
  EXPECT_NE(s.err.find("this looks like lockd's client (lock) port"), std::string::npos) << s.err;
  // It used to wait out a 10 s read timeout.
  EXPECT_LT(std::chrono::steady_clock::now() - started, 5s);
  // An HTTP server that is not the admin API (its own 404 page).
  FakeNode web([](const std::string&) {
    return std::string("HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nnot here\n");
  });
  Outcome n = run({lockctl_binary(), "--admin", web.addr(), "status"});
  EXPECT_EQ(n.status, 2);
  EXPECT_NE(n.err.find("does not look like lockd's admin API"), std::string::npos) << n.err;
}

TEST(LockctlTest, TimeoutIsShortAndSettable) {
  // Accepts, reads, never answers.
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), len), 0);
  ASSERT_EQ(::listen(fd, 16), 0);  // the kernel completes connects; nobody answers
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  const std::string silent = loopback(ntohs(a.sin_port));
  const auto started = std::chrono::steady_clock::now();
  Outcome r = run({lockctl_binary(), "--addr", silent, "--timeout", "300", "release", "1", "k"});
  EXPECT_EQ(r.status, 3);
  EXPECT_NE(r.err.find("no answer from " + silent), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("may or may not"), std::string::npos) << r.err;
  Outcome s = run({lockctl_binary(), "--admin", silent, "status"});  // the 2 s default
  EXPECT_EQ(s.status, 3);
  EXPECT_LT(std::chrono::steady_clock::now() - started, 8s);
  ::close(fd);
}

TEST(LockctlTest, BadLeaseAndBadWaitSayTheServersMaximum) {
  LockdProcess lockd({"--admin", "127.0.0.1:0", "--max-lease-ms", "5000", "--default-lease-ms",
                      "1000", "--max-wait-ms", "700"});
  const std::vector<std::string> at{lockctl_binary(), "--addr", loopback(lockd.port()), "--admin",
                                    loopback(lockd.admin_port())};
  auto ctl = [&](std::vector<std::string> args) {
    std::vector<std::string> argv = at;
    argv.insert(argv.end(), args.begin(), args.end());
    return run(argv);
  };
  Outcome l = ctl({"acquire", "a", "k", "--lease", "6000"});
  EXPECT_EQ(l.status, 2);
  EXPECT_EQ(l.out, "E bad_lease a k\n");
  EXPECT_NE(l.err.find("the server's maximum lease is 5000 ms"), std::string::npos) << l.err;
  Outcome w = ctl({"acquire", "a", "k", "--lease", "1000", "--wait", "701"});
  EXPECT_EQ(w.status, 2);
  EXPECT_NE(w.err.find("the server's maximum wait is 700 ms"), std::string::npos) << w.err;
}

TEST(LockctlTest, UsageErrorsNameWhatIsMissing) {
  const Outcome r = run({lockctl_binary(), "run", "--", "true"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("lockctl run: KEY is missing"), std::string::npos) << r.err;
  const Outcome c = run({lockctl_binary(), "run", "k", "--"});
  EXPECT_EQ(c.status, 2);
  EXPECT_NE(c.err.find("COMMAND is missing"), std::string::npos) << c.err;
  const Outcome a = run({lockctl_binary(), "acquire", "onlyowner"});
  EXPECT_EQ(a.status, 2);
  EXPECT_NE(a.err.find("KEY is required; usage: lockctl acquire OWNER KEY"), std::string::npos)
      << a.err;
}

// One real cluster: acquire and run survive a dead first address, and
// `lockctl cluster` shows the dead member's link down instead of a healthy
// follower.
TEST(LockctlClusterTest, ADeadNodeIsSkippedAndShownDown) {
  LockdCluster c(3);
  const int leader = c.wait_leader();
  ASSERT_NE(leader, 0);
  const int dead = leader == 1 ? 2 : 1;
  c.kill9(dead);
  std::string addrs = c.client_addr(dead);
  for (int i = 1; i <= 3; ++i) {
    if (i != dead) addrs += "," + c.client_addr(i);
  }
  // The dead first address is skipped when lockctl reaches a live node.
  // Under a loaded sanitizer run the two survivors may also change leader
  // mid-request (exit 1, "lost leadership"/"no leader"): that answer came
  // from a live node too, so such a try is repeated on a fresh key; any
  // other failure fails the test.
  int attempt = 0;  // one key per try, across both verbs
  const auto live_answer = [&](const std::vector<std::string>& verb) {
    Outcome o;
    eventually(
        [&] {
          std::vector<std::string> argv{lockctl_binary(), "--addr", addrs};
          for (std::string a : verb) argv.push_back(a == "KEY" ? "k" + std::to_string(attempt) : a);
          ++attempt;
          o = run(argv);
          const bool leader_moved = o.status == 1 && (o.err.find("lost leadership") != std::string::npos ||
                                                      o.err.find("no leader") != std::string::npos);
          return !leader_moved;
        },
        30s, 200ms);
    return o;
  };
  const Outcome a = live_answer({"acquire", "alice", "KEY", "--lease", "60000"});
  EXPECT_EQ(a.status, 0) << a.err;
  const Outcome r = live_answer({"run", "KEY", "--", "true"});
  EXPECT_EQ(r.status, 0) << r.err;

  const std::string admin = loopback(c.admin_port(leader));
  const std::string dead_row_start = std::to_string(dead) + "   unreachable";
  Outcome cl;
  EXPECT_TRUE(eventually(
      [&] {
        cl = run({lockctl_binary(), "--admin", admin, "cluster"});
        return cl.status == 0 && cl.out.find(dead_row_start) != std::string::npos;
      },
      10s))
      << cl.out << cl.err;
  EXPECT_EQ(cl.out.find(std::to_string(dead) + "   follower"), std::string::npos) << cl.out;
  const int other = 6 - leader - dead;
  EXPECT_NE(cl.out.find(std::to_string(other) + "   follower"), std::string::npos) << cl.out;
  EXPECT_NE(cl.out.find("  down  "), std::string::npos) << cl.out;
  EXPECT_NE(cl.out.find("  up    "), std::string::npos) << cl.out;
  const json j = json::parse(run({lockctl_binary(), "--admin", admin, "--json", "cluster"}).out);
  for (const json& m : j["members"]) {
    if (m["id"] == dead) {
      EXPECT_EQ(m["link"], "down") << m;
    } else if (m["id"] == other) {
      EXPECT_EQ(m["link"], "up") << m;
    } else {
      EXPECT_TRUE(m["link"].is_null()) << m;  // itself
    }
  }
}

// --- lockctl top under tmux -------------------------------------------------

bool have_tmux() { return std::system("command -v tmux >/dev/null 2>&1") == 0; }

// A private tmux server, killed at the end.
// Its socket and the files the tests write live in a private temp dir.
struct Tmux {
  Tmux() : socket(dir.sub("tmux")) {}
  ~Tmux() { sh("kill-server 2>/dev/null"); }
  int sh(const std::string& args) const {
    return std::system(("tmux -S " + socket + " " + args).c_str());
  }
  std::string capture() const {
    const std::string file = dir.sub("cap");
    sh("capture-pane -p -t top > " + file + " 2>/dev/null");
    return slurp(file);
  }
  TempDir dir{"lockd-tmux"};
  std::string socket;
};

TEST(LockctlTopTest, ShowsAKeyUnderLoadAndQuitsOnQ) {
  if (!have_tmux()) GTEST_SKIP() << "tmux not installed";
  Fixture f;
  // Load: a holder with a queue on `hot/key`, and a stream of requests.
  LineClient holder(f.lockd.port()), waiter(f.lockd.port());
  holder.call("A alice hot/key 60000");
  waiter.send("A bob hot/key 1000 30000\nA probe hot/key\n");
  ASSERT_EQ(waiter.read_line(), "T probe hot/key");
  std::atomic<bool> stop{false};
  std::thread load([&] {
    LineClient c(f.lockd.port());
    while (!stop) {
      c.call("A loader hot/key");
      std::this_thread::sleep_for(2ms);
    }
  });

  Tmux tmux;
  const std::string status_file = tmux.dir.sub("status");
  std::remove(status_file.c_str());
  const std::string cmd = lockctl_binary() + " --admin 127.0.0.1:" +
                          std::to_string(f.lockd.admin_port()) + " top; echo $? > " + status_file;
  ASSERT_EQ(tmux.sh("new-session -d -s top -x 120 -y 40 '" + cmd + "'"), 0);

  std::string screen;
  const auto deadline = std::chrono::steady_clock::now() + kEventuallyTimeout;
  while (std::chrono::steady_clock::now() < deadline) {
    screen = tmux.capture();
    if (screen.find("hot/key") != std::string::npos &&
        screen.find("requests/s  A -") == std::string::npos) {
      break;  // a second frame, with rates
    }
    std::this_thread::sleep_for(100ms);
  }
  stop = true;
  load.join();
  EXPECT_NE(screen.find("BUSIEST KEYS"), std::string::npos) << screen;
  EXPECT_NE(screen.find("LONGEST QUEUES"), std::string::npos) << screen;
  EXPECT_NE(screen.find("hot/key"), std::string::npos) << screen;
  EXPECT_NE(screen.find("alice"), std::string::npos) << screen;
  EXPECT_EQ(screen.find("requests/s  A -"), std::string::npos) << "rates after 1 s: " << screen;

  tmux.sh("send-keys -t top q");
  std::string status;
  eventually([&] { return !(status = slurp(status_file)).empty(); });
  EXPECT_EQ(status, "0\n") << "top did not quit on q; screen:\n" << tmux.capture();
}

TEST(LockctlTopTest, CtrlCQuitsAndRestoresTheTerminal) {
  if (!have_tmux()) GTEST_SKIP() << "tmux not installed";
  Fixture f;
  Tmux tmux;
  const std::string out_file = tmux.dir.sub("stty");
  std::remove(out_file.c_str());
  // After top exits, record the terminal mode: canonical input and echo
  // must be back.
  const std::string cmd = lockctl_binary() + " --admin 127.0.0.1:" +
                          std::to_string(f.lockd.admin_port()) + " top; stty -a > " + out_file;
  ASSERT_EQ(tmux.sh("new-session -d -s top -x 100 -y 30 '" + cmd + "'"), 0);
  std::string screen;
  eventually(
      [&] { return (screen = tmux.capture()).find("OLDEST HOLDERS") != std::string::npos; },
      kEventuallyTimeout, 100ms);
  ASSERT_NE(screen.find("OLDEST HOLDERS"), std::string::npos) << screen;
  tmux.sh("send-keys -t top C-c");
  std::string stty;
  eventually([&] { return !(stty = slurp(out_file)).empty(); });
  ASSERT_FALSE(stty.empty()) << "top did not exit on Ctrl-C";
  EXPECT_EQ(stty.find("-icanon"), std::string::npos) << stty;
  EXPECT_EQ(stty.find("-echo "), std::string::npos) << stty;
}

}  // namespace
}  // namespace lockd::testing

namespace lockd::testing {
namespace {

TEST(LockctlWatchTest, OnceThenEveryChangeUntilInterrupted) {
  Fixture f;
  // --once: the state now of each key, exit 0.
  LineClient a(f.lockd.port());
  const auto g = fields(a.call("A alice held 60000"));
  ASSERT_EQ(g.size(), 4u);
  Outcome once = f.ctl({"watch", "free", "held", "--once"});
  EXPECT_EQ(once.status, 0) << once.err;
  EXPECT_TRUE(std::regex_match(once.out, std::regex("free [0-9]+ free\nheld [0-9]+ held alice " +
                                                    g[1] + "\n")))
      << once.out;
  Outcome js = f.ctl({"--json", "watch", "held", "--once"});
  EXPECT_EQ(js.status, 0) << js.err;
  const json j = json::parse(js.out);
  EXPECT_EQ(j["key"], "held");
  EXPECT_EQ(j["state"], "held");
  EXPECT_EQ(j["owner"], "alice");
  EXPECT_EQ(std::to_string(j["token"].get<std::uint64_t>()), g[1]);

  // Streaming: the state now, then each change, until SIGTERM (exit 0).
  ChildProcess w;
  ASSERT_TRUE(w.start({lockctl_binary(), "--addr", "127.0.0.1:" + std::to_string(f.lockd.port()),
                       "watch", "k"},
                      ChildProcess::Capture::kStdoutToo));
  const auto watchers = [&] {
    return json::parse(http(f.lockd.admin_port(), "/v1/status").body)["watchers"].get<int>();
  };
  ASSERT_TRUE(eventually([&] { return watchers() == 1; }));
  const auto t = fields(a.call("A bob k 60000"));
  ASSERT_EQ(t.size(), 4u);
  ASSERT_EQ(a.call("R " + t[1] + " k"), "R " + t[1] + " k");
  ASSERT_TRUE(eventually([&] {
    return metric(http(f.lockd.admin_port(), "/metrics").body, "lockd_watch_pushes_total") >= 2;
  }));
  w.signal(SIGTERM);
  EXPECT_EQ(w.wait_exit(10s), 0);
  const std::string out = w.stdout_text();
  EXPECT_TRUE(std::regex_match(out, std::regex("k [0-9]+ free\nk [0-9]+ held bob " + t[1] +
                                                "\nk [0-9]+ free\n")))
      << out;

  // A watch cap refuses: exit 1; no server: exit 3; no key: usage, 2.
  Outcome none = f.ctl({"watch"});
  EXPECT_EQ(none.status, 2);
  Outcome dead = run({lockctl_binary(), "--addr", dead_addr(), "watch", "k", "--once"});
  EXPECT_EQ(dead.status, 3) << dead.err;
}

TEST(LockctlWatchTest, ARefusedWatchExitsOne) {
  LockdProcess lockd({"--max-watches", "1"});
  LineClient c(lockd.port());
  ASSERT_EQ(fields(c.call("W taken")).size(), 4u);
  Outcome busy = run({lockctl_binary(), "--addr", "127.0.0.1:" + std::to_string(lockd.port()),
                      "watch", "k", "--once"});
  EXPECT_EQ(busy.status, 1);
  EXPECT_NE(busy.err.find("B k"), std::string::npos) << busy.err;
}

}  // namespace
}  // namespace lockd::testing
