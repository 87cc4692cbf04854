// Peer handshake v2: layout in peer_handshake.h, rationale in docs/cluster.md.
#include "lockd/cluster/peer_handshake.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>

#include "lockd/common/byte_io.h"
#include "lockd/raft/codec.h"
#include "lockd/raft/membership.h"

namespace lockd::cluster {
namespace {

std::uint16_t get_u16(std::string_view b, std::size_t at) {
  return static_cast<std::uint16_t>(static_cast<unsigned char>(b[at]) |
                                    (static_cast<unsigned char>(b[at + 1]) << 8));
}

std::uint32_t get_u32(std::string_view b, std::size_t at) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b[at + static_cast<std::size_t>(i)]);
  return v;
}

std::uint64_t get_u64(std::string_view b, std::size_t at) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b[at + static_cast<std::size_t>(i)]);
  return v;
}

void put_u16(std::string& out, std::uint16_t v) {
  out.push_back(static_cast<char>(v & 0xff));
  out.push_back(static_cast<char>(v >> 8));
}

void put_tlv(std::string& out, HandshakeTag tag, std::string_view value) {
  put_u16(out, static_cast<std::uint16_t>(tag));
  put_u16(out, static_cast<std::uint16_t>(value.size()));
  out.append(value);
}

std::string u64_bytes(std::uint64_t v) {
  std::string s;
  ByteWriter(s).u64(v);
  return s;
}

// Printable ASCII without spaces: what a host:port is, and safe in a log line.
bool printable(std::string_view s) {
  if (s.size() > kMaxHandshakeAddress) return false;
  for (unsigned char c : s) {
    if (c < 0x21 || c > 0x7e) return false;
  }
  return true;
}

}  // namespace

std::string cluster_id_text(std::uint64_t id) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%016" PRIx64, id);
  return buf;
}

std::string_view to_string(HandshakeError e) {
  switch (e) {
    case HandshakeError::kOk: return "ok";
    case HandshakeError::kBadMagic: return "bad_magic";
    case HandshakeError::kBadChecksum: return "bad_checksum";
    case HandshakeError::kBadFrame: return "bad_frame";
    case HandshakeError::kBadKind: return "bad_kind";
    case HandshakeError::kBadVersion: return "bad_version";
    case HandshakeError::kWrongCluster: return "wrong_cluster";
    case HandshakeError::kUnknownSender: return "unknown_sender";
    case HandshakeError::kWrongSender: return "wrong_sender";
    case HandshakeError::kWrongReceiver: return "wrong_receiver";
    case HandshakeError::kWrongAddress: return "wrong_address";
    case HandshakeError::kNoCommonEntryVersion: return "no_common_entry_version";
    case HandshakeError::kAuthFailed: return "auth_failed";
  }
  return "unknown";
}

std::string_view to_string(MemberStatus s) {
  switch (s) {
    case MemberStatus::kUnknown: return "unknown";
    case MemberStatus::kNotMember: return "not_member";
    case MemberStatus::kLearner: return "learner";
    case MemberStatus::kVoter: return "voter";
    case MemberStatus::kRemoved: return "removed";
  }
  return "unknown";
}

MemberStatus member_status(const raft::Membership& latest, const raft::Membership& committed,
                           raft::NodeId id) {
  if (latest.empty()) return MemberStatus::kUnknown;
  if (raft::is_voter(latest, id)) return MemberStatus::kVoter;
  if (raft::is_learner(latest, id)) return MemberStatus::kLearner;
  if (raft::was_removed(latest, id) && raft::was_removed(committed, id)) return MemberStatus::kRemoved;
  return MemberStatus::kNotMember;
}

