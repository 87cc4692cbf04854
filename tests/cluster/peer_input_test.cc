// The pure halves of the peer transport: the handshake and PeerInput, fed
// plain bytes (no sockets).
#include <gtest/gtest.h>

#include <array>
#include <optional>
#include <random>
#include <vector>

#include "lockd/cluster/peer_handshake.h"
#include "lockd/cluster/peer_input.h"
#include "lockd/raft/codec.h"
#include "lockd/raft/membership.h"
#include "sample_messages.h"

namespace lockd::cluster {
namespace {

std::vector<Member> three_members() {
  return {Member{1, {"127.0.0.1", 7001}, {"127.0.0.1", 8001}},
          Member{2, {"127.0.0.1", 7002}, {"127.0.0.1", 8002}},
          Member{3, {"127.0.0.1", 7003}, {"127.0.0.1", 8003}}};
}

constexpr std::uint64_t kCluster = 0x1234abcd5678ef00ull;
constexpr EntryVersionRange kRange{2, 3};

std::optional<Member> find_member(raft::NodeId id) {
  for (const Member& m : three_members()) {
    if (m.id == id) return m;
  }
  return std::nullopt;
}

HandshakeExpect expect_of(raft::NodeId self, HandshakeKind kind, raft::NodeId peer,
                          std::uint64_t cluster = kCluster) {
  HandshakeExpect e;
  e.self = self;
  e.cluster_id = cluster;
  e.entry_versions = kRange;
  e.kind = kind;
  e.peer = peer;
  e.member = find_member;
  return e;
}

HandshakeExpect accept_side(raft::NodeId self = 1) {
  return expect_of(self, HandshakeKind::kHello, raft::kNoNode);
}

Handshake make(HandshakeKind kind, raft::NodeId sender, raft::NodeId receiver,
               std::uint64_t cluster = kCluster) {
  Handshake h;
  h.kind = kind;
  h.sender = sender;
  h.receiver = receiver;
  h.cluster_id = cluster;
  h.entry_versions = kRange;
  h.client_addr = "127.0.0.1:700" + std::to_string(sender);
  h.raft_addr = "127.0.0.1:800" + std::to_string(sender);
  h.admin_addr = "127.0.0.1:900" + std::to_string(sender);
  h.data_state = DataState::kHasData;
  return h;
}

std::string hello(raft::NodeId sender, raft::NodeId receiver, std::uint64_t cluster = kCluster) {
  std::string out;
  encode_handshake(make(HandshakeKind::kHello, sender, receiver, cluster), out);
  return out;
}

std::string frame(const raft::Message& m) {
  std::string out;
  raft::encode_message(m, out);
  return out;
}

// Re-seals a hand-made frame: body length and CRC.
std::string seal(std::string header8, const std::string& body) {
  std::string f = std::move(header8);
  for (int i = 0; i < 4; ++i) f.push_back(static_cast<char>(body.size() >> (8 * i)));
  f += body;
  const std::uint32_t crc = raft::crc32c(f);
  for (int i = 0; i < 4; ++i) f.push_back(static_cast<char>(crc >> (8 * i)));
  return f;
}

std::string tlv(std::uint16_t tag, std::string_view v) {
  std::string out;
  out.push_back(static_cast<char>(tag & 0xff));
  out.push_back(static_cast<char>(tag >> 8));
  out.push_back(static_cast<char>(v.size() & 0xff));
  out.push_back(static_cast<char>(v.size() >> 8));
  out.append(v);
  return out;
}

std::string u64le(std::uint64_t v) {
  std::string s;
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>(v >> (8 * i)));
  return s;
}

// The required fields of a hello from 2 to 1, by hand.
std::string required_body() {
  return tlv(1, u64le(2)) + tlv(2, u64le(1)) + tlv(3, u64le(kCluster)) +
         tlv(4, std::string("\x02\x00\x03\x00", 4)) + tlv(8, std::string("\x01", 1));
}

const std::string kHeader8 = std::string("LKDP\x02\x00\x01\x00", 8);

TEST(Handshake, RoundTripsEveryField) {
  Handshake h = make(HandshakeKind::kReply, 3, 1);
  std::array<std::uint8_t, 32> nonce{};
  for (std::size_t i = 0; i < nonce.size(); ++i) nonce[i] = static_cast<std::uint8_t>(i * 7);
  h.nonce = nonce;
  h.proof = nonce;
  h.incarnation = 0x0123456789abcdefULL;
  h.heard_voters = std::vector<raft::NodeId>{2, 5};
  std::string bytes;
  encode_handshake(h, bytes);
  EXPECT_EQ(bytes.substr(0, 4), "LKDP");
  EXPECT_EQ(bytes.substr(4, 2), std::string("\x02\x00", 2));
  std::size_t size = 0;
  std::uint16_t version = 0;
  ASSERT_EQ(peek_handshake(bytes, size, version), HandshakeError::kOk);
  EXPECT_EQ(size, bytes.size());
  Handshake back;
  ASSERT_EQ(decode_handshake(bytes, back), HandshakeError::kOk);
  EXPECT_EQ(back, h);
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    std::string bad = bytes;
    bad[i] = static_cast<char>(bad[i] ^ 0x10);
    EXPECT_NE(decode_handshake(bad, back), HandshakeError::kOk) << "flipped byte " << i;
  }
}

