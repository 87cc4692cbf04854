// Peer authentication by a shared secret (`--peer-secret-file`, protocol.md
// §11): the challenge-response of the peer handshake, without TLS.
//
//   dialer   -> hello   (nonce_d)
//   acceptor -> reply   (nonce_a, proof_a = reply_proof(...))
//   dialer   -> confirm (proof_d = confirm_proof(...))
//
// Each proof is HMAC-SHA256 under the secret over a label, both nonces (the
// other side's first: each side proves it saw the challenge it was given),
// and the sender, receiver and cluster id of the frame that carries it, so
// a proof cannot be replayed on another connection, reflected back to its
// maker (the labels differ) or moved to another claim. The secret never
// goes on the wire. What this does not give: privacy or integrity of the
// stream after the handshake (an on-path attacker can relay a handshake
// and then inject): that is --peer-tls (docs/security.md, "Peer port").
//
// Pure but for the randomness of random_nonce(); proofs are compared in
// constant time.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace lockd::cluster {

// The shortest secret accepted: 256 bits, as many as the HMAC's output.
constexpr std::size_t kMinPeerSecretBytes = 32;
// The longest file read (a secret is a random string, not a document).
constexpr std::size_t kMaxPeerSecretBytes = 4096;
constexpr std::size_t kNonceBytes = 32;
constexpr std::size_t kProofBytes = 32;

using Nonce = std::array<std::uint8_t, kNonceBytes>;
using Proof = std::array<std::uint8_t, kProofBytes>;

// The file's bytes less one trailing "\n" (§11). nullopt
// with one line in `error` when the file cannot be read, is longer than
// kMaxPeerSecretBytes or what is left is shorter than kMinPeerSecretBytes.
std::optional<std::string> load_peer_secret(const std::string& path, std::string& error);

// 32 bytes from OpenSSL's CSPRNG (RAND_bytes; aborts if it cannot seed).
Nonce random_nonce();

// What the acceptor's reply proves. `sender` is the acceptor, `receiver`
// the dialer, `cluster_id` the reply's.
Proof reply_proof(std::string_view secret, const Nonce& dialer_nonce, const Nonce& acceptor_nonce,
                  std::uint64_t sender, std::uint64_t receiver, std::uint64_t cluster_id);
// What the dialer's confirm proves. `sender` is the dialer, `receiver` the
// acceptor, `cluster_id` the confirm's.
Proof confirm_proof(std::string_view secret, const Nonce& acceptor_nonce, const Nonce& dialer_nonce,
                    std::uint64_t sender, std::uint64_t receiver, std::uint64_t cluster_id);

// Constant-time equality (CRYPTO_memcmp): how long it takes says nothing
// about where two proofs differ.
bool proofs_equal(const Proof& a, const Proof& b);

}  // namespace lockd::cluster
