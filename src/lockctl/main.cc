// lockctl: the operator's CLI for lockd (spec interfaces.md). Parses the
// command line and runs one command; see commands.h for exit statuses.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "client.h"
#include "commands.h"
#include "lockd/auth/credentials.h"
#include "lockd/version/version.h"
#include "run.h"
#include "member.h"
#include "snapshot.h"

namespace {

using lockd::lockctl::kExitUsage;

// `HOST:PORT[,HOST:PORT...]` -> endpoints; "" or the error, for CLI11.
std::string endpoints_check(const std::string& text) {
  std::string error;
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = text.find(',', start);
    const std::string one = text.substr(start, comma - start);
    if (!lockd::net::parse_endpoint(one, error)) return "'" + one + "': " + error;
    if (comma == std::string::npos) return {};
    start = comma + 1;
  }
}

std::vector<lockd::net::Endpoint> to_endpoints(const std::string& text) {
  std::vector<lockd::net::Endpoint> out;
  std::string error;
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = text.find(',', start);
    out.push_back(*lockd::net::parse_endpoint(text.substr(start, comma - start), error));
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

// The usage line of each command, printed after a usage error in it.
const std::map<std::string, std::string> kUsage = {
    {"status", "lockctl status"},
    {"locks", "lockctl locks [--prefix P] [--after K] [--limit N]"},
    {"lock", "lockctl lock KEY"},
    {"cluster", "lockctl cluster [init]"},
    {"acquire", "lockctl acquire OWNER KEY [--shared [--limit N]] [--lease MS] [--wait MS]"},
    {"release", "lockctl release TOKEN KEY"},
    {"keep", "lockctl keep TOKEN KEY --lease MS"},
    {"watch", "lockctl watch KEY... [--once]"},
    {"run", "lockctl run KEY [--owner O] [--shared [--limit N]] [--lease MS] [--wait MS] -- COMMAND [ARGS...]"},
    {"top", "lockctl top [--interval-ms MS] [--iterations N] [--rows N]"},
    {"member", "lockctl member list | add ID CLIENT_HOST:PORT/RAFT_HOST:PORT | promote ID | remove ID"},
    {"leader", "lockctl leader transfer [ID]"},
};

// The command named on the command line (the first word that is one).
std::string command_in(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--") break;
    if (kUsage.contains(argv[i])) return argv[i];
  }
  return {};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"lockctl: inspect and drive a lockd server", "lockctl"};
  app.require_subcommand(1);
  app.fallthrough();  // global flags may also follow the command
  std::string addr = "127.0.0.1:7070";
  std::string admin = "127.0.0.1:7071";
  bool json = false;
  int timeout_ms = lockd::lockctl::kDefaultTimeoutMs;
  app.add_option("--addr", addr,
                 "lockd client address(es), comma-separated, tried in order (default "
                 "127.0.0.1:7070)")
      ->envname("LOCKD_ADDR")
      ->check(CLI::Validator(endpoints_check, "HOST:PORT[,...]"));
  app.add_option("--admin", admin,
                 "lockd admin API address(es), comma-separated, tried in order (default "
                 "127.0.0.1:7071)")
      ->envname("LOCKD_ADMIN")
      ->check(CLI::Validator(endpoints_check, "HOST:PORT[,...]"));
  app.add_option("--timeout", timeout_ms,
                 "ms one node gets to connect and answer, beyond an acquire's --wait (default 2000)")
      ->check(CLI::Range(1, 3'600'000));
  app.add_flag("--json", json, "print the admin API's JSON unchanged");
  std::string credential_file;
  lockd::lockctl::ClientSecurity security;
  app.add_option("--credential-file", credential_file,
                 "file holding the credential for H and the admin API (else $LOCKD_CREDENTIAL)");
  app.add_option("--tls-ca", security.tls_ca, "CA (PEM) the server's certificate chains to; turns TLS on");
  app.add_option("--tls-cert", security.tls_cert, "client certificate (PEM); turns TLS on");
  app.add_option("--tls-key", security.tls_key, "key of --tls-cert (PEM)");
  // "lockctl 0.1.0 (git 9c497a1)": the same version as the lockd it ships with.
  std::string version = "lockctl " + std::string(lockd::version::number());
  if (!lockd::version::revision().empty()) {
    version += " (git " + std::string(lockd::version::revision()) + ")";
  }
  app.set_version_flag("--version", version);

  auto* status = app.add_subcommand("status", "node status");

  auto* locks = app.add_subcommand("locks", "list locks, sorted by key");
  std::string prefix, after;
  std::optional<std::uint64_t> limit;
  locks->add_option("--prefix", prefix, "only keys starting with P");
  locks->add_option("--after", after, "only keys after K (next page)");
  locks->add_option("--limit", limit, "at most N locks (server default 1000)")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1'000'000'000}));

  auto* lock = app.add_subcommand("lock", "one key: holder, token, expiry, waiters");
  std::string key;
  lock->add_option("KEY", key, "the key")->required();

  auto* cluster = app.add_subcommand("cluster", "members, roles, leader, replication");
  auto* cluster_init =
      cluster->add_subcommand("init", "form the group once (POST /v1/cluster/init) (v1.3)");

  auto* acquire = app.add_subcommand("acquire", "acquire a lock over the text protocol");
  std::string owner;
  std::optional<std::uint64_t> lease_ms, wait_ms;
  acquire->add_option("OWNER", owner, "owner label")->required();
  acquire->add_option("KEY", key, "the key")->required();
  acquire->add_option("--lease", lease_ms, "lease in ms (server default when omitted)");
  acquire->add_option("--wait", wait_ms, "wait up to MS for the lock (blocks)");
  bool acquire_shared = false;
  std::optional<std::uint64_t> acquire_limit;
  acquire->add_flag("--shared", acquire_shared,
                    "shared (`S`, v1.2): a read lock, or with --limit N one of N permits");
  acquire->add_option("--limit", acquire_limit, "with --shared: most holders at once (0: no cap)")
      ->check(CLI::Range(0, 65535));

  auto* release = app.add_subcommand("release", "release a lock over the text protocol");
  std::string token;
  release->add_option("TOKEN", token, "fencing token from acquire")->required();
  release->add_option("KEY", key, "the key")->required();

  auto* keep = app.add_subcommand("keep", "extend a held lease over the text protocol (v1.1)");
  std::uint64_t keep_lease_ms = 0;
  keep->add_option("TOKEN", token, "fencing token of the lease")->required();
  keep->add_option("KEY", key, "the key")->required();
  keep->add_option("--lease", keep_lease_ms, "new lease in ms, counted from now")->required();

  auto* watch = app.add_subcommand(
      "watch", "print a key's state now and at every change over the text protocol (v1.3)");
  std::vector<std::string> watch_keys;
  bool watch_once = false;
  watch->add_option("KEY", watch_keys, "the keys")->required();
  watch->add_flag("--once", watch_once, "print the states now only");

  auto* run = app.add_subcommand("run", "hold a lock while a command runs: run KEY -- CMD ARGS...");
  lockd::lockctl::RunOptions run_opt;
  std::string run_owner;
  run->add_option("KEY", run_opt.key, "the key");
  run->add_option("--owner", run_owner, "owner label (default lockctl-run@HOST:PID)");
  run->add_option("--lease", run_opt.lease_ms, "lease in ms, kept alive while the command runs (default 30000)")
      ->check(CLI::PositiveNumber);
  run->add_option("--wait", run_opt.wait_ms, "wait up to MS for the lock (default 0)");
  run->add_flag("--shared", run_opt.shared,
                "hold it shared (`S`, v1.2): a read lock, or with --limit N one of N permits");
  run->add_option("--limit", run_opt.limit, "with --shared: most holders at once (0: no cap)")
      ->check(CLI::Range(0, 65535));
  run->add_option("COMMAND", run_opt.command, "the command and its arguments, after --");
  // What follows `run`'s `--` is the command, never KEY: cut it off before
  // CLI11 fills the positionals from it (`run -- true` lacks a KEY).
  std::vector<std::string> after_dashes;
  bool has_dashes = false;
  if (command_in(argc, argv) == "run") {
    for (int i = 1; i < argc; ++i) {
      if (std::string_view(argv[i]) != "--") continue;
      has_dashes = true;
      after_dashes.assign(argv + i + 1, argv + argc);
      argc = i;
      break;
    }
  }

  auto* top = app.add_subcommand("top", "live view of the busiest keys (q to quit)");
  lockd::lockctl::TopOptions top_opt;
  top->add_option("--interval-ms", top_opt.interval_ms, "refresh period (default 1000)")
      ->check(CLI::Range(std::uint64_t{100}, std::uint64_t{3'600'000}));
  top->add_option("--iterations", top_opt.iterations, "frames to draw, then exit (0: until q)");
  top->add_option("--rows", top_opt.rows, "rows per table (default: fit the terminal)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{100}));

  auto* snapshot = app.add_subcommand("snapshot", "backups: save the leader's state to a file, check a file");
  snapshot->require_subcommand(1);
  std::string snapshot_file;
  auto* snap_save = snapshot->add_subcommand("save", "download a snapshot from the leader into FILE (atomically, checked)");
  snap_save->add_option("FILE", snapshot_file, "where to write it")->required();
  auto* snap_verify = snapshot->add_subcommand("verify", "check a saved snapshot FILE");
  snap_verify->add_option("FILE", snapshot_file, "the file")->required();

  auto* member = app.add_subcommand("member", "membership changes on the leader (v1.2)");
  member->require_subcommand(1);
  std::uint64_t member_id = 0;
  std::string member_addrs;
  auto* member_list = member->add_subcommand("list", "the members (as lockctl cluster)");
  auto* member_add = member->add_subcommand("add", "add a learner: ID CLIENT_HOST:PORT/RAFT_HOST:PORT");
  member_add->add_option("ID", member_id, "the new member's id (never used before)")->required();
  member_add->add_option("ADDRS", member_addrs, "CLIENT_HOST:PORT/RAFT_HOST:PORT")->required();
  auto* member_promote = member->add_subcommand("promote", "make a caught-up learner a voter");
  member_promote->add_option("ID", member_id, "the learner's id")->required();
  auto* member_remove = member->add_subcommand("remove", "remove a member (its id is never reused)");
  member_remove->add_option("ID", member_id, "the member's id")->required();
  auto* leader = app.add_subcommand("leader", "leadership (v1.2)");
  leader->require_subcommand(1);
  std::optional<std::uint64_t> transfer_id;
  auto* leader_transfer = leader->add_subcommand("transfer", "hand leadership to ID (default: the most caught-up voter)");
  leader_transfer->add_option("ID", transfer_id, "the voter to lead");

  auto* credential = app.add_subcommand("credential", "make credentials for lockd's --credentials file");
  credential->require_subcommand(1);
  auto* cred_new = credential->add_subcommand(
      "new", "print a new random credential and the [[credential]] entry that accepts it");
  std::string cred_identity;
  cred_new->add_option("IDENTITY", cred_identity, "who the credential names")->required();
  credential->add_subcommand(
      "hash", "read a credential on stdin, print its salted hash (the file's hash value)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    const std::string cmd = command_in(argc, argv);
    if (cmd.empty()) {
      std::fprintf(stderr, "lockctl: %s (see lockctl --help)\n", e.what());
    } else {
      std::fprintf(stderr, "lockctl %s: %s; usage: %s\n", cmd.c_str(), e.what(),
                   kUsage.at(cmd).c_str());
    }
    return kExitUsage;
  }

  if (*credential) {
    std::string cred;
    if (*cred_new) {
      if (!lockd::auth::valid_identity(cred_identity)) {
        std::fprintf(stderr, "lockctl: an identity is 1..128 visible ASCII characters, no spaces\n");
        return kExitUsage;
      }
      cred = lockd::auth::new_credential();
      std::printf("# the credential (give it to the client; it is not stored anywhere):\n%s\n\n",
                  cred.c_str());
    } else {
      std::getline(std::cin, cred);
      if (cred.empty() || cred.size() > 512) {
        std::fprintf(stderr, "lockctl: expected a credential (1..512 bytes) on stdin\n");
        return kExitUsage;
      }
    }
    const std::string hash = lockd::auth::credential_hash(cred, lockd::auth::random_bytes(16));
    if (*cred_new) {
      std::printf("# for lockd's --credentials file:\n[[credential]]\nidentity = \"%s\"\nhash = \"%s\"\n",
                  cred_identity.c_str(), hash.c_str());
    } else {
      std::printf("%s\n", hash.c_str());
    }
    return 0;
  }
  if (!credential_file.empty()) {
    std::ifstream in(credential_file);
    if (!in) {
      std::fprintf(stderr, "lockctl: cannot read --credential-file %s\n", credential_file.c_str());
      return kExitUsage;
    }
    std::stringstream text;
    text << in.rdbuf();
    security.credential = text.str();
    if (!security.credential.empty() && security.credential.back() == '\n') security.credential.pop_back();
  } else if (const char* env = std::getenv("LOCKD_CREDENTIAL")) {
    security.credential = env;
  }
  if (std::string error; !lockd::lockctl::set_client_security(security, error)) {
    std::fprintf(stderr, "lockctl: %s\n", error.c_str());
    return kExitUsage;
  }
  lockd::lockctl::Globals g;
  g.addrs = to_endpoints(addr);
  g.admins = to_endpoints(admin);
  g.addr = g.addrs.front();
  g.admin = g.admins.front();
  g.json = json;
  g.timeout_ms = timeout_ms;
  using namespace lockd::lockctl;
  if (*status) return cmd_status(g);
  if (*locks) return cmd_locks(g, prefix, after, limit);
  if (*lock) return cmd_lock(g, key);
  if (*cluster_init) return cmd_cluster_init(g);
  if (*cluster) return cmd_cluster(g);
  if (*acquire) {
    if (acquire_limit && !acquire_shared) {
      std::fprintf(stderr, "lockctl: --limit needs --shared\n");
      return lockd::lockctl::kExitUsage;
    }
    if (acquire_shared) return cmd_acquire_shared(g, owner, key, acquire_limit.value_or(0), lease_ms, wait_ms);
    return cmd_acquire(g, owner, key, lease_ms, wait_ms);
  }
  if (*release) return cmd_release(g, token, key);
  if (*keep) return cmd_keep(g, token, key, keep_lease_ms);
  if (*watch) return cmd_watch(g, watch_keys, watch_once);
  if (*run) {
    if (has_dashes) run_opt.command.insert(run_opt.command.end(), after_dashes.begin(), after_dashes.end());
    if (run_opt.key.empty()) {
      std::fprintf(stderr, "lockctl run: KEY is missing; usage: %s\n", kUsage.at("run").c_str());
      return kExitUsage;
    }
    if (run_opt.command.empty()) {
      std::fprintf(stderr, "lockctl run: COMMAND is missing after --; usage: %s\n",
                   kUsage.at("run").c_str());
      return kExitUsage;
    }
    if (!run_owner.empty()) run_opt.owner = run_owner;
    if (run_opt.limit != 0 && !run_opt.shared) {
      std::fprintf(stderr, "lockctl: --limit needs --shared\n");
      return lockd::lockctl::kExitUsage;
    }
    return cmd_run(g, run_opt);
  }
  if (*top) return cmd_top(g, top_opt);
  if (*snap_save) return cmd_snapshot_save(g, snapshot_file);
  if (*snap_verify) return cmd_snapshot_verify(g, snapshot_file);
  if (*member_list) return cmd_member_list(g);
  if (*member_add) return cmd_member_add(g, member_id, member_addrs);
  if (*member_promote) return cmd_member_promote(g, member_id);
  if (*member_remove) return cmd_member_remove(g, member_id);
  if (*leader_transfer) return cmd_leader_transfer(g, transfer_id);
  return kExitUsage;
}