TEST(Handshake, SkipsUnknownTagsAndRefusesMalformedKnownOnes) {
  Handshake h;
  ASSERT_EQ(decode_handshake(seal(kHeader8, required_body()), h), HandshakeError::kOk);
  EXPECT_EQ(h.sender, 2u);
  EXPECT_EQ(h.cluster_id, kCluster);
  EXPECT_EQ(h.entry_versions, kRange);
  EXPECT_EQ(h.admin_addr, "");
  // A newer node's field is skipped, wherever it is.
  ASSERT_EQ(decode_handshake(seal(kHeader8, tlv(42, "future") + required_body() + tlv(99, "")), h),
            HandshakeError::kOk);
  EXPECT_EQ(h.sender, 2u);
  // Tags 12 and 13 (v1.3): whether the sender heard from us, its voters.
  std::string voters;
  for (std::uint64_t id : {1, 3}) {
    for (int i = 0; i < 8; ++i) voters += static_cast<char>((id >> (8 * i)) & 0xff);
  }
  ASSERT_EQ(decode_handshake(seal(kHeader8, required_body() + tlv(12, std::string("\x01", 1)) + tlv(13, voters)), h),
            HandshakeError::kOk);
  EXPECT_EQ(h.heard_receiver, HeardReceiver::kNever);
  EXPECT_EQ(h.voters, (std::vector<raft::NodeId>{1, 3}));
  EXPECT_EQ(decode_handshake(seal(kHeader8, required_body() + tlv(12, std::string("\x03", 1))), h),
            HandshakeError::kBadFrame);
  EXPECT_EQ(decode_handshake(seal(kHeader8, required_body() + tlv(13, "short")), h), HandshakeError::kBadFrame);
  EXPECT_EQ(decode_handshake(seal(kHeader8, required_body() + tlv(13, std::string(8, '\0'))), h),
            HandshakeError::kBadFrame);
  // Tag 14 (v1.3): the sender's incarnation, 8 bytes, never 0.
  ASSERT_EQ(decode_handshake(seal(kHeader8, required_body() + tlv(14, u64le(7))), h), HandshakeError::kOk);
  EXPECT_EQ(h.incarnation, 7u);
  EXPECT_EQ(decode_handshake(seal(kHeader8, required_body() + tlv(14, u64le(0))), h), HandshakeError::kBadFrame);
  EXPECT_EQ(decode_handshake(seal(kHeader8, required_body() + tlv(14, "short")), h), HandshakeError::kBadFrame);
  // Tag 15 (v1.3): the voters the sender heard from; present and empty is
  // "none", absent is "not said" (a waiting node, an older binary).
  ASSERT_EQ(decode_handshake(seal(kHeader8, required_body() + tlv(15, voters)), h), HandshakeError::kOk);
  EXPECT_EQ(h.heard_voters, (std::vector<raft::NodeId>{1, 3}));
  ASSERT_EQ(decode_handshake(seal(kHeader8, required_body() + tlv(15, "")), h), HandshakeError::kOk);
  EXPECT_EQ(h.heard_voters, std::vector<raft::NodeId>{});
  ASSERT_EQ(decode_handshake(seal(kHeader8, required_body()), h), HandshakeError::kOk);
  EXPECT_FALSE(h.heard_voters.has_value());
  EXPECT_EQ(decode_handshake(seal(kHeader8, required_body() + tlv(15, "short")), h), HandshakeError::kBadFrame);
  EXPECT_EQ(decode_handshake(seal(kHeader8, required_body() + tlv(15, std::string(8, '\0'))), h),
            HandshakeError::kBadFrame);
  // Tag 11 (membership): what the sender's configuration says of us.
  ASSERT_EQ(decode_handshake(seal(kHeader8, required_body() + tlv(11, std::string("\x04", 1))), h),
            HandshakeError::kOk);
  EXPECT_EQ(h.receiver_status, MemberStatus::kRemoved);
  EXPECT_EQ(decode_handshake(seal(kHeader8, required_body() + tlv(11, std::string("\x05", 1))), h),
            HandshakeError::kBadFrame);
  EXPECT_EQ(decode_handshake(seal(kHeader8, required_body() + tlv(11, "")), h),
            HandshakeError::kBadFrame);
  // A known tag of the wrong size, twice, or truncated; a required one missing.
  EXPECT_EQ(decode_handshake(seal(kHeader8, required_body() + tlv(9, "short")), h),
            HandshakeError::kBadFrame);
  EXPECT_EQ(decode_handshake(seal(kHeader8, required_body() + tlv(1, u64le(2))), h),
            HandshakeError::kBadFrame);
  EXPECT_EQ(decode_handshake(seal(kHeader8, required_body() + std::string("\x05\x00\x09", 3)), h),
            HandshakeError::kBadFrame);
  EXPECT_EQ(decode_handshake(seal(kHeader8, tlv(1, u64le(2)) + tlv(2, u64le(1))), h),
            HandshakeError::kBadFrame);
  // An entry range that is empty or backwards; an address that is not text.
  EXPECT_EQ(decode_handshake(seal(kHeader8, tlv(1, u64le(2)) + tlv(2, u64le(1)) +
                                                tlv(3, u64le(kCluster)) +
                                                tlv(4, std::string("\x03\x00\x02\x00", 4)) +
                                                tlv(8, std::string("\x01", 1))),
                             h),
            HandshakeError::kBadFrame);
  EXPECT_EQ(decode_handshake(seal(kHeader8, required_body() + tlv(7, "a b\n")), h),
            HandshakeError::kBadFrame);
  // A body over 4096 bytes is refused from its header alone.
  std::string huge = kHeader8 + std::string("\x01\x10\x00\x00", 4);
  std::size_t size = 0;
  std::uint16_t version = 0;
  EXPECT_EQ(peek_handshake(huge, size, version), HandshakeError::kBadFrame);
}

