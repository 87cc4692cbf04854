// lockd's config file and flag checks, as a process: TOML read by toml++
// with FILE:LINE errors, flags of the other mode, clashing addresses, and a
// failed cluster start that must leave nothing behind.
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "lockd_cluster.h"
#include "lockd_process.h"
#include "run_program.h"

namespace lockd::testing {
namespace {

using namespace std::chrono_literals;

using Exit = RunResult;

// Runs lockd with `args`, expecting it to exit on its own.
Exit run_to_exit(const std::vector<std::string>& args) {
  std::vector<std::string> argv{lockd_binary()};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_program(argv, 20s);
}

// A temporary directory, removed with its contents at the end.
class TempDir {
 public:
  TempDir() { EXPECT_NE(mkdtemp(path_), nullptr); }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string path() const { return path_; }
  std::string file(const std::string& name, const std::string& content) const {
    const std::string p = std::string(path_) + "/" + name;
    std::ofstream(p) << content;
    return p;
  }

 private:
  char path_[32] = "/tmp/lockd-cfg-XXXXXX";
};

std::string loopback(std::uint16_t port) { return "127.0.0.1:" + std::to_string(port); }

TEST(ConfigTest, FileIsRealToml) {
  TempDir dir;
  const std::string path = dir.file("lockd.toml",
                                    "# TOML 1.0: underscores in integers, escapes in strings\n"
                                    "max-lease-ms = 1_000\n"
                                    "default-lease-ms = 1_00\n"
                                    "log-level = \"\\u0069nfo\"  # 'info'\n");
  LockdProcess lockd({"--config", path});
  LineClient c(lockd.port());
  EXPECT_EQ(c.call("A o k 1000").substr(0, 2), "A ");
  EXPECT_EQ(c.call("A o k2 1001"), "E bad_lease o k2");
}

TEST(ConfigTest, EveryFileErrorNamesFileAndLine) {
  struct Case {
    const char* content;
    int line;
    const char* says;
  };
  for (const Case& k : std::vector<Case>{
           {"max-keys = 1\nmax-keys = 2\n", 2, "max-keys"},               // given twice
           {"max-keys = 1\n[server]\nlisten = \"x\"\n", 2, "'server' is a table"},
           {"[[peer]]\nid = 1\n", 1, "'peer' is a table"},
           {"admin = \"127.0.0.1:7071\n", 1, "string"},                    // unterminated
           {"\n\nmax_keys = 5\n", 3, "did you mean 'max-keys'"},
           {"no-such-key = 1\n", 1, "unknown key 'no-such-key'"},
           {"max-keys = \"5\"\n", 1, "expected an integer"},
           {"admin = 7071\n", 1, "expected a string"},
           {"max-keys = -5\n", 1, "negative"},
           {"token-floor = \"\"\n", 1, "expected an integer"},  // never taken as 0
           {"listen = [\"127.0.0.1:0\"]\n", 1, "takes one value"},
           {"mode = \"triple\"\n", 1, "triple not in"},
           {"\ndefault-lease-ms = 0\n", 2, "--default-lease-ms must be"},  // a relation check
           {"node-id = 1\n", 1, "--node-id is a cluster-mode flag"},
           {"client-tls = true\n", 1, "--client-tls and --admin-tls need --tls-cert"},  // applied
           {"client-tls = \"yes\"\n", 1, "expected true or false, not a string"},
       }) {
    TempDir dir;
    const std::string path = dir.file("lockd.toml", k.content);
    const Exit e = run_to_exit({"--config", path, "--listen", "127.0.0.1:0", "--admin", "off"});
    EXPECT_EQ(e.status, 2) << k.content;
    EXPECT_EQ(std::count(e.err.begin(), e.err.end(), '\n'), 1) << e.err;
    const std::string prefix = "lockd: " + path + ":" + std::to_string(k.line) + ": ";
    EXPECT_EQ(e.err.rfind(prefix, 0), 0u) << k.content << " -> " << e.err;
    EXPECT_NE(e.err.find(k.says), std::string::npos) << k.content << " -> " << e.err;
  }
}

TEST(ConfigTest, CommandLinePeersReplaceTheFilesList) {
  // The file's list has a clash (refused if it were used); the command
  // line's list replaces it whole instead of adding to it.
  TempDir dir;
  const std::string c1 = loopback(free_port()), r1 = loopback(free_port());
  const std::string path = dir.file(
      "lockd.toml", "mode = \"cluster\"\nnode-id = 1\ndata-dir = \"" + dir.path() +
                        "\"\nadmin = \"off\"\ninsecure-peers = true\npeer = [\"1=" + c1 + "/" + r1 + "\", \"2=" + c1 +
                        "/127.0.0.1:9\"]\n");
  EXPECT_EQ(run_to_exit({"--config", path}).status, 2);
  ChildProcess node;
  ASSERT_TRUE(node.start({lockd_binary(), "--config", path, "--peer", "1=" + c1 + "/" + r1,
                          "--peer", "2=" + loopback(free_port()) + "/" + loopback(free_port())}));
  EXPECT_TRUE(node.wait_for_line("listening on " + c1, 20s)) << node.stderr_text();
}

TEST(ConfigTest, FlagsOfTheOtherModeAreRefused) {
  TempDir dir;
  const std::string peers[] = {"--peer", "1=127.0.0.1:1/127.0.0.1:2"};
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--node-id", "1"},
           {peers[0], peers[1]},
           {"--data-dir", dir.path()},
       }) {
    std::vector<std::string> argv{"--listen", "127.0.0.1:0", "--admin", "off"};
    argv.insert(argv.end(), args.begin(), args.end());
    const Exit e = run_to_exit(argv);
    EXPECT_EQ(e.status, 2) << args[0];
    EXPECT_NE(e.err.find(args[0] + " is a cluster-mode flag"), std::string::npos) << e.err;
    EXPECT_NE(e.err.find("--mode cluster"), std::string::npos) << e.err;
  }
  const Exit e = run_to_exit({"--mode", "cluster", "--node-id", "1", peers[0], peers[1],
                              "--data-dir", dir.path(), "--admin", "off", "--listen",
                              "127.0.0.1:0"});
  EXPECT_EQ(e.status, 2);
  EXPECT_NE(e.err.find("--listen is a single-mode flag"), std::string::npos) << e.err;
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/IDENTITY"));
}

