#include "lockd/daemon/config.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "lockd/daemon/config_file.h"
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
  if (s.peer_tls &&
      (s.tls_cert.empty() || s.tls_key.empty() || (s.tls_ca.empty() && s.peer_tls_ca.empty()))) {
    return "--peer-tls needs --tls-cert, --tls-key and --tls-ca or --peer-tls-ca (members "
           "authenticate each other)";
  }
  if (!s.peer_tls_ca.empty() && !s.peer_tls) return "--peer-tls-ca needs --peer-tls";
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
  if (c.token_floor > kMaxTokenFloor) {
    return "--token-floor must be at most " + std::to_string(kMaxTokenFloor);
  }
  if (c.server.max_connections == 0) return "--max-connections must be at least 1";
  if (c.admin_max_connections == 0) return "--admin-max-connections must be at least 1";
  if (c.server.max_unauthenticated == 0) return "--max-unauthenticated must be at least 1";
  if (c.server.max_tls_handshakes == 0) return "--max-tls-handshakes must be at least 1";
  if (c.server.sweep_interval_ns <= 0) return "--sweep-interval-ms must be at least 1";
  // Reading pauses at 256 KiB unsent; one read (16 KiB of requests) can add
  // up to ~80 KiB of replies on top, so the cap must leave room for that.
  if (c.server.output.max_bytes < kMinOutputBytes) {
    return "--max-output-bytes must be at least " + std::to_string(kMinOutputBytes);
  }
  if (std::string e = validate_security(c.security); !e.empty()) return e;
  std::set<std::uint64_t> ids;
  // Every address a member listens on, with whose it is: two members (or
  // one member's two ports) on one address would fail to bind, or worse,
  // reach the wrong node. Port 0 (any free port) never clashes.
  std::map<std::string, std::string> owners;
  auto claim = [&owners](const net::Endpoint& at, const std::string& who) -> std::string {
    if (at.port == 0) return {};
    auto [it, fresh] = owners.emplace(at.to_string(), who);
    if (fresh) return {};
    return at.to_string() + " is both " + it->second + " and " + who;
  };
  for (const auto& text : peers) {
    auto peer = parse_peer(text, err);
    if (!peer) return err;
    if (!ids.insert(peer->id).second) {
      return "--peer: node id " + std::to_string(peer->id) + " given twice";
    }
    const std::string node = "node " + std::to_string(peer->id) + "'s ";
    for (const auto& clash : {claim(peer->client, node + "client address"),
                              claim(peer->raft, node + "raft address")}) {
      if (!clash.empty()) return "--peer: " + clash;
    }
    c.peers.push_back(*peer);
  }
  if (c.admin) {
    if (c.mode == Mode::kSingle) claim(c.listen, "the --listen address");
    if (std::string clash = claim(*c.admin, "the --admin address"); !clash.empty()) {
      return "--admin: " + clash;
    }
  }
  if (c.mode == Mode::kCluster) {
    if (!c.node_id) return "--mode cluster needs --node-id";
    if (!ids.contains(*c.node_id)) return "--node-id must be one of the --peer ids";
    if (c.data_dir.empty()) return "--mode cluster needs --data-dir";
    if (c.snapshot_entries == 0) return "--snapshot-entries must be at least 1";
    if (c.member_change_timeout_ms == 0 || c.member_change_timeout_ms > 3'600'000) {
      return "--member-change-timeout-ms must be from 1 to 3600000 (an hour)";
    }
    if (c.heartbeat_ms == 0 || c.election_timeout_ms <= c.heartbeat_ms) {
      return "--election-timeout-ms must be larger than --heartbeat-ms (and that at least 1)";
    }
    // §11a: a cluster is authenticated by default. Without peer
    // authentication anyone who reaches the raft port can take part in
    // votes and replication, so running that way is said in so many words.
    const auto& sec = c.security;
    if (!sec.peer_tls && sec.peer_secret_file.empty() && !sec.insecure_peers) {
      return "--mode cluster needs peer authentication: --peer-tls or --peer-secret-file FILE, "
             "or --insecure-peers to accept unauthenticated peers (docs/security.md)";
    }
  }
  return {};
}


