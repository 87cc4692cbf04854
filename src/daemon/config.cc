#include "lockd/daemon/config.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <set>

#include "lockd/proto/parser.h"
#include "lockd/version/version.h"

namespace lockd::daemon {

namespace {

// `lockd --version`: "lockd 0.1.0 (git 9c497a1)", or "lockd 0.1.0" when
// built outside a git checkout.
std::string version_line() {
  std::string line = "lockd " + std::string(version::number());
  if (!version::revision().empty()) line += " (git " + std::string(version::revision()) + ")";
  return line;
}

constexpr std::size_t kMinOutputBytes = 1024 * 1024;
// Longest lease or wait an operator may allow: a year. Far above any real
// use, and far below where now + lease overflows the nanosecond clock.
constexpr std::uint64_t kMaxConfigurableMs = 366ull * 24 * 3600 * 1000;

// CLI11 messages can span lines; the contract wants one.
std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

std::optional<Peer> parse_peer(const std::string& text, std::string& error) {
  // ID=CLIENT_HOST:PORT/RAFT_HOST:PORT
  const auto eq = text.find('=');
  const auto slash = text.find('/', eq == std::string::npos ? 0 : eq);
  if (eq == std::string::npos || slash == std::string::npos) {
    error = "--peer: expected ID=CLIENT_HOST:PORT/RAFT_HOST:PORT, got '" + text + "'";
    return std::nullopt;
  }
  Peer p;
  if (!proto::parse_u64(std::string_view(text).substr(0, eq), p.id) || p.id == 0) {
    error = "--peer: bad node id in '" + text + "'";
    return std::nullopt;
  }
  std::string err;
  auto client = net::parse_endpoint(std::string_view(text).substr(eq + 1, slash - eq - 1), err);
  auto raft = client ? net::parse_endpoint(std::string_view(text).substr(slash + 1), err)
                     : std::nullopt;
  if (!client || !raft) {
    error = "--peer: " + err;
    return std::nullopt;
  }
  p.client = *client;
  p.raft = *raft;
  return p;
}

// The TLS and authentication flags that only make sense together.
std::string validate_security(const SecurityConfig& s) {
  const bool any_tls = s.client_tls || s.admin_tls;
  if (any_tls && (s.tls_cert.empty() || s.tls_key.empty())) {
    return "--client-tls and --admin-tls need --tls-cert and --tls-key";
  }
  if (s.tls_cert.empty() != s.tls_key.empty()) return "--tls-cert and --tls-key go together";
  // Until `H`, the credentials file and ACLs land (issue 21, next commit).
  if (s.auth == AuthMode::kToken || s.auth == AuthMode::kAny || !s.credentials_file.empty() ||
      !s.acl_file.empty()) {
    return "--auth token|any, --credentials and --acl are not available in this build yet";
  }
  switch (s.auth) {
    case AuthMode::kNone:
      if (!s.acl_file.empty()) return "--acl needs --auth cert, token or any";
      break;
    case AuthMode::kCert:
      if (!s.client_tls || s.tls_ca.empty()) return "--auth cert needs --client-tls and --tls-ca";
      break;
    case AuthMode::kToken:
      if (s.credentials_file.empty()) return "--auth token needs --credentials";
      break;
    case AuthMode::kAny:
      if (s.credentials_file.empty() && (!s.client_tls || s.tls_ca.empty())) {
        return "--auth any needs --credentials, or --client-tls and --tls-ca";
      }
      break;
  }
  return {};
}

// Checks the relations between values that CLI11 checked one by one.
std::string validate(Config& c, const std::string& listen, const std::string& admin,
                     const std::vector<std::string>& peers) {
  std::string err;
  auto ep = net::parse_endpoint(listen, err);
  if (!ep) return "--listen: " + err;
  c.listen = *ep;
  if (admin == "off") {
    c.admin.reset();
  } else {
    auto a = net::parse_endpoint(admin, err);
    if (!a) return "--admin: " + err;
    c.admin = *a;
  }
  const auto& p = c.server.parse;
  if (p.max_lease_ms == 0 || p.max_lease_ms > kMaxConfigurableMs) {
    return "--max-lease-ms must be between 1 and " + std::to_string(kMaxConfigurableMs);
  }
  if (p.max_wait_ms > kMaxConfigurableMs) {
    return "--max-wait-ms must be at most " + std::to_string(kMaxConfigurableMs);
  }
  if (p.default_lease_ms == 0 || p.default_lease_ms > p.max_lease_ms) {
    return "--default-lease-ms must be between 1 and --max-lease-ms (" +
           std::to_string(p.max_lease_ms) + ")";
  }
  if (c.server.locks.max_keys == 0) return "--max-keys must be at least 1";
  if (c.server.max_connections == 0) return "--max-connections must be at least 1";
  if (c.server.sweep_interval_ns <= 0) return "--sweep-interval-ms must be at least 1";
  // Reading pauses at 256 KiB unsent; one read (16 KiB of requests) can add
  // up to ~80 KiB of replies on top, so the cap must leave room for that.
  if (c.server.output.max_bytes < kMinOutputBytes) {
    return "--max-output-bytes must be at least " + std::to_string(kMinOutputBytes);
  }
  if (std::string e = validate_security(c.security); !e.empty()) return e;
  std::set<std::uint64_t> ids;
  for (const auto& text : peers) {
    auto peer = parse_peer(text, err);
    if (!peer) return err;
    if (!ids.insert(peer->id).second) {
      return "--peer: node id " + std::to_string(peer->id) + " given twice";
    }
    c.peers.push_back(*peer);
  }
  if (c.mode == Mode::kCluster) {
    if (!c.node_id) return "--mode cluster needs --node-id";
    if (!ids.contains(*c.node_id)) return "--node-id must be one of the --peer ids";
    if (c.data_dir.empty()) return "--mode cluster needs --data-dir";
    if (c.snapshot_entries == 0) return "--snapshot-entries must be at least 1";
    if (c.heartbeat_ms == 0 || c.election_timeout_ms <= c.heartbeat_ms) {
      return "--election-timeout-ms must be larger than --heartbeat-ms (and that at least 1)";
    }
  }
  return {};
}

}  // namespace

ParseOutcome parse_config(int argc, char** argv) {
  Config c;
  CLI::App app{"lockd: a lock server with fencing tokens"};
  app.set_version_flag("--version", version_line());
  app.set_config("--config", "", "TOML config file (keys named like the long flags)");
  app.allow_config_extras(CLI::config_extras_mode::error);

  std::string mode = "single";
  std::string listen = "127.0.0.1:7070";
  std::string admin = "127.0.0.1:7071";
  std::string log_format = "text";
  std::uint64_t sweep_ms = 5000;
  std::uint64_t node_id = 0;
  std::vector<std::string> peers;
  std::string auth = "none";

  app.add_option("--mode", mode, "single | cluster")
      ->check(CLI::IsMember({"single", "cluster"}));
  app.add_option("--listen", listen, "client protocol HOST:PORT (single mode)");
  app.add_option("--admin", admin, "HTTP admin API HOST:PORT, or off");
  app.add_option("--default-lease-ms", c.server.parse.default_lease_ms,
                 "lease when A gives none");
  app.add_option("--max-lease-ms", c.server.parse.max_lease_ms, "larger lease_ms is bad_lease");
  app.add_option("--max-wait-ms", c.server.parse.max_wait_ms, "larger wait_ms is bad_wait");
  app.add_option("--max-keys", c.server.locks.max_keys, "registered keys; a new key past it: B");
  app.add_option("--max-waiters-per-key", c.server.locks.max_waiters_per_key,
                 "waiters on one key; past it: B");
  app.add_option("--max-waiters", c.server.locks.max_waiters, "waiters over all keys");
  app.add_option("--max-connections", c.server.max_connections, "client connections");
  app.add_option("--max-output-bytes", c.server.output.max_bytes,
                 "unsent reply bytes after which a client is disconnected");
  app.add_option("--sweep-interval-ms", sweep_ms, "sweep of expired keys without waiters");
  app.add_option("--log-level", c.log_level, "trace|debug|info|warn|error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}));
  app.add_option("--log-format", log_format, "text|json")
      ->check(CLI::IsMember({"text", "json"}));
  auto* node_opt = app.add_option("--node-id", node_id, "cluster: this node's id");
  app.add_option("--peer", peers, "cluster: ID=CLIENT_HOST:PORT/RAFT_HOST:PORT, repeatable");
  app.add_option("--data-dir", c.data_dir, "cluster: Raft log and snapshots");
  app.add_option("--election-timeout-ms", c.election_timeout_ms, "cluster");
  app.add_option("--heartbeat-ms", c.heartbeat_ms, "cluster");
  app.add_option("--snapshot-entries", c.snapshot_entries,
                 "cluster: snapshot and compact the log every N applied entries");

  SecurityConfig& sec = c.security;
  app.add_option("--tls-cert", sec.tls_cert, "this node's TLS certificate chain (PEM)");
  app.add_option("--tls-key", sec.tls_key, "the key of --tls-cert (PEM)");
  app.add_option("--tls-ca", sec.tls_ca, "CA (PEM) that client and peer certificates chain to");
  app.add_flag("--client-tls", sec.client_tls, "require TLS on the client port");
  app.add_flag("--admin-tls", sec.admin_tls, "require TLS (HTTPS) on the admin port");
  app.add_option("--auth", auth, "client authentication: none | cert | token | any")
      ->check(CLI::IsMember({"none", "cert", "token", "any"}));
  app.add_option("--credentials", sec.credentials_file,
                 "TOML file of identities and hashed credentials (H, admin bearer tokens)");
  app.add_option("--acl", sec.acl_file, "TOML file: identities -> verbs on key prefixes, admins");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForVersion&) {
    return {std::nullopt, 0, version_line() + "\n"};
  } catch (const CLI::Success&) {  // --help
    return {std::nullopt, 0, app.help()};
  } catch (const CLI::ConfigError& e) {
    // CLI11 says "INI was not able to parse KEY" for a key it does not know.
    std::string what = one_line(e.what());
    const std::string kPrefix = "INI was not able to parse ";
    if (what.rfind(kPrefix, 0) == 0) what = "unknown key '" + what.substr(kPrefix.size()) + "'";
    return {std::nullopt, 2, "lockd: config file: " + what};
  } catch (const CLI::ParseError& e) {
    return {std::nullopt, 2, "lockd: " + one_line(e.what())};
  }
  c.mode = mode == "cluster" ? Mode::kCluster : Mode::kSingle;
  c.log_format = log_format == "json" ? LogFormat::kJson : LogFormat::kText;
  sec.auth = auth == "cert"    ? AuthMode::kCert
             : auth == "token" ? AuthMode::kToken
             : auth == "any"   ? AuthMode::kAny
                               : AuthMode::kNone;
  if (sweep_ms > 1'000'000'000) return {std::nullopt, 2, "lockd: --sweep-interval-ms too large"};
  c.server.sweep_interval_ns = ms_to_ns(sweep_ms);
  if (node_opt->count() > 0) c.node_id = node_id;
  if (std::string err = validate(c, listen, admin, peers); !err.empty()) {
    return {std::nullopt, 2, "lockd: " + err};
  }
  return {std::move(c), 0, {}};
}

}  // namespace lockd::daemon
