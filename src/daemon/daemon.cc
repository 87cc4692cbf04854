#include "lockd/daemon/daemon.h"

#include <event2/event.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <array>
#include <cstdio>
#include <csignal>

#include "lockd/admin/admin_server.h"
#include "lockd/cluster/backup_file.h"
#include "lockd/cluster/cluster_node.h"
#include "lockd/cluster/lock_command.h"
#include "lockd/cluster/peer_secret.h"
#include "lockd/cluster/peer_transport.h"
#include "lockd/common/check.h"
#include "lockd/daemon/fd_limit.h"
#include "lockd/net/clock.h"
#include "lockd/net/priority.h"
#include "lockd/server/lock_server.h"
#include "lockd/auth/authenticator.h"
#include "lockd/tls/tls_context.h"
#include "lockd/version/version.h"

namespace lockd::daemon {

namespace {

// How long a graceful stop waits for slow clients to take their replies.
constexpr timeval kDrainTimeout{5, 0};
// SIGTERM on a leader: how often to look whether the hand-over is done.
constexpr timeval kHandoverPoll{0, 5000};

std::string_view role_name(raft::Role r) {
  switch (r) {
    case raft::Role::kLeader: return "leader";
    case raft::Role::kFollower: return "follower";
    case raft::Role::kPreCandidate:
    case raft::Role::kCandidate: return "candidate";
  }
  return "follower";
}

// Single-mode tokens start at the wall clock in nanoseconds, so a restarted
// lockd hands out tokens above every token of its previous life without
// storing anything: a process cannot grant a billion locks per second, so
// its counter never catches up with the clock it started from. Holds as
// long as the wall clock does not step back across a restart (see
// docs/architecture.md).
std::uint64_t unix_ms_now() { return static_cast<std::uint64_t>(net::realtime_now_ns() / kNsPerMs); }

// GET /v1/snapshot of a single-mode lockd: its table as a cluster would
// have applied it at index 1 (cluster/lock_state_machine.h), so a new
// cluster can be started from it.
admin::SnapshotSource single_snapshot(const server::LockServer& server) {
  admin::SnapshotSource src;
  const locks::LockTable& table = server.table();
  const locks::Token floor = table.next_token() - 1;
  if (floor < cluster::kMinTokenBase || floor > cluster::kMaxTokenBase) {
    src.refused = "tokens are outside the range a cluster can continue from (wall clock before 2001?)";
    return src;
  }
  cluster::BackupMeta meta;
  meta.source = cluster::BackupSource::kSingle;
  meta.index = 1;
  meta.term = 1;
  meta.token_floor = floor;
  meta.taken_unix_ms = unix_ms_now();
  src.filename = "lockd-single-" + std::to_string(meta.taken_unix_ms) + ".snap";
  const TimeNs now = net::monotonic_now_ns();
  src.produce = [&table, meta, now] {
    return cluster::encode_backup(meta, cluster::LockStateMachine::single_mode_snapshot(table, now));
  };
  return src;
}

// --token-floor N lifts the start above N whatever the clock says (a host
// whose clock is behind the one that granted before).
locks::Token first_token_from_clock(std::uint64_t floor) {
  const TimeNs now = net::realtime_now_ns();
  const locks::Token clock = now > 0 ? static_cast<locks::Token>(now) : 1;
  return std::max<locks::Token>(clock, floor + 1);
}

// §11a: a secret, key or credentials file that group or others may read is
// refused at start (as ssh refuses such a private key): whoever else can
// read it can be this node, a member, or any client. Returns the one-line
// error naming the flag, the file and its mode; "" when the file is private
// (or does not exist: its loader then says so).
std::string private_file_error(const char* flag, const std::string& path) {
  if (path.empty()) return {};
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {};
  if ((st.st_mode & (S_IRGRP | S_IROTH)) == 0) return {};
  return fmt::format("{} {} is readable by group or others (mode {:04o}); chmod 600 it", flag, path,
                     st.st_mode & 07777);
}

}  // namespace

Daemon::Daemon(Config config) : config_(std::move(config)) {
  base_ = event_base_new();
  LOCKD_CHECK(base_ != nullptr);
  net::use_priorities(base_);  // clients that are in before strangers' handshakes
}

Daemon::~Daemon() {
  admin_.reset();
  server_.reset();
  cluster_.reset();
  for (event* ev : {sighup_, sigterm_, sigint_, drain_deadline_, handover_poll_}) {
    if (ev != nullptr) event_free(ev);
  }
  event_base_free(base_);
}

bool Daemon::start(std::string& error) {
  std::signal(SIGPIPE, SIG_IGN);
  const std::uint64_t peers = config_.mode == Mode::kCluster && !config_.peers.empty() ? config_.peers.size() - 1 : 0;
  const FdBudget fds = ensure_fd_budget(config_.server.max_connections, peers);
  fd_status_ = admin::FdStatus{fds.after, fds.needed};
  if (fds.short_of_need()) {
    spdlog::warn("descriptor limit {} (hard {}) is below --max-connections {} + {} for {} peers and "
                 "files: clients beyond about {} wait until descriptors free up; raise ulimit -n / "
                 "LimitNOFILE or lower --max-connections",
                 fds.after, fds.hard, config_.server.max_connections, fds.needed - config_.server.max_connections,
                 peers, fds.after > fds.needed - config_.server.max_connections
                            ? fds.after - (fds.needed - config_.server.max_connections)
                            : 0);
  } else if (fds.raised()) {
    spdlog::info("raised the descriptor limit from {} to {} for --max-connections {}", fds.before,
                 fds.after, config_.server.max_connections);
  }
  // Signal handlers before the `listening` line: whoever reads that line
  // may send SIGTERM at once.
  sigterm_ = evsignal_new(base_, SIGTERM, &Daemon::on_signal, this);
  sigint_ = evsignal_new(base_, SIGINT, &Daemon::on_signal, this);
  event_add(sigterm_, nullptr);
  event_add(sigint_, nullptr);
  sighup_ = evsignal_new(base_, SIGHUP, &Daemon::on_sighup, this);
  event_add(sighup_, nullptr);
  if (!start_security(error)) return false;
  if (config_.mode == Mode::kCluster) return start_cluster(error);
  server_ = std::make_unique<server::LockServer>(base_, config_.server,
                                                 first_token_from_clock(config_.token_floor));
  server_->require_tls(client_tls_.get());
  server_->set_authenticator(auth_.get());
  if (!server_->listen(config_.listen, error)) return false;
  if (config_.admin) {
    admin_ = std::make_unique<admin::AdminServer>(
        base_, *server_,
        admin::NodeInfo{std::string(version::full()), "single", server_->bound().to_string(),
                        net::monotonic_now_ns(), {}, {}, {},
                        [server = server_.get()] { return single_snapshot(*server); }, fd_status_, {}});
    admin_->require_tls(admin_tls_.get());
    admin_->set_authenticator(auth_.get());
    admin_->set_max_connections(config_.admin_max_connections);
    admin_->set_max_tls_handshakes(config_.server.max_tls_handshakes);
    if (!admin_->listen(*config_.admin, error)) return false;
  }
  spdlog::info("lockd {} listening on {} (mode=single)", version::full(),
               server_->bound().to_string());
  // After the client line: a reader taking the first `listening` line gets
  // the client port.
  if (admin_) spdlog::info("admin listening on {}", admin_->bound().to_string());
  return true;
}

bool Daemon::start_cluster(std::string& error) {
  cluster::ClusterNodeConfig cc;
  cc.self = *config_.node_id;
  net::Endpoint client_ep;
  for (const Peer& p : config_.peers) {
    cc.members.push_back(cluster::Member{p.id, p.client, p.raft});
    if (p.id == cc.self) client_ep = p.client;
  }
  cc.data_dir = config_.data_dir;
  cc.heartbeat_ns = ms_to_ns(config_.heartbeat_ms);
  cc.election_ticks =
      static_cast<int>(std::max<std::uint64_t>(2, config_.election_timeout_ms / config_.heartbeat_ms));
  cc.limits = config_.server.locks;
  cc.snapshot_entries = config_.snapshot_entries;
  cc.member_change_timeout_ns = ms_to_ns(config_.member_change_timeout_ms);
  cc.wal_sync_thread = config_.wal_sync == "thread";
  cc.restore_from = config_.restore_from;
  cc.initial_state = config_.initial_cluster_state == "new"        ? cluster::InitialClusterState::kNew
                     : config_.initial_cluster_state == "existing" ? cluster::InitialClusterState::kExisting
                                                                   : cluster::InitialClusterState::kNone;
  if (!config_.security.peer_secret_file.empty()) {
    std::optional<std::string> secret =
        cluster::load_peer_secret(config_.security.peer_secret_file, error);
    if (!secret) return false;
    cc.peer_security.secret = std::move(*secret);
  }
  cc.peer_security.tls_server = peer_tls_server_.get();
  cc.peer_security.tls_client = peer_tls_client_.get();
  cc.peer_security.max_tls_handshakes = config_.server.max_tls_handshakes;
  cc.token_floor = config_.token_floor;
  cluster_ = std::make_unique<cluster::ClusterNode>(base_, std::move(cc));
  if (!cluster_->open(error)) return false;
  server::ServerConfig sc = config_.server;
  // Client ids name their node: the node id in the high 16 bits.
  sc.first_client_id = (*config_.node_id << 48) + 1;
  // A `W` before this member applied anything waits this long (§5c).
  sc.watch_apply_wait_ns = static_cast<TimeNs>(ms_to_ns(config_.election_timeout_ms));
  server_ = std::make_unique<server::LockServer>(base_, sc, 1, &cluster_->service());
  cluster_->set_before_sync([server = server_.get()] { server->flush_replies(); });
  server_->require_tls(client_tls_.get());
  server_->set_authenticator(auth_.get());
  if (!server_->listen(client_ep, error)) return false;
  if (config_.admin) {
    admin::NodeInfo info{std::string(version::full()), "cluster", server_->bound().to_string(),
                         net::monotonic_now_ns(), {}, {}, {}, {}, fd_status_, {}};
    const cluster::ClusterNode* node = cluster_.get();
    info.cluster = [node](TimeNs now) {
      const cluster::NodeStatusView v = node->status(now);
      admin::ClusterStatus c;
      c.node_id = v.id;
      // A learner (v1.2) shows as one, whatever its Raft role.
      c.role = v.learner ? std::string("learner") : std::string(role_name(v.role));
      c.conf_index = v.conf_index;
      c.term = v.term;
      c.leader_id = v.leader_id;
      c.leader_addr = v.leader_addr;
      c.commit_index = v.commit;
      c.applied_index = v.applied;
      c.serving = v.serving;
      for (const cluster::MemberView& m : v.members) {
        // Its own entry shows what this node is (a candidate, say); of the
        // others it knows only who leads and who votes.
        const std::string role = m.id == v.id ? c.role
                                 : m.leader   ? "leader"
                                 : m.voter    ? "follower"
                                              : "learner";
        c.members.push_back(admin::ClusterMember{m.id, m.client_addr, m.raft_addr, role, m.voter,
                                                 m.match, m.last_contact_ms, m.link_up,
                                                 m.last_heard_ms});
      }
      return c;
    };
    info.table_now = [node](TimeNs now) { return node->table_now_ns(now); };
    cluster::ClusterNode* changer = cluster_.get();
    info.change_members = [changer](const admin::MemberChangeRequest& r,
                                    std::function<void(const admin::MemberChangeReply&)> done) {
      cluster::MemberChange c;
      c.kind = r.op == admin::MemberChangeOp::kAdd       ? cluster::MemberChangeKind::kAdd
               : r.op == admin::MemberChangeOp::kPromote ? cluster::MemberChangeKind::kPromote
               : r.op == admin::MemberChangeOp::kRemove  ? cluster::MemberChangeKind::kRemove
               : r.op == admin::MemberChangeOp::kInit    ? cluster::MemberChangeKind::kInit
                                                         : cluster::MemberChangeKind::kTransfer;
      c.id = r.id;
      c.client_addr = r.client_addr;
      c.raft_addr = r.raft_addr;
      auto reply = [done = std::move(done)](const cluster::MemberChangeResult& x) {
        done(admin::MemberChangeReply{x.status, x.error, x.message, x.leader_admin});
      };
      if (c.kind == cluster::MemberChangeKind::kInit) {
        changer->init_group(std::move(reply));
      } else {
        changer->change_members(c, std::move(reply));
      }
    };
    info.snapshot = [node] {
      admin::SnapshotSource src;
      const std::optional<cluster::BackupMeta> meta = node->backup_meta(unix_ms_now());
      if (!meta) {
        src.not_leader = true;
        // Learned from the leader's peer handshake; unknown until it dialled us.
        if (const cluster::PeerHello* h = node->peer_hello(node->leader()); h && !h->admin_addr.empty()) {
          src.leader_admin = h->admin_addr;
        }
        return src;
      }
      src.filename = "lockd-" + std::to_string(meta->index) + ".snap";
      src.produce = [node, m = *meta] {
        return cluster::encode_backup(m, node->replicated().snapshot());
      };
      return src;
    };
    info.cluster_metrics = [node](TimeNs now) {
      admin::ClusterMetrics m;
      const raft::RaftStats& r = node->raft_stats();
      m.elections = r.elections_started;
      m.pre_votes = r.pre_votes_started;
      m.leaderships = r.leaderships;
      m.leader_changes = node->leader_changes();
      m.step_downs_check_quorum = r.step_downs_check_quorum;
      m.snapshots_sent = r.snapshots_sent;
      m.snapshots_installed = r.snapshots_installed;
      m.snapshots_refused = r.snapshots_refused;
      const cluster::ReplicatedServiceStats& s = node->service_stats();
      m.proposals = s.proposals;
      m.proposals_refused = s.proposals_refused;
      m.indeterminate = s.indeterminate;
      m.commit_latency = node->commit_latency();
      const storage::StorageStats& w = node->storage_stats();
      m.wal_saves = w.saves;
      m.wal_syncs = w.syncs;
      m.wal_entries = w.entries;
      m.wal_bytes = w.bytes;
      m.snapshots_written = w.snapshots;
      m.sync_latency = w.sync_latency;
      for (const cluster::PeerStats& p : node->peer_stats()) {
        admin::PeerLinkMetrics pm;
        pm.id = p.id;
        pm.link = std::string(cluster::to_string(p.link));
        pm.inbound_connected = p.inbound_connected;
        pm.bytes_sent = p.bytes_sent;
        pm.bytes_received = p.bytes_received;
        pm.messages_sent = p.messages_sent;
        pm.messages_received = p.messages_received;
        pm.messages_dropped = p.messages_dropped;
        pm.reconnects = p.reconnects;
        pm.resolve_failures = p.resolve_failures;
        if (p.last_contact_ns != 0) {
          pm.last_contact_seconds = static_cast<double>(now - p.last_contact_ns) / 1e9;
        }
        m.peers.push_back(std::move(pm));
      }
      const cluster::PeerTransportStats& ts = node->transport_stats();
      for (std::size_t i = 1; i < cluster::kHandshakeErrorCount; ++i) {
        m.peer_refused.emplace_back(
            std::string(cluster::to_string(static_cast<cluster::HandshakeError>(i))),
            ts.refused_by_reason[i]);
      }
      for (std::size_t i = 0; i < cluster::kTransportRefusalCount; ++i) {
        m.peer_refused.emplace_back(
            std::string(cluster::to_string(static_cast<cluster::TransportRefusal>(i))),
            ts.refused_by_transport[i]);
      }
      return m;
    };
    admin_ = std::make_unique<admin::AdminServer>(base_, *server_, std::move(info));
    admin_->require_tls(admin_tls_.get());
    admin_->set_authenticator(auth_.get());
    admin_->set_max_connections(config_.admin_max_connections);
    admin_->set_max_tls_handshakes(config_.server.max_tls_handshakes);
    if (!admin_->listen(*config_.admin, error)) return false;
  }
  if (admin_) cluster_->set_admin_addr(admin_->bound().to_string());
  // Binds the raft address, then claims the data dir: last, so a start
  // that fails on any address leaves no IDENTITY behind.
  if (!cluster_->listen(error)) return false;
  spdlog::info("lockd {} listening on {} (mode=cluster, node {})", version::full(),
               server_->bound().to_string(), *config_.node_id);
  if (admin_) spdlog::info("admin listening on {}", admin_->bound().to_string());
  return true;
}

bool Daemon::start_security(std::string& error) {
  const SecurityConfig& s = config_.security;
  for (const auto& [flag, path] : {std::pair{"--tls-key", &s.tls_key},
                                   std::pair{"--credentials", &s.credentials_file},
                                   std::pair{"--peer-secret-file", &s.peer_secret_file}}) {
    error = private_file_error(flag, *path);
    if (!error.empty()) return false;
  }
  tls::TlsOptions o;
  o.role = tls::TlsRole::kServer;
  o.cert_file = s.tls_cert;
  o.key_file = s.tls_key;
  o.ca_file = s.tls_ca;
  if (s.client_tls) {
    tls::TlsOptions co = o;
    co.peer = s.auth == AuthMode::kCert  ? tls::PeerCertPolicy::kRequired
              : s.auth == AuthMode::kAny ? tls::PeerCertPolicy::kOptional
                                         : tls::PeerCertPolicy::kNone;
    client_tls_ = tls::TlsContext::create(co, error);
    if (!client_tls_) return false;
  }
  if (s.admin_tls) {
    tls::TlsOptions ao = o;
    // A client certificate is one way to an admin identity; a bearer
    // credential is the other, so a certificate is asked for, not required.
    ao.peer = s.auth != AuthMode::kNone && !s.tls_ca.empty() ? tls::PeerCertPolicy::kOptional
                                                             : tls::PeerCertPolicy::kNone;
    admin_tls_ = tls::TlsContext::create(ao, error);
    if (!admin_tls_) return false;
  }
  if (s.peer_tls) {
    // Both directions show a member certificate and require one from
    // --peer-tls-ca (default --tls-ca); the names are checked by the
    // transport (peer_transport.h).
    tls::TlsOptions po = o;
    if (!s.peer_tls_ca.empty()) po.ca_file = s.peer_tls_ca;
    po.peer = tls::PeerCertPolicy::kRequired;
    peer_tls_server_ = tls::TlsContext::create(po, error);
    if (!peer_tls_server_) return false;
    po.role = tls::TlsRole::kClient;
    peer_tls_client_ = tls::TlsContext::create(po, error);
    if (!peer_tls_client_) return false;
  }
  if (s.auth != AuthMode::kNone) {
    auth_ = auth::Authenticator::create(s.auth, {s.credentials_file, s.acl_file}, error);
    if (!auth_) return false;
  }
  return true;
}

void Daemon::on_sighup(int, short, void* arg) { static_cast<Daemon*>(arg)->reload_security(); }

void Daemon::reload_security() {
  spdlog::info("SIGHUP: reloading TLS certificates, credentials and ACL");
  // All or nothing (protocol.md §11a): every file is read first; only when
  // all of them load do they replace the old ones together. A half-applied
  // set (a new ACL with the old credentials, say, or the credentials file
  // deleted and its old entries still valid beside a new ACL) would be a
  // policy nobody wrote.
  const std::array<tls::TlsContext*, 4> contexts{client_tls_.get(), admin_tls_.get(),
                                                 peer_tls_server_.get(), peer_tls_client_.get()};
  std::string error;
  bool ok = true;
  for (tls::TlsContext* ctx : contexts) {
    if (ctx != nullptr && !ctx->stage_reload(error)) {
      ok = false;
      break;
    }
  }
  if (ok && auth_ && !auth_->stage_reload(error)) ok = false;
  if (!ok) {
    for (tls::TlsContext* ctx : contexts) {
      if (ctx != nullptr) ctx->drop_staged();
    }
    if (auth_) auth_->drop_staged();
    spdlog::error("SIGHUP: reload failed, keeping the old TLS files, credentials and ACL (all "
                  "of them): {}", error);
    return;
  }
  for (tls::TlsContext* ctx : contexts) {
    if (ctx != nullptr) ctx->commit_reload();
  }
  if (auth_) auth_->commit_reload();
  spdlog::info("SIGHUP: TLS, credentials and ACL files reloaded");
}

void Daemon::on_signal(int sig, short, void* arg) { static_cast<Daemon*>(arg)->begin_shutdown(sig); }

void Daemon::begin_shutdown(int sig) {
  if (stopping_) {
    spdlog::warn("second signal {}: exiting without draining", sig);
    stop_now_ = true;
    return;
  }
  stopping_ = true;
  spdlog::info("signal {}: stopping; finishing replies already decided", sig);
  if (cluster_ && cluster_->transfer_leadership()) {
    // Wait (bounded) until a follower has taken over, so clients are
    // redirected at once instead of waiting out an election timeout.
    handover_deadline_ns_ =
        net::monotonic_now_ns() + 2 * ms_to_ns(config_.election_timeout_ms) + 200 * kNsPerMs;
    handover_poll_ = evtimer_new(base_, &Daemon::on_handover_poll, this);
    event_add(handover_poll_, &kHandoverPoll);
    return;
  }
  drain();
}

void Daemon::on_handover_poll(int, short, void* arg) {
  auto* self = static_cast<Daemon*>(arg);
  const bool moved = self->cluster_->role() != raft::Role::kLeader;
  if (moved || net::monotonic_now_ns() >= self->handover_deadline_ns_) {
    if (moved) {
      spdlog::info("leadership handed over to node {}", self->cluster_->leader());
    } else {
      spdlog::warn("leadership hand-over timed out; stopping anyway");
    }
    self->drain();
    return;
  }
  event_add(self->handover_poll_, &kHandoverPoll);
}

void Daemon::drain() {
  if (cluster_) cluster_->stop_accepting();
  server_->begin_shutdown();
  if (admin_) admin_->set_draining();
  drain_deadline_ = evtimer_new(
      base_,
      [](int, short, void* arg) {
        spdlog::warn("drain timed out; closing remaining connections");
        static_cast<Daemon*>(arg)->stop_now_ = true;
      },
      this);
  event_add(drain_deadline_, &kDrainTimeout);
}

int Daemon::run() {
  while (!stop_now_) {
    if (event_base_loop(base_, EVLOOP_ONCE) < 0) {
      spdlog::error("event loop failed");
      return 1;
    }
    // Cluster first: applying entries queues replies that the server's
    // end of turn then flushes.
    if (cluster_) cluster_->after_turn();
    if (cluster_ && cluster_->removed_reason() && exit_status_ == 0) {
      // Removed from the group (committed): nothing left to serve. Drain
      // like SIGTERM (a removed node leads nothing: no hand-over) and exit
      // 2, which a restart would not fix either (RestartPreventExitStatus).
      exit_status_ = 2;
      exit_reason_ = *cluster_->removed_reason();
      if (!stopping_) {
        stopping_ = true;
        drain();
      }
    }
    server_->after_turn();
    if (server_->drained()) break;
  }
  spdlog::info("stopped");
  if (exit_status_ != 0) {
    // The last stderr line says why, whatever the log format.
    spdlog::default_logger()->flush();
    std::fprintf(stderr, "lockd: %s\n", exit_reason_.c_str());
    std::fflush(stderr);
  }
  return exit_status_;
}

}  // namespace lockd::daemon
