// PeerTransport over real sockets on 127.0.0.1 (free ports: every listener
// binds port 0 first), all transports on one event loop, polled against
// generous deadlines.
#include <arpa/inet.h>
#include <event2/event.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "lockd/cluster/lock_command.h"
#include "lockd/cluster/peer_transport.h"
#include "lockd/net/address.h"
#include "lockd/net/timer.h"
#include "lockd/raft/codec.h"
#include "sample_messages.h"

namespace lockd::cluster {
namespace {

using namespace std::chrono_literals;

// A listening socket on HOST:0; returns the fd and sets `port`.
int bound_listener(const std::string& host, std::uint16_t& port, bool do_listen = true) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  EXPECT_GE(fd, 0);
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  inet_pton(AF_INET, host.c_str(), &sa.sin_addr);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  if (do_listen) {
    EXPECT_EQ(::listen(fd, 16), 0);
  }
  port = net::local_endpoint(fd).port;
  return fd;
}

// A socket the test drives by hand: a stranger, or a forged member.
class RawPeer {
 public:
  // Connects from `from_host` (any 127.x.y.z works on Linux loopback).
  explicit RawPeer(std::uint16_t port, const std::string& from_host = "127.0.0.1") {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in src{};
    src.sin_family = AF_INET;
    inet_pton(AF_INET, from_host.c_str(), &src.sin_addr);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&src), sizeof src), 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    EXPECT_EQ(::connect(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  }
  ~RawPeer() { ::close(fd_); }
  void write(std::string_view bytes) {
    ASSERT_EQ(::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(bytes.size()));
  }
  // Reads what is there without blocking; true once the peer closed.
  bool poll_closed() {
    char buf[4096];
    for (;;) {
      const ssize_t n = ::recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
      if (n > 0) {
        received_.append(buf, static_cast<std::size_t>(n));
        continue;
      }
      if (n == 0) return true;
      return errno != EAGAIN && errno != EWOULDBLOCK;
    }
  }
  const std::string& received() const { return received_; }

 private:
  int fd_;
  std::string received_;
};

// Captures spdlog output for the test's lifetime.
class LogCapture {
 public:
  LogCapture() : previous_(spdlog::default_logger()) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out_);
    auto logger = std::make_shared<spdlog::logger>("capture", sink);
    logger->set_level(spdlog::level::info);
    spdlog::set_default_logger(logger);
  }
  ~LogCapture() { spdlog::set_default_logger(previous_); }
  std::string text() const { return out_.str(); }

 private:
  std::shared_ptr<spdlog::logger> previous_;
  std::ostringstream out_;
};

struct Node {
  std::unique_ptr<PeerTransport> transport;
  std::vector<raft::Message> received;
};

// N transports (ids 1..N) on one loop, plus an optional extra member whose
// address the test controls.
class Harness {
 public:
  Harness() : base_(event_base_new()) {
    // Wakes the loop so run_until() rechecks its predicate without busy-waiting.
    ticker_ = std::make_unique<net::Timer>(base_, [] {});
    ticker_->arm_every(2 * kNsPerMs);
  }
  ~Harness() {
    nodes_.clear();
    ticker_.reset();
    for (int fd : fds_) ::close(fd);
    event_base_free(base_);
  }

  // Members 1..n on 127.0.0.1 with pre-bound listeners; `extra` adds
  // members whose raft address is given (not started here).
  void start(int n, PeerTransportLimits limits = {}, std::vector<Member> extra = {}) {
    limits_ = limits;
    std::vector<int> listen_fds;
    for (int i = 1; i <= n; ++i) {
      std::uint16_t port = 0;
      listen_fds.push_back(bound_listener("127.0.0.1", port));
      members_.push_back(Member{static_cast<raft::NodeId>(i), {"127.0.0.1", static_cast<std::uint16_t>(7000 + i)},
                                {"127.0.0.1", port}});
    }
    for (const Member& m : extra) members_.push_back(m);
    for (int i = 1; i <= n; ++i) {
      add_node(static_cast<raft::NodeId>(i), members_, listen_fds[static_cast<std::size_t>(i - 1)]);
    }
  }

  void set_limits(PeerTransportLimits limits) { limits_ = limits; }
  // How node `id` authenticates members (call before start/add_node).
  void set_security(raft::NodeId id, PeerSecurity security) { securities_[id] = std::move(security); }
  // What node `id` says about itself from its first handshake on (call before start/add_node).
  void set_local(raft::NodeId id, PeerLocal local) { locals_[id] = std::move(local); }
  void add_node(raft::NodeId id, std::vector<Member> members, int listen_fd) {
    Node& node = nodes_[id];
    node.transport = std::make_unique<PeerTransport>(
        base_, id, std::move(members),
        [&node](const raft::Message& m) { node.received.push_back(m); }, limits_);
    if (const auto it = locals_.find(id); it != locals_.end()) node.transport->set_local(it->second);
    if (const auto it = securities_.find(id); it != securities_.end()) {
      node.transport->set_security(it->second);
    }
    std::string error;
    if (listen_fd >= 0) {
      ASSERT_TRUE(node.transport->listen_on_fd(listen_fd, error)) << error;
    } else {
      ASSERT_TRUE(node.transport->listen(error)) << error;
    }
  }

