// examples/leader_election/cpp run as docs/clients.md shows, against a
// real lockd: two candidates of one election, each elected in turn (the
// second waits for the first to resign), both exit 0.
#include <gtest/gtest.h>

#include <future>
#include <string>

#include "lockd_process.h"
#include "run_program.h"

namespace lockd::testing {
namespace {

using namespace std::chrono_literals;

TEST(ClientPlan, C14_LeaderElectionExampleRuns) {
  LockdProcess lockd;
  const auto candidate = [&](const std::string& name) {
    return run_program({LEADER_ELECTION_BINARY, "--address", "127.0.0.1:" + std::to_string(lockd.port()),
                        "--key", "election/demo", "--name", name, "--lead-for", "1"},
                       30s);
  };
  auto a = std::async(std::launch::async, candidate, "node-a");
  auto b = std::async(std::launch::async, candidate, "node-b");
  const RunResult ra = a.get();
  const RunResult rb = b.get();
  EXPECT_EQ(ra.status, 0) << ra.out << ra.err;
  EXPECT_EQ(rb.status, 0) << rb.out << rb.err;
  for (const RunResult* r : {&ra, &rb}) {
    EXPECT_NE(r->out.find("campaigning for election/demo"), std::string::npos) << r->out;
    EXPECT_NE(r->out.find("elected (token "), std::string::npos) << r->out;
    EXPECT_NE(r->out.find("resigned (ok)"), std::string::npos) << r->out;
    EXPECT_EQ(r->out.find("lost the leadership"), std::string::npos) << r->out;
  }
}

}  // namespace
}  // namespace lockd::testing
