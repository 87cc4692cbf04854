// issue 21, "Why": what anyone who reaches a raft port could do to a real
// lockd before the peer port was hardened, each tried against real
// processes by a test that plays a member by hand (ForgedPeer). Every test
// here failed before its fix (docs/security.md, "Peer port").
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <signal.h>

#include <chrono>
#include <memory>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "eventually.h"
#include "forged_snapshot.h"
#include "http_get.h"
#include "lockd/cluster/lock_command.h"
#include "lockd/cluster/peer_handshake.h"
#include "lockd/cluster/peer_secret.h"
#include "lockd/raft/codec.h"
#include "lockd/raft/raft.h"
#include "lockd_cluster.h"

namespace lockd::testing {
namespace {

using std::chrono::milliseconds;

// Member `id`'s raft address as the nodes' --peer flags give it.
std::string raft_addr(LockdCluster& c, int id) {
  return "127.0.0.1:" + std::to_string(c.raft_port(id));
}

// A TCP connection to a node's raft port that the test drives by hand.
class ForgedPeer {
 public:
  ForgedPeer(std::uint16_t port, const std::string& from_host = "127.0.0.1") {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in src{};
    src.sin_family = AF_INET;
    inet_pton(AF_INET, from_host.c_str(), &src.sin_addr);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&src), sizeof src), 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0;
  }
  ~ForgedPeer() { ::close(fd_); }
  ForgedPeer(const ForgedPeer&) = delete;
  ForgedPeer& operator=(const ForgedPeer&) = delete;