TEST(ConfigTest, TuningOfTheOtherModeIsAWarning) {
  LockdProcess lockd({"--heartbeat-ms", "20"});
  EXPECT_NE(lockd.process().stderr_text().find(
                "warning --heartbeat-ms has no effect in single mode; ignored"),
            std::string::npos)
      << lockd.process().stderr_text();
}

// --wal-sync takes loop or thread only (docs/cluster.md "WAL sync").
TEST(ConfigTest, WalSyncTakesLoopOrThread) {
  TempDir dir;
  const Exit e = run_to_exit({"--mode", "cluster", "--node-id", "1", "--peer",
                              "1=127.0.0.1:1/127.0.0.1:2", "--data-dir", dir.path(), "--admin",
                              "off", "--wal-sync", "sometimes"});
  EXPECT_EQ(e.status, 2);
  EXPECT_NE(e.err.find("--wal-sync"), std::string::npos) << e.err;
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/IDENTITY"));
}

// --member-change-timeout-ms is 1 ms to an hour; outside, exit 2 with one
// line and nothing written.
TEST(ConfigTest, MemberChangeTimeoutIsBounded) {
  for (const char* bad : {"0", "3600001", "-5", "soon"}) {
    TempDir dir;
    const Exit e = run_to_exit({"--mode", "cluster", "--node-id", "1", "--peer",
                                "1=127.0.0.1:1/127.0.0.1:2", "--data-dir", dir.path(), "--admin",
                                "off", "--member-change-timeout-ms", bad});
    EXPECT_EQ(e.status, 2) << bad;
    EXPECT_NE(e.err.find("--member-change-timeout-ms"), std::string::npos) << bad << ": " << e.err;
    EXPECT_FALSE(std::filesystem::exists(dir.path() + "/IDENTITY")) << bad;
  }
}

