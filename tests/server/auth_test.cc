// Client authentication (`H`, --auth, --credentials) and authorization
// (--acl) of protocol.md §11 against a real lockd.
#include <signal.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "eventually.h"
#include "lockd/auth/credentials.h"
#include "lockd_process.h"
#include "tls_client.h"

namespace lockd::testing {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

// A temp dir with a credentials file (billing, ops, alice) and an ACL.
struct SecurityFiles {
  fs::path dir;
  SecurityFiles() {
    dir = fs::path(test_pki_dir()) / ("auth-" + std::to_string(counter()++));
    fs::create_directories(dir);
    write_credentials({{"billing", "billing-token"}, {"ops", "ops-token"}, {"alice", "alice-token"}});
    write_acl(R"(admins = ["ops"]
[[rule]]
identity = "billing"
prefix = "billing/"
verbs = ["A", "S", "R", "K"]
[[rule]]
identity = "*"
prefix = "shared/"
verbs = ["A", "R"]
[[rule]]
identity = "ops"
prefix = ""
verbs = ["A", "R", "K"]
)");
  }
  static int& counter() {
    static int n = 0;
    return n;
  }
  void write_credentials(const std::vector<std::pair<std::string, std::string>>& entries) {
    {
      std::ofstream out(dir / "credentials.toml");
      for (const auto& [identity, credential] : entries) {
        out << "[[credential]]\nidentity = \"" << identity << "\"\nhash = \""
            << auth::credential_hash(credential, auth::random_bytes(16)) << "\"\n";
      }
    }
    // lockd refuses a credentials file that group or others may read (§11a).
    fs::permissions(dir / "credentials.toml", fs::perms::owner_read | fs::perms::owner_write);
  }
  void write_acl(const std::string& text) { std::ofstream(dir / "acl.toml") << text; }
  std::string credentials() const { return (dir / "credentials.toml").string(); }
  std::string acl() const { return (dir / "acl.toml").string(); }
};

std::string token_of(const std::string& reply) {
  const auto f = fields(reply);
  EXPECT_EQ(f.size(), 4u) << reply;
  EXPECT_EQ(f.empty() ? "" : f[0], "A") << reply;
  return f.size() == 4 ? f[1] : "0";
}

TEST(AuthTest, WithAuthOffHelloAnswersAnonymous) {
  LockdProcess lockd;
  LineClient c(lockd.port());
  EXPECT_EQ(c.call("H whatever"), "H anonymous");
  EXPECT_EQ(c.call("H"), "E bad_arity");
  EXPECT_EQ(fields(c.call("A alice k"))[0], "A");
}

// §11: with authentication off, `H` answers `H anonymous` whatever its
// credential: one that breaks §2 (too long, a byte outside 0x21..0x7E) is
// refused and closed only when authentication is on. A line of the wrong
// arity keeps its §7 error.
TEST(AuthTest, WithAuthOffAnyCredentialIsAnonymous) {
  LockdProcess lockd;
  LineClient c(lockd.port());
  EXPECT_EQ(c.call("H " + std::string(600, 'x')), "H anonymous");
  EXPECT_EQ(c.call("H tok\x7f" "en"), "H anonymous");
  EXPECT_EQ(c.call(std::string("H tok\x01" "en")), "H anonymous");
  EXPECT_EQ(c.call("H a b"), "E bad_arity");
  EXPECT_EQ(fields(c.call("A alice k"))[0], "A");  // still open and serving
}

TEST(AuthTest, TokenAuthentication) {
  SecurityFiles files;
  LockdProcess lockd({"--auth", "token", "--credentials", files.credentials()});
  LineClient c(lockd.port());
  // Before H: refused with the echo, connection stays usable.
  EXPECT_EQ(c.call("A alice k1 60000"), "E unauthenticated alice k1");
  EXPECT_EQ(c.call("R 12 k1"), "E unauthenticated 12 k1");
  EXPECT_EQ(c.call("K 12 k1 1000"), "E unauthenticated 12 k1");
  EXPECT_EQ(c.call("S alice k1 0 60000"), "E unauthenticated alice k1");
  EXPECT_EQ(c.call("A alice"), "E bad_arity");  // malformed lines still get their error
  EXPECT_EQ(c.call("H billing-token"), "H billing");
  const std::string t = token_of(c.call("A alice k1 60000"));
  // A later H re-authenticates as another identity.
  EXPECT_EQ(c.call("H ops-token"), "H ops");
  EXPECT_EQ(c.call("R " + t + " k1"), "R " + t + " k1");

  // A wrong credential: E unauthenticated, closed, and nothing after it is read.
  LineClient bad(lockd.port());
  bad.send("H billing-tokeN\nA mallory k2 60000\n");
  EXPECT_EQ(bad.read_line(), "E unauthenticated");
  EXPECT_TRUE(bad.wait_closed(20s));
  // A credential that breaks §2 is refused the same way.
  LineClient ugly(lockd.port());
  ugly.send(std::string("H tok\x01en\nA mallory k2 60000\n"));
  EXPECT_EQ(ugly.read_line(), "E unauthenticated");
  EXPECT_TRUE(ugly.wait_closed(20s));
  // A refused credential logs nobody out elsewhere, and mallory got nothing.
  EXPECT_EQ(fields(c.call("A ops k2 60000"))[0], "A");
}

TEST(AuthTest, AclRows) {
  SecurityFiles files;
  LockdProcess lockd({"--auth", "token", "--credentials", files.credentials(), "--acl", files.acl()});
  LineClient billing(lockd.port()), ops(lockd.port()), alice(lockd.port());
  EXPECT_EQ(billing.call("H billing-token"), "H billing");
  EXPECT_EQ(ops.call("H ops-token"), "H ops");
  EXPECT_EQ(alice.call("H alice-token"), "H alice");
  // Allowed: its prefix, all four verbs.
  const std::string bt = token_of(billing.call("A b billing/inv-1 60000"));
  EXPECT_EQ(billing.call("K " + bt + " billing/inv-1 60000"), "K " + bt + " billing/inv-1");
  EXPECT_EQ(billing.call("R " + bt + " billing/inv-1"), "R " + bt + " billing/inv-1");
  // Forbidden: another prefix.
  EXPECT_EQ(billing.call("A b orders/1 60000"), "E forbidden b orders/1");
  EXPECT_EQ(alice.call("A a billing/inv-2 60000"), "E forbidden a billing/inv-2");
  // "*": any authenticated identity, only the verbs of the rule.
  const std::string at = token_of(alice.call("A a shared/x 60000"));
  EXPECT_EQ(alice.call("K " + at + " shared/x 60000"), "E forbidden " + at + " shared/x");
  EXPECT_EQ(alice.call("R " + at + " shared/x"), "R " + at + " shared/x");
  // R and K with a valid token on a key not granted: forbidden, the lock stays.
  const std::string ot = token_of(ops.call("A o orders/1 60000"));
  EXPECT_EQ(billing.call("R " + ot + " orders/1"), "E forbidden " + ot + " orders/1");
  EXPECT_EQ(billing.call("K " + ot + " orders/1 1"), "E forbidden " + ot + " orders/1");
  EXPECT_EQ(alice.call("A a orders/1 60000"), "E forbidden a orders/1");
  EXPECT_EQ(ops.call("A o2 orders/1 1000 0"), "T o2 orders/1");  // still held by ops
  EXPECT_EQ(ops.call("R " + ot + " orders/1"), "R " + ot + " orders/1");
  // S is its own verb in the ACL (§11): granted with "S", never implied by
  // "A". billing's rule has it; the "*" rule (A, R) and ops' (A, R, K) do not.
  const auto st = fields(billing.call("S b billing/cfg 0 60000"));
  ASSERT_EQ(st.size(), 4u);
  EXPECT_EQ(st[0], "S");
  EXPECT_EQ(billing.call("R " + st[1] + " billing/cfg"), "R " + st[1] + " billing/cfg");
  EXPECT_EQ(alice.call("S a shared/y 0 60000"), "E forbidden a shared/y");
  EXPECT_EQ(ops.call("S o orders/2 3 60000"), "E forbidden o orders/2");
  EXPECT_EQ(billing.call("S b orders/2 3 60000"), "E forbidden b orders/2");
  // Nothing was registered by the refused ones.
  EXPECT_EQ(fields(ops.call("A o orders/2 60000 0"))[0], "A");
}

TEST(AuthTest, WatchNeedsAuthenticationAndItsOwnVerb) {
  SecurityFiles files;
  files.write_acl(R"(admins = ["ops"]
[[rule]]
identity = "billing"
prefix = "billing/"
verbs = ["A", "R"]
[[rule]]
identity = "alice"
prefix = "billing/"
verbs = ["W"]
)");
  LockdProcess lockd({"--auth", "token", "--credentials", files.credentials(), "--acl", files.acl()});
  LineClient anon(lockd.port()), billing(lockd.port()), alice(lockd.port());
  // Not authenticated: refused with the key as the echo.
  EXPECT_EQ(anon.call("W billing/x"), "E unauthenticated billing/x");
  EXPECT_EQ(anon.call("U billing/x"), "E unauthenticated billing/x");
  EXPECT_EQ(billing.call("H billing-token"), "H billing");
  EXPECT_EQ(alice.call("H alice-token"), "H alice");
  // A does not imply W.
  EXPECT_EQ(billing.call("W billing/x"), "E forbidden billing/x");
  // W on its prefix only; the push shows the holder's owner and token.
  EXPECT_EQ(alice.call("W other/x"), "E forbidden other/x");
  const auto w = fields(alice.call("W billing/x"));
  ASSERT_EQ(w.size(), 4u);
  EXPECT_EQ(w[3], "free");
  const std::string bt = token_of(billing.call("A b billing/x 60000"));
  const auto v = fields(*alice.read_line());
  ASSERT_EQ(v.size(), 6u);
  EXPECT_EQ(v[0], "V");
  EXPECT_EQ(v[4], "b");
  EXPECT_EQ(v[5], bt);
  EXPECT_EQ(alice.call("U billing/x"), "U billing/x");
}

TEST(AuthTest, CertificateOrTokenWithAuthAny) {
  SecurityFiles files;
  LockdProcess lockd({"--client-tls", "--tls-cert", pki("server.pem"), "--tls-key", pki("server.key"),
                      "--tls-ca", pki("ca.pem"), "--auth", "any", "--credentials",
                      files.credentials(), "--acl", files.acl()});
  // The certificate's CN is the identity: billing, without H.
  TlsLineClient billing(lockd.port(), {pki("ca.pem"), pki("client-billing.pem"), pki("client-billing.key")});
  ASSERT_TRUE(billing.handshake_ok()) << billing.error();
  EXPECT_EQ(fields(billing.call("A b billing/1 60000"))[0], "A");
  EXPECT_EQ(billing.call("A b orders/1 60000"), "E forbidden b orders/1");
  // No certificate: H is the way in.
  TlsLineClient anon(lockd.port(), {});
  ASSERT_TRUE(anon.handshake_ok()) << anon.error();
  EXPECT_EQ(anon.call("A b billing/2 60000"), "E unauthenticated b billing/2");
  EXPECT_EQ(anon.call("H billing-token"), "H billing");
  EXPECT_EQ(fields(anon.call("A b billing/2 60000"))[0], "A");
  // An expired certificate is refused at the handshake, not downgraded to anonymous.
  TlsLineClient expired(lockd.port(), {pki("ca.pem"), pki("expired.pem"), pki("expired.key")});
  if (expired.handshake_ok()) {
    expired.send("H billing-token\n");
    EXPECT_TRUE(expired.wait_closed(20s));
  }
}

TEST(AuthTest, SighupReloadsCredentialsAndAclAndKeepsOldOnesThatDoNotParse) {
  SecurityFiles files;
  LockdProcess lockd({"--auth", "token", "--credentials", files.credentials(), "--acl", files.acl()});
  LineClient billing(lockd.port());
  EXPECT_EQ(billing.call("H billing-token"), "H billing");
  EXPECT_EQ(billing.call("A b orders/9 60000"), "E forbidden b orders/9");

  // Broken files: both old ones stay; the error is logged.
  files.write_acl("[[rule]\n");
  { std::ofstream(files.credentials()) << "[[credential]]\nidentity = \"x\"\n"; }
  lockd.process().signal(SIGHUP);
  ASSERT_TRUE(lockd.process().wait_for_line("keeping the old TLS files, credentials and ACL", 20s));
  EXPECT_EQ(billing.call("A b orders/9 60000"), "E forbidden b orders/9");
  LineClient c2(lockd.port());
  EXPECT_EQ(c2.call("H ops-token"), "H ops");

  // Good files: billing may now use orders/, and a new credential works.
  files.write_acl("[[rule]]\nidentity = \"billing\"\nprefix = \"orders/\"\nverbs = [\"A\"]\n");
  files.write_credentials({{"billing", "billing-token-2"}});
  lockd.process().signal(SIGHUP);
  EXPECT_TRUE(eventually([&] { return fields(billing.call("A b orders/9 60000"))[0] == "A"; }));
  LineClient c3(lockd.port());
  EXPECT_EQ(c3.call("H billing-token-2"), "H billing");
  LineClient c4(lockd.port());
  EXPECT_EQ(c4.call("H ops-token"), "E unauthenticated");
}

TEST(AuthTest, BadSecurityFlagsAndFilesAtStartAreOneLineAndExit2) {
  SecurityFiles files;
  files.write_acl("verbs = 1\n");
  const std::vector<std::vector<std::string>> cases{
      {"--auth", "token"},                                             // no --credentials
      {"--auth", "cert"},                                              // no --client-tls
      {"--acl", files.acl()},                                          // --auth none
      {"--auth", "token", "--credentials", "/nonexistent.toml"},
      {"--auth", "token", "--credentials", files.credentials(), "--acl", files.acl()},
      {"--auth", "maybe"},
  };
  for (const auto& flags : cases) {
    ChildProcess p;
    std::vector<std::string> argv{lockd_binary(), "--listen", "127.0.0.1:0", "--admin", "off"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    ASSERT_TRUE(p.start(argv));
    EXPECT_EQ(p.wait_exit(20s), 2) << flags[1];
    const std::string& err = p.stderr_text();
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  }
}

}  // namespace
}  // namespace lockd::testing
