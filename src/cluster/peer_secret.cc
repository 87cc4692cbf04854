// Peer secret authentication; see peer_secret.h.
#include "lockd/cluster/peer_secret.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "lockd/common/byte_io.h"
#include "lockd/common/check.h"

namespace lockd::cluster {
namespace {

constexpr std::string_view kReplyLabel = "lockd-peer-reply";
constexpr std::string_view kConfirmLabel = "lockd-peer-confirm";

Proof hmac(std::string_view secret, std::string_view label, const Nonce& first, const Nonce& second,
           std::uint64_t sender, std::uint64_t receiver, std::uint64_t cluster_id) {
  std::string msg(label);
  msg.append(reinterpret_cast<const char*>(first.data()), first.size());
  msg.append(reinterpret_cast<const char*>(second.data()), second.size());
  ByteWriter w(msg);
  w.u64(sender);
  w.u64(receiver);
  w.u64(cluster_id);
  Proof out{};
  unsigned int len = 0;
  const unsigned char* r =
      HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
           reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), out.data(), &len);
  LOCKD_CHECK(r != nullptr && len == out.size());
  return out;
}

}  // namespace

std::optional<std::string> load_peer_secret(const std::string& path, std::string& error) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    error = "--peer-secret-file " + path + ": " + std::strerror(errno);
    return std::nullopt;
  }
  std::string text(kMaxPeerSecretBytes + 1, '\0');
  std::size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      error = "--peer-secret-file " + path + ": " + std::strerror(err);
      return std::nullopt;
    }
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  ::close(fd);
  if (got > kMaxPeerSecretBytes) {
    error = "--peer-secret-file " + path + ": longer than " + std::to_string(kMaxPeerSecretBytes) +
            " bytes";
    return std::nullopt;
  }
  text.resize(got);
  if (text.ends_with('\n')) text.pop_back();  // one: the one `echo` or an editor adds
  if (text.size() < kMinPeerSecretBytes) {
    error = "--peer-secret-file " + path + ": the secret is " + std::to_string(text.size()) +
            " bytes, at least " + std::to_string(kMinPeerSecretBytes) +
            " are needed (e.g. openssl rand -hex 32)";
    return std::nullopt;
  }
  return text;
}

Nonce random_nonce() {
  Nonce n{};
  LOCKD_CHECK(RAND_bytes(n.data(), static_cast<int>(n.size())) == 1);
  return n;
}

Proof reply_proof(std::string_view secret, const Nonce& dialer_nonce, const Nonce& acceptor_nonce,
                  std::uint64_t sender, std::uint64_t receiver, std::uint64_t cluster_id) {
  return hmac(secret, kReplyLabel, dialer_nonce, acceptor_nonce, sender, receiver, cluster_id);
}

Proof confirm_proof(std::string_view secret, const Nonce& acceptor_nonce, const Nonce& dialer_nonce,
                    std::uint64_t sender, std::uint64_t receiver, std::uint64_t cluster_id) {
  return hmac(secret, kConfirmLabel, acceptor_nonce, dialer_nonce, sender, receiver, cluster_id);
}

bool proofs_equal(const Proof& a, const Proof& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace lockd::cluster
