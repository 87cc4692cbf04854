// The admin API of a real 3-node lockd cluster: /v1/cluster on the leader
// and on a follower, the cluster metrics appearing and moving under load
// and across a leader kill, and leases and waits read on every node.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

#include "eventually.h"
#include "http_get.h"
#include "lockd_cluster.h"

namespace lockd::testing {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

// Every unlabelled or labelled sample of a scrape: `name{labels}` -> value.
std::map<std::string, double> scrape(LockdCluster& c, int id) {
  const HttpReply r = http(c.admin_port(id), "/metrics");
  EXPECT_EQ(r.status, 200);
  std::map<std::string, double> out;
  std::istringstream in(r.body);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const std::size_t sp = line.rfind(' ');
    out[line.substr(0, sp)] = std::strtod(line.c_str() + sp + 1, nullptr);
  }
  return out;
}

json get_json(LockdCluster& c, int id, const std::string& target) {
  const HttpReply r = http(c.admin_port(id), target);
  EXPECT_EQ(r.status, 200) << target << ": " << r.body;
  return json::parse(r.body, nullptr, false);
}

TEST(ClusterAdmin, ClusterViewOnLeaderAndFollower) {
  LockdCluster c(3);
  const int leader = c.wait_leader();
  ASSERT_NE(leader, 0);
  const int follower = leader % 3 + 1;

  // The leader knows every member's match index once they have acked.
  ASSERT_TRUE(eventually([&] {
    const json j = get_json(c, leader, "/v1/cluster");
    for (const json& m : j["members"]) {
      if (!m["match_index"].is_number()) return false;
    }
    return true;
  }));
  const json lj = get_json(c, leader, "/v1/cluster");
  EXPECT_EQ(lj["node_id"], leader);
  EXPECT_EQ(lj["leader_id"], leader);
  EXPECT_GE(lj["term"].get<std::uint64_t>(), 1u);
  EXPECT_TRUE(lj["commit_index"].is_number());
  ASSERT_EQ(lj["members"].size(), 3u);
  for (const json& m : lj["members"]) {
    const int id = m["id"].get<int>();
    EXPECT_EQ(m["client_addr"], c.client_addr(id));
    EXPECT_EQ(m["raft_addr"], "127.0.0.1:" + std::to_string(c.raft_port(id)));
    EXPECT_EQ(m["role"], id == leader ? "leader" : "follower");
    EXPECT_TRUE(m["last_contact_ms"].is_number()) << m;
  }

  // A follower names the leader once an append of its term reached it (under
  // ASan that can come after the leader's own view is complete).
  ASSERT_TRUE(eventually([&] { return get_json(c, follower, "/v1/cluster")["leader_id"] == leader; }));
  const json fj = get_json(c, follower, "/v1/cluster");
  EXPECT_EQ(fj["node_id"], follower);
  EXPECT_EQ(fj["leader_id"], leader);
  ASSERT_EQ(fj["members"].size(), 3u);
  for (const json& m : fj["members"]) {
    EXPECT_TRUE(m["match_index"].is_null()) << m;
    EXPECT_TRUE(m["last_contact_ms"].is_null()) << m;
  }
}

// interfaces.md: /v1/cluster lists "every member (this node included) as
// this node sees it". A node that lost its group campaigns: its own entry
// says candidate, as its top-level role does (it said follower).
TEST(ClusterAdmin, OwnEntryShowsACandidate) {
  LockdCluster c(3);
  const int leader = c.wait_leader();
  ASSERT_NE(leader, 0);
  const int survivor = leader % 3 + 1;
  for (int id = 1; id <= 3; ++id) {
    if (id != survivor) c.kill9(id);
  }
  // One body: the top-level role and the members are read together.
  json j;
  ASSERT_TRUE(eventually([&] {
    const HttpReply r = http(c.admin_port(survivor), "/v1/cluster");
    j = json::parse(r.body, nullptr, false);
    return r.status == 200 && j.is_object() && j["role"] == "candidate";
  })) << j.dump();
  EXPECT_EQ(json::parse(c.status_json(survivor), nullptr, false)["role"], "candidate");
  int own = 0;
  for (const json& m : j["members"]) {
    if (m["id"] != survivor) {
      EXPECT_NE(m["role"], "candidate") << m;  // as this node sees them: it has no news
      continue;
    }
    ++own;
    EXPECT_EQ(m["role"], "candidate") << j.dump();
    EXPECT_EQ(m["voter"], true) << m;
  }
  EXPECT_EQ(own, 1) << j.dump();
}