void encode_handshake(const Handshake& h, std::string& out) {
  const std::size_t start = out.size();
  out.append(kHandshakeMagic);
  put_u16(out, kPeerProtocolVersion);
  put_u16(out, static_cast<std::uint16_t>(h.kind));
  const std::size_t len_at = out.size();
  out.append(4, '\0');
  put_tlv(out, HandshakeTag::kSender, u64_bytes(h.sender));
  put_tlv(out, HandshakeTag::kReceiver, u64_bytes(h.receiver));
  put_tlv(out, HandshakeTag::kClusterId, u64_bytes(h.cluster_id));
  if (h.kind == HandshakeKind::kConfirm) {
    // A confirm carries only what its proof covers, and the proof.
    if (h.proof) {
      put_tlv(out, HandshakeTag::kProof,
              std::string_view(reinterpret_cast<const char*>(h.proof->data()), h.proof->size()));
    }
    const auto body = static_cast<std::uint32_t>(out.size() - len_at - 4);
    for (int i = 0; i < 4; ++i) out[len_at + static_cast<std::size_t>(i)] = static_cast<char>(body >> (8 * i));
    ByteWriter(out).u32(raft::crc32c(std::string_view(out).substr(start)));
    return;
  }
  std::string range;
  put_u16(range, h.entry_versions.min);
  put_u16(range, h.entry_versions.max);
  put_tlv(out, HandshakeTag::kEntryVersions, range);
  put_tlv(out, HandshakeTag::kClientAddr, h.client_addr.substr(0, kMaxHandshakeAddress));
  put_tlv(out, HandshakeTag::kRaftAddr, h.raft_addr.substr(0, kMaxHandshakeAddress));
  put_tlv(out, HandshakeTag::kAdminAddr, h.admin_addr.substr(0, kMaxHandshakeAddress));
  put_tlv(out, HandshakeTag::kDataState,
          std::string(1, static_cast<char>(static_cast<std::uint8_t>(h.data_state))));
  if (h.receiver_status != MemberStatus::kUnknown) {
    put_tlv(out, HandshakeTag::kReceiverStatus,
            std::string(1, static_cast<char>(static_cast<std::uint8_t>(h.receiver_status))));
  }
  if (h.heard_receiver != HeardReceiver::kUnknown) {
    put_tlv(out, HandshakeTag::kHeardReceiver,
            std::string(1, static_cast<char>(static_cast<std::uint8_t>(h.heard_receiver))));
  }
  if (h.incarnation != 0) put_tlv(out, HandshakeTag::kIncarnation, u64_bytes(h.incarnation));
  if (h.heard_voters) {
    std::string ids;
    for (std::size_t i = 0; i < h.heard_voters->size() && i < kMaxHandshakeVoters; ++i) {
      ByteWriter(ids).u64((*h.heard_voters)[i]);
    }
    put_tlv(out, HandshakeTag::kHeardVoters, ids);
  }
  if (!h.voters.empty()) {
    std::string ids;
    for (std::size_t i = 0; i < h.voters.size() && i < kMaxHandshakeVoters; ++i) {
      ByteWriter(ids).u64(h.voters[i]);
    }
    put_tlv(out, HandshakeTag::kVoters, ids);
  }
  if (h.nonce) {
    put_tlv(out, HandshakeTag::kNonce,
            std::string_view(reinterpret_cast<const char*>(h.nonce->data()), h.nonce->size()));
  }
  if (h.proof) {
    put_tlv(out, HandshakeTag::kProof,
            std::string_view(reinterpret_cast<const char*>(h.proof->data()), h.proof->size()));
  }
  const auto body = static_cast<std::uint32_t>(out.size() - len_at - 4);
  for (int i = 0; i < 4; ++i) out[len_at + static_cast<std::size_t>(i)] = static_cast<char>(body >> (8 * i));
  ByteWriter(out).u32(raft::crc32c(std::string_view(out).substr(start)));
}

