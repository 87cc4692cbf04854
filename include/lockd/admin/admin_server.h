// AdminServer: the HTTP admin API (spec interfaces.md) on libevent's evhttp,
// bound to --admin, on the same event_base as the lock server.
//
// Why on the reactor thread and not a thread of its own: every view reads
// the lock table, which is not thread-safe, and a second thread would need
// locks on the hot path. The price is that each request's work runs between
// lock requests, so every handler's work is bounded (list and top take a
// `limit`; see views.h for costs). Handlers only read; nothing here changes
// lock state.
//
// `/v1/locks` and `/v1/top` walk every key. On a big table the walk is
// split into slices of kScanBucketsPerSlice buckets, one per loop turn, and
// the reply is sent when the last slice is done (see KeyScan for what a
// split walk guarantees).
//
// `GET /v1/snapshot` is answered by a forked child's file
// (snapshot_export.h), never by serializing on the loop.
//
// Errors are JSON `{"error": CODE, "message": TEXT}` with 400 (bad query
// value or key encoding), 404 (unknown path or key), 405 (not GET/HEAD).
//
// The membership endpoints (v1.2) are the only ones that change anything:
// the cluster node proposes the change and the request is answered once it
// has committed (or failed), as interfaces.md says.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>
#include <memory>
#include <string>
#include <string_view>

#include "lockd/admin/admin_auth.h"
#include "lockd/admin/snapshot_export.h"
#include "lockd/admin/views.h"
#include "lockd/tls/tls_context.h"
#include "lockd/net/accept_pause.h"
#include "lockd/net/address.h"
#include "lockd/net/timer.h"

struct evhttp;
struct evhttp_bound_socket;
struct evhttp_request;
struct event_base;
struct bufferevent;

namespace lockd::admin {

// Bounds on what one HTTP client may make the admin API hold.
constexpr std::size_t kMaxHeadersBytes = 16 * 1024;
constexpr std::size_t kMaxBodyBytes = 4 * 1024;  // only the member endpoints take a (small) body
constexpr int kIdleTimeoutS = 30;
// A connection must have sent its first request this long after its accept
// (protocol.md §11a), else it is shut down (a slow or silent client cannot
// keep one of the --admin-max-connections slots).
constexpr TimeNs kFirstRequestTimeoutNs = 10'000'000'000;
// How often open connections are checked for that deadline and for having
// been closed by evhttp (their slot then frees).
constexpr TimeNs kConnectionSweepNs = 200'000'000;
constexpr std::size_t kDefaultAdminMaxConnections = 128;
// A listing or top walks the table this many hash buckets per loop turn
// (~0.4 ms at 1M keys), so no admin request holds the reactor longer; a
// table that fits in one slice is answered at once.
constexpr std::size_t kScanBucketsPerSlice = 4096;
// Split scans in progress at once; one more is answered 503 `busy`.
constexpr std::size_t kMaxPendingScans = 16;
// A scan restarts when the table rehashes; past this many restarts it
// finishes in one go rather than risk never finishing.
constexpr int kMaxScanRestarts = 3;

class AdminServer {
 public:
  AdminServer(event_base* base, const server::LockServer& server, NodeInfo node);
  ~AdminServer();
  AdminServer(const AdminServer&) = delete;
  AdminServer& operator=(const AdminServer&) = delete;

  // Binds and listens on `ep`. Returns false with `error` set.
  bool listen(const net::Endpoint& ep, std::string& error);
  net::Endpoint bound() const { return bound_; }
  // HTTPS for every connection accepted from now on (`ctx` not owned,
  // outlives the server; a reload applies to new connections).
  void require_tls(const tls::TlsContext* ctx);
  // Authentication and admin checks (admin_auth.h); not owned.
  void set_authenticator(const auth::Authenticator* a) { auth_ = a; }
  // `/readyz` answers 503 from now on (graceful stop).
  void set_draining() { draining_ = true; }
  // --admin-max-connections: connections open at once; one more is closed
  // as soon as it is accepted (and counted).
  void set_max_connections(std::size_t n) { max_connections_ = n; }
  // --max-tls-handshakes (with --admin-tls): TLS handshakes in progress at
  // once; one more connection is closed at once.
  void set_max_tls_handshakes(std::size_t n) { max_tls_handshakes_ = n; }

