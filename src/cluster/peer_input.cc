// PeerInput: see peer_input.h.
#include "lockd/cluster/peer_input.h"

#include <limits>

namespace lockd::cluster {
namespace {
// Once the parsed prefix is this large, drop it (amortised O(1) per byte).
constexpr std::size_t kCompactBytes = 64 * 1024;
}  // namespace

std::string_view to_string(PeerInputError e) {
  switch (e) {
    case PeerInputError::kNone: return "none";
    case PeerInputError::kHandshake: return "handshake";
    case PeerInputError::kFrameTooLarge: return "frame_too_large";
    case PeerInputError::kBadFrame: return "bad_frame";
    case PeerInputError::kWrongSender: return "wrong_sender";
    case PeerInputError::kWrongRecipient: return "wrong_recipient";
    case PeerInputError::kUnexpectedFrame: return "unexpected_frame";
  }
  return "unknown";
}

void PeerInput::feed(std::string_view bytes) {
  if (error_ != PeerInputError::kNone) return;  // nothing more is read after a refusal
  if (off_ >= kCompactBytes || off_ == buf_.size()) {
    buf_.erase(0, off_);
    off_ = 0;
  }
  buf_.append(bytes);
}

PeerInput::Event PeerInput::fail(PeerInputError e) {
  error_ = e;
  buf_.clear();
  buf_.shrink_to_fit();
  off_ = 0;
  return Event::kError;
}

PeerInput::Event PeerInput::next() {
  if (error_ != PeerInputError::kNone) return Event::kError;
  if (!handshaken_) return next_handshake();
  return awaiting_confirm_ ? next_confirm() : next_frame();
}

PeerInput::Event PeerInput::next_handshake() {
  const std::string_view rest = std::string_view(buf_).substr(off_);
  std::size_t size = 0;
  std::uint16_t version = 0;
  const HandshakeError peeked = peek_handshake(rest, size, version);
  if (peeked == HandshakeError::kBadVersion) {
    // Another handshake version: refused, but named. A 1.1 peer's frame
    // is read whole so the refusal can say which node it is.
    if (size != 0 && rest.size() < size) return Event::kNeedMore;
    handshake_ = Handshake{};
    handshake_.version = version;
    if (version == kPeerProtocolVersionV1 && size == kHandshakeV1Bytes) {
      std::uint64_t sender = 0;
      for (int i = 7; i >= 0; --i) {
        sender = (sender << 8) | static_cast<unsigned char>(rest[8 + static_cast<std::size_t>(i)]);
      }
      handshake_.sender = sender;
      handshake_.kind = static_cast<HandshakeKind>(
          static_cast<unsigned char>(rest[6]) | (static_cast<unsigned char>(rest[7]) << 8));
    }
    has_handshake_ = true;
    handshake_error_ = HandshakeError::kBadVersion;
    return fail(PeerInputError::kHandshake);
  }
  if (peeked != HandshakeError::kOk) {
    handshake_error_ = peeked;
    return fail(PeerInputError::kHandshake);
  }
  if (size == 0 || rest.size() < size) return Event::kNeedMore;
  const std::string_view bytes = rest.substr(0, size);
  off_ += size;
  handshake_error_ = decode_handshake(bytes, handshake_);
  if (handshake_error_ != HandshakeError::kOk) return fail(PeerInputError::kHandshake);
  has_handshake_ = true;
  handshake_error_ = check_handshake(handshake_, expect_);
  if (handshake_error_ == HandshakeError::kOk) handshake_error_ = check_auth(handshake_);
  if (handshake_error_ != HandshakeError::kOk) return fail(PeerInputError::kHandshake);
  handshaken_ = true;
  awaiting_confirm_ = auth_.has_value() && expect_.kind == HandshakeKind::kHello;
  peer_ = handshake_.sender;
  return Event::kHandshake;
}

HandshakeError PeerInput::check_auth(const Handshake& h) const {
  if (!auth_) return HandshakeError::kOk;
  if (expect_.kind == HandshakeKind::kHello) {
    // The hello only brings the dialer's challenge; its proof comes in the confirm.
    return h.nonce ? HandshakeError::kOk : HandshakeError::kAuthFailed;
  }
  if (!h.nonce || !h.proof) return HandshakeError::kAuthFailed;
  const Proof want = reply_proof(auth_->secret, auth_->own_nonce, *h.nonce, h.sender, h.receiver,
                                 h.cluster_id);
  return proofs_equal(want, *h.proof) ? HandshakeError::kOk : HandshakeError::kAuthFailed;
}

PeerInput::Event PeerInput::next_confirm() {
  const std::string_view rest = std::string_view(buf_).substr(off_);
  std::size_t size = 0;
  std::uint16_t version = 0;
  const HandshakeError peeked = peek_handshake(rest, size, version);
  if (peeked != HandshakeError::kOk) {
    // Anything but a confirm (a Raft frame sent early, garbage) is refused
    // as unauthenticated: nothing before the confirm reaches Raft.
    handshake_error_ = HandshakeError::kAuthFailed;
    return fail(PeerInputError::kHandshake);
  }
  if (size == 0 || rest.size() < size) return Event::kNeedMore;
  Handshake c;
  handshake_error_ = decode_handshake(rest.substr(0, size), c);
  off_ += size;
  if (handshake_error_ != HandshakeError::kOk) return fail(PeerInputError::kHandshake);
  // It must confirm this very hello: same sender, to us, same cluster id,
  // and a proof over our nonce and theirs.
  if (c.kind != HandshakeKind::kConfirm || c.sender != handshake_.sender ||
      (c.receiver != expect_.self) || c.cluster_id != handshake_.cluster_id || !c.proof) {
    handshake_error_ = HandshakeError::kAuthFailed;
    return fail(PeerInputError::kHandshake);
  }
  const Proof want = confirm_proof(auth_->secret, auth_->own_nonce, *handshake_.nonce, c.sender,
                                   c.receiver, c.cluster_id);
  if (!proofs_equal(want, *c.proof)) {
    handshake_error_ = HandshakeError::kAuthFailed;
    return fail(PeerInputError::kHandshake);
  }
  awaiting_confirm_ = false;
  return Event::kConfirmed;
}

PeerInput::Event PeerInput::next_frame() {
  const std::string_view rest = std::string_view(buf_).substr(off_);
  if (rest.empty()) return Event::kNeedMore;
  // A dialed connection only carries the reply; the peer's messages come
  // on the connection it dialed to us.
  if (expect_.kind == HandshakeKind::kReply) return fail(PeerInputError::kUnexpectedFrame);
  const std::size_t size = raft::frame_size(rest);
  if (size == std::numeric_limits<std::size_t>::max()) return fail(PeerInputError::kFrameTooLarge);
  if (size == 0 || rest.size() < size) return Event::kNeedMore;
  decode_error_ = raft::decode_message(rest.substr(0, size), message_);
  off_ += size;
  if (decode_error_ != raft::DecodeError::kOk) return fail(PeerInputError::kBadFrame);
  if (message_.from != peer_) return fail(PeerInputError::kWrongSender);
  if (message_.to != expect_.self) return fail(PeerInputError::kWrongRecipient);
  return Event::kMessage;
}

std::string PeerInput::describe_error() const {
  switch (error_) {
    case PeerInputError::kNone: return "no error";
    case PeerInputError::kHandshake:
      return has_handshake_ ? describe_mismatch(handshake_error_, handshake_, expect_)
                            : std::string(to_string(handshake_error_));
    case PeerInputError::kFrameTooLarge:
      return "frame longer than " + std::to_string(raft::kMaxFrameBytes) + " bytes";
    case PeerInputError::kBadFrame:
      return "undecodable frame: " + std::string(raft::to_string(decode_error_));
    case PeerInputError::kWrongSender:
      return "message from node " + std::to_string(message_.from) + " on node " +
             std::to_string(peer_) + "'s connection";
    case PeerInputError::kWrongRecipient:
      return "message for node " + std::to_string(message_.to) + ", we are node " +
             std::to_string(expect_.self);
    case PeerInputError::kUnexpectedFrame: return "bytes after the handshake reply";
  }
  return "unknown";
}

}  // namespace lockd::cluster
