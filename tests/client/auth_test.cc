// The C++ client's credential (Options::credential) and TLS (Options::tls),
// protocol.md §11, against a real lockd run with --auth, a credentials file
// and an ACL, and --client-tls with the tree's test PKI (make-test-pki):
// H on every connection (also after a reconnect), TLS, the refusals.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <atomic>
#include <thread>

#include "lockd/auth/credentials.h"
#include "lockd/client/client.h"
#include "lockd/client/guard.h"
#include "eventually.h"
#include "lockd_process.h"
#include "tls_client.h"

namespace lockd::client {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using testing::LockdProcess;

const std::string kCredential(64, 'c');

struct AuthFiles {
  fs::path dir;
  AuthFiles() {
    char tmpl[] = "/tmp/lockd-client-auth-XXXXXX";
    dir = ::mkdtemp(tmpl);
    std::ofstream(dir / "credentials.toml") << "[[credential]]\nidentity = \"billing\"\nhash = \""
                                            << auth::credential_hash(kCredential, auth::random_bytes(16))
                                            << "\"\n";
    // lockd refuses a credentials file that group or others may read (§11a).
    fs::permissions(dir / "credentials.toml", fs::perms::owner_read | fs::perms::owner_write);
    std::ofstream(dir / "acl.toml") << "[[rule]]\nidentity = \"billing\"\nprefix = \"billing/\"\n"
                                       "verbs = [\"A\", \"S\", \"R\", \"K\"]\n"
                                       "[[rule]]\nidentity = \"ops\"\nprefix = \"ops/\"\n"
                                       "verbs = [\"A\", \"S\", \"R\", \"K\"]\n";
  }
  ~AuthFiles() { fs::remove_all(dir); }
  std::vector<std::string> flags(std::uint16_t port = 0) const {
    return {"--listen", "127.0.0.1:" + std::to_string(port), "--auth", "token", "--credentials",
            (dir / "credentials.toml").string(), "--acl", (dir / "acl.toml").string()};
  }
  std::vector<std::string> tls_flags(std::uint16_t port = 0) const {
    return {"--listen", "127.0.0.1:" + std::to_string(port), "--client-tls", "--tls-cert",
            testing::pki("server.pem"), "--tls-key", testing::pki("server.key"), "--tls-ca",
            testing::pki("ca.pem"), "--auth", "any", "--credentials", (dir / "credentials.toml").string(),
            "--acl", (dir / "acl.toml").string()};
  }
};

Options options(std::uint16_t port, std::string credential) {
  Options o;
  o.addresses = {"127.0.0.1:" + std::to_string(port)};
  o.reply_timeout = 5s;
  o.no_leader_budget = 1s;
  o.jitter_seed = 1;
  o.credential = std::move(credential);
  return o;
}

TEST(ClientAuth, CredentialOnEveryConnection) {
  AuthFiles files;
  auto lockd = std::make_unique<LockdProcess>(files.flags());
  const std::uint16_t port = lockd->port();

  EXPECT_EQ(Client(options(port, "")).acquire("alice", "billing/a", 10'000).code(), Code::kUnauthenticated);

  Client client(options(port, kCredential));
  {
    auto guard = client.lock("alice", "billing/a", {.lease_ms = 600});
    ASSERT_TRUE(guard.ok()) << guard.status().to_string();
    EXPECT_EQ(client.identity(), "billing");
    // The keeper's K are authenticated too: two keeps (past the first
    // 600 ms lease) and the lock still held.
    EXPECT_TRUE(testing::eventually([&] { return guard->keeper()->kept_count() >= 2; }));
    EXPECT_FALSE(guard->lost());
  }
  EXPECT_EQ(client.acquire("alice", "payroll/a", 10'000).code(), Code::kForbidden);

  // A restart on the same port: the reconnect sends H again.
  lockd.reset();
  lockd = std::make_unique<LockdProcess>(files.flags(port));
  auto again = client.acquire("alice", "billing/b", 10'000);
  EXPECT_TRUE(again.ok()) << again.status().to_string();

  const std::string wrong(64, 'f');
  const auto refused = Client(options(port, wrong)).acquire("eve", "billing/c", 10'000);
  EXPECT_EQ(refused.code(), Code::kUnauthenticated);
  EXPECT_EQ(refused.status().message.find(wrong), std::string::npos);
  EXPECT_EQ(Client(options(port, "has space")).acquire("eve", "billing/c", 10'000).code(),
            Code::kInvalidArgument);
}

Options tls_options(std::uint16_t port, std::string credential, TlsFiles tls) {
  Options o = options(port, std::move(credential));
  o.tls = std::move(tls);
  return o;
}

TEST(ClientAuth, TlsWithCredentialOrClientCertificate) {
  using testing::pki;
  AuthFiles files;
  auto lockd = std::make_unique<LockdProcess>(files.tls_flags());
  const std::uint16_t port = lockd->port();

  // A credential inside TLS; 127.0.0.1 (the host dialled) is in the server's SAN.
  Client billing(tls_options(port, kCredential, {.ca_file = pki("ca.pem")}));
  {
    auto guard = billing.lock("alice", "billing/a", {.lease_ms = 600});
    ASSERT_TRUE(guard.ok()) << guard.status().to_string();
    EXPECT_EQ(billing.identity(), "billing");
    // Four threads and the keeper share the one TLS session.
    std::vector<std::thread> threads;
    std::atomic<int> failures{0};
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < 30; ++i) {
          auto l = billing.acquire("w" + std::to_string(t), "billing/t" + std::to_string(t), 10'000);
          if (!l.ok() || !billing.release(l.value()).ok()) ++failures;
        }
      });
    }
    for (auto& th : threads) th.join();
    EXPECT_EQ(failures.load(), 0);
    EXPECT_TRUE(testing::eventually([&] { return guard->keeper()->kept_count() >= 2; }));
    EXPECT_FALSE(guard->lost());
  }
  EXPECT_EQ(billing.acquire("alice", "ops/a", 10'000).code(), Code::kForbidden);

  // A client certificate (CN ops) is the identity; the name checked is the one given.
  Client ops(tls_options(port, "", {.ca_file = pki("ca.pem"), .cert_file = pki("client-ops.pem"),
                                    .key_file = pki("client-ops.key"), .server_name = "localhost"}));
  EXPECT_TRUE(ops.acquire("bob", "ops/a", 10'000).ok());
  EXPECT_EQ(ops.acquire("bob", "billing/b", 10'000).code(), Code::kForbidden);

  // TLS alone is no identity; another CA, another name, plaintext: refused.
  EXPECT_EQ(Client(tls_options(port, "", {.ca_file = pki("ca.pem")})).acquire("eve", "billing/c", 1'000).code(),
            Code::kUnauthenticated);
  for (const TlsFiles& tls : {TlsFiles{.ca_file = pki("other-ca.pem")},
                              TlsFiles{.ca_file = pki("ca.pem"), .server_name = "lockd.example.net"},
                              TlsFiles{}}) {
    const auto r = Client(tls_options(port, kCredential, tls)).acquire("eve", "billing/c", 1'000);
    EXPECT_EQ(r.code(), Code::kUnreachable) << tls.ca_file << " " << r.status().to_string();
    EXPECT_EQ(r.status().message.find(kCredential), std::string::npos);
  }
  EXPECT_EQ(Client(tls_options(port, kCredential, {.ca_file = "/nonexistent.pem"})).acquire("eve", "k", 1'000).code(),
            Code::kInvalidArgument);

  // A restart on the same port: the reconnect handshakes and sends H again.
  lockd.reset();
  lockd = std::make_unique<LockdProcess>(files.tls_flags(port));
  auto again = billing.acquire("alice", "billing/b", 10'000);
  EXPECT_TRUE(again.ok()) << again.status().to_string();
}

}  // namespace
}  // namespace lockd::client
