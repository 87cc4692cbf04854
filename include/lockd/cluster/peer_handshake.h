// The first frames on every peer connection (handshake v2, lockd 1.2):
// who is talking to whom, in which cluster, applying which log entry
// encodings, reachable where. Pure: encoding, decoding and checking, no
// sockets (docs/cluster.md, "Peer transport" > "Handshake").
//
// Frame, little-endian like the Raft codec:
//
//   off len
//     0   4  magic "LKDP"
//     4   2  u16 handshake version (kPeerProtocolVersion = 2)
//     6   2  u16 kind: 1 hello (dialer -> acceptor), 2 reply (acceptor -> dialer),
//                      3 confirm (dialer -> acceptor; peer-secret auth only)
//     8   4  u32 body length n (<= kMaxHandshakeBody, else a bad frame)
//    12   n  body: TLV fields, each u16 tag, u16 len, len bytes. Unknown tags
//            are skipped (forward compatible); a known tag with a wrong
//            length, or twice, is a bad frame.
//  12+n   4  u32 CRC-32C of bytes [0, 12+n)
//
// Tags (HandshakeTag): 1 sender id u64, 2 receiver id u64 (0 = unknown),
// 3 cluster id u64 (0 = no formed cluster yet), 4 entry encodings this
// binary applies (u16 min, u16 max), 5/6/7 the sender's client, raft and
// admin addresses (host:port text; admin "" when off), 8 data state u8
// (0 empty, 1 has data), 9 nonce (32 bytes), 10 proof (32 bytes), 11 the
// receiver's place in the sender's configuration u8 (MemberStatus; absent:
// unknown), 12 whether the sender ever heard from the receiver u8 (HeardReceiver),
// 13 the voters of the sender's latest configuration (u64 each), 14 the
// sender's incarnation (u64, random per start of the process, never 0;
// absent: an older binary), 15 the voters of the sender's configuration it
// ever heard from (u64 each, possibly none; sent by a member with its
// data, absent otherwise). Tags 1, 2, 3, 4 and 8 are required in a hello
// and a reply.
//
// A version-1 frame (lockd 1.1's fixed 36 bytes) is recognised by its
// version field and refused with a line naming both versions; the
// acceptor answers it in the 1.1 layout (with version 2 in it) so the old
// node logs "protocol version 2, we speak 1" instead of a checksum error.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "lockd/net/address.h"
#include "lockd/raft/types.h"

