// Backup and restore end to end (docs/operations.md, "Backup and
// restore"): real lockd processes, the real lockctl, real files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "eventually.h"
#include "http_get.h"
#include "lockd_cluster.h"
#include "lockd_process.h"
#include "run_program.h"
#include "temp_dir.h"

namespace lockd::testing {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

using Outcome = RunResult;

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Runs a program to completion, stdout and stderr captured.
Outcome run(const std::vector<std::string>& argv, std::chrono::milliseconds timeout = 30s) {
  return run_program(argv, timeout);
}

std::vector<std::string> lockctl(std::uint16_t admin_port, std::vector<std::string> args) {
  std::vector<std::string> argv{LOCKCTL_BINARY, "--admin", "127.0.0.1:" + std::to_string(admin_port)};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

std::uint64_t token_of(const std::string& reply) {
  const auto f = fields(reply);
  return f.size() == 4 && f[0] == "A" ? std::stoull(f[1]) : 0;
}

json lock_view(std::uint16_t admin_port, const std::string& encoded_key) {
  const HttpReply r = http(admin_port, "/v1/locks/" + encoded_key);
  return r.status == 200 ? json::parse(r.body, nullptr, false) : json();
}

// The drill of docs/operations.md: back up a 3-node group under load,
// destroy it, restore into a new group.
TEST(BackupRestore, DrillThreeNodesUnderLoad) {
  const TempDir tmp("lockd-backup");  // the snapshot files; removed at the end
  const std::string file = tmp.sub("drill.snap");
  std::map<int, std::uint64_t> held;  // held/i -> its token
  std::uint64_t floor = 0;
  std::atomic<std::uint64_t> largest{0};  // the largest token the old group granted (load goes on after the backup)
  {
    LockdCluster old(3);
    const int leader = old.wait_leader();
    ASSERT_NE(leader, 0);
    for (int i = 0; i < 20; ++i) {
      const std::string reply = call_leader(old, "A holder-" + std::to_string(i) + " held/" + std::to_string(i) + " 600000");
      held[i] = token_of(reply);
      ASSERT_NE(held[i], 0u) << reply;
    }
    // Load: grants and releases on other keys all through the backup.
    std::atomic<bool> stop{false};
    std::atomic<int> grants{0};
    std::thread load([&] {
      LineClient cl(old.client_port(leader));
      for (int n = 0; !stop; ++n) {
        const std::string key = "load/" + std::to_string(n % 50);
        const std::uint64_t t = token_of(cl.call("A loader " + key + " 5000"));
        if (t == 0) continue;
        largest = std::max(largest.load(), t);
        ++grants;
        cl.call("R " + std::to_string(t) + " " + key);
      }
    });
    ASSERT_TRUE(eventually([&] { return grants > 50; }));
    // Only the leader serves a backup: a follower's state may lag what the
    // leader acknowledged.
    const int follower = leader == 1 ? 2 : 1;
    const HttpReply refused = http(old.admin_port(follower), "/v1/snapshot");
    EXPECT_EQ(refused.status, 503);
    const json why = json::parse(refused.body, nullptr, false);
    EXPECT_EQ(why.value("error", ""), "not_leader") << refused.body;
    EXPECT_EQ(why.value("leader_admin", ""), "127.0.0.1:" + std::to_string(old.admin_port(leader))) << refused.body;

    // lockctl pointed at the follower follows its leader_admin (learned
    // from the leader's handshake) to the leader.
    const Outcome saved = run(lockctl(old.admin_port(follower), {"snapshot", "save", file}));
    ASSERT_EQ(saved.status, 0) << saved.err;
    EXPECT_NE(saved.out.find("cluster snapshot at index"), std::string::npos) << saved.out;
    EXPECT_NE(saved.out.find("checksum ok"), std::string::npos) << saved.out;
    EXPECT_FALSE(std::filesystem::exists(file + ".tmp." + std::to_string(getpid())));
    const int at_backup = grants;
    ASSERT_TRUE(eventually([&] { return grants > at_backup + 50; }));  // lost by the restore
    stop = true;
    load.join();
    const Outcome verified = run(lockctl(old.admin_port(leader), {"--json", "snapshot", "verify", file}));
    ASSERT_EQ(verified.status, 0) << verified.err;
    const json v = json::parse(verified.out, nullptr, false);
    floor = v.value("token_floor", std::uint64_t{0});
    EXPECT_GE(v.value("keys", 0), 20);
    for (const auto& [i, t] : held) EXPECT_LE(t, floor);
  }  // the old group is gone: killed, data dirs removed

  // A damaged copy is refused before the node does anything, with one line.
  std::string bytes = slurp(file);
  ASSERT_GT(bytes.size(), 200u);
  bytes[bytes.size() / 2] ^= 0x10;
  const std::string damaged = tmp.sub("damaged.snap");
  std::ofstream(damaged, std::ios::binary) << bytes;
  const std::string dir = tmp.sub("damaged-dir");
  std::filesystem::create_directories(dir);
  const Outcome bad = run({lockd_binary(), "--mode", "cluster", "--insecure-peers", "--node-id", "1", "--data-dir", dir, "--admin",
                           "off", "--peer", "1=127.0.0.1:" + std::to_string(free_port()) + "/127.0.0.1:" +
                           std::to_string(free_port()), "--restore-from", damaged});
  EXPECT_EQ(bad.status, 2);
  EXPECT_EQ(bad.err, "lockd: --restore-from " + damaged + ": bad checksum: the file is damaged\n");
  const Outcome bad_verify = run(lockctl(1, {"snapshot", "verify", damaged}));
  EXPECT_EQ(bad_verify.status, 1);
  EXPECT_NE(bad_verify.err.find("bad checksum"), std::string::npos) << bad_verify.err;

  // A new group (new ports, empty data dirs), every member from the file.
  LockdCluster fresh(3, {"--restore-from", file});
  const int leader = fresh.wait_leader();
  ASSERT_NE(leader, 0);
  for (const auto& [i, t] : held) {
    const json j = lock_view(fresh.admin_port(leader), "held%2F" + std::to_string(i));
    EXPECT_EQ(j.value("owner", ""), "holder-" + std::to_string(i)) << j.dump();
    EXPECT_EQ(j.value("token", std::uint64_t{0}), t) << j.dump();
    EXPECT_GT(j.value("expires_in_ms", std::int64_t{0}), 500'000) << j.dump();
  }
  // The holders carry on with their tokens; nobody else gets their keys.
  const std::string key0 = "held/0";
  EXPECT_EQ(call_leader(fresh, "K " + std::to_string(held[0]) + " " + key0 + " 600000"),
            "K " + std::to_string(held[0]) + " " + key0);
  EXPECT_EQ(call_leader(fresh, "A thief held/1 1000"), "T thief held/1");
  // Every new token is above every token in the file, and above every
  // token the old group granted after the backup (tokens never go back).
  const std::uint64_t next = token_of(call_leader(fresh, "A newcomer fresh/1 1000"));
  EXPECT_GT(next, floor);
  EXPECT_GT(largest.load(), floor);
  EXPECT_GT(next, largest.load());
  for (const auto& [i, t] : held) EXPECT_GT(next, t);

  // A member restarted with the flag still given starts from its data dir.
  const int other = leader == 3 ? 2 : 3;
  fresh.kill9(other);
  fresh.start(other);
  EXPECT_NE(fresh.process(other).stderr_text().find("is ignored"), std::string::npos)
      << fresh.process(other).stderr_text();
  ASSERT_NE(fresh.wait_leader(), 0);
  EXPECT_EQ(lock_view(fresh.admin_port(other), "held%2F3").value("token", std::uint64_t{0}), held[3]);
}

// The cluster id node `id` recorded in its IDENTITY ("" while none).
std::string identity_cluster(LockdCluster& c, int id) {
  const std::string text = slurp(c.data_dir(id) + "/IDENTITY");
  const auto at = text.find(" cluster ");
  return at == std::string::npos ? "" : text.substr(at + 9, 18);
}

// A restored group is a new one (docs/operations.md, "Restore"): the old
// group granted past the backup, and the restored group's tokens still
// never go back; it has a new cluster id, so a member of the old group
// (same id, same addresses, its old data) is refused on both sides.
TEST(BackupRestore, RestoredGroupIsANewClusterWithTokensAboveTheOldGroup) {
  const TempDir tmp("lockd-backup");  // the snapshot files; removed at the end
  const std::string file = tmp.sub("newgroup.snap");
  LockdCluster c(3);
  int leader = c.wait_leader();
  ASSERT_NE(leader, 0);
  const std::uint64_t held = token_of(call_leader(c, "A keeper kept 600000"));
  ASSERT_NE(held, 0u);
  ASSERT_TRUE(eventually([&] { return !identity_cluster(c, 3).empty(); }));
  const std::string old_id = identity_cluster(c, 3);
  leader = c.wait_leader();
  const Outcome saved = run(lockctl(c.admin_port(leader), {"snapshot", "save", file}));
  ASSERT_EQ(saved.status, 0) << saved.err;
  // The old group goes on granting after the backup: these tokens are in
  // no file, and a restored group must never grant them again.
  std::uint64_t largest = held;
  for (int i = 0; i < 40; ++i) {
    const std::string key = "after/" + std::to_string(i % 4);
    const std::uint64_t t = token_of(call_leader(c, "A late " + key + " 60000"));
    ASSERT_GT(t, largest);
    largest = t;
    call_leader(c, "R " + std::to_string(t) + " " + key);
  }
  for (int i = 1; i <= 3; ++i) c.kill9(i);
  // Node 3's old data is kept aside: it comes back below, on the same
  // address, as a member of the old group.
  const std::string old3 = tmp.sub("old-node3");
  std::filesystem::copy(c.data_dir(3), old3, std::filesystem::copy_options::recursive);
  // Every member is restored from the file (empty data dirs; v1.3: the
  // file is staged, and cluster init forms the restored group).
  for (int i = 1; i <= 3; ++i) {
    c.wipe(i);
    c.set_node_flags(i, {"--restore-from", file});
    c.start(i);
  }
  ASSERT_EQ(c.init_group(1).status, 200);
  // Every founder has joined before node 3 goes below: one still waiting
  // may need node 3's word again (its first came while it was empty, and
  // node 1 has heard from it since; docs/cluster.md "The start gate").
  for (int id : {2, 3}) {
    ASSERT_TRUE(c.process(id).wait_for_line("founding voter", std::chrono::seconds(20)))
        << c.process(id).stderr_text();
  }
  leader = c.wait_leader();
  ASSERT_NE(leader, 0);
  const std::uint64_t next = token_of(call_leader(c, "A newcomer fresh 60000"));
  EXPECT_GT(next, largest) << "a token the old group granted after the backup would be granted again";
  EXPECT_EQ(lock_view(c.admin_port(leader), "kept").value("token", std::uint64_t{0}), held);
  ASSERT_TRUE(eventually([&] {
    return !identity_cluster(c, 1).empty() && identity_cluster(c, 1) == identity_cluster(c, 2);
  }));
  const std::string new_id = identity_cluster(c, 1);
  EXPECT_NE(new_id, old_id);

  if (leader == 3) {
    ASSERT_EQ(http_raw(c.admin_port(3), "POST /v1/cluster/leader HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                         "Content-Length: 0\r\nConnection: close\r\n\r\n").status, 200);
    leader = c.wait_leader(10s, 3);
    ASSERT_NE(leader, 0);
  }
  c.kill9(3);
  c.wipe(3);
  std::filesystem::remove_all(c.data_dir(3));
  std::filesystem::copy(old3, c.data_dir(3), std::filesystem::copy_options::recursive);
  c.set_node_flags(3, {});
  c.start(3);
  EXPECT_TRUE(c.process(3).wait_for_line("belongs to cluster " + new_id + ", we are cluster " + old_id,
                                         std::chrono::seconds(10)))
      << c.process(3).stderr_text();
  EXPECT_TRUE(eventually([&] {
    const HttpReply m = http(c.admin_port(leader), "/metrics");
    return m.body.find("lockd_peer_refused_total{reason=\"wrong_cluster\"} ") != std::string::npos &&
           m.body.find("lockd_peer_refused_total{reason=\"wrong_cluster\"} 0\n") == std::string::npos;
  })) << http(c.admin_port(leader), "/metrics").body;
  // The restored group serves on, untouched by the old member's log.
  const std::string fresh2 = call_leader(c, "A newcomer fresh2 60000");
  EXPECT_GT(token_of(fresh2), next) << fresh2 << "\nnode 1:\n" << c.process(1).stderr_text()
                                    << "\nnode 2:\n" << c.process(2).stderr_text();
  EXPECT_EQ(lock_view(c.admin_port(leader), "kept").value("token", std::uint64_t{0}), held);
}

// issue 36 item 8: a writer's release hands the key to three queued
// readers in one entry (three tokens from one index). A backup taken right
// after it must cover all three (its floor is the largest token granted,
// not base + index), `lockctl snapshot save` must write it, the file served
// by /v1/snapshot must pass `lockctl snapshot verify`, and a group restored
// from it keeps the readers and grants above all of them.
TEST(BackupRestore, BackupRightAfterAReaderHandOffRestores) {
  const TempDir tmp("lockd-backup");  // the snapshot files; removed at the end
  const std::string file = tmp.sub("handoff.snap");
  const std::string fetched = tmp.sub("fetched.snap");
  std::vector<std::uint64_t> readers;
  {
    LockdCluster c(1);
    ASSERT_NE(c.wait_leader(), 0);
    const std::uint16_t port = c.client_port(1);
    LineClient writer(port);
    const std::uint64_t tw = token_of(writer.call("A w books 600000"));
    ASSERT_NE(tw, 0u);
    LineClient q1(port), q2(port), q3(port);
    LineClient* q[3] = {&q1, &q2, &q3};
    for (int i = 0; i < 3; ++i) {
      q[i]->send("S r" + std::to_string(i) + " books 0 600000 60000\n");
      ASSERT_TRUE(eventually([&] {
        return c.status_json(1).find("\"waiters\":" + std::to_string(i + 1) + ",") != std::string::npos;
      })) << c.status_json(1);
    }
    ASSERT_EQ(writer.call("R " + std::to_string(tw) + " books"), "R " + std::to_string(tw) + " books");
    for (int i = 0; i < 3; ++i) {
      const auto f = fields(q[i]->read_line().value_or(""));
      ASSERT_EQ(f.size(), 4u);
      ASSERT_EQ(f[0], "S");
      readers.push_back(std::stoull(f[1]));
    }
    ASSERT_GT(readers[2], readers[1]);
    ASSERT_GT(readers[1], readers[0]);
    // Right after the hand-off: the last applied entry granted three tokens.
    const Outcome saved = run(lockctl(c.admin_port(1), {"snapshot", "save", file}));
    ASSERT_EQ(saved.status, 0) << saved.err;
    EXPECT_NE(saved.out.find("checksum ok"), std::string::npos) << saved.out;
    const Outcome verified = run(lockctl(c.admin_port(1), {"--json", "snapshot", "verify", file}));
    ASSERT_EQ(verified.status, 0) << verified.err;
    const json v = json::parse(verified.out, nullptr, false);
    EXPECT_GE(v.value("token_floor", std::uint64_t{0}), readers[2]) << verified.out;
    // The same state straight from /v1/snapshot, as a script would fetch it.
    const HttpReply raw = http(c.admin_port(1), "/v1/snapshot");
    ASSERT_EQ(raw.status, 200) << raw.body;
    std::ofstream(fetched, std::ios::binary) << raw.body;
    const Outcome raw_ok = run(lockctl(c.admin_port(1), {"snapshot", "verify", fetched}));
    EXPECT_EQ(raw_ok.status, 0) << raw_ok.err;
  }
  for (const std::string& f : {file, fetched}) {
    LockdCluster fresh(1, {"--restore-from", f});
    ASSERT_NE(fresh.wait_leader(), 0) << fresh.process(1).stderr_text();
    const json j = lock_view(fresh.admin_port(1), "books");
    ASSERT_EQ(j.value("mode", ""), "shared") << j.dump();
    ASSERT_EQ(j["holders"].size(), 3u) << j.dump();
    const std::uint64_t next = token_of(call_once(fresh.client_port(1), "A newcomer other 1000"));
    EXPECT_GT(next, readers[2]) << f;
    EXPECT_EQ(call_once(fresh.client_port(1), "A w books"), "T w books") << f;
  }
}

// A single-mode lockd's backup seeds a cluster: its locks held with their
// tokens, new tokens above them.
TEST(BackupRestore, SingleModeBackupSeedsACluster) {
  const TempDir tmp("lockd-backup");  // the snapshot files; removed at the end
  const std::string file = tmp.sub("single.snap");
  std::uint64_t token = 0;
  {
    LockdProcess single({"--admin", "127.0.0.1:0"});
    LineClient cl(single.port());
    token = token_of(cl.call("A alice orders/42 600000"));
    ASSERT_NE(token, 0u);
    const Outcome saved = run(lockctl(single.admin_port(), {"snapshot", "save", file}));
    ASSERT_EQ(saved.status, 0) << saved.err;
    EXPECT_NE(saved.out.find("single snapshot at index 1"), std::string::npos) << saved.out;
  }
  LockdCluster c(1, {"--restore-from", file});
  ASSERT_NE(c.wait_leader(), 0);
  const json j = lock_view(c.admin_port(1), "orders%2F42");
  EXPECT_EQ(j.value("owner", ""), "alice") << j.dump();
  EXPECT_EQ(j.value("token", std::uint64_t{0}), token);
  EXPECT_GT(token_of(call_once(c.client_port(1), "A bob other 1000")), token);

  // Its data dir now holds a node's data: a stale --restore-from, even of
  // another file, is ignored (v1.3: it never re-seeds a member), and
  // nothing in it changes.
  c.kill9(1);
  const std::string other = tmp.sub("other-single.snap");
  {
    LockdProcess single({"--admin", "127.0.0.1:0"});
    ASSERT_EQ(run(lockctl(single.admin_port(), {"snapshot", "save", other})).status, 0);
  }
  {
    ChildProcess stale;
    ASSERT_TRUE(stale.start({lockd_binary(), "--mode", "cluster", "--insecure-peers", "--node-id", "1", "--data-dir", c.data_dir(1),
                             "--admin", "off", "--peer",
                             "1=" + c.client_addr(1) + "/127.0.0.1:" + std::to_string(c.raft_port(1)),
                             "--restore-from", other}));
    EXPECT_TRUE(stale.wait_for_line("is ignored", std::chrono::seconds(10))) << stale.stderr_text();
    EXPECT_TRUE(eventually([&] { return call_once(c.client_port(1), "R 1 lockd-probe") == "N 1 lockd-probe"; }))
        << stale.stderr_text();
    stale.signal(SIGKILL);
    stale.wait_exit(5000ms);
  }
  c.start(1);  // with the original file: ignored the same way
  ASSERT_NE(c.wait_leader(), 0);
  EXPECT_EQ(lock_view(c.admin_port(1), "orders%2F42").value("token", std::uint64_t{0}), token);
}

}  // namespace
}  // namespace lockd::testing
