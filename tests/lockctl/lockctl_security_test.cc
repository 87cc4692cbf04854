// lockctl against a lockd with TLS on the client and admin ports and
// token authentication: --tls-ca, --credential-file, LOCKD_CREDENTIAL, and
// `lockctl credential new` making the credentials file lockd reads.
#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "lockd_process.h"
#include "run_program.h"
#include "tls_client.h"

namespace lockd::testing {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

using Outcome = RunResult;

Outcome run(const std::vector<std::string>& argv) { return run_program(argv, 30s); }

// `lockctl credential new billing` prints a comment, the credential, then
// the credentials-file entry: the entry goes to DIR/credentials.toml and
// the credential to DIR/credential.
struct NewCredential {
  std::string out;  // lockctl's whole output
  std::string credential;
};
NewCredential new_billing_credential(const fs::path& dir) {
  const Outcome made = run({LOCKCTL_BINARY, "credential", "new", "billing"});
  EXPECT_EQ(made.status, 0) << made.err;
  std::istringstream lines(made.out);
  std::string comment, credential;
  std::getline(lines, comment);
  std::getline(lines, credential);
  const std::size_t entry = made.out.find("[[credential]]");
  EXPECT_NE(entry, std::string::npos) << made.out;
  if (entry != std::string::npos) std::ofstream(dir / "credentials.toml") << made.out.substr(entry);
  std::ofstream(dir / "credential") << credential << "\n";
  // lockd refuses a credentials file that group or others may read (§11a).
  for (const char* name : {"credentials.toml", "credential"}) {
    fs::permissions(dir / name, fs::perms::owner_read | fs::perms::owner_write);
  }
  return {made.out, credential};
}

TEST(LockctlSecurityTest, TlsAndCredentialsForTheTextProtocolAndTheAdminApi) {
  const fs::path dir = fs::path(test_pki_dir()) / "lockctl";
  fs::create_directories(dir);
  const NewCredential made = new_billing_credential(dir);
  const std::string& credential = made.credential;
  ASSERT_EQ(credential.size(), 64u) << made.out;
  // `credential hash` of the same credential is another salt, same scheme.
  EXPECT_EQ(made.out.find(credential, made.out.find("hash")), std::string::npos);

  LockdProcess lockd({"--admin", "127.0.0.1:0", "--client-tls", "--admin-tls", "--tls-cert",
                      pki("server.pem"), "--tls-key", pki("server.key"), "--tls-ca", pki("ca.pem"),
                      "--auth", "token", "--credentials", (dir / "credentials.toml").string()});
  const std::vector<std::string> base{LOCKCTL_BINARY, "--addr", "127.0.0.1:" + std::to_string(lockd.port()),
                                      "--admin", "127.0.0.1:" + std::to_string(lockd.admin_port()),
                                      "--tls-ca", pki("ca.pem")};
  auto with = [&](std::vector<std::string> args) {
    std::vector<std::string> argv = base;
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  };
  const std::string file = (dir / "credential").string();
  const Outcome acquired = run(with({"--credential-file", file, "acquire", "b", "billing/x", "--lease", "60000"}));
  EXPECT_EQ(acquired.status, 0) << acquired.out << acquired.err;
  const Outcome held = run(with({"--credential-file", file, "acquire", "b", "billing/x"}));
  EXPECT_EQ(held.status, 1) << held.out << held.err;  // T: the first acquire really happened
  const Outcome status = run(with({"--credential-file", file, "--json", "status"}));
  EXPECT_EQ(status.status, 0) << status.err;
  EXPECT_NE(status.out.find("\"mode\""), std::string::npos) << status.out;
  // From the environment.
  ::setenv("LOCKD_CREDENTIAL", credential.c_str(), 1);
  EXPECT_EQ(run(with({"lock", "billing/x"})).status, 0);
  // `run` authenticates with it but does not hand it on to the job (issue
  // 35): the job gets its lock's token, not lockctl's identity.
  const Outcome job = run(with({"run", "billing/env", "--", "sh", "-c",
                                "echo \"credential=${LOCKD_CREDENTIAL-none} key=$LOCKD_KEY\""}));
  ::unsetenv("LOCKD_CREDENTIAL");
  EXPECT_EQ(job.status, 0) << job.err;
  EXPECT_EQ(job.out, "credential=none key=billing/env\n") << job.out;
  // Without a credential, or with a wrong one: refused.
  EXPECT_NE(run(with({"acquire", "b", "billing/y"})).status, 0);
  EXPECT_NE(run(with({"status"})).status, 0);
  ::setenv("LOCKD_CREDENTIAL", "wrong", 1);
  const Outcome wrong = run(with({"acquire", "b", "billing/y"}));
  ::unsetenv("LOCKD_CREDENTIAL");
  EXPECT_NE(wrong.status, 0);
  EXPECT_NE(wrong.err.find("credential refused"), std::string::npos) << wrong.err;
  // Without --tls-ca lockctl speaks plaintext to a TLS port: no answer.
  std::vector<std::string> plain{LOCKCTL_BINARY, "--addr", "127.0.0.1:" + std::to_string(lockd.port()),
                                 "--credential-file", file, "acquire", "b", "billing/z"};
  EXPECT_EQ(run(plain).status, 3);

  // `run` takes the same options (it is built on the C++ client).
  const Outcome ran =
      run(with({"--credential-file", file, "run", "billing/r", "--", "sh", "-c", "echo \"$LOCKD_KEY $LOCKD_TOKEN\""}));
  EXPECT_EQ(ran.status, 0) << ran.out << ran.err;
  EXPECT_EQ(ran.out.rfind("billing/r ", 0), 0u) << ran.out;
  // Refused without a credential, with a wrong one, or without TLS: the
  // command never runs.
  const std::string marker = (dir / "ran").string();
  const std::vector<std::string> cmd{"run", "billing/r", "--", "touch", marker};
  auto plus = [](std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  const Outcome anonymous = run(with(cmd));
  EXPECT_EQ(anonymous.status, 1) << anonymous.err;
  ::setenv("LOCKD_CREDENTIAL", "wrong", 1);
  const Outcome refused = run(with(cmd));
  ::unsetenv("LOCKD_CREDENTIAL");
  EXPECT_EQ(refused.status, 1) << refused.err;
  EXPECT_EQ(refused.err.find("wrong"), std::string::npos) << refused.err;  // never echoed
  const Outcome plaintext = run(plus({LOCKCTL_BINARY, "--addr", "127.0.0.1:" + std::to_string(lockd.port()),
                                      "--credential-file", file},
                                     cmd));
  EXPECT_EQ(plaintext.status, 3) << plaintext.err;
  EXPECT_FALSE(fs::exists(marker));
  // A client certificate without the CA to check the server by: a usage error.
  const Outcome no_ca = run(plus({LOCKCTL_BINARY, "--addr", "127.0.0.1:" + std::to_string(lockd.port()),
                                  "--tls-cert", pki("client-billing.pem"), "--tls-key", pki("client-billing.key")},
                                 cmd));
  EXPECT_EQ(no_ca.status, 2) << no_ca.err;
  EXPECT_NE(no_ca.err.find("--tls-cert needs --tls-ca"), std::string::npos) << no_ca.err;
  EXPECT_FALSE(fs::exists(marker));
}

// interfaces.md: exit 1 for a refusal, 3 only when the server cannot be
// reached. A refused `H` (E unauthenticated), a request before `H`, and an
// ACL refusal (E forbidden) are answers from a server that was reached:
// acquire, release and keep exit 1 on each, as `run` and the admin verbs'
// 401/403 do (they exited 2, and 3 for a refused credential).
TEST(LockctlSecurityTest, RefusalsByTheServerExitOne) {
  const fs::path dir = fs::path(test_pki_dir()) / "lockctl-refusals";
  fs::create_directories(dir);
  new_billing_credential(dir);
  std::ofstream(dir / "wrong") << "not-the-credential\n";
  std::ofstream(dir / "acl.toml") << "[[rule]]\nidentity = \"billing\"\nprefix = \"billing/\"\n"
                                     "verbs = [\"A\", \"R\", \"K\"]\n";
  LockdProcess lockd({"--auth", "token", "--credentials", (dir / "credentials.toml").string(),
                      "--acl", (dir / "acl.toml").string()});
  const std::string addr = "127.0.0.1:" + std::to_string(lockd.port());
  auto lockctl = [&](const std::string& file, std::vector<std::string> args) {
    std::vector<std::string> argv{LOCKCTL_BINARY, "--addr", addr};
    if (!file.empty()) {
      argv.push_back("--credential-file");
      argv.push_back((dir / file).string());
    }
    argv.insert(argv.end(), args.begin(), args.end());
    return run(argv);
  };
  const std::vector<std::vector<std::string>> verbs{{"acquire", "b", "other/x"},
                                                    {"release", "12", "other/x"},
                                                    {"keep", "12", "other/x", "--lease", "1000"}};
  for (const auto& verb : verbs) {
    const Outcome anonymous = lockctl("", verb);
    EXPECT_EQ(anonymous.status, 1) << verb[0] << ": " << anonymous.out << anonymous.err;
    EXPECT_NE(anonymous.out.find("E unauthenticated"), std::string::npos) << anonymous.out;
    const Outcome wrong = lockctl("wrong", verb);
    EXPECT_EQ(wrong.status, 1) << verb[0] << ": " << wrong.out << wrong.err;
    EXPECT_NE(wrong.err.find("credential refused"), std::string::npos) << wrong.err;
    EXPECT_EQ(wrong.err.find("not-the-credential"), std::string::npos) << wrong.err;  // never echoed
    EXPECT_EQ(wrong.err.find("cannot reach"), std::string::npos) << wrong.err;
    const Outcome forbidden = lockctl("credential", verb);
    EXPECT_EQ(forbidden.status, 1) << verb[0] << ": " << forbidden.out << forbidden.err;
    EXPECT_NE(forbidden.out.find("E forbidden"), std::string::npos) << forbidden.out;
  }
  // Allowed: the credential and the ACL do work.
  EXPECT_EQ(lockctl("credential", {"acquire", "b", "billing/x"}).status, 0);
  // Still a usage error: a request lockd finds malformed.
  EXPECT_EQ(lockctl("credential", {"keep", "0", "billing/x", "--lease", "1000"}).status, 2);
}

}  // namespace
}  // namespace lockd::testing
