// Peer handshake: layout in peer_handshake.h, rationale in docs/cluster.md.
#include "lockd/cluster/peer_handshake.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <vector>

#include "lockd/common/byte_io.h"
#include "lockd/raft/codec.h"

namespace lockd::cluster {
namespace {

constexpr std::uint64_t kFnvOffset = 0xcbf29ce484222325ull;
constexpr std::uint64_t kFnvPrime = 0x100000001b3ull;
// Bytes covered by the CRC: everything before it.
constexpr std::size_t kCoveredBytes = kHandshakeBytes - 4;

std::uint64_t fnv1a(std::string_view s, std::uint64_t h) {
  for (unsigned char c : s) {
    h ^= c;
    h *= kFnvPrime;
  }
  return h;
}

void put_u16(std::string& out, std::uint16_t v) {
  out.push_back(static_cast<char>(v & 0xff));
  out.push_back(static_cast<char>(v >> 8));
}

std::string hex(std::uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%016" PRIx64, v);
  return buf;
}

}  // namespace

std::uint64_t cluster_hash(std::span<const Member> members) {
  std::vector<const Member*> sorted;
  sorted.reserve(members.size());
  for (const Member& m : members) sorted.push_back(&m);
  std::sort(sorted.begin(), sorted.end(),
            [](const Member* a, const Member* b) { return a->id < b->id; });
  std::uint64_t h = kFnvOffset;
  for (const Member* m : sorted) {
    h = fnv1a(std::to_string(m->id) + " " + m->client.to_string() + " " + m->raft.to_string() + "\n",
              h);
  }
  return h;
}

std::string_view to_string(HandshakeError e) {
  switch (e) {
    case HandshakeError::kOk: return "ok";
    case HandshakeError::kBadMagic: return "bad_magic";
    case HandshakeError::kBadChecksum: return "bad_checksum";
    case HandshakeError::kBadKind: return "bad_kind";
    case HandshakeError::kBadVersion: return "bad_version";
    case HandshakeError::kWrongCluster: return "wrong_cluster";
    case HandshakeError::kUnknownSender: return "unknown_sender";
    case HandshakeError::kWrongSender: return "wrong_sender";
    case HandshakeError::kWrongReceiver: return "wrong_receiver";
  }
  return "unknown";
}

void encode_handshake(const Handshake& h, std::string& out) {
  const std::size_t start = out.size();
  out.append(kHandshakeMagic);
  put_u16(out, h.version);
  put_u16(out, static_cast<std::uint16_t>(h.kind));
  ByteWriter w(out);
  w.u64(h.sender);
  w.u64(h.receiver);
  w.u64(h.cluster_hash);
  w.u32(raft::crc32c(std::string_view(out).substr(start, kCoveredBytes)));
}

HandshakeError decode_handshake(std::string_view bytes, Handshake& out) {
  if (bytes.size() != kHandshakeBytes || bytes.substr(0, kHandshakeMagic.size()) != kHandshakeMagic) {
    return HandshakeError::kBadMagic;
  }
  ByteReader<HandshakeError> r(bytes.substr(kHandshakeMagic.size()), HandshakeError::kOk,
                               HandshakeError::kBadMagic);
  const std::uint8_t v0 = r.u8();
  const std::uint8_t v1 = r.u8();
  const std::uint8_t k0 = r.u8();
  const std::uint8_t k1 = r.u8();
  out.version = static_cast<std::uint16_t>(v0 | (v1 << 8));
  out.kind = static_cast<HandshakeKind>(static_cast<std::uint16_t>(k0 | (k1 << 8)));
  out.sender = r.u64();
  out.receiver = r.u64();
  out.cluster_hash = r.u64();
  const std::uint32_t crc = r.u32();
  if (!r.ok()) return r.error();
  if (crc != raft::crc32c(bytes.substr(0, kCoveredBytes))) return HandshakeError::kBadChecksum;
  return HandshakeError::kOk;
}

HandshakeError check_handshake(const Handshake& got, const HandshakeExpect& expect) {
  // Version first: a newer peer may mean something else by the rest.
  if (got.version != kPeerProtocolVersion) return HandshakeError::kBadVersion;
  if (got.kind != expect.kind) return HandshakeError::kBadKind;
  if (got.cluster_hash != expect.cluster_hash) return HandshakeError::kWrongCluster;
  const bool member = std::find(expect.members.begin(), expect.members.end(), got.sender) !=
                      expect.members.end();
  if (!member || got.sender == expect.self || got.sender == raft::kNoNode) {
    return HandshakeError::kUnknownSender;
  }
  if (expect.peer != raft::kNoNode && got.sender != expect.peer) return HandshakeError::kWrongSender;
  if (got.receiver != expect.self) return HandshakeError::kWrongReceiver;
  return HandshakeError::kOk;
}

std::string describe_mismatch(HandshakeError e, const Handshake& got, const HandshakeExpect& expect) {
  switch (e) {
    case HandshakeError::kOk: return "ok";
    case HandshakeError::kBadMagic: return "not a lockd peer handshake (bad magic)";
    case HandshakeError::kBadChecksum: return "handshake checksum mismatch";
    case HandshakeError::kBadKind:
      return "handshake kind " + std::to_string(static_cast<unsigned>(got.kind)) + ", expected " +
             std::to_string(static_cast<unsigned>(expect.kind));
    case HandshakeError::kBadVersion:
      return "protocol version " + std::to_string(got.version) + ", we speak " +
             std::to_string(kPeerProtocolVersion);
    case HandshakeError::kWrongCluster:
      return "cluster hash " + hex(got.cluster_hash) + " from node " + std::to_string(got.sender) +
             " != ours " + hex(expect.cluster_hash) +
             " (another cluster, or a different --peer list)";
    case HandshakeError::kUnknownSender:
      return "sender node id " + std::to_string(got.sender) +
             (got.sender == expect.self ? " is our own id" : " is not a member");
    case HandshakeError::kWrongSender:
      return "dialed node " + std::to_string(expect.peer) + " but node " +
             std::to_string(got.sender) + " answered";
    case HandshakeError::kWrongReceiver:
      return "node " + std::to_string(got.sender) + " expected to reach node " +
             std::to_string(got.receiver) + ", we are node " + std::to_string(expect.self);
  }
  return "unknown";
}

}  // namespace lockd::cluster