// Case 6 (issue 37): a leader forgets a member's progress on "empty" only
// from a new incarnation of it; a handshake of the one already seen was
// written before what it acknowledged since. Without tag 14 (an older
// binary) every "empty" counts, as before.
TEST(Handshake, OnlyANewIncarnationSayingEmptyLostData) {
  PeerIncarnations seen;
  const auto hello = [](raft::NodeId from, DataState d, std::uint64_t inc) {
    Handshake h = make(HandshakeKind::kHello, from, 1);
    h.data_state = d;
    h.incarnation = inc;
    return h;
  };
  EXPECT_TRUE(seen.lost_data(hello(4, DataState::kEmpty, 10)));     // first seen, empty
  EXPECT_FALSE(seen.lost_data(hello(4, DataState::kEmpty, 10)));    // the same start, late
  EXPECT_FALSE(seen.lost_data(hello(4, DataState::kHasData, 10)));
  EXPECT_FALSE(seen.lost_data(hello(4, DataState::kHasData, 11)));  // restarted with its data
  EXPECT_TRUE(seen.lost_data(hello(4, DataState::kEmpty, 12)));     // restarted wiped
  EXPECT_FALSE(seen.lost_data(hello(4, DataState::kEmpty, 12)));
  EXPECT_TRUE(seen.lost_data(hello(5, DataState::kEmpty, 12)));     // another member
  EXPECT_TRUE(seen.lost_data(hello(6, DataState::kEmpty, 0)));      // an older binary
  EXPECT_TRUE(seen.lost_data(hello(6, DataState::kEmpty, 0)));
  EXPECT_FALSE(seen.lost_data(hello(6, DataState::kHasData, 0)));
}

