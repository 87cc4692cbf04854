// The C++ client's credential (Options::credential, protocol.md §11)
// against a real lockd run with --auth token, a credentials file and an
// ACL: H on every connection (also after a reconnect), the refusals.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "lockd/auth/credentials.h"
#include "lockd/client/client.h"
#include "lockd/client/guard.h"
#include "lockd_process.h"

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
    std::ofstream(dir / "acl.toml") << "[[rule]]\nidentity = \"billing\"\nprefix = \"billing/\"\n"
                                       "verbs = [\"A\", \"S\", \"R\", \"K\"]\n";
  }
  ~AuthFiles() { fs::remove_all(dir); }
  std::vector<std::string> flags(std::uint16_t port = 0) const {
    return {"--listen", "127.0.0.1:" + std::to_string(port), "--auth", "token", "--credentials",
            (dir / "credentials.toml").string(), "--acl", (dir / "acl.toml").string()};
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
    std::this_thread::sleep_for(700ms);  // the keeper's K are authenticated too
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

}  // namespace
}  // namespace lockd::client
