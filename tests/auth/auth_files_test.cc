// src/auth: the credentials and ACL files of interfaces.md, parsed by
// toml++; hashes; the rules of the ACL.
#include <gtest/gtest.h>

#include "lockd/auth/acl.h"
#include "lockd/auth/authenticator.h"
#include "lockd/auth/credentials.h"

namespace lockd::auth {
namespace {

std::string entry(const std::string& identity, const std::string& credential) {
  return "[[credential]]\nidentity = \"" + identity + "\"\nhash = \"" +
         credential_hash(credential, random_bytes(16)) + "\"\n";
}

TEST(CredentialsTest, HashIsSaltThenCredentialAsInterfacesMd) {
  // sha256("salt" ++ "secret"), computed independently with
  // `printf 'saltsecret' | sha256sum`.
  const std::vector<unsigned char> salt{'s', 'a', 'l', 't'};
  EXPECT_EQ(credential_hash("secret", salt),
            "sha256$73616c74$bede90386d450cea8b77b822f8887065e4e5abf132c2f9dccfcc7fbd4cba5e35");
}

TEST(CredentialsTest, IdentifiesOnlyTheRightCredential) {
  std::string error;
  auto c = Credentials::parse(entry("billing", "tok-1") + entry("ops", "tok-2") +
                                  entry("billing", "tok-3"),
                              "creds.toml", error);
  ASSERT_TRUE(c) << error;
  EXPECT_EQ(c->size(), 3u);
  EXPECT_EQ(c->identify("tok-1"), "billing");
  EXPECT_EQ(c->identify("tok-2"), "ops");
  EXPECT_EQ(c->identify("tok-3"), "billing");  // two credentials for one identity (rotation)
  EXPECT_EQ(c->identify("tok-4"), std::nullopt);
  EXPECT_EQ(c->identify("tok-"), std::nullopt);
  EXPECT_EQ(c->identify(""), std::nullopt);
}

TEST(CredentialsTest, BadFilesAreOneLineWithFileAndLine) {
  const std::vector<std::pair<std::string, std::string>> bad{
      {"[[credential]]\nidentity = \"a\"\nhash = \"md5$00$11\"\n", "creds.toml:1: "},
      {"[[credential]]\nidentity = \"a\"\nhash = \"sha256$zz$" + std::string(64, '0') + "\"\n", "hash must be"},
      {"[[credential]]\nidentity = \"a\"\nhash = \"sha256$00$" + std::string(63, '0') + "\"\n", "hash must be"},
      {"[[credential]]\nidentity = \"a b\"\nhash = \"sha256$00$" + std::string(64, '0') + "\"\n", "identity"},
      {"[[credential]]\nidentity = \"a\"\npassword = \"x\"\n", "unknown key 'password'"},
      {"[[credential]]\nidentity = \"a\"\nhash = \"sha256$00$\n", "creds.toml:3:"},
      {"credentials = 1\n", "unknown key 'credentials'"},
  };
  for (const auto& [text, want] : bad) {
    std::string error;
    EXPECT_FALSE(Credentials::parse(text, "creds.toml", error)) << text;
    EXPECT_NE(error.find(want), std::string::npos) << text << " -> " << error;
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  }
}

TEST(AclTest, TheExampleOfInterfacesMd) {
  std::string error;
  auto acl = Acl::parse(R"(
admins = ["ops"]
[[rule]]
identity = "billing"
prefix = "billing/"
verbs = ["A", "S", "R", "K"]
[[rule]]
identity = "*"
prefix = "shared/"
verbs = ["A"]
[[rule]]
identity = "ops"
prefix = ""
verbs = ["R"]
)",
                        "acl.toml", error);
  ASSERT_TRUE(acl) << error;
  EXPECT_TRUE(acl->allows("billing", 'A', "billing/inv-1"));
  EXPECT_TRUE(acl->allows("billing", 'K', "billing/inv-1"));
  EXPECT_FALSE(acl->allows("billing", 'A', "orders/1"));
  EXPECT_FALSE(acl->allows("billing", 'A', "billing"));  // a prefix, not a subtree name
  EXPECT_TRUE(acl->allows("billing", 'A', "shared/x"));  // "*" rule
  EXPECT_TRUE(acl->allows("anyone", 'A', "shared/x"));
  EXPECT_FALSE(acl->allows("anyone", 'R', "shared/x"));
  EXPECT_TRUE(acl->allows("ops", 'R', "anything"));      // "" prefix
  EXPECT_FALSE(acl->allows("ops", 'A', "anything"));
  EXPECT_TRUE(acl->is_admin("ops"));
  EXPECT_FALSE(acl->is_admin("billing"));
  EXPECT_FALSE(acl->is_admin("*"));
}

TEST(AclTest, BadFilesAreRefused) {
  const std::vector<std::pair<std::string, std::string>> bad{
      {"[[rule]]\nidentity = \"a\"\nprefix = \"\"\nverbs = [\"X\"]\n", "verbs"},
      {"[[rule]]\nidentity = \"a\"\nverbs = [\"A\"]\n", "prefix"},
      {"[[rule]]\nprefix = \"\"\nverbs = [\"A\"]\n", "identity"},
      {"[[rule]]\nidentity = \"a\"\nprefix = \"\"\nverbs = \"A\"\n", "verbs"},
      {"admins = \"ops\"\n", "admins"},
      {"[[rules]]\nidentity = \"a\"\n", "unknown key 'rules'"},
      {"[[rule]\n", "acl.toml:1:"},
  };
  for (const auto& [text, want] : bad) {
    std::string error;
    EXPECT_FALSE(Acl::parse(text, "acl.toml", error)) << text;
    EXPECT_NE(error.find(want), std::string::npos) << text << " -> " << error;
  }
}

TEST(AuthenticatorTest, CertificateIdentityOnlyInModesCertAndAny) {
  std::string error;
  tls::PeerCertificate cert{"alice", {}};
  for (const auto& [mode, want] : std::vector<std::pair<AuthMode, bool>>{
           {AuthMode::kCert, true}, {AuthMode::kAny, true}, {AuthMode::kToken, false}}) {
    auto a = Authenticator::create(mode, {}, error);
    ASSERT_TRUE(a) << error;
    EXPECT_EQ(a->by_certificate(cert).has_value(), want);
  }
  auto a = Authenticator::create(AuthMode::kCert, {}, error);
  EXPECT_FALSE(a->by_certificate(tls::PeerCertificate{"has space", {}}).has_value());
  EXPECT_FALSE(a->by_credential("x").has_value());  // no credentials file
  EXPECT_TRUE(a->allows("alice", 'A', "k"));        // no ACL: everything
}

}  // namespace
}  // namespace lockd::auth
