// src/tls: two TlsSessions pumped into each other through memory, with
// certificates made by make-test-pki. No sockets.
#include "lockd/tls/tls_session.h"

#include <gtest/gtest.h>
#include <openssl/err.h>

#include <filesystem>
#include <string_view>

#include "tls_client.h"

namespace lockd::tls {
namespace {

using testing::pki;

std::unique_ptr<TlsContext> server_ctx(PeerCertPolicy peer, const std::string& cert = "server") {
  std::string error;
  auto ctx = TlsContext::create(
      {TlsRole::kServer, pki(cert + ".pem"), pki(cert + ".key"), pki("ca.pem"), peer}, error);
  EXPECT_NE(ctx, nullptr) << error;
  return ctx;
}

std::unique_ptr<TlsContext> client_ctx(const std::string& cert, const std::string& ca = "ca.pem") {
  std::string error;
  TlsOptions o{TlsRole::kClient, "", "", pki(ca), PeerCertPolicy::kRequired};
  if (!cert.empty()) {
    o.cert_file = pki(cert + ".pem");
    o.key_file = pki(cert + ".key");
  }
  auto ctx = TlsContext::create(o, error);
  EXPECT_NE(ctx, nullptr) << error;
  return ctx;
}

// Moves bytes both ways until neither side has output. Returns false as
// soon as one side fails.
bool pump(TlsSession& c, TlsSession& s, std::string& c_plain, std::string& s_plain) {
  for (int i = 0; i < 20; ++i) {
    std::string wire;
    c.take_output(wire);
    if (!wire.empty() && s.on_input(wire, s_plain) == TlsSession::Status::kError) return false;
    std::string back;
    s.take_output(back);
    if (!back.empty() && c.on_input(back, c_plain) == TlsSession::Status::kError) return false;
    if (wire.empty() && back.empty()) return true;
  }
  return true;
}

TEST(TlsSessionTest, HandshakeThenBothWaysWithTheClientCertificateNamed) {
  auto sctx = server_ctx(PeerCertPolicy::kRequired);
  auto cctx = client_ctx("node-2");
  auto s = TlsSession::accept(*sctx);
  auto c = TlsSession::connect(*cctx, "localhost");
  ASSERT_EQ(c->write("A alice k\n"), TlsSession::Status::kOk);  // held until the handshake
  std::string cp, sp;
  ASSERT_TRUE(pump(*c, *s, cp, sp)) << s->error() << c->error();
  EXPECT_TRUE(s->handshake_done());
  EXPECT_TRUE(c->handshake_done());
  EXPECT_EQ(s->protocol(), "TLSv1.3");
  EXPECT_EQ(sp, "A alice k\n");
  ASSERT_TRUE(s->peer_certificate().has_value());
  EXPECT_EQ(s->peer_certificate()->subject_cn, "lockd-node-2");
  EXPECT_TRUE(s->peer_certificate()->names("lockd-node-2"));
  EXPECT_FALSE(s->peer_certificate()->names("lockd-node-3"));
  ASSERT_TRUE(c->peer_certificate().has_value());
  EXPECT_EQ(c->peer_certificate()->subject_cn, "lockd");
  ASSERT_EQ(s->write("A 1 alice k\n"), TlsSession::Status::kOk);
  ASSERT_TRUE(pump(*c, *s, cp, sp));
  EXPECT_EQ(cp, "A 1 alice k\n");
}

TEST(TlsSessionTest, CertificatesFromAnotherCaExpiredOrMissingAreRefused) {
  auto sctx = server_ctx(PeerCertPolicy::kRequired);
  for (const std::string cert : {"stranger", "expired", ""}) {
    auto s = TlsSession::accept(*sctx);
    auto cctx = client_ctx(cert);
    auto c = TlsSession::connect(*cctx, "");
    ASSERT_EQ(c->write("A alice k\n"), TlsSession::Status::kOk);
    std::string cp, sp;
    EXPECT_FALSE(pump(*c, *s, cp, sp)) << cert;
    EXPECT_EQ(sp, "") << cert;  // nothing it sent came through
    EXPECT_FALSE(s->peer_certificate().has_value());
  }
}

TEST(TlsSessionTest, OptionalClientCertificate) {
  auto sctx = server_ctx(PeerCertPolicy::kOptional);
  auto cctx = client_ctx("");
  auto s = TlsSession::accept(*sctx);
  auto c = TlsSession::connect(*cctx, "");
  std::string cp, sp;
  ASSERT_TRUE(pump(*c, *s, cp, sp)) << s->error();
  EXPECT_TRUE(s->handshake_done());
  EXPECT_FALSE(s->peer_certificate().has_value());
}

TEST(TlsSessionTest, ClientRefusesAServerFromAnotherCaOrWithAnotherName) {
  auto sctx = server_ctx(PeerCertPolicy::kNone);
  {
    auto cctx = client_ctx("", "other-ca.pem");
    auto s = TlsSession::accept(*sctx);
    auto c = TlsSession::connect(*cctx, "");
    std::string cp, sp;
    EXPECT_FALSE(pump(*c, *s, cp, sp));
    EXPECT_NE(c->error().find("certificate verify failed"), std::string::npos) << c->error();
  }
  {
    auto cctx = client_ctx("");
    auto s = TlsSession::accept(*sctx);
    auto c = TlsSession::connect(*cctx, "lockd-node-7");
    std::string cp, sp;
    EXPECT_FALSE(pump(*c, *s, cp, sp));
  }
}

TEST(TlsSessionTest, PlaintextIsAHandshakeFailure) {
  auto sctx = server_ctx(PeerCertPolicy::kNone);
  auto s = TlsSession::accept(*sctx);
  std::string plain;
  EXPECT_EQ(s->on_input("A alice k 1000\n", plain), TlsSession::Status::kError);
  EXPECT_EQ(plain, "");
  EXPECT_FALSE(s->error().empty());
}

TEST(TlsSessionTest, ReloadKeepsTheOldFilesWhenTheNewOnesDoNotLoad) {
  const std::string dir = testing::test_pki_dir() + "/reload";
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(pki("server.pem"), dir + "/cert.pem",
                             std::filesystem::copy_options::overwrite_existing);
  std::filesystem::copy_file(pki("server.key"), dir + "/key.pem",
                             std::filesystem::copy_options::overwrite_existing);
  std::string error;
  auto ctx = TlsContext::create({TlsRole::kServer, dir + "/cert.pem", dir + "/key.pem", "",
                                 PeerCertPolicy::kNone},
                                error);
  ASSERT_NE(ctx, nullptr) << error;
  // A session made before the reload survives it.
  auto before = TlsSession::accept(*ctx);
  // The certificate of another key: the pair does not match.
  std::filesystem::copy_file(pki("server2.pem"), dir + "/cert.pem",
                             std::filesystem::copy_options::overwrite_existing);
  EXPECT_FALSE(ctx->reload(error));
  EXPECT_NE(error.find("mismatch"), std::string::npos) << error;
  EXPECT_EQ(ctx->reloads(), 0u);
  std::filesystem::copy_file(pki("server2.key"), dir + "/key.pem",
                             std::filesystem::copy_options::overwrite_existing);
  ASSERT_TRUE(ctx->reload(error)) << error;
  EXPECT_EQ(ctx->reloads(), 1u);
  auto cctx = client_ctx("");
  auto c = TlsSession::connect(*cctx, "");
  std::string cp, sp;
  ASSERT_TRUE(pump(*c, *before, cp, sp)) << before->error();
  EXPECT_TRUE(before->handshake_done());
}

TEST(TlsSessionTest, MissingFilesAreOneLineErrors) {
  std::string error;
  EXPECT_EQ(TlsContext::create({TlsRole::kServer, "/nonexistent.pem", "/nonexistent.key", "",
                                PeerCertPolicy::kNone},
                               error),
            nullptr);
  EXPECT_NE(error.find("/nonexistent.pem"), std::string::npos) << error;
  EXPECT_EQ(error.find('\n'), std::string::npos);
  EXPECT_EQ(TlsContext::create({TlsRole::kServer, pki("server.pem"), pki("server.key"), "",
                                PeerCertPolicy::kRequired},
                               error),
            nullptr);
  EXPECT_NE(error.find("--tls-ca"), std::string::npos) << error;
}

// on_input reads every whole record it is given, however the ciphertext is
// cut: records split at any byte, many records in one input, a record
// bigger than one read (16 KiB of plaintext per record).
TEST(TlsSessionTest, RecordsCutAnywhereOrBatchedAreAllRead) {
  auto sctx = server_ctx(PeerCertPolicy::kNone);
  auto cctx = client_ctx("");
  for (const std::size_t cut : {std::size_t{1}, std::size_t{7}, std::size_t{1000}, std::size_t{0}}) {
    auto s = TlsSession::accept(*sctx);
    auto c = TlsSession::connect(*cctx, "");
    std::string cp, sp;
    ASSERT_TRUE(pump(*c, *s, cp, sp)) << s->error();
    std::string sent;
    for (int i = 0; i < 20; ++i) {
      const std::string line = "A 1 key-" + std::to_string(i) + " 1000\n";
      ASSERT_EQ(c->write(line), TlsSession::Status::kOk);  // one record each
      sent += line;
    }
    const std::string big(40 * 1024, 'x');  // three records
    ASSERT_EQ(c->write(big), TlsSession::Status::kOk);
    sent += big;
    std::string wire;
    c->take_output(wire);
    const std::string_view w(wire);
    const std::size_t step = cut == 0 ? w.size() : cut;
    for (std::size_t at = 0; at < w.size(); at += step) {
      ASSERT_EQ(s->on_input(w.substr(at, step), sp), TlsSession::Status::kOk) << s->error();
    }
    EXPECT_EQ(sp.size(), sent.size()) << "cut " << cut;
    EXPECT_TRUE(sp == sent) << "cut " << cut;
  }
}

// An error some other OpenSSL call left in the thread's queue is not taken
// for this session's.
TEST(TlsSessionTest, AStaleOpensslErrorDoesNotFailASession) {
  auto sctx = server_ctx(PeerCertPolicy::kNone);
  auto cctx = client_ctx("");
  auto s = TlsSession::accept(*sctx);
  auto c = TlsSession::connect(*cctx, "");
  std::string cp, sp;
  ASSERT_TRUE(pump(*c, *s, cp, sp)) << s->error();
  ASSERT_EQ(c->write("A 1 k 1000\n"), TlsSession::Status::kOk);
  std::string wire;
  c->take_output(wire);
  ERR_put_error(ERR_LIB_SSL, 0, ERR_R_INTERNAL_ERROR, __FILE__, __LINE__);
  // Half a record: the read can only say "want read".
  EXPECT_EQ(s->on_input(std::string_view(wire).substr(0, 10), sp), TlsSession::Status::kOk)
      << s->error();
  ERR_put_error(ERR_LIB_SSL, 0, ERR_R_INTERNAL_ERROR, __FILE__, __LINE__);
  EXPECT_EQ(s->on_input(std::string_view(wire).substr(10), sp), TlsSession::Status::kOk)
      << s->error();
  EXPECT_EQ(sp, "A 1 k 1000\n");
  ERR_put_error(ERR_LIB_SSL, 0, ERR_R_INTERNAL_ERROR, __FILE__, __LINE__);
  EXPECT_EQ(s->write("G 1\n"), TlsSession::Status::kOk) << s->error();
  ERR_clear_error();
}

}  // namespace
}  // namespace lockd::tls