  bool connected() const { return connected_; }
  bool write(std::string_view bytes) {
    return ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
           static_cast<ssize_t>(bytes.size());
  }
  // Says hello as member `self` to member `to` (the claim any stranger can
  // make without peer authentication: ids and addresses are the public
  // --peer list, cluster id 0 is "not formed yet") and waits for the reply.
  bool handshake_as(raft::NodeId self, raft::NodeId to, const std::string& raft_addr,
                    bool with_nonce = false,
                    cluster::MemberStatus says = cluster::MemberStatus::kUnknown,
                    cluster::DataState state = cluster::DataState::kHasData,
                    std::uint64_t incarnation = 0) {
    cluster::Handshake h;
    h.receiver_status = says;
    h.incarnation = incarnation;
    if (with_nonce) h.nonce = cluster::Nonce{};
    h.kind = cluster::HandshakeKind::kHello;
    h.sender = self;
    h.receiver = to;
    h.entry_versions = {cluster::kEntryVersionMin, cluster::kEntryVersionMax};
    h.raft_addr = raft_addr;
    h.data_state = state;
    std::string hello;
    cluster::encode_handshake(h, hello);
    if (!write(hello)) return false;
    return read_handshake(milliseconds(10'000));
  }
  // The same as a member that knows the peer secret: hello with a nonce,
  // the node's reply, then the confirm that proves the secret.
  bool authenticated_handshake_as(raft::NodeId self, raft::NodeId to, const std::string& raft_addr,
                                  const std::string& secret) {
    cluster::Handshake h;
    h.kind = cluster::HandshakeKind::kHello;
    h.sender = self;
    h.receiver = to;
    h.entry_versions = {cluster::kEntryVersionMin, cluster::kEntryVersionMax};
    h.raft_addr = raft_addr;
    h.data_state = cluster::DataState::kHasData;
    const cluster::Nonce own = cluster::random_nonce();
    h.nonce = own;
    std::string hello;
    cluster::encode_handshake(h, hello);
    if (!write(hello) || !read_handshake(milliseconds(10'000))) return false;
    std::size_t size = 0;
    std::uint16_t version = 0;
    cluster::Handshake reply;
    if (cluster::peek_handshake(received_, size, version) != cluster::HandshakeError::kOk ||
        cluster::decode_handshake(std::string_view(received_).substr(0, size), reply) !=
            cluster::HandshakeError::kOk ||
        !reply.nonce) {
      return false;
    }
    received_.erase(0, size);
    cluster::Handshake confirm;
    confirm.kind = cluster::HandshakeKind::kConfirm;
    confirm.sender = self;
    confirm.receiver = to;
    confirm.cluster_id = 0;
    confirm.proof = cluster::confirm_proof(secret, *reply.nonce, own, self, to, 0);
    std::string frame;
    cluster::encode_handshake(confirm, frame);
    return write(frame);
  }
  bool send_message(const raft::Message& m) {
    std::string frame;
    raft::encode_message(m, frame);
    return write(frame);
  }
  // True once the node closed this connection within `timeout` (0: now).
  bool wait_closed(milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    do {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, timeout.count() == 0 ? 0 : 20) <= 0) continue;
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return true;
      received_.append(buf, static_cast<std::size_t>(n));
    } while (std::chrono::steady_clock::now() < deadline);
    return false;
  }
  const std::string& received() const { return received_; }

 private:
  // Reads until one whole handshake frame is in received_.
  bool read_handshake(milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      std::size_t size = 0;
      std::uint16_t version = 0;
      if (cluster::peek_handshake(received_, size, version) != cluster::HandshakeError::kOk) {
        return false;
      }
      if (size > 0 && received_.size() >= size) return true;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return false;
      received_.append(buf, static_cast<std::size_t>(n));
    }
    return false;
  }

  int fd_ = -1;
  bool connected_ = false;
  std::string received_;
};

raft::Message message(raft::MessageType type, raft::Term term) {
  raft::Message m;
  m.type = type;
  m.from = 2;
  m.to = 1;
  m.term = term;
  return m;
}

// One snapshot in one chunk, from "node 2" as the leader of `term`.
raft::Message snapshot_message(raft::Term term, raft::Index index, std::string data) {
  raft::Message m = message(raft::MessageType::kSnapshot, term);
  m.snapshot = raft::SnapshotMeta{index, term};
  m.offset = 0;
  m.total_bytes = data.size();
  m.done = true;
  m.chunk = std::move(data);
  return m;
}

// Without peer authentication anyone who knows the public --peer list
// handshakes as a member. What it
// sends must still not be able to wreck the node: a term near 2^64 (the
// next campaign would wrap it to 0), a snapshot of garbage (stored before
// it was decoded: the node exited, and exited again on every restart), a
// snapshot whose waiter ids are beyond its index (an assertion later).
TEST(HostilePeer, ForgedTermsAndSnapshotsAreRefusedAndTheNodeRestarts) {
  LockdCluster c(3, {"--insecure-peers"});
  ASSERT_NE(c.wait_leader(), 0);
  // Some state to keep: a lock taken through the log.
  int leader = c.wait_leader();
  const std::string granted = call_once(c.client_port(leader), "A alice k1 600000");
  ASSERT_EQ(granted.rfind("A ", 0), 0u) << granted;
  // Node 1 alone from now on: the forged "node 2" is the only voice it hears.
  c.kill9(2);
  c.kill9(3);
  ASSERT_TRUE(eventually([&] { return node_metric(c, 1, "lockd_raft_role{role=\"leader\"}") == 0; }));
  const double term = node_metric(c, 1, "lockd_raft_term");
  ASSERT_GT(term, 0);

  ForgedPeer forged(c.raft_port(1));
  ASSERT_TRUE(forged.connected());
  ASSERT_TRUE(forged.handshake_as(2, 1, raft_addr(c, 2)));
  const std::string received = "lockd_peer_received_messages_total{peer=\"2\"}";
  const double before = node_metric(c, 1, received);

  // 1. Terms past raft::kMaxTerm, 2^64 - 1 included: refused, term unchanged.
  const raft::Term huge = std::numeric_limits<raft::Term>::max();
  ASSERT_TRUE(forged.send_message(message(raft::MessageType::kHeartbeat, huge)));
  ASSERT_TRUE(forged.send_message(message(raft::MessageType::kVote, raft::kMaxTerm + 1)));
  ASSERT_TRUE(eventually([&] { return node_metric(c, 1, received) >= before + 2; }));
  EXPECT_EQ(node_metric(c, 1, "lockd_raft_term"), term);

  // 2. A snapshot of garbage, far ahead of the node's log.
  const auto next = static_cast<raft::Term>(term) + 1;
  ASSERT_TRUE(forged.send_message(snapshot_message(next, 1000, "garbage, not a lock table")));
  ASSERT_TRUE(eventually([&] { return node_metric(c, 1, "lockd_raft_snapshots_refused_total") == 1; }))
      << c.process(1).stderr_text();
  // 3. A snapshot that decodes but whose waiter id is beyond its index.
  ASSERT_TRUE(forged.send_message(
      snapshot_message(next, 1000, cluster::testing::snapshot_with_waiter(1000, 1001))));
  ASSERT_TRUE(eventually([&] { return node_metric(c, 1, "lockd_raft_snapshots_refused_total") == 2; }))
      << c.process(1).stderr_text();
  EXPECT_EQ(node_metric(c, 1, "lockd_raft_snapshots_installed_total"), 0);
  EXPECT_TRUE(c.process(1).wait_for_line("refusing a snapshot at index 1000", milliseconds(10'000)))
      << c.process(1).stderr_text();
  EXPECT_LT(node_metric(c, 1, "lockd_raft_commit_index"), 1000);

  // The node restarts from what it stored, and the group serves again with
  // the lock taken before.
  c.kill9(1);
  c.start(1);
  c.start(2);
  c.start(3);
  leader = c.wait_leader();
  ASSERT_NE(leader, 0);
  EXPECT_EQ(call_once(c.client_port(leader), "A bob k1"), "T bob k1");
}

// Strangers holding every connection slot they can get on a node's raft
// port (they used to share one cap of 64 with members, and a member
// redialing found it full) do not keep a member out: connections from a
// member's host wait in a pool of their own.
TEST(HostilePeer, StrangersHoldingTheRaftPortDoNotLockMembersOut) {
  LockdCluster c(3, {"--insecure-peers"});
  ASSERT_NE(c.wait_leader(), 0);
  c.kill9(2);
  std::vector<std::unique_ptr<ForgedPeer>> strangers;
  const auto refill = [&] {
    for (auto& s : strangers) {
      if (s->wait_closed(milliseconds(0))) s = std::make_unique<ForgedPeer>(c.raft_port(1), "127.0.0.2");
    }
  };
  for (int i = 0; i < 40; ++i) {
    strangers.push_back(std::make_unique<ForgedPeer>(c.raft_port(1), "127.0.0.2"));
  }
  ASSERT_TRUE(eventually([&] {
    return node_metric(c, 1, "lockd_peer_refused_total{reason=\"pending_full\"}") >= 8;
  }));
  c.start(2);
  EXPECT_TRUE(eventually([&] {
    refill();
    return node_metric(c, 1, "lockd_peer_inbound_up{peer=\"2\"}") == 1;
  }));
  // The strangers were closed by the handshake deadline, and counted.
  EXPECT_TRUE(eventually([&] {
    refill();
    return node_metric(c, 1, "lockd_peer_refused_total{reason=\"handshake_timeout\"}") >= 1;
  }));
  EXPECT_NE(c.wait_leader(), 0);
}

// Rule 4 of protocol.md §10 and §11a: without peer authentication, a
// forged hello that says "you were removed" (the claim any stranger can
// make: it used to make node 3 exit 2 for good) does not stop a running
// member: it logs the claim and the group goes on committing with it.
TEST(HostilePeer, AForgedRemovedHelloDoesNotStopARunningMember) {
  LockdCluster c(3, {"--insecure-peers"});
  int leader = c.wait_leader();
  ASSERT_NE(leader, 0);
  ASSERT_EQ(call_leader(c, "A alice k1 600000").rfind("A ", 0), 0u);
  // Node 3 runs: it has heard from a leader.
  ASSERT_TRUE(eventually([&] { return c.status_json(3).find("\"leader\":\"") != std::string::npos; }))
      << c.status_json(3);
  const int claimed = leader == 3 ? 1 : leader;  // the claim names a real member
  ForgedPeer forged(c.raft_port(3));
  ASSERT_TRUE(forged.connected());
  ASSERT_TRUE(forged.handshake_as(static_cast<raft::NodeId>(claimed), 3, raft_addr(c, claimed),
                                  false, cluster::MemberStatus::kRemoved));
  EXPECT_TRUE(c.process(3).wait_for_line("unauthenticated peer", milliseconds(10'000)))
      << c.process(3).stderr_text();
  // Again, a few times: still one line a minute, still running.
  for (int i = 0; i < 3; ++i) {
    ForgedPeer again(c.raft_port(3));
    ASSERT_TRUE(again.handshake_as(static_cast<raft::NodeId>(claimed), 3, raft_addr(c, claimed),
                                   false, cluster::MemberStatus::kRemoved));
  }
  // The group commits, node 3 applies it, and node 3 is alive throughout.
  for (int i = 0; i < 5; ++i) {
    ASSERT_EQ(call_leader(c, "A bob k-" + std::to_string(i) + " 600000").rfind("A ", 0), 0u);
  }
  leader = c.wait_leader();
  ASSERT_NE(leader, 0);
  const double commit = node_metric(c, leader, "lockd_raft_commit_index");
  EXPECT_TRUE(eventually([&] { return node_metric(c, 3, "lockd_raft_applied_index") >= commit; }))
      << c.process(3).stderr_text();
  EXPECT_FALSE(c.process(3).wait_exit(milliseconds(100)).has_value()) << c.process(3).stderr_text();
  EXPECT_EQ(c.process(3).stderr_text().find("was removed from the group"), std::string::npos)
      << c.process(3).stderr_text();
}

// A file holding `text`, removed with the object.
class TempFile {
 public:
  explicit TempFile(const std::string& text) {
    char tmpl[] = "/tmp/lockd-secret-XXXXXX";
    const int fd = ::mkstemp(tmpl);
    path_ = tmpl;
    EXPECT_EQ(::write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
    ::close(fd);
  }
  ~TempFile() { ::unlink(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// --peer-secret-file on every member: a node started with another secret
// is refused by both others (and counted), the group goes on serving, and
// a stranger who handshakes as a member without the secret can make the
// leader store, vote or step down for nothing.
TEST(HostilePeer, ANodeWithTheWrongSecretIsRefusedAndTheGroupServes) {
  const TempFile secret("0123456789abcdef0123456789abcdef-cluster-secret\n");
  LockdCluster c(3, {"--peer-secret-file", secret.path()});
  int leader = c.wait_leader();
  ASSERT_NE(leader, 0);
  const std::string granted = call_once(c.client_port(leader), "A alice k1 600000");
  ASSERT_EQ(granted.rfind("A ", 0), 0u) << granted;

  // Node 3 comes back with another secret.
  c.kill9(3);
  const TempFile wrong("fedcba9876543210fedcba9876543210-another-secret\n");
  ChildProcess bad;
  std::vector<std::string> argv{lockd_binary(), "--mode", "cluster", "--node-id", "3",
                                "--data-dir", c.data_dir(3), "--admin", "off",
                                "--election-timeout-ms", "150", "--heartbeat-ms", "30",
                                "--peer-secret-file", wrong.path()};
  for (int i = 1; i <= 3; ++i) {
    argv.push_back("--peer");
    argv.push_back(std::to_string(i) + "=127.0.0.1:" + std::to_string(c.client_port(i)) +
                   "/127.0.0.1:" + std::to_string(c.raft_port(i)));
  }
  ASSERT_TRUE(bad.start(argv));
  ASSERT_TRUE(bad.wait_for_line("listening on", milliseconds(10'000))) << bad.stderr_text();
  const std::string auth_failed = "lockd_peer_refused_total{reason=\"auth_failed\"}";
  EXPECT_TRUE(eventually([&] {
    return node_metric(c, 1, auth_failed) > 0 && node_metric(c, 2, auth_failed) > 0;
  }));
  EXPECT_TRUE(bad.wait_for_line("did not prove it knows the peer secret", milliseconds(10'000)))
      << bad.stderr_text();
  leader = c.wait_leader();
  ASSERT_NE(leader, 0);
  EXPECT_EQ(call_once(c.client_port(leader), "A bob k1"), "T bob k1");
  const std::string granted2 = call_once(c.client_port(leader), "A carol k2 600000");
  EXPECT_EQ(granted2.rfind("A ", 0), 0u) << granted2;

  // A stranger who knows the member list but not the secret: its hello as
  // node 3 is answered, its Raft frames where the confirm belongs are not
  // read. A vote request and an append at a far higher term change nothing.
  const double term = node_metric(c, leader, "lockd_raft_term");
  ForgedPeer forged(c.raft_port(leader));
  ASSERT_TRUE(forged.handshake_as(3, static_cast<raft::NodeId>(leader), raft_addr(c, 3), true));
  raft::Message vote;
  vote.type = raft::MessageType::kVote;
  vote.from = 3;
  vote.to = static_cast<raft::NodeId>(leader);
  vote.term = static_cast<raft::Term>(term) + 100;
  raft::Message append = vote;
  append.type = raft::MessageType::kHeartbeat;
  forged.send_message(vote);
  forged.send_message(append);
  EXPECT_TRUE(forged.wait_closed(milliseconds(10'000)));
  EXPECT_EQ(node_metric(c, leader, "lockd_raft_term"), term);
  EXPECT_EQ(node_metric(c, leader, "lockd_raft_role{role=\"leader\"}"), 1);
  bad.signal(SIGKILL);
  bad.wait_exit(milliseconds(5000));
}

// The membership flake (issue 37, case 6's fix): a learner's handshake
// written before it caught up ("empty", still in flight) completes at the
// leader after its acknowledgements. Played by hand here, in that order: a
// hello of the incarnation already seen that says "empty" leaves its
// progress alone; only a new incarnation's "empty" (a wiped learner
// restarted) makes the leader replicate to it from the start. Before the
// fix every "empty" reset a caught-up learner to match 0.
TEST(HostilePeer, OnlyANewIncarnationSayingEmptyResetsALearnersProgress) {
  LockdCluster c(2, {"--insecure-peers"}, {}, /*formed=*/1);
  ASSERT_EQ(c.wait_leader(), 1);
  const std::string body = "{\"id\":2,\"client_addr\":\"" + c.client_addr(2) +
                           "\",\"raft_addr\":\"" + c.raft_addr(2) + "\"}";
  const HttpReply added = http_raw(
      c.admin_port(1), "POST /v1/cluster/members HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: "
                       "close\r\nContent-Type: application/json\r\nContent-Length: " +
                           std::to_string(body.size()) + "\r\n\r\n" + body);
  ASSERT_EQ(added.status, 200) << added.body;
  const std::string lag = "lockd_raft_learner_lag_entries{peer=\"2\"}";
  const double commit = node_metric(c, 1, "lockd_raft_commit_index");
  ASSERT_GE(commit, 2);
  ASSERT_EQ(node_metric(c, 1, lag), commit);  // nothing acknowledged yet
  constexpr std::uint64_t kFirst = 0x1111, kSecond = 0x2222;
  // Incarnation 1 of node 2, with data, acknowledges the whole log.
  ForgedPeer first(c.raft_port(1));
  ASSERT_TRUE(first.handshake_as(2, 1, raft_addr(c, 2), false, cluster::MemberStatus::kUnknown,
                                 cluster::DataState::kHasData, kFirst));
  raft::Message ack = message(raft::MessageType::kAppendResp,
                              static_cast<raft::Term>(node_metric(c, 1, "lockd_raft_term")));
  ack.index = static_cast<raft::Index>(commit);
  ASSERT_TRUE(first.send_message(ack));
  ASSERT_TRUE(eventually([&] { return node_metric(c, 1, lag) == 0; })) << node_metric(c, 1, lag);
  // A hello of the same incarnation saying "empty", completed late: the
  // reply means the leader has taken it (it adopts a hello before replying).
  ForgedPeer stale(c.raft_port(1));
  ASSERT_TRUE(stale.handshake_as(2, 1, raft_addr(c, 2), false, cluster::MemberStatus::kUnknown,
                                 cluster::DataState::kEmpty, kFirst));
  EXPECT_EQ(node_metric(c, 1, lag), 0) << "a stale handshake reset a caught-up learner";
  EXPECT_EQ(c.process(1).stderr_text().find("node 2 says its data dir is empty"), std::string::npos)
      << c.process(1).stderr_text();
  // A new incarnation saying "empty": its data is gone, so is its progress.
  ForgedPeer wiped(c.raft_port(1));
  ASSERT_TRUE(wiped.handshake_as(2, 1, raft_addr(c, 2), false, cluster::MemberStatus::kUnknown,
                                 cluster::DataState::kEmpty, kSecond));
  EXPECT_TRUE(c.process(1).wait_for_line("node 2 says its data dir is empty", milliseconds(10'000)))
      << c.process(1).stderr_text();
  EXPECT_EQ(node_metric(c, 1, lag), commit);
}

// Entry versions (protocol.md §10): an entry of a type this binary does
// not know (a newer version's), sent by an authenticated member, stops the
// follower with one line naming it (exit 1, as an undecodable membership
// entry does). Before, the codec refused the whole append: the follower
// dropped the connection, the leader resent it, for ever.
TEST(HostilePeer, AnUnknownEntryTypeStopsTheFollowerWithOneLine) {
  LockdCluster c(3);
  const int leader = c.wait_leader();
  ASSERT_NE(leader, 0);
  const int follower = leader == 3 ? 2 : 3;
  const int other = 6 - leader - follower;
  std::string error;
  const std::optional<std::string> secret = cluster::load_peer_secret(c.peer_secret_file(), error);
  ASSERT_TRUE(secret) << error;
  c.kill9(other);  // the forged connection speaks for it
  ForgedPeer forged(c.raft_port(follower));
  ASSERT_TRUE(forged.authenticated_handshake_as(static_cast<raft::NodeId>(other),
                                                static_cast<raft::NodeId>(follower),
                                                raft_addr(c, other), *secret));
  const auto term = static_cast<raft::Term>(node_metric(c, follower, "lockd_raft_term"));
  const auto last = static_cast<raft::Index>(node_metric(c, follower, "lockd_raft_commit_index"));
  raft::Message append;
  append.type = raft::MessageType::kAppend;
  append.from = static_cast<raft::NodeId>(other);
  append.to = static_cast<raft::NodeId>(follower);
  append.term = term + 1;
  append.index = last;
  append.log_term = term;
  append.entries.push_back(raft::Entry{term + 1, last + 1, static_cast<raft::EntryType>(7), "future"});
  ASSERT_TRUE(forged.send_message(append));
  EXPECT_EQ(c.process(follower).wait_exit(milliseconds(10'000)), 1) << c.process(follower).stderr_text();
  const std::string err = c.process(follower).stderr_text();
  EXPECT_NE(err.find("lockd: log entry " + std::to_string(last + 1) +
                     " has entry type 7, which this binary does not know"),
            std::string::npos)
      << err;
}

TEST(HostilePeer, AShortSecretStopsTheStartWithOneLine) {
  const TempFile short_secret("only-31-bytes-of-secret-here-xx\n");
  ChildProcess p;
  ASSERT_TRUE(p.start({lockd_binary(), "--mode", "cluster", "--node-id", "1", "--data-dir",
                       "/tmp/lockd-never-created", "--admin", "off", "--peer",
                       "1=127.0.0.1:1/127.0.0.1:2", "--peer-secret-file", short_secret.path()}));
  EXPECT_EQ(p.wait_exit(milliseconds(10'000)), 2);
  EXPECT_NE(p.stderr_text().find("the secret is 31 bytes, at least 32"), std::string::npos)
      << p.stderr_text();
}

}  // namespace
}  // namespace lockd::testing
