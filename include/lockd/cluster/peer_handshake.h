// The first frame on every peer connection: who is talking to whom, in
// which cluster, speaking which protocol version. Pure: encoding, decoding
// and checking, no sockets (docs/cluster.md, "Peer transport").
//
// Layout, 36 bytes, little-endian like the Raft codec:
//
//   off len field
//     0   4 magic "LKDP"
//     4   2 u16 protocol version (kPeerProtocolVersion)
//     6   2 u16 kind: 1 = hello (dialer -> acceptor), 2 = reply (acceptor -> dialer)
//     8   8 u64 sender node id
//    16   8 u64 receiver node id (who the sender believes it talks to)
//    24   8 u64 cluster hash (cluster_hash() of the sender's member list)
//    32   4 u32 CRC-32C of bytes 0..31
//
// Fixed size and version-independent up to the version field, so a node of
// any version can read enough of it to say why it refuses.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "lockd/net/address.h"
#include "lockd/raft/types.h"

namespace lockd::cluster {

constexpr std::uint16_t kPeerProtocolVersion = 1;
constexpr std::size_t kHandshakeBytes = 36;
constexpr std::string_view kHandshakeMagic = "LKDP";

// One member of the cluster as every node's configuration lists it.
struct Member {
  raft::NodeId id = raft::kNoNode;
  net::Endpoint client;  // text protocol address
  net::Endpoint raft;    // peer transport address
};

// FNV-1a 64 over the canonical member list: members sorted by id, one line
// each, "ID CLIENT RAFT\n" with both addresses as Endpoint::to_string()
// prints them. Two nodes agree only if they list the same ids with the
// same addresses (spelled the same: "localhost" is not "127.0.0.1").
std::uint64_t cluster_hash(std::span<const Member> members);

// Which side of a connection wrote a handshake.
enum class HandshakeKind : std::uint16_t {
  kHello = 1,  // the dialer's opening frame
  kReply = 2,  // the acceptor's answer, sent even when it refuses (so both sides log why)
};

struct Handshake {
  std::uint16_t version = kPeerProtocolVersion;
  HandshakeKind kind = HandshakeKind::kHello;
  raft::NodeId sender = raft::kNoNode;
  raft::NodeId receiver = raft::kNoNode;
  std::uint64_t cluster_hash = 0;

  bool operator==(const Handshake&) const = default;
};

// Appends the 36 bytes of `h` to `out`.
void encode_handshake(const Handshake& h, std::string& out);

// Why 36 bytes are not a handshake, or not one we accept.
enum class HandshakeError : std::uint8_t {
  kOk = 0,          // accepted
  kBadMagic,        // not a lockd peer (or garbage)
  kBadChecksum,     // corrupted
  kBadKind,         // neither hello nor reply, or not the one expected here
  kBadVersion,      // a protocol version this build does not speak
  kWrongCluster,    // cluster hash differs: another cluster or a different member list
  kUnknownSender,   // sender is not a member, or is this node itself
  kWrongSender,     // a dialer reached a different member than it dialed
  kWrongReceiver,   // the sender thinks it talks to another node id
};
std::string_view to_string(HandshakeError e);

// Decodes exactly kHandshakeBytes (magic and checksum only; no policy).
// kBadMagic / kBadChecksum on failure, leaving `out` unspecified.
HandshakeError decode_handshake(std::string_view bytes, Handshake& out);

// What this node requires of a handshake it receives.
struct HandshakeExpect {
  raft::NodeId self = raft::kNoNode;
  std::uint64_t cluster_hash = 0;
  HandshakeKind kind = HandshakeKind::kHello;
  raft::NodeId peer = raft::kNoNode;  // kReply: the member dialed; kHello: kNoNode (any member)
  std::span<const raft::NodeId> members;  // every member id, self included
};

// The policy check of a decoded handshake.
HandshakeError check_handshake(const Handshake& got, const HandshakeExpect& expect);

// One line naming what differs, for the warning a refusal logs:
// "cluster hash 0x1234 != ours 0xabcd", "sender 7 is not a member", ...
std::string describe_mismatch(HandshakeError e, const Handshake& got, const HandshakeExpect& expect);

}  // namespace lockd::cluster
