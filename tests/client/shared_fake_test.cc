// The C++ client's shared holds (`S`, v1.2) against FakeServer, a scripted
// node: the bytes it sends for read locks and semaphores, the replies it
// understands, and the cluster rules (redirects, indeterminate, a late
// grant nobody waits for) applied to `S` exactly as to `A`. The same
// client against a real lockd is in shared_test.cc.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <vector>

#include "eventually.h"
#include "fake_server.h"
#include "lockd/client/client.h"
#include "lockd_process.h"

namespace lockd::client {

void PrintTo(Code code, std::ostream* os);

namespace {

using namespace std::chrono_literals;
using testing::FakeServer;
using testing::eventually;
using testing::fields;

Options options_for(const std::string& address) {
  Options o;
  o.addresses = {address};
  o.reply_timeout = 5s;
  o.jitter_seed = 1;
  return o;
}

bool saw(const FakeServer& node, const std::string& line) {
  for (const auto& l : node.received()) {
    if (l == line) return true;
  }
  return false;
}

// Grants every `S` with token 40, 41, ...; answers R and K for any token.
std::vector<std::string> granting(const std::string& line, std::atomic<int>& next) {
  const auto f = fields(line);
  if (f[0] == "S") return {"S " + std::to_string(next++) + " " + f[1] + " " + f[2]};
  if (f[0] == "R" || f[0] == "K") return {f[0] + " " + f[1] + " " + f[2]};
  return {"E unknown_command"};
}

TEST(ClientSharedFake, ReadLockSendsLimitZeroAndReleasesItsOwnToken) {
  std::atomic<int> next{40};
  FakeServer node([&](const std::string& l) { return granting(l, next); });
  Client client(options_for(node.address()));
  {
    auto a = client.lock_shared("alice", "cfg", {.lease_ms = 1'000, .keep = false});
    auto b = client.lock_shared("bob", "cfg", {.lease_ms = 1'000, .keep = false});
    ASSERT_TRUE(a.ok()) << a.status().to_string();
    ASSERT_TRUE(b.ok()) << b.status().to_string();
    EXPECT_EQ(a->token(), 40u);
    EXPECT_EQ(b->token(), 41u);
    EXPECT_EQ(a->limit(), 0u);
    EXPECT_TRUE(a->lock().shared);
  }
  EXPECT_EQ(node.received(), (std::vector<std::string>{"S alice cfg 0 1000", "S bob cfg 0 1000",
                                                      "R 41 cfg", "R 40 cfg"}));
}

TEST(ClientSharedFake, SemaphoreSendsItsPermitsAndKeepsThePermit) {
  std::atomic<int> next{7};
  FakeServer node([&](const std::string& l) { return granting(l, next); });
  Client client(options_for(node.address()));
  Semaphore pool(client, "workers", 8);
  auto permit = pool.acquire("w1", {.lease_ms = 300, .wait_ms = 2'000});
  ASSERT_TRUE(permit.ok()) << permit.status().to_string();
  EXPECT_EQ(permit->limit(), 8u);
  // The keeper extends this holder's lease by its own token.
  ASSERT_TRUE(eventually([&] { return saw(node, "K 7 workers 300"); }, 5s));
  EXPECT_TRUE(permit->release().ok());
  EXPECT_EQ(node.received().front(), "S w1 workers 8 300 2000");
  EXPECT_EQ(node.received().back(), "R 7 workers");
  EXPECT_FALSE(permit->lost());

  Semaphore none(client, "workers", 0);
  EXPECT_EQ(none.acquire("w1", {.lease_ms = 300}).code(), Code::kInvalidArgument);
  EXPECT_EQ(client.acquire_shared("w1", "workers", 65'536, 300).code(), Code::kInvalidArgument);
}

TEST(ClientSharedFake, EveryRefusalIsItsOwnCode) {
  FakeServer node([](const std::string& line) -> std::vector<std::string> {
    const auto f = fields(line);
    if (f[1] == "t") return {"T " + f[1] + " " + f[2]};
    if (f[1] == "b") return {"B " + f[1] + " " + f[2]};
    if (f[1] == "m") return {"E limit_mismatch " + f[1] + " " + f[2]};
    if (f[1] == "i") return {"E indeterminate " + f[1] + " " + f[2]};
    return {"A 5 " + f[1] + " " + f[2]};  // the wrong grant kind for an S
  });
  Client client(options_for(node.address()));
  EXPECT_EQ(client.acquire_shared("t", "k", 0, 100).code(), Code::kTimedOut);
  EXPECT_EQ(client.acquire_shared("b", "k", 0, 100).code(), Code::kBusy);
  EXPECT_EQ(client.acquire_shared("m", "k", 3, 100).code(), Code::kLimitMismatch);
  EXPECT_EQ(client.acquire_shared("i", "k", 3, 100).code(), Code::kIndeterminate);
  EXPECT_EQ(client.acquire_shared("x", "k", 3, 100).code(), Code::kProtocol);
  EXPECT_EQ(node.received().size(), 5u);  // none resent
}

TEST(ClientSharedFake, FollowsARedirectAndRetriesNoLeader) {
  std::atomic<int> next{60};
  std::atomic<int> refusals{0};
  FakeServer leader([&](const std::string& line) -> std::vector<std::string> {
    const auto f = fields(line);
    if (f[0] == "S" && refusals++ < 2) return {"E no_leader " + f[1] + " " + f[2]};
    return granting(line, next);
  });
  const std::string leader_addr = leader.address();
  FakeServer follower([&](const std::string& line) -> std::vector<std::string> {
    const auto f = fields(line);
    return {"M " + leader_addr + " " + f[1] + " " + f[2]};
  });
  Client client(options_for(follower.address()));
  auto held = client.acquire_shared("alice", "k", 4, 1'000);
  ASSERT_TRUE(held.ok()) << held.status().to_string();
  EXPECT_EQ(held->token, 60u);
  EXPECT_TRUE(client.release(held.value()).ok());
  EXPECT_TRUE(saw(leader, "R 60 k"));
}

TEST(ClientSharedFake, ALateSharedGrantNobodyWaitsForIsReleased) {
  FakeServer node([](const std::string& line) -> std::vector<std::string> {
    const auto f = fields(line);
    if (f[0] == "R") return {"R " + f[1] + " " + f[2]};
    return {};
  });
  Options o = options_for(node.address());
  o.reply_timeout = 200ms;
  Client client(o);
  EXPECT_EQ(client.acquire_shared("alice", "k", 2, 1'000).code(), Code::kIndeterminate);
  node.push("S 33 alice k");
  ASSERT_TRUE(eventually([&] {
    client.release(1, "other");  // any call drives the reader
    return saw(node, "R 33 k");
  }, 5s));
}

TEST(ClientSharedFake, KeeperReportsTheLossOfASharedHold) {
  FakeServer node([](const std::string& line) -> std::vector<std::string> {
    const auto f = fields(line);
    if (f[0] == "S") return {"S 8 " + f[1] + " " + f[2]};
    if (f[0] == "K") return {"N " + f[1] + " " + f[2]};
    return {"N " + f[1] + " " + f[2]};
  });
  Client client(options_for(node.address()));
  std::atomic<bool> lost{false};
  auto guard = client.lock_shared("alice", "k", {.lease_ms = 300, .on_lost = [&](const Status& s) {
                                                   lost = s.code == Code::kNotHeld;
                                                 }});
  ASSERT_TRUE(guard.ok());
  ASSERT_TRUE(eventually([&] { return lost.load(); }, 5s));
  EXPECT_TRUE(guard->lost());
  EXPECT_EQ(guard->release().code, Code::kNotHeld);
}

}  // namespace
}  // namespace lockd::client