void encode_handshake_v1(std::uint16_t version, HandshakeKind kind, raft::NodeId sender,
                         raft::NodeId receiver, std::string& out) {
  const std::size_t start = out.size();
  out.append(kHandshakeMagic);
  put_u16(out, version);
  put_u16(out, static_cast<std::uint16_t>(kind));
  ByteWriter w(out);
  w.u64(sender);
  w.u64(receiver);
  w.u64(0);  // 1.1's cluster hash: it never gets that far
  w.u32(raft::crc32c(std::string_view(out).substr(start, kHandshakeV1Bytes - 4)));
}

HandshakeError peek_handshake(std::string_view buffered, std::size_t& frame_bytes,
                              std::uint16_t& version) {
  frame_bytes = 0;
  const std::size_t m = std::min(buffered.size(), kHandshakeMagic.size());
  if (buffered.substr(0, m) != kHandshakeMagic.substr(0, m)) return HandshakeError::kBadMagic;
  if (buffered.size() < 6) return HandshakeError::kOk;
  version = get_u16(buffered, 4);
  if (version != kPeerProtocolVersion) {
    if (version == kPeerProtocolVersionV1) frame_bytes = kHandshakeV1Bytes;
    return HandshakeError::kBadVersion;
  }
  if (buffered.size() < kHandshakeHeaderBytes) return HandshakeError::kOk;
  const std::uint32_t body = get_u32(buffered, 8);
  if (body > kMaxHandshakeBody) return HandshakeError::kBadFrame;
  frame_bytes = kHandshakeHeaderBytes + body + kHandshakeTrailerBytes;
  return HandshakeError::kOk;
}

