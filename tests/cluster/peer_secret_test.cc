// Peer secret authentication (peer_secret.h): the secret file's rules, and
// the proofs against values computed independently (Python's hmac module,
// the command in each test), so both ends of a mixed-version group agree.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "lockd/cluster/peer_secret.h"

namespace lockd::cluster {
namespace {

class SecretFile : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/lockd-secret-XXXXXX";
    const int fd = ::mkstemp(tmpl);
    ASSERT_GE(fd, 0);
    ::close(fd);
    path_ = tmpl;
  }
  void TearDown() override { std::remove(path_.c_str()); }
  void write(const std::string& bytes) {
    std::ofstream(path_, std::ios::binary | std::ios::trunc) << bytes;
  }
  std::string path_;
};

TEST_F(SecretFile, OneTrailingNewlineIsDropped) {
  std::string error;
  const std::string s32(32, 'x');
  write(s32 + "\n");
  EXPECT_EQ(load_peer_secret(path_, error), s32) << error;
  write(s32 + "\n\n");  // only one: the other is part of the secret
  EXPECT_EQ(load_peer_secret(path_, error), s32 + "\n") << error;
  write(s32);
  EXPECT_EQ(load_peer_secret(path_, error), s32) << error;
  write(std::string("\0\xff", 2) + s32);  // any bytes
  EXPECT_EQ(load_peer_secret(path_, error), std::string("\0\xff", 2) + s32) << error;
}

TEST_F(SecretFile, ShortLongAndMissingAreOneLineErrors) {
  std::string error;
  write(std::string(31, 'x') + "\n");  // 32 bytes in the file, 31 of secret
  EXPECT_EQ(load_peer_secret(path_, error), std::nullopt);
  EXPECT_NE(error.find("the secret is 31 bytes, at least 32"), std::string::npos) << error;
  EXPECT_EQ(error.find('\n'), std::string::npos);
  write(std::string(kMaxPeerSecretBytes + 1, 'x'));
  EXPECT_EQ(load_peer_secret(path_, error), std::nullopt);
  EXPECT_NE(error.find("longer than"), std::string::npos) << error;
  EXPECT_EQ(load_peer_secret(path_ + ".missing", error), std::nullopt);
  EXPECT_NE(error.find("No such file"), std::string::npos) << error;
}

Nonce nonce_from(std::uint8_t first) {
  Nonce n{};
  for (std::size_t i = 0; i < n.size(); ++i) n[i] = static_cast<std::uint8_t>(first + i);
  return n;
}

std::string hex(const Proof& p) {
  std::string out;
  char buf[3];
  for (std::uint8_t b : p) {
    std::snprintf(buf, sizeof buf, "%02x", b);
    out += buf;
  }
  return out;
}

// python3 -c "import hmac,hashlib,struct; s=b'0123456789abcdef0123456789abcdef';
//   nd=bytes(range(32)); na=bytes(range(32,64)); c=0x1122334455667788
//   print(hmac.new(s,b'lockd-peer-reply'+nd+na+struct.pack('<QQQ',1,2,c),hashlib.sha256).hexdigest())
//   print(hmac.new(s,b'lockd-peer-confirm'+na+nd+struct.pack('<QQQ',2,1,c),hashlib.sha256).hexdigest())"
TEST(PeerProof, MatchesAnIndependentHmac) {
  const std::string secret = "0123456789abcdef0123456789abcdef";
  const Nonce nd = nonce_from(0);
  const Nonce na = nonce_from(32);
  const std::uint64_t cid = 0x1122334455667788ull;
  EXPECT_EQ(hex(reply_proof(secret, nd, na, 1, 2, cid)),
            "f71acbe42b925d2607c3121ea9189ceb5cbdc9bdeebcbd9bcfd8d70747597c5e");
  EXPECT_EQ(hex(confirm_proof(secret, na, nd, 2, 1, cid)),
            "9eb7cc6025c28d91da9cf308cc07f13151f90e80289b92f185ed078dd5859cd7");
}

TEST(PeerProof, EveryInputChangesIt) {
  const std::string secret(32, 's');
  const Nonce nd = nonce_from(0);
  const Nonce na = nonce_from(32);
  const Proof base = reply_proof(secret, nd, na, 1, 2, 7);
  EXPECT_TRUE(proofs_equal(base, reply_proof(secret, nd, na, 1, 2, 7)));
  EXPECT_FALSE(proofs_equal(base, reply_proof(std::string(32, 't'), nd, na, 1, 2, 7)));
  EXPECT_FALSE(proofs_equal(base, reply_proof(secret, na, nd, 1, 2, 7)));  // nonces swapped
  EXPECT_FALSE(proofs_equal(base, reply_proof(secret, nd, na, 2, 1, 7)));  // roles swapped
  EXPECT_FALSE(proofs_equal(base, reply_proof(secret, nd, na, 1, 3, 7)));
  EXPECT_FALSE(proofs_equal(base, reply_proof(secret, nd, na, 1, 2, 8)));
  // A reply proof is never a confirm proof over the same inputs (no reflection).
  EXPECT_FALSE(proofs_equal(base, confirm_proof(secret, nd, na, 1, 2, 7)));
}

TEST(PeerProof, NoncesAreFreshAndComparisonIsExact) {
  EXPECT_NE(random_nonce(), random_nonce());
  Proof a{};
  Proof b{};
  EXPECT_TRUE(proofs_equal(a, b));
  b[31] = 1;
  EXPECT_FALSE(proofs_equal(a, b));
  b[31] = 0;
  b[0] = 0x80;
  EXPECT_FALSE(proofs_equal(a, b));
}

}  // namespace
}  // namespace lockd::cluster