  // Refusals, for /metrics (`lockd_admin_refused_total{reason}`).
  struct Stats {
    std::uint64_t accepted = 0;
    std::uint64_t refused_max_connections = 0;   // over --admin-max-connections
    std::uint64_t refused_first_request = 0;     // no request within 10 s
    std::uint64_t refused_tls_handshakes = 0;    // over --max-tls-handshakes
    std::uint64_t refused_host = 0;              // Host not naming the admin API (403)
    std::uint64_t refused_origin = 0;            // a foreign Origin (403)
    std::uint64_t refused_content_type = 0;      // a body that is not application/json (403)
  };
  const Stats& stats() const { return stats_; }
  std::size_t open_connections() const;
  // Admin TLS connections (not closing) whose handshake has not finished.
  std::size_t tls_handshakes() const;

 private:
  // A split scan waiting for its next slice.
  struct PendingScan {
    evhttp_request* req;      // ours until we reply, even if the client left
    std::unique_ptr<KeyScan> scan;
    std::size_t cursor = 0;   // next bucket
    std::size_t buckets = 0;  // bucket count when the walk (re)started
    int restarts = 0;
  };

  static void on_request(evhttp_request* req, void* arg);
  void handle(evhttp_request* req);
  // POST/DELETE of the member endpoints and POST /v1/cluster/leader.
  void handle_member_change(evhttp_request* req, std::string_view path);
  // Answers at once for a small table, else queues a split scan.
  void start_scan(evhttp_request* req, std::unique_ptr<KeyScan> scan);
  void on_scan_timer();

  // Every accepted connection's bufferevent is made here (evhttp's bevcb),
  // so each is counted: see Conn.
  static bufferevent* make_bufferevent(event_base* base, void* arg);
  // Releases the connections evhttp has freed, shuts down those past their
  // first-request deadline and those refused at the cap.
  void sweep_connections();
  void note_request(evhttp_request* req);
  void append_admin_metrics(std::string& out) const;

  // One accepted connection. evhttp 2.1 has no connection cap and no hook
  // when it frees a connection, so we hold a reference on its bufferevent:
  // evhttp's bufferevent_free() then clears the callbacks without freeing
  // it, and the sweep sees the event callback gone and drops our reference
  // (which frees it and closes the fd).
  struct Conn {
    bufferevent* bev = nullptr;
    TimeNs accepted_ns = 0;
    bool requested = false;  // its first request arrived
    bool closing = false;    // shut down by us (refused or timed out)
  };

  const server::LockServer& server_;
  const tls::TlsContext* tls_ = nullptr;
  const auth::Authenticator* auth_ = nullptr;
  NodeInfo node_;
  evhttp* http_ = nullptr;
  net::Endpoint bound_;
  std::deque<std::unique_ptr<PendingScan>> scans_;  // round robin, one slice each
  net::Timer scan_timer_;  // armed for the next loop turn while scans_ is non-empty
  net::AcceptPause accept_pause_;  // evhttp's listener, out of descriptors
  SnapshotExport snapshot_export_;  // GET /v1/snapshot
  bool draining_ = false;
  std::string configured_host_;  // --admin's host, for the Host check
  std::size_t max_connections_ = kDefaultAdminMaxConnections;
  std::size_t max_tls_handshakes_ = 64;
  std::vector<Conn> conns_;
  net::Timer sweep_timer_;  // armed while conns_ is non-empty
  Stats stats_;
};

}  // namespace lockd::admin