// The --help groups that say which mode a flag belongs to. A flag of the
// other mode is refused when it changes what the node is or where it
// listens (it was meant for the other mode, and running without it would
// surprise), and only warned about when it is a tuning knob with no effect.
constexpr const char* kClusterOnly = "Cluster mode (refused without --mode cluster)";
constexpr const char* kClusterTuning = "Cluster tuning (no effect in single mode: a warning)";
constexpr const char* kSingleOnly = "Single mode (refused with --mode cluster)";
constexpr const char* kSingleTuning = "Single-mode tuning (no effect in cluster mode: a warning)";

// Refuses (returns the message) or warns about flags given for the other
// mode, on the command line or in the file.
template <typename Where>
std::string check_mode_scope(const CLI::App& app, Mode mode, const Where& where,
                             std::vector<std::string>& warnings) {
  const bool cluster = mode == Mode::kCluster;
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->count() == 0) continue;
    const std::string& group = opt->get_group();
    const std::string flag = opt->get_name();
    if (!cluster && group == kClusterOnly) {
      return where(flag) + flag +
             " is a cluster-mode flag, but this is --mode single (the default): add "
             "--mode cluster, or leave " + flag + " out";
    }
    if (cluster && group == kSingleOnly) {
      return where(flag) + flag +
             " is a single-mode flag: in cluster mode the client address is this node's own "
             "--peer entry; leave " + flag + " out";
    }
    if ((!cluster && group == kClusterTuning) || (cluster && group == kSingleTuning)) {
      warnings.push_back(where(flag) + flag + " has no effect in " +
                         (cluster ? "cluster" : "single") + " mode; ignored");
    }
  }
  return {};
}
}  // namespace