namespace lockd::cluster {

constexpr std::uint16_t kPeerProtocolVersion = 2;
constexpr std::string_view kHandshakeMagic = "LKDP";
constexpr std::size_t kHandshakeHeaderBytes = 12;  // magic, version, kind, body length
constexpr std::size_t kHandshakeTrailerBytes = 4;  // CRC-32C
constexpr std::size_t kMaxHandshakeBody = 4096;
// lockd 1.1's handshake: fixed size, version 1.
constexpr std::uint16_t kPeerProtocolVersionV1 = 1;
constexpr std::size_t kHandshakeV1Bytes = 36;
constexpr std::size_t kHandshakeNonceBytes = 32;
constexpr std::size_t kHandshakeProofBytes = 32;
constexpr std::size_t kMaxHandshakeAddress = 255;  // host:port text

enum class HandshakeTag : std::uint16_t {
  kSender = 1,
  kReceiver = 2,
  kClusterId = 3,
  kEntryVersions = 4,
  kClientAddr = 5,
  kRaftAddr = 6,
  kAdminAddr = 7,
  kDataState = 8,
  kNonce = 9,
  kProof = 10,
  kReceiverStatus = 11,  // membership (issue 20): what the sender's configuration says of the receiver
  kHeardReceiver = 12,   // v1.3: u8 1 = the sender never heard from the receiver, 2 = it did
  kVoters = 13,          // v1.3: the voters of the sender's latest configuration, u64 each
  kIncarnation = 14,     // v1.3: u64, random per start of the sender's process (0 never sent)
  kHeardVoters = 15,     // v1.3: the voters the sender ever heard from, u64 each (0 bytes: none)
};
// At most this many ids in tag 13.
constexpr std::size_t kMaxHandshakeVoters = 64;

// Tag 12 (protocol.md §10 rule 3): whether the sender ever counted a
// message of the receiver (its durable "heard from" record).
enum class HeardReceiver : std::uint8_t {
  kUnknown = 0,  // absent (an older binary): treated as "heard"
  kNever = 1,
  kHeard = 2,
};

// What the sender's configuration (the latest in its log) says about the
// receiver (tag 11). A node that lost its data learns from it that it is
// still a voter (it must not vote: refused at start), a removed id learns
// it was removed, a joining node that it was added as a learner.
enum class MemberStatus : std::uint8_t {
  kUnknown = 0,    // the sender has no configuration to tell (or an older binary: tag absent)
  kNotMember = 1,  // not in the sender's configuration (not added yet)
  kLearner = 2,
  kVoter = 3,
  kRemoved = 4,    // removed: the id can never come back
};
std::string_view to_string(MemberStatus s);

// What a node tells member `id` in tag 11. `latest` is the latest
// configuration in its log (committed or not: thesis §4.1), `committed`
// the one in force at its commit index. "Removed" only once the removal is
// committed there: a running node told so stops for good, and an appended
// removal can still be lost with its leader; until then the id is simply
// no member.
MemberStatus member_status(const raft::Membership& latest, const raft::Membership& committed,
                           raft::NodeId id);

// One member of the cluster as every node's configuration lists it.
struct Member {
  raft::NodeId id = raft::kNoNode;
  net::Endpoint client;  // text protocol address
  net::Endpoint raft;    // peer transport address
};

// Which side of a connection wrote a handshake.
enum class HandshakeKind : std::uint16_t {
  kHello = 1,    // the dialer's opening frame
  kReply = 2,    // the acceptor's answer, sent even when it refuses (so both sides log why)
  kConfirm = 3,  // the dialer's proof (peer-secret auth)
};

// The log entry encodings a binary can apply (cluster/lock_command.h):
// [min, max]. {0, 0}: unknown (never heard from).
struct EntryVersionRange {
  std::uint16_t min = 0;
  std::uint16_t max = 0;

  bool known() const { return min != 0; }
  bool contains(std::uint16_t v) const { return known() && min <= v && v <= max; }
  bool overlaps(const EntryVersionRange& o) const { return min <= o.max && o.min <= max; }
  bool operator==(const EntryVersionRange&) const = default;
};

enum class DataState : std::uint8_t {
  kEmpty = 0,    // never formed or joined a cluster: an empty data dir
  kHasData = 1,  // has a log, a snapshot or an identity
};

struct Handshake {
  std::uint16_t version = kPeerProtocolVersion;
  HandshakeKind kind = HandshakeKind::kHello;
  raft::NodeId sender = raft::kNoNode;
  raft::NodeId receiver = raft::kNoNode;  // 0 = unknown
  std::uint64_t cluster_id = 0;           // 0 = no formed cluster yet
  EntryVersionRange entry_versions;
  std::string client_addr;
  std::string raft_addr;
  std::string admin_addr;  // "" when admin is off
  DataState data_state = DataState::kEmpty;
  MemberStatus receiver_status = MemberStatus::kUnknown;  // tag 11 when not kUnknown
  HeardReceiver heard_receiver = HeardReceiver::kUnknown;  // tag 12 when not kUnknown
  std::vector<raft::NodeId> voters;  // tag 13 when not empty: the sender's configuration's voters
  std::uint64_t incarnation = 0;     // tag 14 when not 0: which start of the sender's process
  // Tag 15 when set (start_gate.h, rule 3): which voters of its
  // configuration a member with its data ever heard from. An empty voter
  // no such member heard from never took part, so its "never heard" may
  // stand; one some member heard from may have lost the record that
  // mattered. Unset: a waiting node, or an older binary.
  std::optional<std::vector<raft::NodeId>> heard_voters;
  std::optional<std::array<std::uint8_t, kHandshakeNonceBytes>> nonce;  // tag 9 when present
  std::optional<std::array<std::uint8_t, kHandshakeProofBytes>> proof;  // tag 10 when present

