// Membership changes on a running group of real lockd processes (issue 20;
// interfaces.md v1.2: the member endpoints, --initial-cluster-state):
// growing 3 -> 5 and shrinking back while a client holds a lock and a
// light load runs, removing the leader, promote refused before a learner
// caught up, a removed id refused; a member whose data dir was wiped is
// refused under its old id and replaced by a new member that catches up
// through the leader's snapshot.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <csignal>
#include <cstdio>

#include <atomic>
#include <chrono>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "eventually.h"
#include "http_get.h"
#include "lockd_cluster.h"
#include "run_program.h"

namespace lockd::testing {
namespace {

using json = nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

std::uint64_t token_of(const std::string& reply) {
  const auto f = fields(reply);
  return f.size() == 4 && f[0] == "A" ? std::stoull(f[1]) : 0;
}

HttpReply admin(LockdCluster& c, int id, const std::string& method, const std::string& target,
                const std::string& body = "") {
  // A Host naming the admin API and a JSON type, as §11a requires of a change.
  std::string raw = method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n";
  if (!body.empty()) raw += "Content-Type: application/json\r\n";
  raw += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  return http_raw(c.admin_port(id), raw);
}

// A change through the leader's admin port, retried while it answers
// `retry_on` (409 not_caught_up while a learner catches up) or while
// leadership moves (503).
HttpReply change(LockdCluster& c, const std::string& method, const std::string& target,
                 const std::string& body = "", const std::string& retry_on = "") {
  HttpReply r;
  eventually(
      [&] {
        const int leader = c.wait_leader(milliseconds(15000));
        if (leader == 0) return false;
        r = admin(c, leader, method, target, body);
        if (r.status == 503) return false;
        return retry_on.empty() || r.body.find(retry_on) == std::string::npos;
      },
      milliseconds(20000), milliseconds(50));
  return r;
}

// Leadership handed to `id` through the admin API; true once it leads. A
// transfer whose target did not win within an election timeout is
// answered 409 transfer_failed, as documented: on a loaded machine (ASan,
// parallel tests) another node's election can beat the target's, so it is
// asked again, as an operator would.
bool transfer_to(LockdCluster& c, int id) {
  const HttpReply r =
      change(c, "POST", "/v1/cluster/leader", json{{"id", id}}.dump(), "transfer_failed");
  return r.status == 200 && eventually([&] { return c.wait_leader() == id; });
}

// Runs lockctl with `args` (split on spaces); its exit status and what it
// printed (stdout, then stderr).
std::pair<int, std::string> lockctl(const std::string& args) {
  std::vector<std::string> argv{LOCKCTL_BINARY};
  std::istringstream words(args);
  for (std::string w; words >> w;) argv.push_back(w);
  const RunResult r = run_program(argv);
  return {r.status, r.out + r.err};
}

std::string add_body(LockdCluster& c, int id) {
  return json{{"id", id}, {"client_addr", c.client_addr(id)}, {"raft_addr", c.raft_addr(id)}}.dump();
}

// Members of the leader's /v1/cluster: id -> role.
std::map<int, std::string> roles(LockdCluster& c) {
  const int leader = c.wait_leader();
  if (leader == 0) return {};
  const HttpReply r = http(c.admin_port(leader), "/v1/cluster");
  const json j = json::parse(r.body, nullptr, false);
  std::map<int, std::string> out;
  if (!j.is_object()) return out;
  for (const json& m : j["members"]) out[m["id"].get<int>()] = m["role"].get<std::string>();
  return out;
}

// `n` keys granted to bob and released again through the leader: 2n log
// entries. False at the first grant refused.
bool grant_and_release(LockdCluster& c, int n) {
  for (int i = 0; i < n; ++i) {
    const std::uint64_t t = token_of(call_leader(c, "A bob k" + std::to_string(i) + " 60000"));
    if (t == 0) return false;
    call_leader(c, "R " + std::to_string(t) + " k" + std::to_string(i));
  }
  return true;
}

// A light load through whichever node leads: A and R of its own keys,
// counting grants, while `held` must keep its one holder (alice).
class Load {
 public:
  Load(LockdCluster& c, std::string held) : c_(c), held_(std::move(held)) {
    thread_ = std::thread([this] { run(); });
  }
  ~Load() { stop(); }
  void stop() {
    if (!thread_.joinable()) return;
    stop_ = true;
    thread_.join();
  }
  int grants() const { return grants_; }
  int second_holders() const { return second_holders_; }

 private:
  void run() {
    for (int i = 0; !stop_; ++i) {
      const std::string key = "load" + std::to_string(i % 50);
      const std::string reply = call_leader(c_, "A carol " + key + " 5000");
      if (const std::uint64_t t = token_of(reply); t != 0) {
        grants_ += 1;
        call_leader(c_, "R " + std::to_string(t) + " " + key);
      }
      // Never two holders: alice holds `held` for the whole test.
      if (i % 5 == 0 && call_leader(c_, "A bob " + held_).rfind("A ", 0) == 0) second_holders_ += 1;
      std::this_thread::sleep_for(milliseconds(5));
    }
  }