// Tag 11 says "removed" only once the removal is committed in the
// sender's log: a node told so stops for good, and a removal that is only
// appended can still be lost with its leader (issue 20).
TEST(Handshake, RemovedIsSaidOnlyOnceTheRemovalIsCommitted) {
  const raft::Membership three = raft::voters_only({1, 2, 3});
  raft::Membership two = raft::voters_only({1, 2});
  two.removed = {3};
  EXPECT_EQ(member_status(two, three, 3), MemberStatus::kNotMember);  // appended, not committed
  EXPECT_EQ(member_status(two, two, 3), MemberStatus::kRemoved);
  EXPECT_EQ(member_status(two, three, 1), MemberStatus::kVoter);
  raft::Membership learner = three;
  learner.members.push_back(raft::Member{4, false, "127.0.0.1:1", "127.0.0.1:2"});
  EXPECT_EQ(member_status(learner, three, 4), MemberStatus::kLearner);  // in force on append
  EXPECT_EQ(member_status(three, three, 4), MemberStatus::kNotMember);
  EXPECT_EQ(member_status(raft::Membership{}, raft::Membership{}, 1), MemberStatus::kUnknown);
}

TEST(Handshake, ChecksNameWhatDiffers) {
  const HandshakeExpect e = accept_side(1);
  const auto check = [&](const Handshake& h) { return check_handshake(h, e); };
  EXPECT_EQ(check(make(HandshakeKind::kHello, 2, 1)), HandshakeError::kOk);
  Handshake v3 = make(HandshakeKind::kHello, 2, 1);
  v3.version = 3;
  EXPECT_EQ(check(v3), HandshakeError::kBadVersion);
  EXPECT_EQ(check(make(HandshakeKind::kReply, 2, 1)), HandshakeError::kBadKind);
  const Handshake other = make(HandshakeKind::kHello, 2, 1, kCluster + 1);
  EXPECT_EQ(check(other), HandshakeError::kWrongCluster);
  EXPECT_EQ(describe_mismatch(HandshakeError::kWrongCluster, other, e),
            "node 2 belongs to cluster 0x1234abcd5678ef01, we are cluster 0x1234abcd5678ef00 (a "
            "node of another or a re-created cluster; wipe its data dir to add it anew)");
  // A node of no formed cluster yet, or we are not formed yet: accepted.
  EXPECT_EQ(check(make(HandshakeKind::kHello, 2, 1, 0)), HandshakeError::kOk);
  EXPECT_EQ(check_handshake(other, expect_of(1, HandshakeKind::kHello, raft::kNoNode, 0)),
            HandshakeError::kOk);
  EXPECT_EQ(check(make(HandshakeKind::kHello, 9, 1)), HandshakeError::kUnknownSender);
  EXPECT_EQ(check(make(HandshakeKind::kHello, 1, 1)), HandshakeError::kUnknownSender);
  EXPECT_EQ(check(make(HandshakeKind::kHello, 2, 3)), HandshakeError::kWrongReceiver);
  EXPECT_EQ(check(make(HandshakeKind::kHello, 2, 0)), HandshakeError::kOk);  // receiver unknown
  const Handshake wrong = make(HandshakeKind::kHello, 2, 3);
  EXPECT_NE(describe_mismatch(HandshakeError::kWrongReceiver, wrong, e).find("expected to reach node 3"),
            std::string::npos);
  Handshake moved = make(HandshakeKind::kHello, 2, 1);
  moved.raft_addr = "127.0.0.2:8002";
  EXPECT_EQ(check(moved), HandshakeError::kWrongAddress);
  Handshake old_entries = make(HandshakeKind::kHello, 2, 1);
  old_entries.entry_versions = {1, 1};
  EXPECT_EQ(check(old_entries), HandshakeError::kNoCommonEntryVersion);
  EXPECT_NE(describe_mismatch(HandshakeError::kNoCommonEntryVersion, old_entries, e)
                .find("applies log entry versions 1..1, we apply 2..3"),
            std::string::npos);

  // Who may connect is the owner's call, not a fixed list.
  HandshakeExpect only3 = accept_side(1);
  only3.member = [](raft::NodeId id) -> std::optional<Member> {
    if (id == 3) return Member{3, {"127.0.0.1", 7003}, {"127.0.0.1", 8003}};
    return std::nullopt;
  };
  EXPECT_EQ(check_handshake(make(HandshakeKind::kHello, 2, 1), only3), HandshakeError::kUnknownSender);
  EXPECT_EQ(check_handshake(make(HandshakeKind::kHello, 3, 1), only3), HandshakeError::kOk);

  const HandshakeExpect dialer = expect_of(2, HandshakeKind::kReply, 3);
  EXPECT_EQ(check_handshake(make(HandshakeKind::kReply, 3, 2), dialer), HandshakeError::kOk);
  EXPECT_EQ(check_handshake(make(HandshakeKind::kReply, 1, 2), dialer), HandshakeError::kWrongSender);
}

