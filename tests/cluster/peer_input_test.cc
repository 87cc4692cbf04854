// The pure halves of the peer transport: the handshake and PeerInput, fed
// plain bytes (no sockets).
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "lockd/cluster/peer_handshake.h"
#include "lockd/cluster/peer_input.h"
#include "lockd/raft/codec.h"
#include "sample_messages.h"

namespace lockd::cluster {
namespace {

std::vector<Member> three_members() {
  return {Member{1, {"127.0.0.1", 7001}, {"127.0.0.1", 8001}},
          Member{2, {"127.0.0.1", 7002}, {"127.0.0.1", 8002}},
          Member{3, {"127.0.0.1", 7003}, {"127.0.0.1", 8003}}};
}

const std::vector<raft::NodeId> kIds = {1, 2, 3};

HandshakeExpect accept_side(raft::NodeId self = 1) {
  return HandshakeExpect{self, cluster_hash(three_members()), HandshakeKind::kHello, raft::kNoNode,
                         kIds};
}

std::string hello(raft::NodeId sender, raft::NodeId receiver, std::uint64_t hash) {
  std::string out;
  encode_handshake(Handshake{kPeerProtocolVersion, HandshakeKind::kHello, sender, receiver, hash},
                   out);
  return out;
}

std::string frame(const raft::Message& m) {
  std::string out;
  raft::encode_message(m, out);
  return out;
}

TEST(ClusterHash, CoversIdsAndBothAddressesButNotOrder) {
  auto a = three_members();
  const std::uint64_t h = cluster_hash(a);
  std::vector<Member> reordered = {a[2], a[0], a[1]};
  EXPECT_EQ(cluster_hash(reordered), h);
  auto client_changed = a;
  client_changed[1].client.port = 7999;
  EXPECT_NE(cluster_hash(client_changed), h);
  auto raft_changed = a;
  raft_changed[1].raft.host = "127.0.0.2";
  EXPECT_NE(cluster_hash(raft_changed), h);
  auto id_changed = a;
  id_changed[2].id = 4;
  EXPECT_NE(cluster_hash(id_changed), h);
  EXPECT_NE(cluster_hash(std::vector<Member>(a.begin(), a.begin() + 2)), h);
}

TEST(Handshake, RoundTripsIn36Bytes) {
  const Handshake h{kPeerProtocolVersion, HandshakeKind::kReply, 3, 1, 0x0123456789abcdefull};
  std::string bytes;
  encode_handshake(h, bytes);
  ASSERT_EQ(bytes.size(), kHandshakeBytes);
  EXPECT_EQ(bytes.substr(0, 4), "LKDP");
  Handshake back;
  ASSERT_EQ(decode_handshake(bytes, back), HandshakeError::kOk);
  EXPECT_EQ(back, h);
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    std::string bad = bytes;
    bad[i] = static_cast<char>(bad[i] ^ 0x10);
    EXPECT_NE(decode_handshake(bad, back), HandshakeError::kOk) << "flipped byte " << i;
  }
}

TEST(Handshake, ChecksNameWhatDiffers) {
  const HandshakeExpect e = accept_side(1);
  const auto check = [&](Handshake h) { return check_handshake(h, e); };
  const std::uint64_t hash = e.cluster_hash;
  EXPECT_EQ(check({kPeerProtocolVersion, HandshakeKind::kHello, 2, 1, hash}), HandshakeError::kOk);
  EXPECT_EQ(check({2, HandshakeKind::kHello, 2, 1, hash}), HandshakeError::kBadVersion);
  EXPECT_EQ(check({kPeerProtocolVersion, HandshakeKind::kReply, 2, 1, hash}), HandshakeError::kBadKind);
  EXPECT_EQ(check({kPeerProtocolVersion, HandshakeKind::kHello, 2, 1, hash + 1}),
            HandshakeError::kWrongCluster);
  EXPECT_EQ(check({kPeerProtocolVersion, HandshakeKind::kHello, 9, 1, hash}),
            HandshakeError::kUnknownSender);
  EXPECT_EQ(check({kPeerProtocolVersion, HandshakeKind::kHello, 1, 1, hash}),
            HandshakeError::kUnknownSender);
  EXPECT_EQ(check({kPeerProtocolVersion, HandshakeKind::kHello, 2, 3, hash}),
            HandshakeError::kWrongReceiver);
  const Handshake wrong{kPeerProtocolVersion, HandshakeKind::kHello, 2, 3, hash};
  EXPECT_NE(describe_mismatch(HandshakeError::kWrongReceiver, wrong, e).find("expected to reach node 3"),
            std::string::npos);

  HandshakeExpect dialer{2, hash, HandshakeKind::kReply, 3, kIds};
  EXPECT_EQ(check_handshake({kPeerProtocolVersion, HandshakeKind::kReply, 3, 2, hash}, dialer),
            HandshakeError::kOk);
  EXPECT_EQ(check_handshake({kPeerProtocolVersion, HandshakeKind::kReply, 1, 2, hash}, dialer),
            HandshakeError::kWrongSender);
}

TEST(PeerInput, AcceptsHandshakeThenEveryMessageTypeInAnySplit) {
  const std::string h = hello(2, 1, accept_side().cluster_hash);
  const auto msgs = testing::every_message_type(2, 1);
  std::string stream = h;
  for (const auto& m : msgs) stream += frame(m);
  for (std::size_t chunk : {std::size_t{1}, std::size_t{3}, std::size_t{35}, std::size_t{36},
                            std::size_t{37}, std::size_t{1000}, stream.size()}) {
    PeerInput in(accept_side());
    std::vector<raft::Message> got;
    bool handshaken = false;
    for (std::size_t i = 0; i < stream.size(); i += chunk) {
      in.feed(std::string_view(stream).substr(i, chunk));
      for (;;) {
        const auto ev = in.next();
        if (ev == PeerInput::Event::kNeedMore) break;
        ASSERT_NE(ev, PeerInput::Event::kError) << in.describe_error();
        if (ev == PeerInput::Event::kHandshake) {
          EXPECT_FALSE(handshaken);
          handshaken = true;
          EXPECT_EQ(in.peer(), 2u);
        } else {
          got.push_back(in.message());
        }
      }
    }
    EXPECT_TRUE(handshaken);
    EXPECT_EQ(got, msgs) << "chunk " << chunk;
    EXPECT_EQ(in.buffered_bytes(), 0u);
  }
}

PeerInput::Event run(PeerInput& in, std::string_view bytes) {
  in.feed(bytes);
  PeerInput::Event ev;
  while ((ev = in.next()) == PeerInput::Event::kHandshake || ev == PeerInput::Event::kMessage) {
  }
  return ev;
}

TEST(PeerInput, RefusesGarbageBeforeTheHandshake) {
  PeerInput in(accept_side());
  EXPECT_EQ(run(in, "GET / HTTP/1.1\r\nHost: x\r\n\r\n0123456789"), PeerInput::Event::kError);
  EXPECT_EQ(in.error(), PeerInputError::kHandshake);
  EXPECT_EQ(in.handshake_error(), HandshakeError::kBadMagic);
  EXPECT_FALSE(in.has_handshake());
  // Sticky, and nothing more is buffered.
  in.feed("more");
  EXPECT_EQ(in.next(), PeerInput::Event::kError);
  EXPECT_EQ(in.buffered_bytes(), 0u);
}

TEST(PeerInput, RefusedHandshakeIsKeptForTheLog) {
  PeerInput in(accept_side());
  EXPECT_EQ(run(in, hello(2, 1, 12345)), PeerInput::Event::kError);
  EXPECT_EQ(in.handshake_error(), HandshakeError::kWrongCluster);
  EXPECT_TRUE(in.has_handshake());
  EXPECT_EQ(in.handshake().sender, 2u);
  EXPECT_NE(in.describe_error().find("cluster hash"), std::string::npos) << in.describe_error();
}

TEST(PeerInput, BadCrcWrongFromWrongToAndHugeFramesAreErrors) {
  const std::string h = hello(2, 1, accept_side().cluster_hash);
  raft::Message m = testing::every_message_type(2, 1)[6];

  std::string bad_crc = frame(m);
  bad_crc.back() = static_cast<char>(bad_crc.back() ^ 1);
  PeerInput a(accept_side());
  EXPECT_EQ(run(a, h + bad_crc), PeerInput::Event::kError);
  EXPECT_EQ(a.error(), PeerInputError::kBadFrame);
  EXPECT_EQ(a.decode_error(), raft::DecodeError::kBadChecksum);

  raft::Message from3 = m;
  from3.from = 3;
  PeerInput b(accept_side());
  EXPECT_EQ(run(b, h + frame(from3)), PeerInput::Event::kError);
  EXPECT_EQ(b.error(), PeerInputError::kWrongSender);

  raft::Message to3 = m;
  to3.to = 3;
  PeerInput c(accept_side());
  EXPECT_EQ(run(c, h + frame(to3)), PeerInput::Event::kError);
  EXPECT_EQ(c.error(), PeerInputError::kWrongRecipient);

  // A length word past the cap is refused before anything is buffered.
  PeerInput d(accept_side());
  EXPECT_EQ(run(d, h + std::string("\xff\xff\xff\x7f", 4)), PeerInput::Event::kError);
  EXPECT_EQ(d.error(), PeerInputError::kFrameTooLarge);

  // A zero length word is an error, not a stall.
  PeerInput e(accept_side());
  EXPECT_EQ(run(e, h + std::string(4, '\0')), PeerInput::Event::kError);
  EXPECT_EQ(e.error(), PeerInputError::kBadFrame);
}

TEST(PeerInput, DialedSideTakesOnlyTheReply) {
  const std::uint64_t hash = accept_side().cluster_hash;
  HandshakeExpect dialer{1, hash, HandshakeKind::kReply, 2, kIds};
  std::string reply;
  encode_handshake(Handshake{kPeerProtocolVersion, HandshakeKind::kReply, 2, 1, hash}, reply);
  PeerInput in(dialer);
  in.feed(reply);
  EXPECT_EQ(in.next(), PeerInput::Event::kHandshake);
  EXPECT_EQ(in.next(), PeerInput::Event::kNeedMore);
  in.feed(frame(testing::every_message_type(2, 1)[0]));
  EXPECT_EQ(in.next(), PeerInput::Event::kError);
  EXPECT_EQ(in.error(), PeerInputError::kUnexpectedFrame);
}

TEST(PeerInput, RandomBytesNeverCrash) {
  std::mt19937_64 rng(7);
  const std::string h = hello(2, 1, accept_side().cluster_hash);
  for (int round = 0; round < 2000; ++round) {
    PeerInput in(accept_side());
    std::string bytes = (round % 2 == 0) ? h : std::string();
    const std::size_t n = rng() % 200;
    for (std::size_t i = 0; i < n; ++i) bytes.push_back(static_cast<char>(rng()));
    const auto ev = run(in, bytes);
    EXPECT_TRUE(ev == PeerInput::Event::kNeedMore || ev == PeerInput::Event::kError);
  }
}

}  // namespace
}  // namespace lockd::cluster
