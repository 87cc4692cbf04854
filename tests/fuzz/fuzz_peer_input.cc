// libFuzzer target: arbitrary bytes, cut into arbitrary reads, through
// PeerInput (what a peer connection receives). Checks what must hold for
// any input: no crash, no hang, bounded buffering, errors are sticky, and
// every message handed out names the handshaken peer and us.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lockd/cluster/peer_handshake.h"
#include "lockd/cluster/peer_input.h"
#include "lockd/cluster/peer_secret.h"
#include "lockd/raft/codec.h"

using namespace lockd;
using namespace lockd::cluster;

namespace {

void require(bool ok) {
  if (!ok) std::abort();
}

constexpr std::uint64_t kCluster = 0x5eed5eed5eed5eedull;

std::optional<Member> member(raft::NodeId id) {
  if (id < 1 || id > 3) return std::nullopt;
  return Member{id, {"127.0.0.1", static_cast<std::uint16_t>(7000 + id)},
                {"127.0.0.1", static_cast<std::uint16_t>(8000 + id)}};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  // The first byte picks the read size (bits 0-5), the side (bit 6) and
  // whether a valid handshake goes first (bit 7), so the fuzzer reaches
  // the frame parser without having to forge a CRC. Without that prefix
  // the input is the handshake itself (v2 TLV body, v1 frames, garbage).
  const std::size_t chunk = 1 + (data[0] & 0x3f) * 37;
  const bool dialed = (data[0] & 0x40) != 0;
  const bool prefix = (data[0] & 0x80) != 0;
  HandshakeExpect expect;
  expect.self = 1;
  expect.cluster_id = kCluster;
  expect.entry_versions = {2, 3};
  expect.kind = dialed ? HandshakeKind::kReply : HandshakeKind::kHello;
  expect.peer = dialed ? raft::NodeId{2} : raft::kNoNode;
  expect.member = member;
  std::string input;
  if (prefix) {
    Handshake h;
    h.kind = expect.kind;
    h.sender = 2;
    h.receiver = 1;
    h.cluster_id = kCluster;
    h.entry_versions = {2, 2};
    h.raft_addr = "127.0.0.1:8002";
    h.data_state = DataState::kHasData;
    encode_handshake(h, input);
  }
  // Peer-secret auth (peer_secret.h), picked by the last byte's low bits
  // so older seeds keep their meaning: 0/3 off; 1 on, the fuzzer on its
  // own (it cannot forge a proof, so nothing may pass the confirm); 2 on,
  // with a valid hello-with-nonce and confirm (acceptor) or a valid reply
  // (dialer) in front, so the frames behind them are reached too.
  const int auth_mode = data[size - 1] & 3;
  const std::string secret(32, 's');
  Nonce own{};
  own.fill(0x0a);
  const Nonce theirs{};
  std::optional<PeerInputAuth> auth;
  if (auth_mode == 1 || auth_mode == 2) auth = PeerInputAuth{secret, own};
  if (auth_mode == 2) {
    input.clear();
    Handshake h;
    h.kind = expect.kind;
    h.sender = 2;
    h.receiver = 1;
    h.cluster_id = kCluster;
    h.entry_versions = {2, 2};
    h.raft_addr = "127.0.0.1:8002";
    h.data_state = DataState::kHasData;
    h.nonce = theirs;
    if (dialed) h.proof = reply_proof(secret, own, theirs, 2, 1, kCluster);
    encode_handshake(h, input);
    if (!dialed) {
      Handshake c;
      c.kind = HandshakeKind::kConfirm;
      c.sender = 2;
      c.receiver = 1;
      c.cluster_id = kCluster;
      c.proof = confirm_proof(secret, own, theirs, 2, 1, kCluster);
      encode_handshake(c, input);
    }
  }
  input.append(reinterpret_cast<const char*>(data) + 1, size - 1);

  PeerInput in(expect, auth);
  bool confirmed = false;
  bool failed = false;
  bool handshaken = false;
  for (std::size_t i = 0; i < input.size(); i += chunk) {
    in.feed(std::string_view(input).substr(i, chunk));
    // Each next() consumes bytes or stops, so this loop ends.
    for (;;) {
      const PeerInput::Event ev = in.next();
      if (ev == PeerInput::Event::kNeedMore) break;
      if (ev == PeerInput::Event::kError) {
        failed = true;
        require(in.error() != PeerInputError::kNone);
        require(!in.describe_error().empty());
        break;
      }
      require(!failed);
      if (ev == PeerInput::Event::kHandshake) {
        require(!handshaken);
        handshaken = true;
        require(in.peer() == 2 || (!dialed && in.peer() == 3));
        // What a passed handshake says is what the checks allow.
        const Handshake& h = in.handshake();
        require(h.version == kPeerProtocolVersion && h.kind == expect.kind);
        require(h.cluster_id == 0 || h.cluster_id == kCluster);
        require(h.entry_versions.min >= 1 && h.entry_versions.min <= h.entry_versions.max &&
                h.entry_versions.min <= 3 && h.entry_versions.max >= 2);
        require(h.receiver == 0 || h.receiver == 1);
        require(h.client_addr.size() <= kMaxHandshakeAddress &&
                h.admin_addr.size() <= kMaxHandshakeAddress);
        // With auth a hello needs a challenge; a reply, a proof that checks.
        require(!auth || h.nonce.has_value());
        require(!auth || !dialed || h.proof.has_value());
        require(in.awaiting_confirm() == (auth.has_value() && !dialed));
      } else if (ev == PeerInput::Event::kConfirmed) {
        require(auth && !dialed && handshaken && !confirmed);
        confirmed = true;
        // Only the confirm we built proves the secret.
        require(auth_mode == 2);
      } else {
        require(handshaken && !dialed);
        require(!auth || confirmed);  // nothing reaches Raft before the confirm
        require(in.message().from == in.peer() && in.message().to == 1);
      }
    }
    if (failed) {
      require(in.next() == PeerInput::Event::kError);
      require(in.buffered_bytes() == 0);
      break;
    }
    // At most one unfinished frame (or handshake) plus one read.
    require(in.buffered_bytes() <= raft::kFrameLengthBytes + raft::kMaxFrameBytes + chunk);
  }
  return 0;
}