// Issue 37 case 1: an empty waiting node hears a non-member's hello (for
// its status words only) when its owner asks for it; never a reply, never
// its own id, and the member checks (address) apply to members only.
TEST(Handshake, StrangersPassOnlyWhenAsked) {
  HandshakeExpect e = accept_side(1);
  e.member = [](raft::NodeId id) -> std::optional<Member> {
    if (id == 1) return Member{1, {"127.0.0.1", 7001}, {"127.0.0.1", 8001}};
    return std::nullopt;
  };
  EXPECT_EQ(check_handshake(make(HandshakeKind::kHello, 2, 1), e), HandshakeError::kUnknownSender);
  e.accept_strangers = true;
  Handshake stranger = make(HandshakeKind::kHello, 2, 1);
  stranger.raft_addr = "127.0.0.9:8002";
  EXPECT_EQ(check_handshake(stranger, e), HandshakeError::kOk);
  EXPECT_EQ(check_handshake(make(HandshakeKind::kHello, 1, 1), e), HandshakeError::kUnknownSender);
  EXPECT_EQ(check_handshake(make(HandshakeKind::kHello, 2, 3), e), HandshakeError::kWrongReceiver);
  HandshakeExpect dialer = expect_of(1, HandshakeKind::kReply, 2);
  dialer.member = e.member;
  dialer.accept_strangers = true;
  EXPECT_EQ(check_handshake(make(HandshakeKind::kReply, 2, 1), dialer), HandshakeError::kUnknownSender);
}