  // Runs loop turns (each followed by every transport's flush) until
  // `done` holds or the deadline passes.
  bool run_until(const std::function<bool()>& done, std::chrono::milliseconds limit = 10s) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      turn();
    }
    return true;
  }
  void turn() {
    event_base_loop(base_, EVLOOP_ONCE);
    for (auto& [id, node] : nodes_) node.transport->flush();
  }

  bool connected(raft::NodeId a, raft::NodeId b) {
    return t(a).peer_stats(b)->link == LinkState::kConnected &&
           t(b).peer_stats(a)->inbound_connected;
  }
  bool all_connected() {
    for (auto& [a, na] : nodes_) {
      for (auto& [b, nb] : nodes_) {
        if (a != b && !connected(a, b)) return false;
      }
    }
    return true;
  }

  PeerTransport& t(raft::NodeId id) { return *nodes_.at(id).transport; }
  Node& node(raft::NodeId id) { return nodes_.at(id); }
  void remove(raft::NodeId id) { nodes_.erase(id); }
  const std::vector<Member>& members() const { return members_; }
  void set_members(std::vector<Member> m) { members_ = std::move(m); }
  std::uint16_t port(raft::NodeId id) const { return members_.at(id - 1).raft.port; }
  void keep_fd(int fd) { fds_.push_back(fd); }
  event_base* base() { return base_; }

 private:
  event_base* base_;
  std::unique_ptr<net::Timer> ticker_;
  PeerTransportLimits limits_;
  std::vector<Member> members_;
  std::map<raft::NodeId, Node> nodes_;
  std::map<raft::NodeId, PeerLocal> locals_;
  std::map<raft::NodeId, PeerSecurity> securities_;
  std::vector<int> fds_;
};

constexpr std::uint64_t kCluster = 0xc1c1c1c1d2d2d2d2ull;

Handshake forged(HandshakeKind kind, raft::NodeId sender, raft::NodeId receiver,
                 std::uint64_t cluster) {
  Handshake h;
  h.kind = kind;
  h.sender = sender;
  h.receiver = receiver;
  h.cluster_id = cluster;
  h.entry_versions = {kEntryVersionMin, kEntryVersionMax};
  h.data_state = DataState::kHasData;
  return h;
}

std::string hello(raft::NodeId sender, raft::NodeId receiver, std::uint64_t cluster) {
  std::string out;
  encode_handshake(forged(HandshakeKind::kHello, sender, receiver, cluster), out);
  return out;
}

// The size of the handshake frame at the start of `bytes` (0: none).
std::size_t handshake_size(std::string_view bytes) {
  std::size_t size = 0;
  std::uint16_t version = 0;
  if (peek_handshake(bytes, size, version) != HandshakeError::kOk) return 0;
  return size;
}

std::string frame(const raft::Message& m) {
  std::string out;
  raft::encode_message(m, out);
  return out;
}

TEST(PeerTransport, TwoNodesExchangeEveryMessageType) {
  Harness h;
  h.start(2);
  ASSERT_TRUE(h.run_until([&] { return h.all_connected(); }));
  const auto to2 = testing::every_message_type(1, 2);
  const auto to1 = testing::every_message_type(2, 1);
  for (const auto& m : to2) h.t(1).send(m);
  for (const auto& m : to1) h.t(2).send(m);
  ASSERT_TRUE(h.run_until([&] {
    return h.node(1).received.size() >= to1.size() && h.node(2).received.size() >= to2.size();
  }));
  EXPECT_EQ(h.node(2).received, to2);
  EXPECT_EQ(h.node(1).received, to1);
  const PeerStats& s = *h.t(1).peer_stats(2);
  EXPECT_EQ(s.messages_sent, to2.size());
  EXPECT_EQ(s.messages_received, to1.size());
  EXPECT_EQ(s.messages_dropped, 0u);
  EXPECT_EQ(s.decode_errors, 0u);
  EXPECT_GT(s.bytes_sent, 0u);
  EXPECT_GT(s.bytes_received, 0u);
  EXPECT_GT(s.last_contact_ns, 0);
  EXPECT_EQ(h.t(1).peer_stats(1), nullptr);
}

TEST(PeerTransport, ThreeNodesEveryPairEveryType) {
  Harness h;
  h.start(3);
  ASSERT_TRUE(h.run_until([&] { return h.all_connected(); }));
  std::map<std::pair<raft::NodeId, raft::NodeId>, std::vector<raft::Message>> sent;
  for (raft::NodeId a = 1; a <= 3; ++a) {
    for (raft::NodeId b = 1; b <= 3; ++b) {
      if (a == b) continue;
      sent[{a, b}] = testing::every_message_type(a, b);
      for (const auto& m : sent[{a, b}]) h.t(a).send(m);
    }
  }
  const std::size_t per_node = 2 * raft::kMaxMessageType;
  ASSERT_TRUE(h.run_until([&] {
    return h.node(1).received.size() >= per_node && h.node(2).received.size() >= per_node &&
           h.node(3).received.size() >= per_node;
  }));
  for (raft::NodeId b = 1; b <= 3; ++b) {
    ASSERT_EQ(h.node(b).received.size(), per_node);
    // Each sender's messages arrive in order on its own connection.
    std::map<raft::NodeId, std::vector<raft::Message>> by_sender;
    for (const auto& m : h.node(b).received) by_sender[m.from].push_back(m);
    for (auto& [a, msgs] : by_sender) EXPECT_EQ(msgs, (sent[{a, b}])) << a << "->" << b;
  }
}

