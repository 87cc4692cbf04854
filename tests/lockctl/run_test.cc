// `lockctl run` against a real lockd: the command runs under the lock
// with LOCKD_TOKEN, its exit status comes back, the lock is released
// afterwards, kept alive meanwhile, signals are forwarded, and the
// command is stopped when the lock is lost (lockd restarted).
#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "eventually.h"
#include "http_get.h"
#include "lockd_process.h"
#include "temp_dir.h"

namespace lockd::testing {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

std::string lockctl_binary() { return LOCKCTL_BINARY; }

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

class LockctlRun : public ::testing::Test {
 protected:

  // Starts `lockctl --addr ... run <args>`.
  std::unique_ptr<ChildProcess> start(std::uint16_t port, const std::vector<std::string>& args) {
    std::vector<std::string> argv{lockctl_binary(), "--addr",
                                  "127.0.0.1:" + std::to_string(port), "run"};
    argv.insert(argv.end(), args.begin(), args.end());
    auto p = std::make_unique<ChildProcess>();
    EXPECT_TRUE(p->start(argv));
    return p;
  }
  // True if `key` can be acquired at once (and then releases it).
  static bool free_now(std::uint16_t port, const std::string& key) {
    LineClient c(port);
    const auto f = fields(c.call("A probe " + key + " 1000"));
    if (f.empty() || f[0] != "A") return false;
    c.call("R " + f[1] + " " + key);
    return true;
  }
  std::string path(const std::string& name) const { return dir_.sub(name); }

