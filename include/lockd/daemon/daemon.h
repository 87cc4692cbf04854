// Daemon: the one object main() builds (STYLE §4). Owns the event loop,
// the lock server, the admin API and, in cluster mode, the cluster node
// (Raft, storage, transport, replicated lock service); runs the loop until
// SIGTERM/SIGINT and drains before returning. A leader first hands its
// leadership to the most caught-up follower (bounded wait).
//
// The loop: each turn runs the ready callbacks (EVLOOP_ONCE), then the
// end-of-turn work (flush replies, reap connections, re-arm timers), then
// sleeps in epoll. One thread.
#pragma once

#include <memory>
#include <string>

#include "lockd/admin/views.h"
#include "lockd/common/time.h"
#include "lockd/daemon/config.h"

struct event;
struct event_base;

namespace lockd::server {
class LockServer;
}
namespace lockd::admin {
class AdminServer;
}
namespace lockd::cluster {
class ClusterNode;
}

namespace lockd::tls {
class TlsContext;
}
namespace lockd::auth {
class Authenticator;
}

namespace lockd::daemon {

class Daemon {
 public:
  explicit Daemon(Config config);
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Binds every socket. Returns false with `error` set (nothing listens).
  bool start(std::string& error);
  // Runs until a stop signal and a drained shutdown. Returns the exit code.
  int run();

 private:
  static void on_signal(int sig, short, void* arg);
  // Loads the TLS contexts (and, with --auth, the credentials and ACL)
  // the flags ask for. False with `error` set: lockd exits 2.
  bool start_security(std::string& error);
  // SIGHUP: reloads certificates, keys, CAs, credentials and ACL. A file
  // that does not load leaves the old one in force and is logged.
  static void on_sighup(int, short, void* arg);
  void reload_security();
  void begin_shutdown(int sig);
  // Stops the lock server and admin (after a leader's hand-over).
  void drain();
  bool start_cluster(std::string& error);
  static void on_handover_poll(int, short, void* arg);

  Config config_;
  admin::FdStatus fd_status_;  // the descriptor budget found at start, for /v1/status
  event_base* base_ = nullptr;
  std::unique_ptr<cluster::ClusterNode> cluster_;  // cluster mode only; outlives server_
  std::unique_ptr<server::LockServer> server_;
  std::unique_ptr<admin::AdminServer> admin_;  // null with --admin off
  std::unique_ptr<tls::TlsContext> client_tls_;  // --client-tls
  std::unique_ptr<tls::TlsContext> admin_tls_;   // --admin-tls
  std::unique_ptr<tls::TlsContext> peer_tls_server_;  // --peer-tls: accepting members
  std::unique_ptr<tls::TlsContext> peer_tls_client_;  // --peer-tls: dialing members
  std::unique_ptr<auth::Authenticator> auth_;    // --auth, --credentials, --acl
  event* sighup_ = nullptr;
  event* sigterm_ = nullptr;
  event* sigint_ = nullptr;
  event* drain_deadline_ = nullptr;  // gives up on slow readers at shutdown
  event* handover_poll_ = nullptr;   // SIGTERM on a leader: waits for the transfer
  TimeNs handover_deadline_ns_ = 0;
  bool stopping_ = false;
  bool stop_now_ = false;
  int exit_status_ = 0;         // run()'s: 2 once this node learned it was removed
  std::string exit_reason_;     // the last stderr line when exit_status_ != 0
};

}  // namespace lockd::daemon
