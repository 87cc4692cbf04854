// Config: every lockd flag (spec interfaces.md), parsed from the command
// line and an optional TOML file (`--config FILE`; the command line wins).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "lockd/auth/authenticator.h"
#include "lockd/net/address.h"
#include "lockd/server/lock_server.h"

namespace lockd::daemon {

enum class Mode {
  kSingle,   // one process, state in memory
  kCluster,  // a Raft group (--node-id, --peer, --data-dir)
};

enum class LogFormat {
  kText,  // human-readable lines
  kJson,  // one JSON object per line
};

// Who a client must be (protocol.md §11, `--auth`).
using AuthMode = auth::AuthMode;

// TLS and authentication (v1.2; docs/security.md).
struct SecurityConfig {
  std::string tls_cert;  // --tls-cert: this node's certificate chain (PEM)
  std::string tls_key;   // --tls-key
  std::string tls_ca;    // --tls-ca: the CA clients and peers chain to
  bool client_tls = false;
  bool admin_tls = false;
  bool peer_tls = false;         // --peer-tls: mutual TLS on the raft port
  std::string peer_secret_file;  // --peer-secret-file: peer challenge-response without TLS
  // --insecure-peers: the operator accepts unauthenticated peers (cluster
  // mode refuses to start without peer authentication otherwise, §11a).
  bool insecure_peers = false;
  AuthMode auth = AuthMode::kNone;
  std::string credentials_file;  // --credentials
  std::string acl_file;          // --acl
  // --peer-tls-ca (v1.3): the CA member certificates chain to, when it is
  // not the client CA; "" = --tls-ca.
  std::string peer_tls_ca;
};

// One cluster member as `--peer ID=CLIENT_HOST:PORT/RAFT_HOST:PORT` gives it.
struct Peer {
  std::uint64_t id = 0;
  net::Endpoint client;
  net::Endpoint raft;
};

struct Config {
  Mode mode = Mode::kSingle;
  net::Endpoint listen{"127.0.0.1", 7070};
  std::optional<net::Endpoint> admin = net::Endpoint{"127.0.0.1", 7071};  // nullopt: off
  server::ServerConfig server;
  SecurityConfig security;
  std::string log_level = "info";
  LogFormat log_format = LogFormat::kText;
  // Cluster mode.
  std::optional<std::uint64_t> node_id;
  std::vector<Peer> peers;
  std::string data_dir;
  std::uint64_t election_timeout_ms = 300;
  std::uint64_t heartbeat_ms = 50;
  std::uint64_t snapshot_entries = 10'000;  // applied entries between snapshots
  std::string wal_sync = "loop";            // --wal-sync: loop | thread
  std::uint64_t member_change_timeout_ms = 30'000;  // a membership change's 504 after this
  std::string restore_from;  // --restore-from FILE: seed a new cluster from a backup
  // --initial-cluster-state new|existing as given ("" when not): ignored
  // (v1.3) but for the warning `new` logs (cluster_node.h).
  std::string initial_cluster_state;
  // --token-floor: every token granted is above it (both modes; durable).
  std::uint64_t token_floor = 0;
  // --admin-max-connections (v1.3): admin HTTP connections open at once.
  std::uint64_t admin_max_connections = 128;
};

// Largest --token-floor: leaves 2^62 tokens above it before a token overflows.
constexpr std::uint64_t kMaxTokenFloor = (1ull << 62) - 1;

// The outcome of parsing: a config to run with, or an exit (help text
// printed: status 0; a usage error: a one-line message, status 2).
struct ParseOutcome {
  std::optional<Config> config;
  int exit_code = 0;
  std::string message;  // printed on stdout (status 0) or stderr (status 2)
  // Harmless mistakes (a flag of the other mode that has no effect there),
  // logged at warn once logging is set up.
  std::vector<std::string> warnings;
};

ParseOutcome parse_config(int argc, char** argv);

}  // namespace lockd::daemon