  const TempDir dir_{"lockd-ctl-run"};  // files the commands write; removed with the fixture
};

TEST_F(LockctlRun, PassesTheExitStatusAndTokenAndReleasesAfterwards) {
  LockdProcess lockd;
  auto run = start(lockd.port(), {"jobs/nightly", "--", "sh", "-c",
                                  "echo \"$LOCKD_TOKEN $LOCKD_KEY\" > " + path("env") + "; exit 7"});
  EXPECT_EQ(run->wait_exit(15s), 7) << run->stderr_text();
  const auto f = fields(slurp(path("env")));
  ASSERT_EQ(f.size(), 2u);
  EXPECT_GT(std::stoull(f[0]), 0u);
  EXPECT_EQ(f[1], "jobs/nightly");
  EXPECT_TRUE(free_now(lockd.port(), "jobs/nightly"));

  auto ok = start(lockd.port(), {"jobs/nightly", "--", "true"});
  EXPECT_EQ(ok->wait_exit(15s), 0);
  auto killed = start(lockd.port(), {"jobs/nightly", "--", "sh", "-c", "kill -9 $$"});
  EXPECT_EQ(killed->wait_exit(15s), 128 + 9);
  auto missing = start(lockd.port(), {"jobs/nightly", "--", "/no/such/program"});
  EXPECT_EQ(missing->wait_exit(15s), 127);
  EXPECT_TRUE(free_now(lockd.port(), "jobs/nightly"));
}

// `run --shared [--limit N]` (v1.2): two readers run side by side with a
// reader already holding the key; a semaphore of 1 that is taken refuses.
TEST_F(LockctlRun, SharedRunsBesideOtherReadersAndASemaphoreRefusesWhenFull) {
  LockdProcess lockd;
  LineClient holder(lockd.port());
  ASSERT_EQ(fields(holder.call("S other cfg 0 60000"))[0], "S");
  // Both commands wait for the other's file: they can only finish if they
  // hold the key at the same time as each other (and as `other`).
  const std::string a = "touch " + path("a") + "; while [ ! -e " + path("b") + " ]; do sleep 0.01; done";
  const std::string b = "touch " + path("b") + "; while [ ! -e " + path("a") + " ]; do sleep 0.01; done";
  auto ra = start(lockd.port(), {"cfg", "--shared", "--", "sh", "-c", a});
  auto rb = start(lockd.port(), {"cfg", "--shared", "--limit", "0", "--", "sh", "-c", b});
  EXPECT_EQ(ra->wait_exit(15s), 0) << ra->stderr_text();
  EXPECT_EQ(rb->wait_exit(15s), 0) << rb->stderr_text();
  // A writer is refused while `other` reads; and a semaphore of one, taken.
  auto w = start(lockd.port(), {"cfg", "--", "touch", path("w")});
  EXPECT_EQ(w->wait_exit(15s), 1);
  EXPECT_FALSE(fs::exists(path("w")));
  ASSERT_EQ(fields(holder.call("S other sem 1 60000"))[0], "S");
  auto s = start(lockd.port(), {"sem", "--shared", "--limit", "1", "--", "touch", path("s")});
  EXPECT_EQ(s->wait_exit(15s), 1);
  EXPECT_FALSE(fs::exists(path("s")));
  auto bad = start(lockd.port(), {"sem", "--limit", "1", "--", "true"});
  EXPECT_EQ(bad->wait_exit(15s), 2);
}

TEST_F(LockctlRun, HeldElsewhereExitsOneWithoutRunningTheCommand) {
  LockdProcess lockd;
  LineClient holder(lockd.port());
  ASSERT_EQ(fields(holder.call("A other k 60000"))[0], "A");
  auto run = start(lockd.port(), {"k", "--", "touch", path("ran")});
  EXPECT_EQ(run->wait_exit(15s), 1);
  EXPECT_NE(run->stderr_text().find("not acquired"), std::string::npos) << run->stderr_text();
  EXPECT_FALSE(fs::exists(path("ran")));
}

TEST_F(LockctlRun, WaitsForTheLockWithWait) {
  LockdProcess lockd({"--admin", "127.0.0.1:0"});
  LineClient holder(lockd.port());
  const std::vector<std::string> held = fields(holder.call("A other k 60000"));
  ASSERT_EQ(held[0], "A");
  auto run = start(lockd.port(), {"k", "--wait", "15000", "--", "touch", path("ran")});
  // It queues (a lockctl that ignored --wait would get `T` and exit 1)...
  std::string status;
  ASSERT_TRUE(eventually([&] {
    status = http(lockd.admin_port(), "/v1/status").body;
    return status.find("\"waiters\":1") != std::string::npos;
  })) << "status: " << status << "\nlockctl: " << run->stderr_text();
  EXPECT_FALSE(fs::exists(path("ran")));
  // ...and runs once the holder lets go.
  EXPECT_EQ(holder.call("R " + held[1] + " k"), "R " + held[1] + " k");
  EXPECT_EQ(run->wait_exit(15s), 0) << run->stderr_text();
  EXPECT_TRUE(fs::exists(path("ran")));
}

// Issue 36 item 1, its exact reproduction: a lock granted after a wait
// longer than its lease is held for the whole job (the keeper dates the
// lease from the grant, not from the send), and nobody else gets in.
TEST_F(LockctlRun, HoldsTheLockForTheWholeJobAfterALongWait) {
  LockdProcess lockd;
  auto first = std::make_unique<ChildProcess>();
  ASSERT_TRUE(first->start({lockctl_binary(), "--addr", "127.0.0.1:" + std::to_string(lockd.port()),
                            "acquire", "first", "kk", "--lease", "3000"}));
  ASSERT_EQ(first->wait_exit(15s), 0) << first->stderr_text();
  auto run = start(lockd.port(), {"kk", "--lease", "2000", "--wait", "10000", "--", "sh", "-c",
                                  "touch " + path("started") + "; sleep 5; echo job-finished > " + path("done")});
  ASSERT_TRUE(eventually([&] { return fs::exists(path("started")); }));
  std::this_thread::sleep_for(2'500ms);  // past the 2 s lease, dated from the grant
  EXPECT_FALSE(free_now(lockd.port(), "kk"));
  EXPECT_EQ(run->wait_exit(20s), 0) << run->stderr_text();
  EXPECT_EQ(slurp(path("done")), "job-finished\n");
  EXPECT_EQ(run->stderr_text().find("lost"), std::string::npos) << run->stderr_text();
  EXPECT_TRUE(free_now(lockd.port(), "kk"));
}

TEST_F(LockctlRun, KeepsTheLockWhileTheCommandRuns) {
  LockdProcess lockd;
  // A 500 ms lease and a command that runs four of them.
  auto run = start(lockd.port(), {"k", "--lease", "500", "--", "sh", "-c",
                                  "touch " + path("started") + "; sleep 2"});
  ASSERT_TRUE(eventually([&] { return fs::exists(path("started")); }));
  std::this_thread::sleep_for(1'200ms);
  EXPECT_FALSE(free_now(lockd.port(), "k"));  // still held past two leases
  EXPECT_EQ(run->wait_exit(15s), 0) << run->stderr_text();
  EXPECT_TRUE(free_now(lockd.port(), "k"));
}

TEST_F(LockctlRun, ForwardsSignalsAndStillReleases) {
  LockdProcess lockd;
  auto run = start(lockd.port(),
                   {"k", "--", "sh", "-c",
                    "trap 'exit 42' TERM; touch " + path("started") + "; while :; do sleep 0.05; done"});
  ASSERT_TRUE(eventually([&] { return fs::exists(path("started")); }));
  run->signal(SIGTERM);
  EXPECT_EQ(run->wait_exit(15s), 42) << run->stderr_text();
  EXPECT_TRUE(free_now(lockd.port(), "k"));
}

TEST_F(LockctlRun, StopsTheCommandWhenTheLockIsLost) {
  auto lockd = std::make_unique<LockdProcess>();
  const std::uint16_t port = lockd->port();
  auto run = start(port, {"k", "--lease", "600", "--", "sh", "-c",
                          "trap 'echo term > " + path("term") + "; exit 0' TERM; touch " +
                              path("started") + "; while :; do sleep 0.05; done"});
  ASSERT_TRUE(eventually([&] { return fs::exists(path("started")); }));
  lockd.reset();  // the lock table is gone with it
  lockd = std::make_unique<LockdProcess>(
      std::vector<std::string>{"--listen", "127.0.0.1:" + std::to_string(port)});
  EXPECT_EQ(run->wait_exit(15s), 1) << run->stderr_text();
  EXPECT_NE(run->stderr_text().find("lost the lock on k"), std::string::npos)
      << run->stderr_text();
  EXPECT_EQ(slurp(path("term")), "term\n");
}

TEST_F(LockctlRun, UsageErrors) {
  LockdProcess lockd;
  EXPECT_EQ(start(lockd.port(), {"k"})->wait_exit(15s), 2);
  EXPECT_EQ(start(lockd.port(), {"bad key", "--", "true"})->wait_exit(15s), 2);
  EXPECT_EQ(start(lockd.port(), {"k", "--lease", "0", "--", "true"})->wait_exit(15s), 2);
}

TEST_F(LockctlRun, UnreachableServerExitsThree) {
  std::uint16_t port = 0;
  { LockdProcess gone; port = gone.port(); }
  auto run = start(port, {"k", "--", "touch", path("ran")});
  EXPECT_EQ(run->wait_exit(15s), 3);
  EXPECT_FALSE(fs::exists(path("ran")));
}

}  // namespace
}  // namespace lockd::testing
