// What an operator reads in a cluster's logs (docs/cluster.md, "Logs"):
// real lockd processes, their stderr as a terminal would show it.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "lockd_cluster.h"

namespace lockd::testing {
namespace {

using namespace std::chrono_literals;

// Three nodes in one terminal can be told apart; each says whom it
// follows; the leader warns when it loses a member and when it is back;
// no table-clock internals at info.
TEST(ClusterLogs, NodesNameThemselvesTheirLeaderAndALostPeer) {
  LockdCluster c(3);
  const int leader = c.wait_leader();
  ASSERT_NE(leader, 0);
  const std::string lead = std::to_string(leader);
  for (int i = 1; i <= 3; ++i) {
    const std::string me = "[node " + std::to_string(i) + "] ";
    const std::string follows = i == leader ? "following leader " + lead + " (this node) in term "
                                            : "following leader " + lead + " in term ";
    EXPECT_TRUE(c.process(i).wait_for_line(" warning " + me + follows, 10s)) << c.process(i).stderr_text();
    EXPECT_NE(c.process(i).stderr_text().find(" info " + me + "lockd "), std::string::npos)
        << c.process(i).stderr_text();
  }
  EXPECT_EQ(c.process(leader).stderr_text().find("table time offset"), std::string::npos)
      << c.process(leader).stderr_text();
  const int follower = leader == 1 ? 2 : 1;
  const std::string raft = "127.0.0.1:" + std::to_string(c.raft_port(follower));
  c.kill9(follower);
  EXPECT_TRUE(c.process(leader).wait_for_line(
      " warning [node " + lead + "] lost the link to node " + std::to_string(follower) + " (raft " + raft +
          "); retrying",
      10s))
      << c.process(leader).stderr_text();
  c.start(follower);
  EXPECT_TRUE(c.process(leader).wait_for_line(
      " warning [node " + lead + "] node " + std::to_string(follower) + " is back after ", 10s))
      << c.process(leader).stderr_text();
}

// --log-format json: every line is one JSON object naming its node.
TEST(ClusterLogs, JsonLinesNameTheNode) {
  LockdCluster c(1, {"--log-format", "json"});
  ASSERT_NE(c.wait_leader(), 0);
  ASSERT_TRUE(c.process(1).wait_for_line("following leader 1", 10s)) << c.process(1).stderr_text();
  std::istringstream in(c.process(1).stderr_text());
  int lines = 0;
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << line;
    EXPECT_EQ(j.value("node", 0), 1) << line;
    EXPECT_FALSE(j.value("msg", "").empty()) << line;
    ++lines;
  }
  EXPECT_GT(lines, 3);
}

}  // namespace
}  // namespace lockd::testing