TEST(ClusterAdmin, MetricsAppearAndMove) {
  LockdCluster c(3);
  const int leader = c.wait_leader();
  ASSERT_NE(leader, 0);
  const std::string p1 = std::to_string(leader % 3 + 1);
  const std::string p2 = std::to_string((leader + 1) % 3 + 1);

  // Links come up; the role is one-hot.
  ASSERT_TRUE(eventually([&] {
    auto m = scrape(c, leader);
    return m["lockd_peer_up{peer=\"" + p1 + "\"}"] == 1 &&
           m["lockd_peer_up{peer=\"" + p2 + "\"}"] == 1;
  }));
  auto before = scrape(c, leader);
  EXPECT_EQ(before["lockd_raft_role{role=\"leader\"}"], 1);
  // at(): a missing series must not read as 0.
  EXPECT_EQ(before.at("lockd_raft_role{role=\"follower\"}"), 0);
  EXPECT_GE(before["lockd_raft_term"], 1);
  EXPECT_EQ(before["lockd_raft_leader_id"], leader);
  EXPECT_GE(before["lockd_raft_leaderships_total"], 1);
  EXPECT_GE(before["lockd_raft_elections_total"], 1);
  EXPECT_GE(before["lockd_raft_leader_changes_total"], 1);
  for (const char* name :
       {"lockd_raft_commit_index", "lockd_raft_applied_index", "lockd_raft_proposals_total",
        "lockd_raft_commit_duration_seconds_count", "lockd_wal_syncs_total",
        "lockd_wal_entries_total", "lockd_wal_sync_duration_seconds_count",
        "lockd_snapshots_written_total", "lockd_raft_snapshots_sent_total"}) {
    EXPECT_TRUE(before.count(name)) << name;
  }
  // The leader sees the link up before the follower has necessarily heard
  // an append of this term (a loaded ASan run read leader_id 0): poll.
  std::map<std::string, double> follower;
  EXPECT_TRUE(eventually([&] {
    follower = scrape(c, std::stoi(p1));
    return follower.count("lockd_raft_leader_id") && follower["lockd_raft_leader_id"] == leader;
  })) << follower["lockd_raft_leader_id"];
  EXPECT_EQ(follower.at("lockd_raft_role{role=\"follower\"}"), 1);

  // 50 acquire/release pairs through the leader.
  for (int i = 0; i < 50; ++i) {
    const std::string key = "metrics-k" + std::to_string(i);
    const std::string a = call_once(c.client_port(leader), "A alice " + key + " 60000");
    ASSERT_EQ(a.substr(0, 2), "A ") << a;
    const std::string token = a.substr(2, a.find(' ', 2) - 2);
    ASSERT_EQ(call_once(c.client_port(leader), "R " + token + " " + key).substr(0, 2), "R ");
  }
  auto after = scrape(c, leader);
  EXPECT_GE(after["lockd_raft_proposals_total"] - before["lockd_raft_proposals_total"], 100);
  EXPECT_GE(after["lockd_raft_commit_duration_seconds_count"] -
                before["lockd_raft_commit_duration_seconds_count"],
            100);
  EXPECT_GT(after["lockd_raft_commit_duration_seconds_sum"],
            before["lockd_raft_commit_duration_seconds_sum"]);
  EXPECT_GE(after["lockd_raft_commit_index"] - before["lockd_raft_commit_index"], 100);
  EXPECT_GE(after["lockd_wal_entries_total"] - before["lockd_wal_entries_total"], 100);
  EXPECT_GT(after["lockd_wal_syncs_total"], before["lockd_wal_syncs_total"]);
  EXPECT_GT(after["lockd_peer_sent_bytes_total{peer=\"" + p1 + "\"}"],
            before["lockd_peer_sent_bytes_total{peer=\"" + p1 + "\"}"]);
  EXPECT_GT(after["lockd_peer_received_messages_total{peer=\"" + p2 + "\"}"],
            before["lockd_peer_received_messages_total{peer=\"" + p2 + "\"}"]);

  // Kill the leader: a survivor wins an election, counts a leader change,
  // and sees its link to the dead node go down.
  const int survivor = std::stoi(p1);
  const double changes_before = scrape(c, survivor)["lockd_raft_leader_changes_total"];
  c.kill9(leader);
  const int next = c.wait_leader(10000ms, leader);
  ASSERT_NE(next, 0);
  const std::string dead = "lockd_peer_up{peer=\"" + std::to_string(leader) + "\"}";
  ASSERT_TRUE(eventually([&] {
    const auto now = scrape(c, next);
    return now.count(dead) == 1 && now.at(dead) == 0;
  }));
  auto m = scrape(c, next);
  EXPECT_EQ(m["lockd_raft_role{role=\"leader\"}"], 1);
  EXPECT_GE(m["lockd_raft_elections_total"], 1);
  EXPECT_GT(m["lockd_raft_term"], after["lockd_raft_term"]);
  EXPECT_GT(scrape(c, survivor)["lockd_raft_leader_changes_total"], changes_before);
}