TEST(PeerTransport, OneWritePerPeerPerFlush) {
  Harness h;
  h.start(3);
  ASSERT_TRUE(h.run_until([&] { return h.all_connected(); }));
  const std::uint64_t writes2 = h.t(1).peer_stats(2)->writes;
  const std::uint64_t writes3 = h.t(1).peer_stats(3)->writes;
  const std::uint64_t total = h.t(1).stats().writes;
  auto msgs = testing::every_message_type(1, 2);
  for (int round = 0; round < 5; ++round) {
    for (const auto& m : msgs) h.t(1).send(m);
  }
  raft::Message hb = msgs[6];
  hb.to = 3;
  for (int i = 0; i < 20; ++i) h.t(1).send(hb);
  EXPECT_EQ(h.t(1).peer_stats(2)->writes, writes2) << "send() must only queue";
  h.t(1).flush();
  EXPECT_EQ(h.t(1).peer_stats(2)->writes, writes2 + 1);
  EXPECT_EQ(h.t(1).peer_stats(3)->writes, writes3 + 1);
  EXPECT_EQ(h.t(1).stats().writes, total + 2);
  EXPECT_EQ(h.t(1).peer_stats(2)->queued_bytes, 0u);
  ASSERT_TRUE(h.run_until([&] {
    return h.node(2).received.size() == 5 * msgs.size() && h.node(3).received.size() == 20;
  }));
  // Nothing queued: a flush writes nothing.
  const std::uint64_t after = h.t(1).stats().writes;
  h.t(1).flush();
  EXPECT_EQ(h.t(1).stats().writes, after);
}

TEST(PeerTransport, ReconnectsAfterThePeerRestarts) {
  Harness h;
  h.start(2);
  ASSERT_TRUE(h.run_until([&] { return h.all_connected(); }));
  const std::uint64_t reconnects = h.t(1).peer_stats(2)->reconnects;

  h.remove(2);  // closes its listener and every connection
  ASSERT_TRUE(h.run_until([&] { return h.t(1).peer_stats(2)->link != LinkState::kConnected; }));
  EXPECT_FALSE(h.t(1).peer_stats(2)->inbound_connected);
  // While it is away, 1 keeps redialing with backoff and sends are dropped or bounded.
  ASSERT_TRUE(h.run_until([&] { return h.t(1).peer_stats(2)->reconnects >= reconnects + 2; }));
  h.t(1).send(testing::every_message_type(1, 2)[0]);

  h.add_node(2, h.members(), -1);  // listen() on the same address again
  ASSERT_TRUE(h.run_until([&] { return h.all_connected(); }));
  const auto msgs = testing::every_message_type(1, 2);
  for (const auto& m : msgs) h.t(1).send(m);
  const auto back = testing::every_message_type(2, 1);
  for (const auto& m : back) h.t(2).send(m);
  ASSERT_TRUE(h.run_until([&] {
    return h.node(2).received.size() >= msgs.size() && h.node(1).received.size() >= back.size();
  }));
  EXPECT_EQ(h.node(2).received, msgs);
}

TEST(PeerTransport, DropsAndCountsWhileThePeerIsDown) {
  Harness h;
  // Member 2's port is bound but not listening: every dial is refused.
  std::uint16_t dead_port = 0;
  h.keep_fd(bound_listener("127.0.0.1", dead_port, false));
  h.start(1, {}, {Member{2, {"127.0.0.1", 7002}, {"127.0.0.1", dead_port}}});
  ASSERT_TRUE(h.run_until([&] {
    return h.t(1).peer_stats(2)->link == LinkState::kDown && h.t(1).peer_stats(2)->reconnects >= 2;
  }));
  // Down: dropped at once.
  const std::uint64_t dropped = h.t(1).peer_stats(2)->messages_dropped;
  raft::Message m = testing::every_message_type(1, 2)[6];
  int sent_while_down = 0;
  for (int i = 0; i < 10; ++i) {
    if (h.t(1).peer_stats(2)->link != LinkState::kDown) break;
    h.t(1).send(m);
    ++sent_while_down;
  }
  EXPECT_EQ(h.t(1).peer_stats(2)->messages_dropped, dropped + static_cast<std::uint64_t>(sent_while_down));
  EXPECT_EQ(h.t(1).peer_stats(2)->queued_bytes, 0u);
}

TEST(PeerTransport, QueueIsBoundedWhenThePeerDoesNotRead) {
  Harness h;
  // Member 2 is a socket that listens but never accepts or reads: TCP
  // connects (the kernel's backlog), the handshake is never answered, so
  // messages pile up in the queue behind the hello.
  std::uint16_t port = 0;
  h.keep_fd(bound_listener("127.0.0.1", port));
  PeerTransportLimits limits;
  limits.max_queued_bytes_per_peer = 256 * 1024;
  limits.handshake_timeout_ns = 60'000 * kNsPerMs;
  h.start(1, limits, {Member{2, {"127.0.0.1", 7002}, {"127.0.0.1", port}}});
  ASSERT_TRUE(h.run_until([&] { return h.t(1).peer_stats(2)->writes >= 1; }));
  ASSERT_EQ(h.t(1).peer_stats(2)->link, LinkState::kConnecting);

  raft::Message big = testing::every_message_type(1, 2)[8];  // kSnapshot
  big.chunk.assign(64 * 1024, 'c');
  constexpr int kMessages = 64;  // 4 MiB: 16 times the bound
  for (int i = 0; i < kMessages; ++i) {
    h.t(1).send(big);
    EXPECT_LE(h.t(1).peer_stats(2)->queued_bytes, limits.max_queued_bytes_per_peer);
    if (i % 8 == 0) h.turn();
  }
  const PeerStats& s = *h.t(1).peer_stats(2);
  EXPECT_GT(s.messages_dropped, 0u);
  EXPECT_EQ(s.messages_sent + s.messages_dropped, static_cast<std::uint64_t>(kMessages));
  EXPECT_LE(s.queued_bytes, limits.max_queued_bytes_per_peer);
  EXPECT_EQ(s.link, LinkState::kConnecting);
}