// The §11a connection bounds (v1.3): out-of-range values are one line and
// exit 2; the config file takes them under their flag names.
TEST(ConfigTest, ConnectionBoundsAreCheckedAndAreFileKeys) {
  const std::vector<std::pair<std::string, std::string>> bad{
      {"--auth-timeout-ms", "0"}, {"--auth-timeout-ms", "3600001"},
      {"--max-unauthenticated", "0"}, {"--max-tls-handshakes", "0"},
      {"--max-connections-per-ip", "-1"}};
  for (const auto& [flag, value] : bad) {
    const Exit e = run_to_exit({"--listen", "127.0.0.1:0", "--admin", "off", flag, value});
    EXPECT_EQ(e.status, 2) << flag << " " << value;
    EXPECT_NE(e.err.find(flag), std::string::npos) << e.err;
    EXPECT_EQ(std::count(e.err.begin(), e.err.end(), '\n'), 1) << e.err;
  }
  TempDir dir;
  const std::string path = dir.file("lockd.toml",
                                    "auth-timeout-ms = 5000\nmax-unauthenticated = 10\n"
                                    "max-connections-per-ip = 1\nmax-tls-handshakes = 8\n");
  LockdProcess lockd({"--config", path});
  LineClient first(lockd.port());
  EXPECT_EQ(first.call("A o k 1000").substr(0, 2), "A ");
  LineClient second(lockd.port());  // one more from 127.0.0.1: closed at once
  EXPECT_TRUE(second.wait_closed(20s));
}

// A number flag given an empty or non-decimal value is a bad flag
// (interfaces.md: one line, exit 2, before anything listens). CLI11 took ""
// as 0, so `--token-floor ""` ran with no floor at all, and "0x10" as hex.
TEST(ConfigTest, EmptyOrNonDecimalNumbersAreRefused) {
  for (const char* flag : {"--token-floor", "--max-wait-ms", "--max-keys", "--max-output-bytes"}) {
    for (const char* bad : {"", "0x10", " 5", "5s"}) {
      const Exit e = run_to_exit({"--listen", "127.0.0.1:0", "--admin", "off", flag, bad});
      EXPECT_EQ(e.status, 2) << flag << " '" << bad << "'";
      EXPECT_EQ(std::count(e.err.begin(), e.err.end(), '\n'), 1) << e.err;
      EXPECT_EQ(e.err.rfind(std::string("lockd: ") + flag + ": ", 0), 0u) << flag << " '" << bad << "': " << e.err;
    }
  }
  // Leading zeros are decimal, as in the protocol: 010 is 10, not octal 8.
  LockdProcess lockd({"--max-lease-ms", "010", "--default-lease-ms", "09"});
  LineClient c(lockd.port());
  EXPECT_EQ(c.call("A o k 11"), "E bad_lease o k");
  EXPECT_EQ(c.call("A o k 10").substr(0, 2), "A ");
}