HandshakeError decode_handshake(std::string_view frame, Handshake& out) {
  if (frame.size() < kHandshakeHeaderBytes + kHandshakeTrailerBytes ||
      frame.substr(0, kHandshakeMagic.size()) != kHandshakeMagic) {
    return HandshakeError::kBadMagic;
  }
  const std::uint16_t version = get_u16(frame, 4);
  if (version != kPeerProtocolVersion) {
    out.version = version;
    return HandshakeError::kBadVersion;
  }
  const std::uint32_t body = get_u32(frame, 8);
  if (body > kMaxHandshakeBody ||
      frame.size() != kHandshakeHeaderBytes + body + kHandshakeTrailerBytes) {
    return HandshakeError::kBadFrame;
  }
  const std::size_t covered = kHandshakeHeaderBytes + body;
  if (get_u32(frame, covered) != raft::crc32c(frame.substr(0, covered))) {
    return HandshakeError::kBadChecksum;
  }
  Handshake h;
  h.version = version;
  h.kind = static_cast<HandshakeKind>(get_u16(frame, 6));
  std::uint32_t seen = 0;  // bit per known tag
  std::size_t at = kHandshakeHeaderBytes;
  while (at < covered) {
    if (covered - at < 4) return HandshakeError::kBadFrame;
    const std::uint16_t tag = get_u16(frame, at);
    const std::uint16_t len = get_u16(frame, at + 2);
    at += 4;
    if (covered - at < len) return HandshakeError::kBadFrame;
    const std::string_view v = frame.substr(at, len);
    at += len;
    if (tag < 1 || tag > static_cast<std::uint16_t>(HandshakeTag::kHeardVoters)) continue;  // a newer field
    if ((seen & (1u << tag)) != 0) return HandshakeError::kBadFrame;
    seen |= 1u << tag;
    switch (static_cast<HandshakeTag>(tag)) {
      case HandshakeTag::kSender:
      case HandshakeTag::kReceiver:
      case HandshakeTag::kClusterId: {
        if (len != 8) return HandshakeError::kBadFrame;
        const std::uint64_t x = get_u64(v, 0);
        if (tag == 1) h.sender = x;
        if (tag == 2) h.receiver = x;
        if (tag == 3) h.cluster_id = x;
        break;
      }
      case HandshakeTag::kEntryVersions:
        if (len != 4) return HandshakeError::kBadFrame;
        h.entry_versions = {get_u16(v, 0), get_u16(v, 2)};
        if (h.entry_versions.min == 0 || h.entry_versions.min > h.entry_versions.max) {
          return HandshakeError::kBadFrame;
        }
        break;
      case HandshakeTag::kClientAddr:
      case HandshakeTag::kRaftAddr:
      case HandshakeTag::kAdminAddr:
        if (!printable(v)) return HandshakeError::kBadFrame;
        (tag == 5 ? h.client_addr : tag == 6 ? h.raft_addr : h.admin_addr) = std::string(v);
        break;
      case HandshakeTag::kDataState:
        if (len != 1 || static_cast<unsigned char>(v[0]) > 1) return HandshakeError::kBadFrame;
        h.data_state = static_cast<DataState>(v[0]);
        break;
      case HandshakeTag::kReceiverStatus:
        if (len != 1 || static_cast<unsigned char>(v[0]) > 4) return HandshakeError::kBadFrame;
        h.receiver_status = static_cast<MemberStatus>(v[0]);
        break;
      case HandshakeTag::kHeardReceiver:
        if (len != 1 || static_cast<unsigned char>(v[0]) < 1 || static_cast<unsigned char>(v[0]) > 2) {
          return HandshakeError::kBadFrame;
        }
        h.heard_receiver = static_cast<HeardReceiver>(v[0]);
        break;
      case HandshakeTag::kVoters:
        if (len == 0 || len % 8 != 0 || len / 8 > kMaxHandshakeVoters) return HandshakeError::kBadFrame;
        for (std::size_t i = 0; i < len; i += 8) {
          const std::uint64_t id = get_u64(v, i);
          if (id == raft::kNoNode) return HandshakeError::kBadFrame;
          h.voters.push_back(id);
        }
        break;
      case HandshakeTag::kIncarnation:
        if (len != 8 || get_u64(v, 0) == 0) return HandshakeError::kBadFrame;
        h.incarnation = get_u64(v, 0);
        break;
      case HandshakeTag::kHeardVoters:
        if (len % 8 != 0 || len / 8 > kMaxHandshakeVoters) return HandshakeError::kBadFrame;
        h.heard_voters.emplace();
        for (std::size_t i = 0; i < len; i += 8) {
          const std::uint64_t id = get_u64(v, i);
          if (id == raft::kNoNode) return HandshakeError::kBadFrame;
          h.heard_voters->push_back(id);
        }
        break;
      case HandshakeTag::kNonce:
      case HandshakeTag::kProof: {
        if (len != 32) return HandshakeError::kBadFrame;
        std::array<std::uint8_t, 32> a{};
        for (std::size_t i = 0; i < 32; ++i) a[i] = static_cast<std::uint8_t>(v[i]);
        (tag == 9 ? h.nonce : h.proof) = a;
        break;
      }
    }
  }
  // A confirm carries only what its proof needs; hello and reply say who
  // they are in full.
  constexpr std::uint32_t kRequired = (1u << 1) | (1u << 2) | (1u << 3) | (1u << 4) | (1u << 8);
  if (h.kind != HandshakeKind::kConfirm && (seen & kRequired) != kRequired) {
    return HandshakeError::kBadFrame;
  }
  out = std::move(h);
  return HandshakeError::kOk;
}

bool PeerIncarnations::lost_data(const Handshake& h) {
  const bool empty = h.data_state == DataState::kEmpty;
  if (h.incarnation == 0) return empty;  // an older binary: every "empty" counts
  for (auto& [id, inc] : seen_) {
    if (id != h.sender) continue;
    const bool fresh = inc != h.incarnation;
    inc = h.incarnation;
    return empty && fresh;
  }
  seen_.emplace_back(h.sender, h.incarnation);
  return empty;
}