TEST(PeerTransport, DialsFromItsOwnRaftHost) {
  Harness h;
  // Node 1's raft host is 127.0.0.2; member 2 is a raw listener on
  // 127.0.0.1 that records who connected.
  std::uint16_t port1 = 0;
  const int fd1 = bound_listener("127.0.0.2", port1);
  std::uint16_t port2 = 0;
  const int fd2 = bound_listener("127.0.0.1", port2);
  h.keep_fd(fd2);
  std::vector<Member> members = {Member{1, {"127.0.0.2", 7001}, {"127.0.0.2", port1}},
                                 Member{2, {"127.0.0.1", 7002}, {"127.0.0.1", port2}}};
  h.add_node(1, members, fd1);
  int accepted = -1;
  ASSERT_TRUE(h.run_until([&] {
    accepted = ::accept4(fd2, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    return accepted >= 0;
  }));
  sockaddr_in peer{};
  socklen_t len = sizeof peer;
  ASSERT_EQ(getpeername(accepted, reinterpret_cast<sockaddr*>(&peer), &len), 0);
  char host[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &peer.sin_addr, host, sizeof host);
  EXPECT_STREQ(host, "127.0.0.2");
  ::close(accepted);
}

TEST(PeerTransport, MessagesQueuedWhileConnectingGoOutOnceTheReplyChecks) {
  Harness h;
  h.start(2);
  ASSERT_EQ(h.t(1).peer_stats(2)->link, LinkState::kConnecting);
  const auto msgs = testing::every_message_type(1, 2);
  for (const auto& m : msgs) h.t(1).send(m);
  EXPECT_EQ(h.t(1).peer_stats(2)->messages_dropped, 0u);
  ASSERT_TRUE(h.run_until([&] { return h.node(2).received.size() >= msgs.size(); }));
  EXPECT_EQ(h.node(2).received, msgs);
  EXPECT_EQ(h.t(1).peer_stats(2)->messages_dropped, 0u);
}

TEST(PeerTransport, StalledLinkIsClosedAndRedialed) {
  Harness h;
  // Member 2 is a raw socket that answers the handshake and then never
  // reads: the socket buffers fill and the link stops making progress.
  std::uint16_t port = 0;
  const int lfd = bound_listener("127.0.0.1", port);
  h.keep_fd(lfd);
  PeerTransportLimits limits;
  limits.write_stall_timeout_ns = 200 * kNsPerMs;
  limits.max_queued_bytes_per_peer = 1u << 20;
  h.start(1, limits, {Member{2, {"127.0.0.1", 7002}, {"127.0.0.1", port}}});
  int conn = -1;
  ASSERT_TRUE(h.run_until([&] {
    if (conn < 0) conn = ::accept4(lfd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    return conn >= 0;
  }));
  std::string reply;
  encode_handshake(forged(HandshakeKind::kReply, 2, 1, 0), reply);
  ASSERT_EQ(::send(conn, reply.data(), reply.size(), MSG_NOSIGNAL), static_cast<ssize_t>(reply.size()));
  ASSERT_TRUE(h.run_until([&] { return h.t(1).peer_stats(2)->link == LinkState::kConnected; }));

  raft::Message big = testing::every_message_type(1, 2)[8];
  big.chunk.assign(64 * 1024, 'c');
  ASSERT_TRUE(h.run_until([&] {
    for (int i = 0; i < 4; ++i) h.t(1).send(big);
    return h.t(1).peer_stats(2)->write_stalls >= 1;
  }, 30s));
  EXPECT_NE(h.t(1).peer_stats(2)->link, LinkState::kConnected);
  EXPECT_GT(h.t(1).peer_stats(2)->messages_dropped, 0u);
  EXPECT_EQ(h.t(1).peer_stats(2)->queued_bytes, 0u);
  ::close(conn);
}

class InboundAbuse : public ::testing::Test {
 protected:
  void SetUp() override {
    PeerTransportLimits limits;
    limits.handshake_timeout_ns = 150 * kNsPerMs;
    limits.max_pending_from_members = 4;
    limits.max_pending_strangers = 2;
    limits.refusal_warn_interval_ns = 0;  // every refusal logs: the tests read them
    // Members 2 and 3 exist only as forged raw sockets.
    std::uint16_t p2 = 0, p3 = 0;
    h.keep_fd(bound_listener("127.0.0.1", p2, false));
    h.keep_fd(bound_listener("127.0.0.1", p3, false));
    h.start(1, limits,
            {Member{2, {"127.0.0.1", 7002}, {"127.0.0.1", p2}},
             Member{3, {"127.0.0.1", 7003}, {"127.0.0.1", p3}}});
    PeerLocal local = h.t(1).local();
    local.cluster_id = kCluster;
    h.t(1).set_local(local);
  }
  // Waits until node 1 closed `raw`.
  void expect_closed(RawPeer& raw) {
    EXPECT_TRUE(h.run_until([&] { return raw.poll_closed(); }));
    h.turn();
    EXPECT_EQ(h.t(1).inbound_connections(), 0u);
  }
  std::uint64_t hash() { return kCluster; }

  Harness h;
};

TEST_F(InboundAbuse, GarbageClosesAndCounts) {
  RawPeer raw(h.port(1));
  raw.write("GET / HTTP/1.1\r\nHost: lockd\r\n\r\nGET / HTTP/1.1\r\n\r\n");
  expect_closed(raw);
  EXPECT_EQ(h.t(1).stats().decode_errors, 1u);
  EXPECT_TRUE(raw.received().empty()) << "a stranger gets no reply";
}

TEST_F(InboundAbuse, BadCrcClosesAndCountsOnThePeer) {
  RawPeer raw(h.port(1));
  std::string bad = frame(testing::every_message_type(2, 1)[6]);
  bad[bad.size() - 2] = static_cast<char>(bad[bad.size() - 2] ^ 0x40);
  raw.write(hello(2, 1, hash()) + bad);
  expect_closed(raw);
  EXPECT_GT(raw.received().size(), 0u) << "the reply came before the close";
  EXPECT_EQ(handshake_size(raw.received()), raw.received().size());
  EXPECT_EQ(h.t(1).peer_stats(2)->decode_errors, 1u);
  EXPECT_EQ(h.t(1).peer_stats(2)->messages_received, 0u);
  EXPECT_FALSE(h.t(1).peer_stats(2)->inbound_connected);
  EXPECT_TRUE(h.node(1).received.empty());
}

TEST_F(InboundAbuse, WrongFromClosesTheLink) {
  RawPeer raw(h.port(1));
  const auto good = testing::every_message_type(2, 1)[6];
  auto forged = good;
  forged.from = 3;
  raw.write(hello(2, 1, hash()) + frame(good) + frame(forged));
  expect_closed(raw);
  ASSERT_EQ(h.node(1).received.size(), 1u);  // the good one before it
  EXPECT_EQ(h.node(1).received[0], good);
  EXPECT_EQ(h.t(1).peer_stats(2)->decode_errors, 1u);
  EXPECT_EQ(h.t(1).peer_stats(3)->decode_errors, 0u);
}

TEST_F(InboundAbuse, WrongToClosesTheLink) {
  RawPeer raw(h.port(1));
  auto m = testing::every_message_type(2, 3)[0];
  raw.write(hello(2, 1, hash()) + frame(m));
  expect_closed(raw);
  EXPECT_EQ(h.t(1).peer_stats(2)->decode_errors, 1u);
  EXPECT_TRUE(h.node(1).received.empty());
}

TEST_F(InboundAbuse, WrongClusterIdIsRefusedLoggedAndCounted) {
  LogCapture log;
  RawPeer raw(h.port(1));
  raw.write(hello(2, 1, hash() ^ 0x5a5a));
  expect_closed(raw);
  EXPECT_EQ(h.t(1).stats().handshake_rejected, 1u);
  EXPECT_EQ(h.t(1).stats().refused_by_reason[static_cast<std::size_t>(HandshakeError::kWrongCluster)],
            1u);
  EXPECT_EQ(h.t(1).peer_stats(2)->handshake_rejected, 1u);
  EXPECT_FALSE(h.t(1).peer_stats(2)->inbound_connected);
  EXPECT_NE(log.text().find("refusing a connection from node 2 (127.0.0.1): node 2 belongs to "
                            "cluster 0xc1c1c1c1d2d28888, we are cluster 0xc1c1c1c1d2d2d2d2"),
            std::string::npos)
      << log.text();
  // The refusal still answers with our own view, so the dialer can log too.
  Handshake reply;
  ASSERT_EQ(handshake_size(raw.received()), raw.received().size());
  ASSERT_EQ(decode_handshake(raw.received(), reply), HandshakeError::kOk);
  EXPECT_EQ(reply.cluster_id, hash());
  EXPECT_EQ(reply.sender, 1u);
  EXPECT_EQ(reply.kind, HandshakeKind::kReply);
  EXPECT_EQ(reply.raft_addr, h.members()[0].raft.to_string());
}

TEST_F(InboundAbuse, OneOneNodeIsAnsweredInItsOwnLayout) {
  LogCapture log;
  RawPeer raw(h.port(1));
  std::string v1;
  encode_handshake_v1(1, HandshakeKind::kHello, 2, 1, v1);
  raw.write(v1);
  expect_closed(raw);
  EXPECT_EQ(h.t(1).stats().refused_by_reason[static_cast<std::size_t>(HandshakeError::kBadVersion)],
            1u);
  EXPECT_NE(log.text().find("peer handshake version 1 (lockd 1.1), we speak 2"), std::string::npos)
      << log.text();
  // 36 bytes a 1.1 node decodes (its CRC over 32 bytes), naming version 2.
  ASSERT_EQ(raw.received().size(), kHandshakeV1Bytes);
  EXPECT_EQ(raw.received().substr(4, 2), std::string("\x02\x00", 2));
  EXPECT_EQ(raft::crc32c(raw.received().substr(0, 32)),
            static_cast<std::uint32_t>(static_cast<unsigned char>(raw.received()[32]) |
                                       (static_cast<unsigned char>(raw.received()[33]) << 8) |
                                       (static_cast<unsigned char>(raw.received()[34]) << 16) |
                                       (static_cast<std::uint32_t>(static_cast<unsigned char>(raw.received()[35])) << 24)));
}

TEST_F(InboundAbuse, WrongNodeIdsAreRefusedAndLogged) {
  LogCapture log;
  {
    RawPeer raw(h.port(1));
    raw.write(hello(2, 3, hash()));  // thinks it reached node 3
    expect_closed(raw);
  }
  {
    RawPeer raw(h.port(1));
    raw.write(hello(9, 1, hash()));  // not a member
    expect_closed(raw);
  }
  {
    RawPeer raw(h.port(1));
    raw.write(hello(1, 1, hash()));  // our own id
    expect_closed(raw);
  }
  EXPECT_EQ(h.t(1).stats().handshake_rejected, 3u);
  EXPECT_NE(log.text().find("expected to reach node 3, we are node 1"), std::string::npos)
      << log.text();
  EXPECT_NE(log.text().find("sender node id 9 is not a member"), std::string::npos) << log.text();
  EXPECT_NE(log.text().find("is our own id"), std::string::npos) << log.text();
}

TEST_F(InboundAbuse, SilentConnectionIsClosedAfterTheHandshakeTimeout) {
  RawPeer raw(h.port(1));
  ASSERT_TRUE(h.run_until([&] { return h.t(1).inbound_connections() == 1; }));
  expect_closed(raw);
  EXPECT_EQ(h.t(1).stats().handshake_timeouts, 1u);
}

// Connections still handshaking are bounded in two pools: from the IPs of
// members' raft addresses (here 127.0.0.1) and from anywhere else.
TEST_F(InboundAbuse, PendingConnectionsAreBoundedPerPool) {
  std::vector<std::unique_ptr<RawPeer>> raws;
  for (int i = 0; i < 6; ++i) raws.push_back(std::make_unique<RawPeer>(h.port(1)));
  for (int i = 0; i < 3; ++i) raws.push_back(std::make_unique<RawPeer>(h.port(1), "127.0.0.2"));
  ASSERT_TRUE(h.run_until([&] { return h.t(1).stats().accepted == 9; }));
  EXPECT_EQ(h.t(1).inbound_connections(), 4u + 2u);
  EXPECT_EQ(h.t(1).stats().inbound_refused, 3u);
  EXPECT_EQ(h.t(1).stats().refused_by_transport[static_cast<std::size_t>(
                TransportRefusal::kPendingFull)],
            3u);
}

// A peer that dribbles its hello a byte at a time gets no longer than a
// silent one: the deadline runs from the accept.
TEST_F(InboundAbuse, ADribbledHandshakeEndsAtTheSameDeadline) {
  RawPeer raw(h.port(1));
  const std::string bytes = hello(2, 1, hash());
  const auto start = std::chrono::steady_clock::now();
  std::size_t sent = 0;
  ASSERT_TRUE(h.run_until([&] {
    if (sent + 1 < bytes.size() && std::chrono::steady_clock::now() - start > sent * 5ms) {
      raw.write(bytes.substr(sent++, 1));
    }
    return raw.poll_closed();
  }));
  EXPECT_LT(sent + 1, bytes.size()) << "the whole hello got through";
  EXPECT_EQ(h.t(1).stats().handshake_timeouts, 1u);
  EXPECT_EQ(h.t(1).stats().refused_by_transport[static_cast<std::size_t>(
                TransportRefusal::kHandshakeTimeout)],
            1u);
}

TEST(PeerTransport, HandshakeTellsTheOwnerWhatEachPeerSaid) {
  Harness h;
  PeerLocal l2;
  l2.admin_addr = "127.0.0.1:9002";
  l2.entry_versions = {kEntryVersionMin, static_cast<std::uint16_t>(kEntryVersionMax + 1)};
  l2.data_state = DataState::kHasData;
  h.set_local(2, l2);
  h.start(2);
  std::vector<Handshake> seen;
  h.t(1).set_on_handshake([&](const Handshake& hs) { seen.push_back(hs); });
  ASSERT_TRUE(h.run_until([&] { return h.all_connected() && seen.size() >= 2; }));
  // Node 2's hello (it dialed us) and its reply (we dialed it) say the same.
  for (const Handshake& hs : seen) {
    EXPECT_EQ(hs.sender, 2u);
    EXPECT_EQ(hs.admin_addr, "127.0.0.1:9002");
    EXPECT_EQ(hs.client_addr, "127.0.0.1:7002");
    EXPECT_EQ(hs.raft_addr, h.members()[1].raft.to_string());
    EXPECT_EQ(hs.entry_versions.max, kEntryVersionMax + 1);
    EXPECT_EQ(hs.data_state, DataState::kHasData);
  }
}

TEST(PeerTransport, NodesOfDifferentClustersRefuseEachOther) {
  LogCapture log;
  Harness h;
  PeerTransportLimits limits;
  limits.refusal_warn_interval_ns = 0;
  h.set_limits(limits);
  std::uint16_t p1 = 0, p2 = 0;
  const int fd1 = bound_listener("127.0.0.1", p1);
  const int fd2 = bound_listener("127.0.0.1", p2);
  std::vector<Member> a = {Member{1, {"127.0.0.1", 7001}, {"127.0.0.1", p1}},
                           Member{2, {"127.0.0.1", 7002}, {"127.0.0.1", p2}}};
  // Same ids and addresses, but node 2 kept the data of a re-created cluster.
  PeerLocal l1;
  l1.entry_versions = {kEntryVersionMin, kEntryVersionMax};
  l1.cluster_id = 0x1111;
  h.set_local(1, l1);
  PeerLocal l2 = l1;
  l2.cluster_id = 0x2222;
  h.set_local(2, l2);
  h.add_node(1, a, fd1);
  h.add_node(2, a, fd2);
  // Queued behind the hello: must never reach node 2, and must not turn
  // node 2's refusal into a reset that hides its reply from node 1.
  h.t(1).send(testing::every_message_type(1, 2)[6]);
  ASSERT_TRUE(h.run_until([&] {
    return h.t(1).stats().handshake_rejected >= 2 && h.t(2).stats().handshake_rejected >= 2;
  }));
  EXPECT_NE(h.t(1).peer_stats(2)->link, LinkState::kConnected);
  EXPECT_NE(h.t(2).peer_stats(1)->link, LinkState::kConnected);
  EXPECT_FALSE(h.t(1).peer_stats(2)->inbound_connected);
  h.t(1).send(testing::every_message_type(1, 2)[6]);
  for (int i = 0; i < 20; ++i) h.turn();
  EXPECT_TRUE(h.node(2).received.empty());
  // Both sides say why: the acceptor of the hello, the dialer of the reply.
  EXPECT_NE(log.text().find("refusing a connection from node 2 (127.0.0.1): node 2 belongs to "
                            "cluster 0x0000000000002222, we are cluster 0x0000000000001111"),
            std::string::npos)
      << log.text();
  EXPECT_NE(log.text().find("refusing the answer of node 2 (127.0.0.1): node 2 belongs to cluster "
                            "0x0000000000002222"),
            std::string::npos)
      << log.text();
  EXPECT_GE(h.t(1).stats().refused_by_reason[static_cast<std::size_t>(HandshakeError::kWrongCluster)],
            2u);
}

TEST(PeerTransport, AMemberAtAnotherAddressIsRefused) {
  LogCapture log;
  Harness h;
  PeerTransportLimits limits;
  limits.refusal_warn_interval_ns = 0;
  h.set_limits(limits);
  std::uint16_t p1 = 0, p2 = 0;
  const int fd1 = bound_listener("127.0.0.1", p1);
  const int fd2 = bound_listener("127.0.0.1", p2);
  std::vector<Member> a = {Member{1, {"127.0.0.1", 7001}, {"127.0.0.1", p1}},
                           Member{2, {"127.0.0.1", 7002}, {"127.0.0.1", p2}}};
  std::vector<Member> b = a;
  b[0].raft.host = "localhost";  // node 2's --peer list spells node 1 differently
  h.add_node(1, a, fd1);
  h.add_node(2, b, fd2);
  ASSERT_TRUE(h.run_until([&] { return h.t(2).stats().handshake_rejected >= 1; }));
  EXPECT_FALSE(h.t(2).peer_stats(1)->inbound_connected);
  EXPECT_NE(log.text().find("node 1 says its raft address is 127.0.0.1:" + std::to_string(p1) +
                            ", our member list has localhost:" + std::to_string(p1)),
            std::string::npos)
      << log.text();
}

// --- issue 21: strangers, forgers and the peer secret --------------------

// Two real transports on 127.0.0.1 (1 and 2), with `limits` and, when
// `secret1`/`secret2` are not empty, those secrets.
// Returns node 2's listening fd when `start2` is false (for a later add_node).
int start_pair(Harness& h, PeerTransportLimits limits, const std::string& secret1 = "",
               const std::string& secret2 = "", bool start2 = true) {
  h.set_limits(limits);
  std::uint16_t p1 = 0, p2 = 0;
  const int fd1 = bound_listener("127.0.0.1", p1);
  const int fd2 = bound_listener("127.0.0.1", p2);
  std::vector<Member> m = {Member{1, {"127.0.0.1", 7001}, {"127.0.0.1", p1}},
                           Member{2, {"127.0.0.1", 7002}, {"127.0.0.1", p2}}};
  h.set_members(m);
  h.set_security(1, PeerSecurity{secret1});
  h.set_security(2, PeerSecurity{secret2});
  h.add_node(1, m, fd1);
  if (!start2) return fd2;
  h.add_node(2, m, fd2);
  return -1;
}

std::uint64_t refused(PeerTransport& t, TransportRefusal r) {
  return t.stats().refused_by_transport[static_cast<std::size_t>(r)];
}
std::uint64_t refused(PeerTransport& t, HandshakeError e) {
  return t.stats().refused_by_reason[static_cast<std::size_t>(e)];
}

// Strangers (any host but the members') holding every pending slot they
// can get do not keep a member from connecting: its pool is its own.
TEST(PeerTransportHardening, StrangersFillingTheirPoolDoNotLockAMemberOut) {
  Harness h;
  PeerTransportLimits limits;
  limits.max_pending_strangers = 3;
  limits.max_pending_from_members = 3;
  limits.handshake_timeout_ns = 10'000 * kNsPerMs;  // the strangers stay for the whole test
  const int fd2 = start_pair(h, limits, "", "", false);
  std::vector<std::unique_ptr<RawPeer>> strangers;
  for (int i = 0; i < 5; ++i) strangers.push_back(std::make_unique<RawPeer>(h.port(1), "127.0.0.2"));
  ASSERT_TRUE(h.run_until([&] { return h.t(1).stats().accepted == 5; }));
  EXPECT_EQ(refused(h.t(1), TransportRefusal::kPendingFull), 2u);
  h.add_node(2, h.members(), fd2);
  ASSERT_TRUE(h.run_until([&] { return h.connected(2, 1) && h.connected(1, 2); }));
  h.t(2).send(testing::every_message_type(2, 1)[6]);
  ASSERT_TRUE(h.run_until([&] { return h.node(1).received.size() == 1; }));
  EXPECT_EQ(h.t(1).inbound_connections(), 3u + 1u);
}

// Without peer auth anyone can handshake as member 2, but that no longer
// closes member 2's working connection (it used to: "it redialed"), and
// forgers cannot crowd it out: past max_links_per_member they are refused.
TEST(PeerTransportHardening, AForgedHelloDoesNotTakeOverAMembersLink) {
  LogCapture log;
  Harness h;
  PeerTransportLimits limits;
  limits.max_links_per_member = 2;
  limits.refusal_warn_interval_ns = 0;
  start_pair(h, limits);
  ASSERT_TRUE(h.run_until([&] { return h.all_connected(); }));
  std::vector<std::unique_ptr<RawPeer>> forgers;
  for (int i = 0; i < 3; ++i) {
    forgers.push_back(std::make_unique<RawPeer>(h.port(1)));
    forgers.back()->write(hello(2, 1, 0));
  }
  ASSERT_TRUE(h.run_until([&] {
    return refused(h.t(1), TransportRefusal::kMemberLinksFull) == 2u;
  }));
  // Member 2's own link is still up: what it sends arrives, with no redial.
  h.t(2).send(testing::every_message_type(2, 1)[6]);
  ASSERT_TRUE(h.run_until([&] { return h.node(1).received.size() == 1; }));
  EXPECT_EQ(h.t(2).peer_stats(1)->reconnects, 0u);
  EXPECT_EQ(h.t(2).peer_stats(1)->link, LinkState::kConnected);
  EXPECT_NE(log.text().find("node 2 already has 2 connections to us"), std::string::npos)
      << log.text();
}

TEST(PeerTransportHardening, MembersWithTheSameSecretConnect) {
  Harness h;
  const std::string secret(40, 'k');
  start_pair(h, {}, secret, secret);
  ASSERT_TRUE(h.run_until([&] { return h.all_connected(); }));
  const auto to2 = testing::every_message_type(1, 2);
  const auto to1 = testing::every_message_type(2, 1);
  for (const auto& m : to2) h.t(1).send(m);
  for (const auto& m : to1) h.t(2).send(m);
  ASSERT_TRUE(h.run_until([&] {
    return h.node(2).received.size() == to2.size() && h.node(1).received.size() == to1.size();
  }));
  EXPECT_EQ(h.node(2).received, to2);
  EXPECT_EQ(h.node(1).received, to1);
  EXPECT_EQ(h.t(1).stats().handshake_rejected + h.t(2).stats().handshake_rejected, 0u);
}

// Messages queued while connecting wait behind the confirm and then arrive.
TEST(PeerTransportHardening, MessagesQueuedBeforeTheConfirmArriveAfterIt) {
  Harness h;
  const std::string secret(40, 'k');
  start_pair(h, {}, secret, secret);
  const auto to2 = testing::every_message_type(1, 2);
  for (const auto& m : to2) h.t(1).send(m);  // still connecting
  ASSERT_TRUE(h.run_until([&] { return h.node(2).received.size() == to2.size(); }));
  EXPECT_EQ(h.node(2).received, to2);
}

TEST(PeerTransportHardening, AnotherSecretIsRefusedBothWaysAndNothingArrives) {
  LogCapture log;
  Harness h;
  PeerTransportLimits limits;
  limits.refusal_warn_interval_ns = 0;
  start_pair(h, limits, std::string(40, 'a'), std::string(40, 'b'));
  h.t(1).send(testing::every_message_type(1, 2)[6]);
  ASSERT_TRUE(h.run_until([&] {
    return refused(h.t(1), HandshakeError::kAuthFailed) >= 2 &&
           refused(h.t(2), HandshakeError::kAuthFailed) >= 2;
  }));
  for (int i = 0; i < 20; ++i) h.turn();
  EXPECT_TRUE(h.node(1).received.empty());
  EXPECT_TRUE(h.node(2).received.empty());
  EXPECT_NE(h.t(1).peer_stats(2)->link, LinkState::kConnected);
  EXPECT_FALSE(h.t(1).peer_stats(2)->inbound_connected);
  EXPECT_NE(log.text().find("did not prove it knows the peer secret"), std::string::npos)
      << log.text();
}

TEST(PeerTransportHardening, NoSecretAgainstASecretIsRefused) {
  Harness h;
  start_pair(h, {}, std::string(40, 'a'), "");
  ASSERT_TRUE(h.run_until([&] {
    return refused(h.t(1), HandshakeError::kAuthFailed) >= 2;
  }));
  for (int i = 0; i < 20; ++i) h.turn();
  EXPECT_FALSE(h.t(1).peer_stats(2)->inbound_connected);
  EXPECT_NE(h.t(1).peer_stats(2)->link, LinkState::kConnected);
}

// With the secret on, a stranger who says hello as member 2 gets a reply
// but cannot confirm: nothing it sends reaches Raft, and member 2's own
// link stays as it was.
TEST(PeerTransportHardening, WithTheSecretAForgerReachesNothingAndTakesNothingOver) {
  Harness h;
  const std::string secret(40, 'k');
  PeerTransportLimits limits;
  limits.max_links_per_member = 1;
  start_pair(h, limits, secret, secret);
  ASSERT_TRUE(h.run_until([&] { return h.all_connected(); }));
  Handshake forged_hello = forged(HandshakeKind::kHello, 2, 1, 0);
  forged_hello.nonce = Nonce{};
  std::string bytes;
  encode_handshake(forged_hello, bytes);
  Handshake bad_confirm;
  bad_confirm.kind = HandshakeKind::kConfirm;
  bad_confirm.sender = 2;
  bad_confirm.receiver = 1;
  bad_confirm.proof = Proof{};
  std::string confirm_bytes;
  encode_handshake(bad_confirm, confirm_bytes);
  RawPeer early(h.port(1));  // a Raft frame where the confirm belongs
  early.write(bytes + frame(testing::every_message_type(2, 1)[6]));
  RawPeer wrong(h.port(1));  // a confirm that proves nothing
  wrong.write(bytes + confirm_bytes + frame(testing::every_message_type(2, 1)[6]));
  ASSERT_TRUE(h.run_until([&] { return early.poll_closed() && wrong.poll_closed(); }));
  EXPECT_EQ(refused(h.t(1), HandshakeError::kAuthFailed), 2u);
  EXPECT_TRUE(h.node(1).received.empty());
  h.t(2).send(testing::every_message_type(2, 1)[6]);
  ASSERT_TRUE(h.run_until([&] { return h.node(1).received.size() == 1; }));
  EXPECT_EQ(h.t(2).peer_stats(1)->reconnects, 0u);
}

}  // namespace
}  // namespace lockd::cluster
