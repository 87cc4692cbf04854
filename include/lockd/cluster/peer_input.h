// PeerInput: everything one peer connection may receive, parsed and
// checked, as a pure class (no socket, no clock), so tests and the fuzzer
// drive it with plain bytes.
//
// An accepted connection must start with a hello handshake from a member,
// then carry Raft frames whose `from` is that member and `to` is us. A
// dialed connection must start with the reply handshake of the member we
// dialed and then carry nothing (messages travel one way per connection).
// Anything else is an error and the owner closes the link: peer input is
// untrusted bytes, so errors are values, never assertions.
//
// Memory is bounded: the buffer holds at most one unfinished frame
// (<= raft::kMaxFrameBytes, refused as soon as its length word is read)
// plus the bytes of one feed().
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lockd/cluster/peer_handshake.h"
#include "lockd/cluster/peer_secret.h"
#include "lockd/raft/codec.h"
#include "lockd/raft/message.h"

namespace lockd::cluster {

// Why a connection's input was refused.
enum class PeerInputError : std::uint8_t {
  kNone = 0,            // no error
  kHandshake,           // the handshake was garbage or refused: see handshake_error()
  kFrameTooLarge,       // a length word beyond raft::kMaxFrameBytes
  kBadFrame,            // a frame that does not decode: see decode_error()
  kWrongSender,         // a message whose `from` is not the handshaken peer
  kWrongRecipient,      // a message whose `to` is not this node
  kUnexpectedFrame,     // bytes after the reply on a dialed (send-only) connection
};
std::string_view to_string(PeerInputError e);

// Peer-secret authentication of one connection (peer_secret.h,
// HANDSHAKE.md). With it, an accepted connection's hello must carry a
// nonce and a confirm frame whose proof checks must follow the reply
// before any Raft frame; a dialed connection's reply must carry a nonce
// and a proof that checks.
struct PeerInputAuth {
  std::string_view secret;  // the shared secret; must outlive the PeerInput
  Nonce own_nonce{};        // what this side sent: in its hello (dialer) or its reply (acceptor)
};

class PeerInput {
 public:
  // What next() found.
  enum class Event : std::uint8_t {
    kNeedMore = 0,  // feed more bytes
    kHandshake,     // the handshake arrived and passed: handshake() holds it (an
                    // acceptor with auth answers it, then waits for kConfirmed)
    kConfirmed,     // acceptor with auth: the dialer's confirm proved the secret
    kMessage,       // a checked message: message() holds it
    kError,         // refused for good: error() says why; every later next() says kError
  };

  // `expect.kind` picks the side: kHello for an accepted connection,
  // kReply (with expect.peer) for a dialed one. next() calls
  // `expect.member`: what it refers to must outlive this object.
  explicit PeerInput(HandshakeExpect expect, std::optional<PeerInputAuth> auth = std::nullopt)
      : expect_(std::move(expect)), auth_(auth) {}

  // Appends received bytes. Call next() until kNeedMore before feeding
  // again, so the buffer stays bounded.
  void feed(std::string_view bytes);
  Event next();

  // The received handshake: valid after kHandshake, and after a kError
  // with error() == kHandshake when has_handshake() (it decoded but the
  // policy refused it; the acceptor still replies so both sides can log).
  const Handshake& handshake() const { return handshake_; }
  bool has_handshake() const { return has_handshake_; }
  // The handshake passed (whatever the confirm does later).
  bool handshaken() const { return handshaken_; }
  // True from an acceptor's kHandshake until kConfirmed (auth on).
  bool awaiting_confirm() const { return awaiting_confirm_; }
  // Whether Raft messages may follow: the handshake passed (and, with
  // auth on an accepted connection, the confirm).
  bool ready() const { return handshaken_ && !awaiting_confirm_; }
  // The handshake's sender once accepted, else kNoNode.
  raft::NodeId peer() const { return peer_; }
  raft::Message& message() { return message_; }

  PeerInputError error() const { return error_; }
  HandshakeError handshake_error() const { return handshake_error_; }
  raft::DecodeError decode_error() const { return decode_error_; }
  // One line for logs: what was refused and why.
  std::string describe_error() const;
  // Bytes buffered and not yet parsed.
  std::size_t buffered_bytes() const { return buf_.size() - off_; }

 private:
  Event fail(PeerInputError e);
  Event next_handshake();
  Event next_confirm();
  Event next_frame();
  // The handshake error of a frame that passed the member checks but not
  // the secret's (kOk when auth is off or it passed).
  HandshakeError check_auth(const Handshake& h) const;

  HandshakeExpect expect_;
  std::string buf_;
  std::size_t off_ = 0;  // parsed prefix of buf_
  std::optional<PeerInputAuth> auth_;
  bool handshaken_ = false;
  bool awaiting_confirm_ = false;
  bool has_handshake_ = false;
  raft::NodeId peer_ = raft::kNoNode;
  Handshake handshake_;
  raft::Message message_;
  PeerInputError error_ = PeerInputError::kNone;
  HandshakeError handshake_error_ = HandshakeError::kOk;
  raft::DecodeError decode_error_ = raft::DecodeError::kOk;
};

}  // namespace lockd::cluster
