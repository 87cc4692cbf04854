// lockd under a low descriptor limit: it raises the soft limit when it can,
// warns when it cannot, and when descriptors run out it pauses accepting
// instead of spinning, and accepts the waiting clients once some leave.
#include <signal.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include "http_get.h"
#include "lockd_cluster.h"
#include "lockd_process.h"
#include "temp_dir.h"

namespace lockd::testing {
namespace {

using namespace std::chrono_literals;

// lockd under `ulimit <limit_args>` (through sh), on port 0, admin off.
struct LimitedLockd {
  LimitedLockd(const std::string& limit_args, const std::vector<std::string>& flags)
      : lockd(flags, {"/bin/sh", "-c", "ulimit " + limit_args + " && exec \"$0\" \"$@\""}),
        proc(lockd.process()),
        port(lockd.port()),
        admin_port(lockd.admin_port()) {}
  ~LimitedLockd() {
    proc.signal(SIGTERM);
    proc.wait_exit(20s);
  }
  LockdProcess lockd;
  ChildProcess& proc;
  std::uint16_t port;
  std::uint16_t admin_port;
};

// CPU seconds (user + system) the process has used so far.
double cpu_seconds(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::istringstream rest(stat.substr(stat.rfind(')') + 2));
  std::string field;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 15; ++i) {
    rest >> field;
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// A raw connection: connect() completes in the kernel's backlog even when
// lockd cannot accept it yet.
int connect_raw(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

std::size_t count(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (std::size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

TEST(FdLimit, ASoftLimitBelowTheNeedIsRaised) {
  LimitedLockd lockd("-Sn 100", {"--max-connections", "500"});
  EXPECT_NE(lockd.proc.stderr_text().find("raised the descriptor limit from 100 to 564"), std::string::npos)
      << lockd.proc.stderr_text();
  EXPECT_EQ(lockd.proc.stderr_text().find("below --max-connections"), std::string::npos);
}

TEST(FdLimit, AHardLimitBelowTheNeedIsOneWarning) {
  LimitedLockd lockd("-n 100", {"--max-connections", "500", "--admin", "127.0.0.1:0"});
  const std::string& err = lockd.proc.stderr_text();
  EXPECT_EQ(count(err, "descriptor limit 100 (hard 100) is below --max-connections 500"), 1u) << err;
  LineClient c(lockd.port);
  EXPECT_EQ(c.call("A o k 1000").substr(0, 2), "A ");  // and it serves
  // /v1/status says so too, for whoever did not read the log.
  const std::string body = http(lockd.admin_port, "/v1/status").body;
  EXPECT_NE(body.find("\"fd_limit\":100,\"fds_needed\":564,\"fd_limit_low\":true"), std::string::npos) << body;
}

TEST(FdLimit, EnoughDescriptorsIsNoWarning) {
  LimitedLockd lockd("-n 100", {"--max-connections", "34", "--admin", "127.0.0.1:0"});
  EXPECT_EQ(lockd.proc.stderr_text().find("descriptor limit"), std::string::npos) << lockd.proc.stderr_text();
  const std::string body = http(lockd.admin_port, "/v1/status").body;
  EXPECT_NE(body.find("\"fd_limit\":100,\"fds_needed\":98,\"fd_limit_low\":false"), std::string::npos) << body;
}

// A cluster member counts a connection each way per peer: the same 34
// clients under the same limit fall short with two peers.
TEST(FdLimit, ClusterPeersCountTowardTheNeed) {
  const TempDir tmp("lockd-fd-limit");
  const std::string dir = tmp.sub("data");
  const std::uint16_t admin = free_port();
  std::vector<std::string> argv{"/bin/sh", "-c", "ulimit -n 100 && exec \"$0\" \"$@\"", lockd_binary(),
                                "--mode", "cluster", "--node-id", "1", "--data-dir", dir, "--insecure-peers",
                                "--admin", "127.0.0.1:" + std::to_string(admin), "--max-connections", "34"};
  for (int id = 1; id <= 3; ++id) {
    argv.push_back("--peer");
    argv.push_back(std::to_string(id) + "=127.0.0.1:" + std::to_string(free_port()) + "/127.0.0.1:" +
                   std::to_string(free_port()));
  }
  ChildProcess node;
  ASSERT_TRUE(node.start(argv));
  ASSERT_TRUE(node.wait_for_line("admin listening", 10s)) << node.stderr_text();
  EXPECT_EQ(count(node.stderr_text(), "descriptor limit 100 (hard 100) is below --max-connections 34 + 68 for 2 peers"),
            1u)
      << node.stderr_text();
  const std::string body = http(admin, "/v1/status").body;
  EXPECT_NE(body.find("\"fd_limit\":100,\"fds_needed\":102,\"fd_limit_low\":true"), std::string::npos) << body;
  node.signal(SIGTERM);
  node.wait_exit(20s);
}

TEST(FdLimit, OutOfDescriptorsPausesAcceptingAndRecovers) {
  LimitedLockd lockd("-n 48", {"--max-connections", "1000", "--admin", "127.0.0.1:0"});
  // More clients than descriptors: the first ones are served, the rest wait
  // in the listen backlog.
  std::vector<std::unique_ptr<LineClient>> first;
  for (int i = 0; i < 20; ++i) {
    first.push_back(std::make_unique<LineClient>(lockd.port));
    ASSERT_EQ(first.back()->call("A o k" + std::to_string(i) + " 60000").substr(0, 2), "A ");
  }
  std::vector<int> waiting;
  for (int i = 0; i < 60; ++i) {
    const int fd = connect_raw(lockd.port);
    ASSERT_GE(fd, 0);
    waiting.push_back(fd);
  }
  ASSERT_TRUE(lockd.proc.wait_for_line("client listener", 20s)) << lockd.proc.stderr_text();
  // The admin listener (evhttp's) pauses the same way.
  for (int i = 0; i < 3; ++i) {
    const int fd = connect_raw(lockd.admin_port);
    ASSERT_GE(fd, 0);
    waiting.push_back(fd);
  }
  ASSERT_TRUE(lockd.proc.wait_for_line("admin listener", 20s)) << lockd.proc.stderr_text();
  // Paused, not spinning on a listener that stays readable: over two
  // seconds lockd uses a small share of one core (a spinning loop takes
  // all it can get).
  const double before = cpu_seconds(lockd.proc.pid());
  std::this_thread::sleep_for(2s);  // the interval measured, not a wait for an event
  const double used = cpu_seconds(lockd.proc.pid()) - before;
  EXPECT_LT(used, 0.5) << "lockd used " << used << " s of CPU in 2 s while out of descriptors";
  // One warning line per listener, not one per attempt.
  EXPECT_EQ(count(lockd.proc.stderr_text(), "pausing accepts"), 2u) << lockd.proc.stderr_text();
  EXPECT_EQ(count(lockd.proc.stderr_text(), "Error from accept"), 0u) << lockd.proc.stderr_text();
  // Served clients still work.
  EXPECT_EQ(first[0]->call("R 1 nokey"), "N 1 nokey");
  // Descriptors come back: the waiting clients are accepted and served.
  for (auto& c : first) c->close();
  for (int fd : waiting) ::close(fd);
  waiting.clear();
  LineClient late(lockd.port);
  EXPECT_EQ(late.call("A o late 1000").substr(0, 2), "A ");
  EXPECT_EQ(http(lockd.admin_port, "/healthz").status, 200);
}

}  // namespace
}  // namespace lockd::testing