HandshakeError check_handshake(const Handshake& got, const HandshakeExpect& expect) {
  // Version first: a newer peer may mean something else by the rest.
  if (got.version != kPeerProtocolVersion) return HandshakeError::kBadVersion;
  if (got.kind != expect.kind) return HandshakeError::kBadKind;
  if (got.cluster_id != 0 && expect.cluster_id != 0 && got.cluster_id != expect.cluster_id) {
    return HandshakeError::kWrongCluster;
  }
  const std::optional<Member> m =
      expect.member && got.sender != raft::kNoNode ? expect.member(got.sender) : std::nullopt;
  const bool stranger = !m && expect.accept_strangers && expect.kind == HandshakeKind::kHello &&
                        got.sender != raft::kNoNode;
  if ((!m && !stranger) || got.sender == expect.self) return HandshakeError::kUnknownSender;
  if (expect.peer != raft::kNoNode && got.sender != expect.peer) return HandshakeError::kWrongSender;
  if (got.receiver != raft::kNoNode && got.receiver != expect.self) {
    return HandshakeError::kWrongReceiver;
  }
  if (m && !got.raft_addr.empty() && got.raft_addr != m->raft.to_string()) {
    return HandshakeError::kWrongAddress;
  }
  if (expect.entry_versions.known() && !got.entry_versions.overlaps(expect.entry_versions)) {
    return HandshakeError::kNoCommonEntryVersion;
  }
  return HandshakeError::kOk;
}

std::string describe_mismatch(HandshakeError e, const Handshake& got, const HandshakeExpect& expect) {
  const std::string node = "node " + std::to_string(got.sender);
  switch (e) {
    case HandshakeError::kOk: return "ok";
    case HandshakeError::kBadMagic: return "not a lockd peer handshake (bad magic)";
    case HandshakeError::kBadChecksum: return "handshake checksum mismatch";
    case HandshakeError::kBadFrame: return "malformed handshake";
    case HandshakeError::kBadKind:
      return "handshake kind " + std::to_string(static_cast<unsigned>(got.kind)) + ", expected " +
             std::to_string(static_cast<unsigned>(expect.kind));
    case HandshakeError::kBadVersion:
      return "peer handshake version " + std::to_string(got.version) +
             (got.version == kPeerProtocolVersionV1 ? " (lockd 1.1)" : "") + ", we speak " +
             std::to_string(kPeerProtocolVersion) +
             " (lockd 1.2): upgrade every member (docs/cluster.md, \"Upgrading\")";
    case HandshakeError::kWrongCluster:
      return node + " belongs to cluster " + cluster_id_text(got.cluster_id) + ", we are cluster " +
             cluster_id_text(expect.cluster_id) +
             " (a node of another or a re-created cluster; wipe its data dir to add it anew)";
    case HandshakeError::kUnknownSender:
      return "sender node id " + std::to_string(got.sender) +
             (got.sender == expect.self ? " is our own id" : " is not a member");
    case HandshakeError::kWrongSender:
      return "dialed node " + std::to_string(expect.peer) + " but " + node + " answered";
    case HandshakeError::kWrongReceiver:
      return node + " expected to reach node " + std::to_string(got.receiver) + ", we are node " +
             std::to_string(expect.self);
    case HandshakeError::kWrongAddress: {
      const std::optional<Member> m = expect.member ? expect.member(got.sender) : std::nullopt;
      return node + " says its raft address is " + got.raft_addr + ", our member list has " +
             (m ? m->raft.to_string() : std::string("none")) +
             " (a different --peer list? spell addresses the same on every node)";
    }
    case HandshakeError::kNoCommonEntryVersion:
      return node + " applies log entry versions " + std::to_string(got.entry_versions.min) +
             ".." + std::to_string(got.entry_versions.max) + ", we apply " +
             std::to_string(expect.entry_versions.min) + ".." +
             std::to_string(expect.entry_versions.max) + ": no common encoding";
    case HandshakeError::kAuthFailed:
      return node + " did not prove it knows the peer secret (another --peer-secret-file, or "
             "none; or not a member at all)";
  }
  return "unknown";
}

}  // namespace lockd::cluster
