// lockd as a process: flags, config file, exit codes, logging.
#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>

#include "lockd_process.h"
#include "run_program.h"

namespace lockd::testing {
namespace {

using namespace std::chrono_literals;

// Runs lockd with `args` expecting it to exit on its own; returns status.
int run_expecting_exit(const std::vector<std::string>& args, std::string* err) {
  std::vector<std::string> argv{lockd_binary()};
  argv.insert(argv.end(), args.begin(), args.end());
  const RunResult r = run_program(argv, 20s);
  *err = r.err;
  return r.status;
}

TEST(ProcessTest, BadFlagsExitTwoWithOneLine) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--no-such-flag"},
           {"--mode", "triple"},
           {"--listen", "nonsense"},
           {"--max-keys", "abc"},
           {"--default-lease-ms", "0"},
           {"--default-lease-ms", "5000", "--max-lease-ms", "100"},
           {"--max-lease-ms", "18446744073709551615"},  // now + lease would overflow
           {"--max-wait-ms", "99999999999999"},
           {"--log-level", "loud"},
           {"--config", "/nonexistent/lockd.toml"},
           {"--mode", "cluster"},
       }) {
    std::string err;
    EXPECT_EQ(run_expecting_exit(args, &err), 2) << args[0];
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
    EXPECT_EQ(err.rfind("lockd: ", 0), 0u) << err;
  }
}

TEST(ProcessTest, ListenConflictIsAnErrorNotACrash) {
  LockdProcess first;
  std::string err;
  EXPECT_EQ(run_expecting_exit({"--listen", "127.0.0.1:" + std::to_string(first.port()),
                                "--admin", "off"},
                               &err),
            2);
  EXPECT_NE(err.find("cannot listen"), std::string::npos) << err;
}

// A config file that deletes itself at the end of the test.
class TempFile {
 public:
  explicit TempFile(const std::string& content) {
    const int fd = mkstemp(path_);
    EXPECT_GE(fd, 0);
    close(fd);
    std::ofstream(path_) << content;
  }
  ~TempFile() { std::remove(path_); }
  std::string path() const { return path_; }

 private:
  char path_[32] = "/tmp/lockd-config-XXXXXX";
};

TEST(ProcessTest, ConfigFileSetsFlagsAndCommandLineWins) {
  TempFile config(
      "# lockd config\n"
      "default-lease-ms = 100\n"
      "max-lease-ms = 500\n"
      "sweep-interval-ms = 60000\n");
  LockdProcess lockd({"--config", config.path(), "--max-lease-ms", "800"});
  LineClient c(lockd.port());
  EXPECT_EQ(c.call("A o k 800").substr(0, 2), "A ");  // command line wins
  EXPECT_EQ(c.call("A o k2 801"), "E bad_lease o k2");
  // The file's default lease applies: 100 ms.
  auto r = fields(c.call("A o k3"));
  ASSERT_EQ(r.size(), 4u);
  std::this_thread::sleep_for(200ms);
  // Expired: taken over. The lease's end is pushed to its holder's
  // connection (X, protocol.md §5c), before or after this reply.
  c.send("A p k3\n");
  std::string line = c.read_line().value_or("<none>");
  if (line.starts_with("X ")) {
    EXPECT_EQ(line, "X " + r[1] + " k3");
    line = c.read_line().value_or("<none>");
  }
  EXPECT_EQ(line.substr(0, 2), "A ") << line;
}

TEST(ProcessTest, BadConfigFileExitsTwo) {
  for (const char* content : {"no-such-key = 1\n", "max-keys = \"many\"\n",
                              "default-lease-ms = 0\n", "[[[\n"}) {
    TempFile config(content);
    std::string err;
    EXPECT_EQ(run_expecting_exit({"--config", config.path()}, &err), 2) << content;
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  }
}

TEST(ProcessTest, JsonLogFormatWritesJsonLines) {
  LockdProcess lockd({"--log-format", "json"});
  const std::string& err = lockd.process().stderr_text();
  EXPECT_EQ(err.rfind("{\"ts\":", 0), 0u) << err;
  EXPECT_NE(err.find("\"msg\":\"lockd"), std::string::npos) << err;
}

TEST(ProcessTest, SigintAlsoStopsCleanly) {
  LockdProcess lockd;
  lockd.process().signal(SIGINT);
  EXPECT_EQ(lockd.process().wait_exit(20s), 0);
}

// --token-floor N: single mode's first token is above N, never N itself
// (N is the largest token the old deployment may have granted). A floor
// far above the clock, so the clock cannot hide a start at max(clock, N).
TEST(ProcessTest, FirstTokenIsAboveTheTokenFloor) {
  constexpr std::uint64_t kFloor = 4'000'000'000'000'000'000ull;  // year 2096 in ns
  LockdProcess lockd({"--token-floor", std::to_string(kFloor)});
  LineClient cl(lockd.port());
  EXPECT_EQ(cl.call("A a first 1000"), "A " + std::to_string(kFloor + 1) + " a first");
  EXPECT_EQ(cl.call("S b second 0 1000"), "S " + std::to_string(kFloor + 2) + " b second");
}

}  // namespace
}  // namespace lockd::testing