ParseOutcome parse_config(int argc, char** argv) {
  Config c;
  CLI::App app{"lockd: a lock server with fencing tokens"};
  app.set_version_flag("--version", version_line());

  std::string config_path;
  std::string mode = "single";
  std::string listen = "127.0.0.1:7070";
  std::string admin = "127.0.0.1:7071";
  std::string log_format = "text";
  std::uint64_t sweep_ms = 5000;
  std::uint64_t tls_handshake_timeout_ms = 10'000;
  std::uint64_t auth_timeout_ms = 10'000;
  std::uint64_t node_id = 0;
  std::vector<std::string> peers;
  std::string auth = "none";
  std::string initial_cluster_state = "new";

  // Every option is also a config file key (config_file.h). Its group says
  // which mode it belongs to (check_mode_scope()).
  app.add_option("--config", config_path, "TOML config file (keys named like the long flags)");
  app.add_option("--mode", mode, "single | cluster")
      ->check(CLI::IsMember({"single", "cluster"}));
  app.add_option("--listen", listen, "client protocol HOST:PORT")->group(kSingleOnly);
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
  app.add_option("--max-watches-per-connection", c.server.watches.max_per_connection,
                 "keys one connection watches (W); past it: B");
  app.add_option("--max-watches", c.server.watches.max_total,
                 "watches over all connections; past it: B");
  app.add_option("--max-output-bytes", c.server.output.max_bytes,
                 "unsent reply bytes after which a client is disconnected");
  app.add_option("--sweep-interval-ms", sweep_ms, "sweep of expired keys without waiters")
      ->group(kSingleTuning);
  app.add_option("--log-level", c.log_level, "trace|debug|info|warn|error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}));
  app.add_option("--log-format", log_format, "text|json")
      ->check(CLI::IsMember({"text", "json"}));
  app.add_option("--node-id", node_id, "this node's id")->group(kClusterOnly);
  app.add_option("--peer", peers, "ID=CLIENT_HOST:PORT/RAFT_HOST:PORT, one per member")
      ->group(kClusterOnly);
  app.add_option("--data-dir", c.data_dir, "Raft log and snapshots")->group(kClusterOnly);
  app.add_option("--election-timeout-ms", c.election_timeout_ms, "lower bound")
      ->group(kClusterTuning);
  app.add_option("--heartbeat-ms", c.heartbeat_ms, "")->group(kClusterTuning);
  app.add_option("--restore-from", c.restore_from,
                 "stage a backup FILE (lockctl snapshot save) in an empty data dir; lockctl "
                 "cluster init forms the restored group from it (ignored once the data dir holds "
                 "data)")
      ->group(kClusterOnly);
  app.add_option("--initial-cluster-state", initial_cluster_state,
                 "accepted for old unit files and ignored (v1.3): an empty data dir waits to be "
                 "let in; a group is formed once with lockctl cluster init")
      ->check(CLI::IsMember({"new", "existing"}))
      ->group(kClusterOnly);
  app.add_option("--snapshot-entries", c.snapshot_entries,
                 "snapshot and compact the log at least N applied entries apart (and once the log since the last snapshot is a quarter of its size)")
      ->group(kClusterTuning);
  app.add_option("--wal-sync", c.wal_sync,
                 "loop: fdatasync on the event loop (the default, measured best here); thread: on a "
                 "sync thread while the loop keeps reading (docs/cluster.md \"WAL sync\")")
      ->check(CLI::IsMember({"loop", "thread"}))
      ->group(kClusterTuning);
  app.add_option("--member-change-timeout-ms", c.member_change_timeout_ms,
                 "how long a membership change or leadership transfer through the admin API may "
                 "take to commit before it is answered 504 timeout (it may still take effect)")
      ->group(kClusterTuning);
  app.add_option("--token-floor", c.token_floor,
                 "every token granted is larger than N (moving from single mode, or a "
                 "re-created cluster: the largest token handed out before)");

  SecurityConfig& sec = c.security;
  app.add_option("--tls-cert", sec.tls_cert, "this node's TLS certificate chain (PEM)");
  app.add_option("--tls-key", sec.tls_key, "the key of --tls-cert (PEM)");
  app.add_option("--tls-ca", sec.tls_ca, "CA (PEM) that client and peer certificates chain to");
  app.add_flag("--client-tls", sec.client_tls, "require TLS on the client port");
  app.add_flag("--admin-tls", sec.admin_tls, "require TLS (HTTPS) on the admin port");
  app.add_flag("--peer-tls", sec.peer_tls,
               "cluster: mutual TLS on the raft port (members' certificates name lockd-node-<ID>)");
  app.add_option("--peer-secret-file", sec.peer_secret_file,
                 "cluster: shared secret (>= 32 bytes) that members prove they know");
  app.add_flag("--insecure-peers", sec.insecure_peers,
               "cluster: run without peer authentication (anyone who reaches the raft port "
               "can vote and replicate); without it cluster mode needs --peer-tls or "
               "--peer-secret-file");
  app.add_option("--tls-handshake-timeout-ms", tls_handshake_timeout_ms,
                 "--client-tls: a client that has not finished its TLS handshake this long "
                 "after connecting is disconnected");
  // §11a bounds on connections before authentication (v1.3; kept together).
  app.add_option("--auth-timeout-ms", auth_timeout_ms,
                 "with --auth: a client connection not authenticated this long after connecting "
                 "is closed");
  app.add_option("--max-unauthenticated", c.server.max_unauthenticated,
                 "with --auth: client connections open and not yet authenticated; one more "
                 "closes the oldest of them");
  app.add_option("--max-connections-per-ip", c.server.max_connections_per_ip,
                 "client connections from one source address; one more is closed at once; 0 = "
                 "no cap");
  app.add_option("--max-tls-handshakes", c.server.max_tls_handshakes,
                 "TLS handshakes in progress per port (one more closes the oldest of them)");
  app.add_option("--auth", auth, "client authentication: none | cert | token | any")
      ->check(CLI::IsMember({"none", "cert", "token", "any"}));
  app.add_option("--credentials", sec.credentials_file,
                 "TOML file of identities and hashed credentials (H, admin bearer tokens)");
  app.add_option("--acl", sec.acl_file, "TOML file: identities -> verbs on key prefixes, admins");
  // Hardening of the admin and peer side (v1.3, protocol.md §11a).
  app.add_option("--admin-max-connections", c.admin_max_connections,
                 "admin HTTP connections open at once; one more closes the oldest that has sent no request yet");
  app.add_option("--peer-tls-ca", sec.peer_tls_ca,
                 "cluster: the CA (PEM) member certificates chain to, when it is not the client "
                 "CA (default: --tls-ca)")
      ->group(kClusterOnly);

  // Every number flag takes plain decimal digits, on the command line or
  // in the file. CLI11 alone would take "" as 0 (`--token-floor ""` ran
  // with no floor), "-5" as a huge unsigned number, and "010" and "0x10"
  // as octal and hex; leading zeros are dropped so that "010" is 10, as
  // in the protocol's numbers.
  for (CLI::Option* opt : app.get_options()) {
    if (opt->get_type_name().starts_with("UINT")) {
      opt->transform(CLI::Validator(
          [](std::string& v) {
            if (v.empty()) return std::string("an empty value; give a number");
            if (v.starts_with('-')) return v + " is negative";
            if (!std::all_of(v.begin(), v.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
              return "'" + v + "' is not a decimal number";
            }
            v.erase(0, std::min(v.find_first_not_of('0'), v.size() - 1));
            return std::string();
          },
          ""));
    }
  }

  ConfigOrigins origins;
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForVersion&) {
    return {std::nullopt, 0, version_line() + "\n", {}};
  } catch (const CLI::Success&) {  // --help
    return {std::nullopt, 0, app.help(), {}};
  } catch (const CLI::ParseError& e) {
    return {std::nullopt, 2, "lockd: " + one_line(e.what()), {}};
  }
  if (!config_path.empty()) {
    if (std::string err = apply_config_file(app, config_path, origins); !err.empty()) {
      return {std::nullopt, 2, "lockd: " + err, {}};
    }
  }
  // "FILE:LINE: " when `flag` came from the config file, so an error about
  // it points there.
  auto where = [&origins](const std::string& flag) {
    auto it = origins.find(flag);
    return it == origins.end() ? std::string() : it->second + ": ";
  };
  c.mode = mode == "cluster" ? Mode::kCluster : Mode::kSingle;
  std::vector<std::string> warnings;
  if (std::string err = check_mode_scope(app, c.mode, where, warnings); !err.empty()) {
    return {std::nullopt, 2, "lockd: " + err, {}};
  }
  c.log_format = log_format == "json" ? LogFormat::kJson : LogFormat::kText;
  c.initial_cluster_state = initial_cluster_state;
  sec.auth = auth == "cert"    ? AuthMode::kCert
             : auth == "token" ? AuthMode::kToken
             : auth == "any"   ? AuthMode::kAny
                               : AuthMode::kNone;
  if (sweep_ms > 1'000'000'000) {
    return {std::nullopt, 2, "lockd: " + where("--sweep-interval-ms") + "--sweep-interval-ms too large", {}};
  }
  c.server.sweep_interval_ns = ms_to_ns(sweep_ms);
  if (tls_handshake_timeout_ms == 0 || tls_handshake_timeout_ms > 3'600'000) {
    return {std::nullopt, 2,
            "lockd: " + where("--tls-handshake-timeout-ms") +
                "--tls-handshake-timeout-ms must be 1..3600000",
            {}};
  }
  c.server.tls_handshake_timeout_ns = ms_to_ns(tls_handshake_timeout_ms);
  if (auth_timeout_ms == 0 || auth_timeout_ms > 3'600'000) {
    return {std::nullopt, 2,
            "lockd: " + where("--auth-timeout-ms") + "--auth-timeout-ms must be 1..3600000", {}};
  }
  c.server.auth_timeout_ns = ms_to_ns(auth_timeout_ms);
  if (app.get_option("--node-id")->count() > 0) c.node_id = node_id;
  if (std::string err = validate(c, listen, admin, peers); !err.empty()) {
    // Name the file line of the flag the message starts with, if it came
    // from there.
    const std::string flag = err.substr(0, err.find_first_of(" :"));
    return {std::nullopt, 2, "lockd: " + where(flag) + err, {}};
  }
  return {std::move(c), 0, {}, std::move(warnings)};
}

}  // namespace lockd::daemon