  bool operator==(const Handshake&) const = default;
};

// Appends the frame of `h` (version 2 whatever h.version says) to `out`.
void encode_handshake(const Handshake& h, std::string& out);
// Appends lockd 1.1's 36-byte frame with `version` in its version field:
// the answer to a 1.1 node, which can then say why it refuses us.
void encode_handshake_v1(std::uint16_t version, HandshakeKind kind, raft::NodeId sender,
                         raft::NodeId receiver, std::string& out);

// Why bytes are not a handshake, or not one we accept.
enum class HandshakeError : std::uint8_t {
  kOk = 0,          // accepted
  kBadMagic,        // not a lockd peer (or garbage)
  kBadChecksum,     // corrupted
  kBadFrame,        // body too long, a malformed TLV, a known tag of the wrong size, a
                    // required tag missing, an address that is not printable text
  kBadKind,         // not the kind expected here
  kBadVersion,      // a handshake version this build does not speak (1.1's is 1)
  kWrongCluster,    // both cluster ids set and different
  kUnknownSender,   // sender is not a member, or is this node itself
  kWrongSender,     // a dialer reached a different member than it dialed
  kWrongReceiver,   // the sender thinks it talks to another node id
  kWrongAddress,    // the sender's raft address is not the one our member list has for it
  kNoCommonEntryVersion,  // no log entry encoding both binaries apply
  kAuthFailed,      // peer-secret auth on: no nonce, no proof, or a proof that does not check
};
constexpr std::size_t kHandshakeErrorCount = 13;
std::string_view to_string(HandshakeError e);

// How much of a buffer is a handshake frame. kOk with frame_bytes = 0: need
// more bytes; kOk with frame_bytes > 0: the frame is that long. kBadMagic,
// kBadFrame (body too long), or kBadVersion with `version` set (a 1.1
// peer's frame is kHandshakeV1Bytes long).
HandshakeError peek_handshake(std::string_view buffered, std::size_t& frame_bytes,
                              std::uint16_t& version);

// Decodes one whole version-2 frame (layout and checksum only; no policy).
HandshakeError decode_handshake(std::string_view frame, Handshake& out);

// What this node requires of a handshake it receives.
struct HandshakeExpect {
  raft::NodeId self = raft::kNoNode;
  std::uint64_t cluster_id = 0;  // ours; 0 = not formed yet (accepts any)
  EntryVersionRange entry_versions;  // ours
  HandshakeKind kind = HandshakeKind::kHello;
  raft::NodeId peer = raft::kNoNode;  // kReply: the member dialed; kHello: kNoNode (any member)
  // Who may connect: the member with this id (self included, learners
  // included once there are any), or nullopt. The transport's owner decides
  // (today the --peer list; with membership, the configuration from the log).
  std::function<std::optional<Member>(raft::NodeId)> member;
  // kHello only: a sender `member` does not know (not us) passes too, for
  // its status words alone (tags 11-13): an empty node waiting to be let in
  // whose --peer names only itself learns so that it was a voter (issue
  // 37, case 1). The transport sets it only with peer authentication on,
  // and never lets such a connection carry a Raft message.
  bool accept_strangers = false;
};

// The policy check of a decoded handshake.
HandshakeError check_handshake(const Handshake& got, const HandshakeExpect& expect);

// One line naming what differs, for the warning a refusal logs:
// "node 2 belongs to cluster 0x.., we are cluster 0x..", ...
std::string describe_mismatch(HandshakeError e, const Handshake& got, const HandshakeExpect& expect);

// Issue 37 case 6: whether a member's handshake says it lost what it
// acknowledged (a learner wiped and restarted), so a leader must forget
// its progress. Only a *new* incarnation of the peer that says "empty"
// has lost anything: a handshake of the incarnation already seen was
// written earlier (a hello or reply still in flight when the member
// installed the leader's snapshot) and says nothing new. A peer without
// tag 14 (an older binary) is believed on every "empty" handshake, as
// before. Remembers each peer's latest incarnation.
class PeerIncarnations {
 public:
  bool lost_data(const Handshake& h);

 private:
  std::vector<std::pair<raft::NodeId, std::uint64_t>> seen_;
};

// "0x0123456789abcdef": how cluster ids are printed everywhere.
std::string cluster_id_text(std::uint64_t id);

}  // namespace lockd::cluster