// Leases in cluster mode run on table time (the leader's clock mapped, see
// cluster/lock_state_machine.h), not on a node's own monotonic clock: the
// admin views must measure against it on every node, or a lease taken a
// moment ago reads as expired hours ago (the offset is about the host's
// uptime when the cluster formed).
TEST(ClusterAdmin, LeasesAndWaitsReadTheSameOnEveryNode) {
  LockdCluster c(3);
  const int leader = c.wait_leader();
  ASSERT_NE(leader, 0);
  const std::string a = call_once(c.client_port(leader), "A alice held 60000");
  ASSERT_EQ(a.substr(0, 2), "A ") << a;
  // A queued waiter, on a connection kept open.
  LineClient bob(c.client_port(leader));
  bob.send("A bob held 60000 30000\n");
  for (int id = 1; id <= 3; ++id) {
    SCOPED_TRACE("node " + std::to_string(id));
    // Followers see the lock and the waiter once they applied them.
    ASSERT_TRUE(eventually([&] {
      const HttpReply r = http(c.admin_port(id), "/v1/locks/held");
      return r.status == 200 && json::parse(r.body, nullptr, false)["waiter_count"] == 1;
    }));
    const json one = get_json(c, id, "/v1/locks/held");
    EXPECT_EQ(one["owner"], "alice");
    EXPECT_EQ(one["expired"], false);
    EXPECT_GT(one["expires_in_ms"].get<std::int64_t>(), 30000) << one.dump();
    EXPECT_LE(one["expires_in_ms"].get<std::int64_t>(), 60000) << one.dump();
    EXPECT_GE(one["held_ms"].get<std::int64_t>(), 0) << one.dump();
    EXPECT_LT(one["held_ms"].get<std::int64_t>(), 30000) << one.dump();
    ASSERT_EQ(one["waiters"].size(), 1u) << one.dump();
    EXPECT_EQ(one["waiters"][0]["owner"], "bob");
    EXPECT_GT(one["waiters"][0]["wait_left_ms"].get<std::int64_t>(), 0) << one.dump();
    EXPECT_LE(one["waiters"][0]["wait_left_ms"].get<std::int64_t>(), 30000) << one.dump();

    const json list = get_json(c, id, "/v1/locks");
    ASSERT_EQ(list["locks"].size(), 1u) << list.dump();
    EXPECT_GT(list["locks"][0]["expires_in_ms"].get<std::int64_t>(), 30000) << list.dump();
    EXPECT_EQ(get_json(c, id, "/v1/status")["holders"], 1);
    EXPECT_EQ(scrape(c, id)["lockd_holders"], 1);
    const json top = get_json(c, id, "/v1/top");
    ASSERT_EQ(top["oldest_holders"].size(), 1u) << top.dump();
    EXPECT_GT(top["oldest_holders"][0]["expires_in_ms"].get<std::int64_t>(), 30000);
  }
}

}  // namespace
}  // namespace lockd::testing