TEST(PeerInput, VersionOneFrameIsRefusedNamingBothVersions) {
  // lockd 1.1's 36-byte hello from node 2.
  std::string v1;
  encode_handshake_v1(1, HandshakeKind::kHello, 2, 1, v1);
  ASSERT_EQ(v1.size(), kHandshakeV1Bytes);
  PeerInput in(accept_side());
  in.feed(std::string_view(v1).substr(0, 20));
  EXPECT_EQ(in.next(), PeerInput::Event::kNeedMore);  // read whole, to name the sender
  in.feed(std::string_view(v1).substr(20));
  EXPECT_EQ(in.next(), PeerInput::Event::kError);
  EXPECT_EQ(in.handshake_error(), HandshakeError::kBadVersion);
  EXPECT_TRUE(in.has_handshake());
  EXPECT_EQ(in.handshake().sender, 2u);
  EXPECT_EQ(in.handshake().version, 1);
  EXPECT_NE(in.describe_error().find("peer handshake version 1 (lockd 1.1), we speak 2"),
            std::string::npos)
      << in.describe_error();
}

TEST(PeerInput, AcceptsHandshakeThenEveryMessageTypeInAnySplit) {
  const std::string h = hello(2, 1);
  const auto msgs = testing::every_message_type(2, 1);
  std::string stream = h;
  for (const auto& m : msgs) stream += frame(m);
  for (std::size_t chunk : {std::size_t{1}, std::size_t{3}, std::size_t{11}, std::size_t{12},
                            h.size() - 1, h.size(), h.size() + 1, std::size_t{1000},
                            stream.size()}) {
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
  EXPECT_NE(in.describe_error().find("node 2 belongs to cluster 0x0000000000003039"),
            std::string::npos)
      << in.describe_error();
}

TEST(PeerInput, BadCrcWrongFromWrongToAndHugeFramesAreErrors) {
  const std::string h = hello(2, 1);
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
  const HandshakeExpect dialer = expect_of(1, HandshakeKind::kReply, 2);
  std::string reply;
  encode_handshake(make(HandshakeKind::kReply, 2, 1), reply);
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
  const std::string h = hello(2, 1);
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

// --- peer-secret authentication (HANDSHAKE.md, peer_secret.h) ---------------

namespace lockd::cluster {
namespace {

const std::string kSecret(32, 'S');

Nonce nonce_of(std::uint8_t b) {
  Nonce n{};
  n.fill(b);
  return n;
}

std::string encoded(const Handshake& h) {
  std::string out;
  encode_handshake(h, out);
  return out;
}

// Node 2's hello to node 1 with its challenge.
Handshake hello_with_nonce(const Nonce& nd) {
  Handshake h = make(HandshakeKind::kHello, 2, 1);
  h.nonce = nd;
  return h;
}

// Node 2's confirm of node 1's reply (whose nonce was `na`).
std::string confirm(const std::string& secret, const Nonce& na, const Nonce& nd,
                    std::uint64_t cluster = kCluster) {
  Handshake c;
  c.kind = HandshakeKind::kConfirm;
  c.sender = 2;
  c.receiver = 1;
  c.cluster_id = cluster;
  c.proof = confirm_proof(secret, na, nd, 2, 1, cluster);
  return encoded(c);
}

TEST(PeerInputAuth, AcceptorTakesMessagesOnlyAfterAValidConfirm) {
  const Nonce na = nonce_of(0xa1);
  const Nonce nd = nonce_of(0xd2);
  const raft::Message m = testing::every_message_type(2, 1)[4];
  PeerInput in(accept_side(), PeerInputAuth{kSecret, na});
  in.feed(encoded(hello_with_nonce(nd)));
  EXPECT_EQ(in.next(), PeerInput::Event::kHandshake);
  EXPECT_TRUE(in.awaiting_confirm());
  EXPECT_FALSE(in.ready());
  EXPECT_EQ(in.next(), PeerInput::Event::kNeedMore);
  in.feed(confirm(kSecret, na, nd) + frame(m));
  EXPECT_EQ(in.next(), PeerInput::Event::kConfirmed);
  EXPECT_TRUE(in.ready());
  ASSERT_EQ(in.next(), PeerInput::Event::kMessage);
  EXPECT_EQ(in.message(), m);
}

TEST(PeerInputAuth, AcceptorRefusesEverythingElse) {
  const Nonce na = nonce_of(0xa1);
  const Nonce nd = nonce_of(0xd2);
  const raft::Message m = testing::every_message_type(2, 1)[4];
  struct Case {
    const char* what;
    std::string after_hello;  // bytes after a good hello ("" = the hello itself is bad)
  };
  Handshake wrong_sender_confirm;
  wrong_sender_confirm.kind = HandshakeKind::kConfirm;
  wrong_sender_confirm.sender = 3;
  wrong_sender_confirm.receiver = 1;
  wrong_sender_confirm.cluster_id = kCluster;
  wrong_sender_confirm.proof = confirm_proof(kSecret, na, nd, 3, 1, kCluster);
  Handshake replayed_reply = make(HandshakeKind::kReply, 2, 1);  // a reply is not a confirm
  replayed_reply.proof = reply_proof(kSecret, nd, na, 2, 1, kCluster);
  const std::vector<Case> cases = {
      {"a Raft frame before any confirm", frame(m)},
      {"garbage", "GET / HTTP/1.1\r\n\r\n"},
      {"another secret", confirm(std::string(32, 'T'), na, nd)},
      {"nonces swapped", confirm(kSecret, nd, na)},
      {"another cluster id", confirm(kSecret, na, nd, kCluster + 1)},
      {"another sender", encoded(wrong_sender_confirm)},
      {"a reply with the reply's proof", encoded(replayed_reply)},
  };
  for (const Case& c : cases) {
    PeerInput in(accept_side(), PeerInputAuth{kSecret, na});
    in.feed(encoded(hello_with_nonce(nd)));
    ASSERT_EQ(in.next(), PeerInput::Event::kHandshake) << c.what;
    in.feed(c.after_hello + frame(m));
    PeerInput::Event ev;
    while ((ev = in.next()) == PeerInput::Event::kNeedMore) in.feed(frame(m));
    EXPECT_EQ(ev, PeerInput::Event::kError) << c.what;
    EXPECT_FALSE(in.ready()) << c.what;
    EXPECT_EQ(in.handshake_error(), HandshakeError::kAuthFailed) << c.what;
  }
  // A hello without a challenge is refused at once, naming the secret.
  PeerInput in(accept_side(), PeerInputAuth{kSecret, na});
  EXPECT_EQ(run(in, hello(2, 1)), PeerInput::Event::kError);
  EXPECT_EQ(in.handshake_error(), HandshakeError::kAuthFailed);
  EXPECT_NE(in.describe_error().find("did not prove it knows the peer secret"), std::string::npos)
      << in.describe_error();
}

TEST(PeerInputAuth, DialerChecksTheReplysProof) {
  const Nonce nd = nonce_of(0xd2);
  const Nonce na = nonce_of(0xa1);
  auto reply = [&](std::optional<Proof> proof) {
    Handshake r = make(HandshakeKind::kReply, 1, 2);
    r.nonce = na;
    r.proof = proof;
    return encoded(r);
  };
  const HandshakeExpect dial = expect_of(2, HandshakeKind::kReply, 1);
  {
    PeerInput in(dial, PeerInputAuth{kSecret, nd});
    in.feed(reply(reply_proof(kSecret, nd, na, 1, 2, kCluster)));
    EXPECT_EQ(in.next(), PeerInput::Event::kHandshake);
    EXPECT_TRUE(in.ready());
    EXPECT_EQ(in.handshake().nonce, na);
  }
  for (const std::optional<Proof>& bad :
       {std::optional<Proof>{}, std::optional<Proof>{reply_proof("x" + kSecret, nd, na, 1, 2, kCluster)},
        std::optional<Proof>{reply_proof(kSecret, na, nd, 1, 2, kCluster)},
        std::optional<Proof>{confirm_proof(kSecret, nd, na, 1, 2, kCluster)}}) {
    PeerInput in(dial, PeerInputAuth{kSecret, nd});
    in.feed(reply(bad));
    EXPECT_EQ(in.next(), PeerInput::Event::kError);
    EXPECT_EQ(in.handshake_error(), HandshakeError::kAuthFailed);
  }
}

}  // namespace
}  // namespace lockd::cluster