  LockdCluster& c_;
  std::string held_;
  std::atomic<bool> stop_{false};
  std::atomic<int> grants_{0};
  std::atomic<int> second_holders_{0};
  std::thread thread_;
};

// 3 -> 5 -> 3 while alice holds a lock and a light load runs: two learners
// join (promote refused until each caught up), are promoted, then the
// leader and one more of the first members are removed. A learner never
// started cannot be promoted (409 not_caught_up); a removed id cannot be
// added again and, restarted, exits with one line.
TEST(Membership, GrowToFiveAndShrinkToThreeUnderLoad) {
  LockdCluster c(6, {"--snapshot-entries", "200"}, {}, 3);
  ASSERT_NE(c.wait_leader(), 0);
  const std::uint64_t held = token_of(call_leader(c, "A alice held 600000"));
  ASSERT_NE(held, 0u);
  Load load(c, "held");

  {
    // Through lockctl, asking a follower: it follows the 503 to the leader.
    const int leader = c.wait_leader();
    const int follower = leader == 1 ? 2 : 1;
    const std::string admin_flag = "--admin 127.0.0.1:" + std::to_string(c.admin_port(follower));
    const auto [rc, out] = lockctl(admin_flag + " member add 5 " + c.client_addr(5) + "/" + c.raft_addr(5));
    ASSERT_EQ(rc, 0) << out;
    EXPECT_NE(out.find("learner"), std::string::npos) << out;
    const auto [rc2, out2] = lockctl(admin_flag + " member promote 5");
    EXPECT_EQ(rc2, 1) << out2;  // not started: not caught up
    EXPECT_NE(out2.find("not_caught_up"), std::string::npos) << out2;
  }
  for (int id : {4, 5}) {
    const HttpReply add = id == 5 ? HttpReply{200, {}, ""}
                                  : change(c, "POST", "/v1/cluster/members", add_body(c, id));
    ASSERT_EQ(add.status, 200) << add.body;
    EXPECT_EQ(roles(c)[id], "learner");
    if (id == 5) {
      c.set_peers(id, {1, 2, 3, id});
      c.set_node_flags(id, {"--initial-cluster-state", "existing"});
      c.start(id);
      const auto [rc, out] = lockctl("--admin 127.0.0.1:" + std::to_string(c.admin_port(1)) +
                                     "," + "127.0.0.1:" + std::to_string(c.admin_port(2)) +
                                     " member promote 5");
      // Caught up in a moment: lockctl says not_caught_up (exit 1) until then.
      if (rc != 0) {
        ASSERT_EQ(change(c, "POST", "/v1/cluster/members/5/promote", "", "not_caught_up").status, 200)
            << out;
      }
      continue;
    }
    // Not started yet: not caught up.
    const HttpReply early =
        admin(c, c.wait_leader(), "POST", "/v1/cluster/members/" + std::to_string(id) + "/promote");
    EXPECT_EQ(early.status, 409) << early.body;
    EXPECT_EQ(early.body, "{\"error\":\"not_caught_up\"}\n");
    c.set_peers(id, {1, 2, 3, id});
    c.set_node_flags(id, {"--initial-cluster-state", "existing"});
    c.start(id);
    const HttpReply promote = change(c, "POST", "/v1/cluster/members/" + std::to_string(id) + "/promote",
                                     "", "not_caught_up");
    ASSERT_EQ(promote.status, 200) << promote.body;
  }
  std::map<int, std::string> r = roles(c);
  ASSERT_EQ(r.size(), 5u);
  {
    // lockctl leader transfer ID, then --json member list is /v1/cluster.
    const int leader = c.wait_leader();
    const int to = leader == 4 ? 5 : 4;
    const auto [rc, out] = lockctl("--admin 127.0.0.1:" + std::to_string(c.admin_port(leader)) +
                                   " leader transfer " + std::to_string(to));
    EXPECT_EQ(rc, 0) << out;
    EXPECT_TRUE(eventually([&] { return c.wait_leader() == to; }, milliseconds(10000)));
    const auto [rc2, out2] = lockctl("--json --admin 127.0.0.1:" + std::to_string(c.admin_port(to)) +
                                     " member list");
    EXPECT_EQ(rc2, 0) << out2;
    const json j = json::parse(out2, nullptr, false);
    ASSERT_TRUE(j.is_object()) << out2;
    EXPECT_EQ(j["leader_id"], to);
    EXPECT_EQ(j["members"].size(), 5u);
  }
  for (const auto& [id, role] : r) EXPECT_NE(role, "learner") << id;

  // A learner that never started is never promoted.
  ASSERT_EQ(change(c, "POST", "/v1/cluster/members", add_body(c, 6)).status, 200);
  EXPECT_EQ(admin(c, c.wait_leader(), "POST", "/v1/cluster/members/6/promote").status, 409);
  ASSERT_EQ(change(c, "DELETE", "/v1/cluster/members/6").status, 200);

  // Remove the leader: it answers once the change committed, then a new
  // leader serves.
  const int old_leader = c.wait_leader();
  ASSERT_NE(old_leader, 0);
  const HttpReply gone = admin(c, old_leader, "DELETE", "/v1/cluster/members/" + std::to_string(old_leader));
  ASSERT_EQ(gone.status, 200) << gone.body;
  // It stepped down as the change committed (before it answered), not an
  // election timeout later for want of a quorum: the answer is its own
  // /v1/cluster as it answered (read after it, the node may have stopped:
  // removed, it exits once a member tells it so).
  const json after = json::parse(gone.body, nullptr, false);
  ASSERT_TRUE(after.is_object()) << gone.body;
  EXPECT_EQ(after["node_id"], old_leader);
  EXPECT_NE(after["role"], "leader") << gone.body;
  // Its own log says the removal committed: it stops (exit 2) without a
  // member telling it, even with every other member paused at once.
  std::vector<int> paused;
  for (int id = 1; id <= c.size(); ++id) {
    if (id != old_leader && c.running(id)) {
      c.signal(id, SIGSTOP);
      paused.push_back(id);
    }
  }
  EXPECT_EQ(c.process(old_leader).wait_exit(milliseconds(15000)), 2)
      << c.process(old_leader).stderr_text();
  EXPECT_NE(c.process(old_leader).stderr_text().find("was removed from the group"),
            std::string::npos)
      << c.process(old_leader).stderr_text();
  for (int id : paused) c.signal(id, SIGCONT);
  EXPECT_TRUE(eventually([&] {
    const int l = c.wait_leader(milliseconds(15000));
    return l != 0 && l != old_leader;
  }));
  const int other = old_leader == 1 ? 2 : 1;
  ASSERT_EQ(change(c, "DELETE", "/v1/cluster/members/" + std::to_string(other)).status, 200);
  r = roles(c);
  EXPECT_EQ(r.size(), 3u);
  EXPECT_EQ(r.count(old_leader), 0u);
  EXPECT_EQ(r.count(other), 0u);

  load.stop();
  EXPECT_EQ(load.second_holders(), 0) << "a second holder of 'held'";
  EXPECT_GT(load.grants(), 0);
  // alice still holds it, with her token.
  EXPECT_EQ(call_leader(c, "R " + std::to_string(held) + " held"), "R " + std::to_string(held) + " held");

  // A removed id is never added again, and exits when restarted.
  const HttpReply again = change(c, "POST", "/v1/cluster/members", add_body(c, other));
  EXPECT_EQ(again.status, 409) << again.body;
  EXPECT_NE(again.body.find("removed_id"), std::string::npos) << again.body;
  c.kill9(other);
  // Refused at open when its own log holds the committed removal (no
  // `listening` line), else by the first member it reaches.
  try {
    c.start(other);
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(c.process(other).wait_exit(milliseconds(15000)), 2) << c.process(other).stderr_text();
  EXPECT_NE(c.process(other).stderr_text().find("was removed from the group"), std::string::npos)
      << c.process(other).stderr_text();
}

// The issue's "Why": a member whose data dir was wiped, restarted under
// its id (the old advice), is refused at start with one line (and, before
// that, an edited --peer list under a group that never recorded a
// configuration); replacing it
// is a removal and a new member, which catches up through the leader's
// snapshot under load and then holds every grant.
TEST(Membership, WipedMemberIsRefusedAndReplacedByANewOne) {
  LockdCluster c(4, {"--snapshot-entries", "20"}, {}, 3);
  const int leader = c.wait_leader();
  ASSERT_NE(leader, 0);
  const std::uint64_t held = token_of(call_leader(c, "A alice held 600000"));
  ASSERT_NE(held, 0u);
  ASSERT_TRUE(grant_and_release(c, 30));  // past a snapshot and compaction
  const int wiped = leader == 3 ? 2 : 3;
  // A member that took part: it holds the log so far (on a loaded machine
  // a follower can still be catching up, its data dir empty).
  const json sl = json::parse(c.status_json(leader), nullptr, false);
  ASSERT_TRUE(sl.is_object());
  ASSERT_TRUE(eventually([&] {
    const json sw = json::parse(c.status_json(wiped), nullptr, false);
    return sw.is_object() && sw["applied_index"] >= sl["commit_index"];
  })) << c.status_json(wiped);
  c.kill9(wiped);
  // This group never changed membership through the log: its --peer lists
  // are its configuration, and an edited one is refused.
  c.set_peers(wiped, {1, 2, 3, 4});
  EXPECT_THROW(c.start(wiped), std::runtime_error);
  EXPECT_EQ(c.process(wiped).wait_exit(milliseconds(10000)), 2);
  EXPECT_NE(c.process(wiped).stderr_text().find("never changed membership through the log"),
            std::string::npos)
      << c.process(wiped).stderr_text();
  c.kill9(wiped);  // reaped already: forgets the process
  c.set_peers(wiped, {});
  c.wipe(wiped);
  c.start(wiped);
  EXPECT_EQ(c.process(wiped).wait_exit(milliseconds(15000)), 2);
  const std::string err = c.process(wiped).stderr_text();
  const std::string last = err.substr(err.rfind('\n', err.size() - 2) + 1);
  EXPECT_NE(last.find("heard from it before"), std::string::npos) << err;
  EXPECT_NE(last.find("Remove the old id"), std::string::npos) << last;
  EXPECT_NE(last.find("add a new member"), std::string::npos) << last;

  Load load(c, "held");
  ASSERT_EQ(change(c, "DELETE", "/v1/cluster/members/" + std::to_string(wiped)).status, 200);
  ASSERT_EQ(change(c, "POST", "/v1/cluster/members", add_body(c, 4)).status, 200);
  c.set_peers(4, {1, 2, 3, 4});
  c.set_node_flags(4, {"--initial-cluster-state", "existing"});
  c.start(4);
  EXPECT_TRUE(c.process(4).wait_for_line("installed the leader's snapshot", std::chrono::seconds(15)))
      << c.process(4).stderr_text();
  // Decoded once: the table checked on arrival is the one installed.
  EXPECT_NE(c.process(4).stderr_text().find("(the table decoded when it was checked)"), std::string::npos)
      << c.process(4).stderr_text();
  ASSERT_EQ(change(c, "POST", "/v1/cluster/members/4/promote", "", "not_caught_up").status, 200);
  load.stop();
  EXPECT_EQ(load.second_holders(), 0);
  // The new member's own table (read locally) has alice's lock.
  EXPECT_TRUE(eventually([&] {
    const HttpReply r = http(c.admin_port(4), "/v1/locks/held");
    return r.status == 200 && r.body.find(std::to_string(held)) != std::string::npos;
  }));
  // It counts: with the wiped member gone and another stopped, {leader, 4}
  // is a majority of 3 that still grants.
  const int now_leader = c.wait_leader();
  for (int i = 1; i <= 3; ++i) {
    if (i != now_leader && i != wiped) c.kill9(i);
  }
  EXPECT_EQ(call_leader(c, "A dave after 60000").rfind("A ", 0), 0u);
  EXPECT_EQ(call_leader(c, "A bob held"), "T bob held");
}

// A leader sends a learner the snapshot it holds in a file, whichever way
// that file became its latest (storage::FileSnapshotBytes): loaded at
// start after a kill -9 of every node, then installed from another leader
// and sent on once this node leads. Neither leader cuts a snapshot of its
// own in between (fewer than --snapshot-entries new entries), so each
// transfer is of the snapshot handed over at that point. (That the bytes
// come from the file and not from memory is FileSnapshotBytes' unit
// tests' part: a flipped bit in the file stops the sender.)
TEST(Membership, LeadersSendSnapshotsLoadedAtStartAndInstalledOnes) {
  // One snapshot in the fill (~220 entries), and room for the ~20 entries
  // after it without another.
  LockdCluster c(5, {"--snapshot-entries", "200"}, {}, 3);
  ASSERT_NE(c.wait_leader(), 0);
  const std::uint64_t held = token_of(call_leader(c, "A alice held 600000"));
  ASSERT_NE(held, 0u);
  ASSERT_TRUE(grant_and_release(c, 110));  // past a snapshot and compaction
  for (int i = 1; i <= 3; ++i) c.kill9(i);
  for (int i = 1; i <= 3; ++i) c.start(i);
  const int first = c.wait_leader();
  ASSERT_NE(first, 0);

  std::map<int, std::string> installed;  // id -> "installed the leader's snapshot at index N …"
  const auto join = [&](int id, std::vector<int> peers) {
    ASSERT_EQ(change(c, "POST", "/v1/cluster/members", add_body(c, id)).status, 200);
    c.set_peers(id, std::move(peers));
    c.set_node_flags(id, {"--initial-cluster-state", "existing"});
    c.start(id);
    const std::optional<std::string> line =
        c.process(id).wait_for_line("installed the leader's snapshot", std::chrono::seconds(15));
    EXPECT_TRUE(line) << c.process(id).stderr_text();
    installed[id] = line.value_or("").substr(line.value_or("").find("installed"));
    const HttpReply r = change(c, "POST", "/v1/cluster/members/" + std::to_string(id) + "/promote",
                               "", "not_caught_up");
    ASSERT_EQ(r.status, 200) << r.body;
    // The learner's own table (read locally) has alice's lock.
    EXPECT_TRUE(eventually([&] {
      const HttpReply h = http(c.admin_port(id), "/v1/locks/held");
      return h.status == 200 && h.body.find(std::to_string(held)) != std::string::npos;
    })) << id;
  };
  const auto cut_none = [&](int id) {
    c.process(id).wait_for_line("lockd-test: read what it logged so far", milliseconds(200));
    EXPECT_EQ(c.process(id).stderr_text().find("] snapshot at index"), std::string::npos)
        << c.process(id).stderr_text();
  };

  join(4, {1, 2, 3, 4});  // from the file `first` loaded at start
  cut_none(first);
  // Once failed under ASan (2026-12-06, not reproduced since): what the
  // leader and node 4 logged says why, should it come back.
  ASSERT_TRUE(transfer_to(c, 4)) << "leader " << first << ":\n" << c.process(first).stderr_text()
                                 << "\nnode 4:\n" << c.process(4).stderr_text();
  join(5, {1, 2, 3, 4, 5});  // from the file node 4 installed
  cut_none(4);
  EXPECT_EQ(installed[5], installed[4]);  // the very snapshot node 4 installed
  EXPECT_EQ(call_leader(c, "A bob held"), "T bob held");
  EXPECT_EQ(call_leader(c, "R " + std::to_string(held) + " held"), "R " + std::to_string(held) + " held");
}

// What the leader's /v1/cluster says of member `id` (null when absent).
json member_view(LockdCluster& c, int leader, int id) {
  const HttpReply r = http(c.admin_port(leader), "/v1/cluster");
  const json j = json::parse(r.body, nullptr, false);
  if (!j.is_object() || !j.contains("members")) return nullptr;
  for (const json& m : j["members"]) {
    if (m["id"] == id) return m;
  }
  return nullptr;
}

// The "error" of a refusal's JSON body ("" when it is not one).
std::string error_of(const HttpReply& r) {
  const json j = json::parse(r.body, nullptr, false);
  return j.is_object() && j.contains("error") && j["error"].is_string() ? j["error"].get<std::string>()
                                                                         : "";
}

// One group serving several checks (issue 20): every refusal the member
// endpoints list (interfaces.md v1.2, docs/cluster.md) but `timeout`;
// a learner that cannot be reached (SIGSTOP: its connections stay open,
// nothing answers) is refused promotion while the group keeps serving,
// and once back it catches up and is promoted; a second change while one
// is in flight gets 409 {"error":"change_in_progress"}. Removed members
// that keep running stop by themselves (exit 2).
TEST(Membership, PartitionedLearnerAndEveryRefusal) {
  LockdCluster c(4, {}, {}, 3);
  int leader = c.wait_leader();
  ASSERT_NE(leader, 0);
  const std::uint64_t held = token_of(call_leader(c, "A alice held 600000"));
  ASSERT_NE(held, 0u);
  Load load(c, "held");

  // Refusals on the group {1, 2, 3}, asked of the leader.
  const auto refused = [&](const std::string& method, const std::string& target,
                           const std::string& body, int status, const std::string& error) {
    const HttpReply r = change(c, method, target, body);
    EXPECT_EQ(r.status, status) << method << " " << target << " " << body << ": " << r.body;
    EXPECT_EQ(error_of(r), error) << method << " " << target << " " << body << ": " << r.body;
  };
  refused("POST", "/v1/cluster/members", add_body(c, 2), 409, "already_member");
  refused("POST", "/v1/cluster/members/2/promote", "", 409, "not_learner");
  refused("POST", "/v1/cluster/members/9/promote", "", 404, "not_found");
  refused("DELETE", "/v1/cluster/members/9", "", 404, "not_found");
  refused("POST", "/v1/cluster/leader", R"({"id":9})", 404, "not_found");
  refused("POST", "/v1/cluster/leader", R"({"id":"two"})", 400, "bad_request");
  refused("POST", "/v1/cluster/members", "", 400, "bad_request");
  refused("POST", "/v1/cluster/members", "{not json", 400, "bad_request");
  refused("POST", "/v1/cluster/members", R"({"id":0,"client_addr":"127.0.0.1:1","raft_addr":"127.0.0.1:2"})",
          400, "bad_request");
  refused("POST", "/v1/cluster/members", R"({"id":7,"client_addr":"127.0.0.1:1"})", 400, "bad_request");
  refused("POST", "/v1/cluster/members", R"({"id":7,"client_addr":"nowhere","raft_addr":"127.0.0.1:2"})",
          400, "bad_request");
  refused("GET", "/v1/cluster/members/2/promote", "", 405, "method_not_allowed");
  refused("POST", "/v1/cluster/members/2", "", 405, "method_not_allowed");
  {
    // A follower names the leader's admin address (learned from the
    // handshake: poll until it has it).
    HttpReply r;
    int follower = 0;
    EXPECT_TRUE(eventually(
        [&] {
          leader = c.wait_leader();
          follower = leader == 1 ? 2 : 1;
          r = admin(c, follower, "POST", "/v1/cluster/members", add_body(c, 4));
          const json j = json::parse(r.body, nullptr, false);
          return r.status == 503 && j.is_object() && j["leader_admin"].is_string();
        },
        milliseconds(20000), milliseconds(50)))
        << r.status << " " << r.body;
    EXPECT_EQ(r.status, 503);
    EXPECT_EQ(r.body, json({{"error", "not_leader"},
                            {"leader_admin", "127.0.0.1:" + std::to_string(c.admin_port(leader))}})
                              .dump() + "\n");
  }
  // Nothing of the above changed the configuration.
  const std::map<int, std::string> three = roles(c);
  EXPECT_EQ(three.size(), 3u);
  for (const auto& [id, role] : three) EXPECT_TRUE(role == "leader" || role == "follower") << id << role;

  // Learner 4 joins and catches up; a learner is not a transfer target.
  ASSERT_EQ(change(c, "POST", "/v1/cluster/members", add_body(c, 4)).status, 200);
  refused("POST", "/v1/cluster/leader", R"({"id":4})", 409, "not_a_voter");
  c.set_peers(4, {1, 2, 3, 4});
  c.set_node_flags(4, {"--initial-cluster-state", "existing"});
  c.start(4);
  ASSERT_TRUE(eventually([&] {
    leader = c.wait_leader();
    const json m = member_view(c, leader, 4);
    const json s = json::parse(c.status_json(leader), nullptr, false);
    return m.is_object() && m["match_index"].is_number() && s.is_object() &&
           m["match_index"].get<std::uint64_t>() + 5 >= s["commit_index"].get<std::uint64_t>();
  })) << c.process(4).stderr_text();

  // Partitioned: the leader stops hearing from it. Once its last contact
  // is older than a few election timeouts, promote is refused, and stays
  // refused while the group commits on without it.
  c.signal(4, SIGSTOP);
  ASSERT_TRUE(eventually([&] {
    leader = c.wait_leader();
    const json m = member_view(c, leader, 4);
    return m.is_object() && m["last_contact_ms"].is_number() && m["last_contact_ms"].get<int>() > 1000;
  }));
  const int grants_before = load.grants();
  HttpReply early = change(c, "POST", "/v1/cluster/members/4/promote");
  EXPECT_EQ(early.status, 409);
  EXPECT_EQ(early.body, "{\"error\":\"not_caught_up\"}\n");
  EXPECT_TRUE(eventually([&] { return load.grants() >= grants_before + 20; }))
      << "the group stopped serving while its learner was unreachable";
  early = change(c, "POST", "/v1/cluster/members/4/promote");
  EXPECT_EQ(early.body, "{\"error\":\"not_caught_up\"}\n");
  EXPECT_EQ(roles(c)[4], "learner");
  {
    // The leader's metrics show the learner's lag.
    leader = c.wait_leader();
    const std::string metrics = http(c.admin_port(leader), "/metrics").body;
    const std::string lag = "lockd_raft_learner_lag_entries{peer=\"4\"} ";
    const std::size_t at = metrics.find(lag);
    ASSERT_NE(at, std::string::npos) << metrics;
    EXPECT_GT(std::stoull(metrics.substr(at + lag.size())), 0u);
    EXPECT_NE(metrics.find("lockd_raft_voters 3\n"), std::string::npos);
    EXPECT_NE(metrics.find("lockd_raft_learners 1\n"), std::string::npos);
  }

  // Reachable again: it catches up and is promoted.
  c.signal(4, SIGCONT);
  const HttpReply promoted = change(c, "POST", "/v1/cluster/members/4/promote", "", "not_caught_up");
  ASSERT_EQ(promoted.status, 200) << promoted.body;
  EXPECT_EQ(roles(c)[4], "follower");
  const json sl = json::parse(c.status_json(c.wait_leader()), nullptr, false);
  ASSERT_TRUE(sl.is_object());
  EXPECT_TRUE(eventually([&] {
    const json s4 = json::parse(c.status_json(4), nullptr, false);
    return s4.is_object() && s4["applied_index"] >= sl["commit_index"];
  })) << c.status_json(4);

  // One change at a time. A transfer to a voter that cannot answer is in
  // flight for an election timeout (then 409 transfer_failed); an add
  // asked meanwhile is refused with exactly the contract's body. If the
  // add came too late (a loaded machine), it was a real change: undo it
  // and try again with another id.
  // (Resumed, the paused voter may act on the TimeoutNow it missed and
  // take over: the next attempt pauses another voter then.)
  bool seen = false;
  for (int attempt = 0; attempt < 5 && !seen; ++attempt) {
    leader = c.wait_leader();
    ASSERT_NE(leader, 0);
    const int to = leader == 4 ? 3 : 4;
    c.signal(to, SIGSTOP);
    HttpReply transfer;
    std::thread first([&] {
      transfer = admin(c, leader, "POST", "/v1/cluster/leader", json{{"id", to}}.dump());
    });
    const bool handing = c.process(leader)
                             .wait_for_line("handing leadership to node " + std::to_string(to),
                                            milliseconds(5000))
                             .has_value();
    const int fake = 100 + attempt;
    const std::string body = json{{"id", fake},
                                  {"client_addr", "127.0.0.1:" + std::to_string(free_port())},
                                  {"raft_addr", "127.0.0.1:" + std::to_string(free_port())}}
                                 .dump();
    const HttpReply second = admin(c, leader, "POST", "/v1/cluster/members", body);
    first.join();
    c.signal(to, SIGCONT);
    ASSERT_TRUE(handing) << transfer.status << " " << transfer.body;
    EXPECT_EQ(transfer.status, 409) << transfer.body;
    EXPECT_EQ(error_of(transfer), "transfer_failed") << transfer.body;
    if (second.status == 409) {
      EXPECT_EQ(second.body, "{\"error\":\"change_in_progress\"}\n");
      seen = true;
    } else {
      ASSERT_EQ(second.status, 200) << second.body;
      ASSERT_EQ(change(c, "DELETE", "/v1/cluster/members/" + std::to_string(fake)).status, 200);
    }
  }
  EXPECT_TRUE(seen) << "never caught a change in flight";
  EXPECT_EQ(roles(c).size(), 4u);

  // Shrink to one voter: the last one cannot be removed, and has no one
  // to hand leadership to.
  leader = c.wait_leader();
  for (int id = 1; id <= 4; ++id) {
    if (id == leader) continue;
    ASSERT_EQ(change(c, "DELETE", "/v1/cluster/members/" + std::to_string(id)).status, 200) << id;
  }
  ASSERT_EQ(roles(c).size(), 1u);
  // Each removed node, still running, learns it was removed from a member
  // that committed it, and stops: exit 2, its last stderr line says why.
  for (int id = 1; id <= 4; ++id) {
    if (id == leader) continue;
    EXPECT_EQ(c.process(id).wait_exit(milliseconds(20000)), 2) << id << c.process(id).stderr_text();
    const std::string err = c.process(id).stderr_text();
    const std::string last = err.substr(err.rfind('\n', err.size() - 2) + 1);
    EXPECT_EQ(last.rfind("lockd: node " + std::to_string(id) + " was removed from the group", 0), 0u)
        << err;
  }
  refused("DELETE", "/v1/cluster/members/" + std::to_string(leader), "", 409, "last_voter");
  refused("POST", "/v1/cluster/leader", "", 409, "no_voter");
  load.stop();
  EXPECT_EQ(load.second_holders(), 0);
  EXPECT_EQ(call_leader(c, "R " + std::to_string(held) + " held"), "R " + std::to_string(held) + " held");
}

// A learner catching up through log entries replays configurations older
// than the member that now leads: at the first of them (a learner 9 added,
// before node 4 was) its configuration lacks node 4. Started as the runbook
// says, with the current members' --peer entries, it keeps node 4's links
// and catches up (found by the chaos runner's membership faults: it closed
// the leader's links and refused it as a stranger, never catching up).
TEST(Membership, LearnerReplaysAConfigurationWithoutTheCurrentLeader) {
  LockdCluster c(5, {}, {}, 3);
  ASSERT_NE(c.wait_leader(), 0);
  const std::string fake = json{{"id", 9},
                                {"client_addr", "127.0.0.1:" + std::to_string(free_port())},
                                {"raft_addr", "127.0.0.1:" + std::to_string(free_port())}}
                               .dump();
  ASSERT_EQ(change(c, "POST", "/v1/cluster/members", fake).status, 200);
  ASSERT_EQ(change(c, "DELETE", "/v1/cluster/members/9").status, 200);
  // More entries than one append carries (64): the learner's first batch
  // ends on the configuration without node 4.
  for (int i = 0; i < 100; ++i) ASSERT_EQ(call_leader(c, "R 1 filler").rfind("N ", 0), 0u);
  ASSERT_EQ(change(c, "POST", "/v1/cluster/members", add_body(c, 4)).status, 200);
  c.set_peers(4, {1, 2, 3, 4});
  c.set_node_flags(4, {"--initial-cluster-state", "existing"});
  c.start(4);
  ASSERT_EQ(change(c, "POST", "/v1/cluster/members/4/promote", "", "not_caught_up").status, 200);
  ASSERT_TRUE(transfer_to(c, 4));

  ASSERT_EQ(change(c, "POST", "/v1/cluster/members", add_body(c, 5)).status, 200);
  c.set_peers(5, {1, 2, 3, 4, 5});
  c.set_node_flags(5, {"--initial-cluster-state", "existing"});
  c.start(5);
  const HttpReply promoted = change(c, "POST", "/v1/cluster/members/5/promote", "", "not_caught_up");
  EXPECT_EQ(promoted.status, 200) << promoted.body;
  // Caught up for real (promote allows a lag of 1000 entries): it applies
  // what the leader committed.
  const json sl = json::parse(c.status_json(c.wait_leader()), nullptr, false);
  ASSERT_TRUE(sl.is_object());
  EXPECT_TRUE(eventually([&] {
    const json s5 = json::parse(c.status_json(5), nullptr, false);
    return s5.is_object() && s5["applied_index"] >= sl["commit_index"];
  })) << c.status_json(5);
  c.process(5).wait_for_line("lockd-test: read what it logged so far", milliseconds(200));
  EXPECT_EQ(c.process(5).stderr_text().find("refusing a connection from a stranger"), std::string::npos)
      << c.process(5).stderr_text();
}

// A new member must have addresses of its own (a learner on a member's
// client or raft address was added, and the real member refused its
// connections) and real ports (port 0 was taken): 409 address_in_use and
// 400 bad_request, and the configuration stays as it was. Re-adding a
// member with its own addresses is still already_member.
TEST(Membership, AddressesInUseAndPortZeroAreRefused) {
  LockdCluster c(3);
  ASSERT_NE(c.wait_leader(), 0);
  const std::string fresh_client = "127.0.0.1:" + std::to_string(free_port());
  const std::string fresh_raft = "127.0.0.1:" + std::to_string(free_port());
  int next_id = 7;  // a new id each time: one refusal must not hide behind another's add
  const auto body = [&next_id](const std::string& client, const std::string& raft) {
    return json{{"id", next_id++}, {"client_addr", client}, {"raft_addr", raft}}.dump();
  };
  struct Case {
    std::string body;
    int status;
    std::string error;
  };
  for (const Case& k : std::vector<Case>{
           {body(c.client_addr(2), fresh_raft), 409, "address_in_use"},  // member 2's client
           {body(fresh_client, c.raft_addr(3)), 409, "address_in_use"},  // member 3's raft
           {body(c.raft_addr(1), fresh_raft), 409, "address_in_use"},    // another's raft as client
           {body(fresh_client, c.client_addr(1)), 409, "address_in_use"},
           {body(fresh_client, fresh_client), 400, "bad_request"},  // its own two ports at one address
           {body("127.0.0.1:0", fresh_raft), 400, "bad_request"},
           {body(fresh_client, "127.0.0.1:0"), 400, "bad_request"},
           {add_body(c, 2), 409, "already_member"},
       }) {
    const HttpReply r = change(c, "POST", "/v1/cluster/members", k.body);
    EXPECT_EQ(r.status, k.status) << k.body << ": " << r.body;
    EXPECT_EQ(error_of(r), k.error) << k.body << ": " << r.body;
  }
  // Nothing changed: three members, no learner; and the next change is taken.
  EXPECT_EQ(roles(c).size(), 3u);
  const int id = next_id;
  const HttpReply added = change(c, "POST", "/v1/cluster/members", body(fresh_client, fresh_raft));
  EXPECT_EQ(added.status, 200) << added.body;
  EXPECT_EQ(roles(c)[id], "learner");
}

// A change or transfer that does not land within --member-change-timeout-ms
// is answered 504 {"error":"timeout"} (docs/cluster.md), and nothing else
// moves. A change that cannot commit ends sooner as 503 here (a follower
// that cannot persist answers no heartbeat either, so the leader steps
// down), so the test uses a transfer to a stopped member with a deadline
// shorter than the election timeout, after which the leader would give up
// on its own (409 transfer_failed).
TEST(Membership, AChangeThatDoesNotLandInTimeIsAnswered504) {
  LockdCluster c(3, {"--member-change-timeout-ms", "100", "--election-timeout-ms", "1000"});
  const int leader = c.wait_leader();
  ASSERT_NE(leader, 0);
  const int target = leader == 1 ? 2 : 1;
  c.process(target).signal(SIGSTOP);
  const auto t0 = steady_clock::now();
  const HttpReply r = admin(c, leader, "POST", "/v1/cluster/leader",
                            json{{"id", target}}.dump());
  EXPECT_EQ(r.status, 504) << r.body;
  EXPECT_EQ(error_of(r), "timeout") << r.body;
  EXPECT_GE(steady_clock::now() - t0, milliseconds(100));
  c.process(target).signal(SIGCONT);
  // Still one leader, and the next change is taken.
  EXPECT_NE(c.wait_leader(), 0);
  EXPECT_TRUE(transfer_to(c, target));
}

// safety.md mutation 13: a node stops on its own log only when its
// removal committed there, not when it is merely appended. The leader
// removes itself while one follower is paused: the new voters {other two}
// cannot commit it, so the leader (which drops to follower: it hears only
// one of the two new voters) holds its removal uncommitted and must keep
// running; once the paused one resumes, the removal commits and it exits 2.
TEST(Membership, ANodeWhoseRemovalIsOnlyAppendedKeepsRunning) {
  LockdCluster c(3, {"--heartbeat-ms", "50", "--election-timeout-ms", "500",
                     "--member-change-timeout-ms", "300"});
  const int leader = c.wait_leader();
  ASSERT_NE(leader, 0);
  const int paused = leader == 1 ? 2 : 1;
  c.signal(paused, SIGSTOP);
  const HttpReply r = admin(c, leader, "DELETE", "/v1/cluster/members/" + std::to_string(leader));
  EXPECT_EQ(r.status, 504) << r.body;
  ASSERT_TRUE(c.process(leader).wait_for_line("is removed from the group", milliseconds(10000)))
      << c.process(leader).stderr_text();
  // It stops leading (it hears one of the two new voters only) ...
  ASSERT_TRUE(c.process(leader).wait_for_line("no leader in term", milliseconds(10000)))
      << c.process(leader).stderr_text();
  // ... and, its removal uncommitted, keeps running (the check waits two
  // heartbeats, 100 ms, after it sees a committed removal: give it 20).
  EXPECT_EQ(c.process(leader).wait_exit(milliseconds(2000)), std::nullopt)
      << c.process(leader).stderr_text();
  c.signal(paused, SIGCONT);
  EXPECT_EQ(c.process(leader).wait_exit(milliseconds(15000)), 2) << c.process(leader).stderr_text();
  EXPECT_NE(c.process(leader).stderr_text().find("was removed from the group"), std::string::npos)
      << c.process(leader).stderr_text();
}

}  // namespace
}  // namespace lockd::testing