TEST(ConfigTest, ClashingAddressesAreRefused) {
  TempDir dir;
  const std::vector<std::string> cluster{"--mode", "cluster", "--node-id", "1",
                                         "--data-dir", dir.path()};
  struct Case {
    std::vector<std::string> flags;
    const char* says;
  };
  for (const Case& k : std::vector<Case>{
           {{"--peer", "1=127.0.0.1:7110/127.0.0.1:7111", "--peer", "2=127.0.0.1:7110/127.0.0.1:7121",
             "--admin", "off"},
            "--peer: 127.0.0.1:7110 is both node 1's client address and node 2's client address"},
           {{"--peer", "1=127.0.0.1:7110/127.0.0.1:7111", "--peer", "2=127.0.0.1:7120/127.0.0.1:7110",
             "--admin", "off"},
            "is both node 1's client address and node 2's raft address"},
           {{"--peer", "1=127.0.0.1:7110/127.0.0.1:7111", "--peer", "2=127.0.0.1:7120/127.0.0.1:7121",
             "--admin", "127.0.0.1:7121"},
            "--admin: 127.0.0.1:7121 is both node 2's raft address and the --admin address"},
       }) {
    std::vector<std::string> argv = cluster;
    argv.insert(argv.end(), k.flags.begin(), k.flags.end());
    const Exit e = run_to_exit(argv);
    EXPECT_EQ(e.status, 2);
    EXPECT_NE(e.err.find(k.says), std::string::npos) << e.err;
  }
  const Exit e = run_to_exit({"--listen", "127.0.0.1:7070", "--admin", "127.0.0.1:7070"});
  EXPECT_EQ(e.status, 2);
  EXPECT_NE(e.err.find("is both the --listen address and the --admin address"), std::string::npos)
      << e.err;
}

// §11a: cluster mode is authenticated by default. Without --peer-tls or
// --peer-secret-file it refuses to start (one line, exit 2, nothing
// written) unless --insecure-peers says the operator accepts strangers;
// single mode is unchanged.
TEST(ConfigTest, ClusterModeNeedsPeerAuthenticationOrInsecurePeers) {
  TempDir dir;
  const std::vector<std::string> node{"--mode", "cluster", "--node-id", "1", "--data-dir", dir.path(),
                                      "--admin", "off", "--peer",
                                      "1=" + loopback(free_port()) + "/" + loopback(free_port())};
  const Exit refused = run_to_exit(node);
  EXPECT_EQ(refused.status, 2);
  EXPECT_EQ(std::count(refused.err.begin(), refused.err.end(), '\n'), 1) << refused.err;
  EXPECT_NE(refused.err.find("--mode cluster needs peer authentication: --peer-tls or "
                             "--peer-secret-file FILE, or --insecure-peers"),
            std::string::npos)
      << refused.err;
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/IDENTITY"));

  ChildProcess insecure;
  std::vector<std::string> argv{lockd_binary()};
  argv.insert(argv.end(), node.begin(), node.end());
  argv.push_back("--insecure-peers");
  ASSERT_TRUE(insecure.start(argv));
  EXPECT_TRUE(insecure.wait_for_line("listening on", 20s)) << insecure.stderr_text();
}

// The trap: a cluster start that failed on a busy address had
// already written IDENTITY with the mistyped member list, so the corrected
// config was refused.
TEST(ConfigTest, FailedClusterStartLeavesNoIdentity) {
  TempDir dir;
  LockdProcess busy;  // holds a client port
  const std::uint16_t raft1 = free_port(), c2 = free_port(), r2 = free_port(), c3 = free_port(),
                      r3 = free_port();
  auto node1 = [&](std::uint16_t client, const char* third_id) {
    return std::vector<std::string>{
        "--mode",    "cluster",  "--node-id", "1", "--data-dir", dir.path(), "--admin", "off",
        "--insecure-peers",
        "--peer",    "1=" + loopback(client) + "/" + loopback(raft1),
        "--peer",    "2=" + loopback(c2) + "/" + loopback(r2),
        "--peer",    std::string(third_id) + "=" + loopback(c3) + "/" + loopback(r3)};
  };
  const Exit failed = run_to_exit(node1(busy.port(), "4"));  // port in use, id 4 a typo
  EXPECT_EQ(failed.status, 2);
  EXPECT_NE(failed.err.find("cannot listen"), std::string::npos) << failed.err;
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/IDENTITY"));

  ChildProcess fixed;
  std::vector<std::string> argv{lockd_binary()};
  const auto flags = node1(free_port(), "3");
  argv.insert(argv.end(), flags.begin(), flags.end());
  ASSERT_TRUE(fixed.start(argv));
  EXPECT_TRUE(fixed.wait_for_line("listening on", 20s)) << fixed.stderr_text();
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/IDENTITY"));
}

}  // namespace
}  // namespace lockd::testing
