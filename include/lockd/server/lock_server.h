// LockServer: the glue between client connections and the lock table.
//
// Single mode: the server decides on its own LockTable (the local lock
// service). Cluster mode: it is built with a LockService (lock_service.h)
// that decides through Raft; the server then only frames, parses, routes
// and flushes, and arms no deadline or sweep timer of its own.
//
// A request travels one straight line: a Connection hands bytes to
// on_bytes(), the LineFramer cuts lines, the parser turns each into a
// Request or an error, the LockTable decides, and the replies (plus any
// Deliveries to other waiting clients) are appended to output buffers that
// are flushed once at the end of the loop turn (after_turn()).
//
// Owns every client connection and the timers of the table's deadlines and
// of the sweep. Runs on the reactor thread.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "lockd/auth/authenticator.h"
#include "lockd/locks/lock_table.h"
#include "lockd/net/connection.h"
#include "lockd/net/listener.h"
#include "lockd/net/precise_timer.h"
#include "lockd/net/timer.h"
#include "lockd/proto/line_framer.h"
#include "lockd/proto/parser.h"
#include "lockd/server/lock_service.h"
#include "lockd/server/server_stats.h"
#include "lockd/server/watch_hub.h"
#include "lockd/tls/tls_context.h"

struct event_base;

namespace lockd::server {

struct ServerConfig {
  proto::ParseLimits parse;
  locks::Limits locks;
  std::size_t max_connections = 10'000;
  WatchLimits watches;  // --max-watches-per-connection, --max-watches (v1.3)
  // Cluster: how long a `W` on a member that has applied no entry yet
  // waits for one before `E no_leader <key>` (one election timeout).
  TimeNs watch_apply_wait_ns = 300 * kNsPerMs;
  TimeNs sweep_interval_ns = 5'000 * kNsPerMs;
  net::OutputLimits output;
  // --client-tls: a connection whose TLS handshake has not completed this
  // long after its accept is closed (a client that connects and sends
  // nothing, or half a ClientHello, would otherwise hold its descriptor
  // and a connection slot forever).
  TimeNs tls_handshake_timeout_ns = 10'000 * kNsPerMs;
  // §11a bounds (v1.3; docs/security.md "Connections before authentication").
  // With auth on: a connection not authenticated this long after its
  // accept is closed (--auth-timeout-ms).
  TimeNs auth_timeout_ns = 10'000 * kNsPerMs;
  // With auth on: unauthenticated connections open at once; one more
  // closes the oldest of them (--max-unauthenticated).
  std::size_t max_unauthenticated = 256;
  // Connections from one source address; one more is closed at once; 0 =
  // no cap (--max-connections-per-ip).
  std::size_t max_connections_per_ip = 1024;
  // --client-tls: handshakes in progress; one more connection is closed at
  // once (--max-tls-handshakes).
  std::size_t max_tls_handshakes = 64;
  // First client id. Cluster mode puts the node id in the high bits so a
  // client id names its node in every replica's table.
  std::uint64_t first_client_id = 1;
};

class LockServer final : public net::ConnectionHandler,
                         public ClientReplies,
                         public PushOutput,
                         private locks::LostObserver {
 public:
  // `service` null: single mode on the server's own table, starting at
  // `first_token`. Otherwise every request goes to `service` (not owned;
  // outlives the server).
  LockServer(event_base* base, const ServerConfig& config, locks::Token first_token,
             LockService* service = nullptr);
  ~LockServer() override;

  // Starts accepting clients on `ep`. Returns false with `error` set.
  bool listen(const net::Endpoint& ep, std::string& error);
  // Requires TLS of every client accepted from now on (`ctx` not owned,
  // outlives the server; its reloads apply to new connections only).
  // Their handshakes run on a HandshakeWorker thread (net/handshake_worker.h).
  void require_tls(const tls::TlsContext* ctx);
  // Authenticates and authorizes every request from now on (protocol.md
  // §11; not owned, outlives the server). Checked on every node before a
  // request is routed, so a follower refuses an unauthenticated client
  // itself instead of redirecting it.
  void set_authenticator(const auth::Authenticator* a) { auth_ = a; }
  net::Endpoint bound() const { return listener_.bound(); }
  // Pauses of the client listener for want of descriptors (net/listener.h).
  std::uint64_t accept_pauses() const { return listener_.accept_pauses(); }

  // End-of-turn work: flushes every connection with output, reaps closed
  // connections and re-arms the deadline timer. Called by the loop owner
  // after each turn of callbacks.
  void after_turn();
  // Sends every reply decided so far (after_turn() does this too). The
  // cluster node calls it before it blocks in fdatasync.
  void flush_replies();

  // Graceful stop: accepts no more clients, reads no more requests, sends
  // every reply already decided, then closes each connection.
  void begin_shutdown();
  // True once shutdown has begun and every connection is gone.
  bool drained() const { return shutting_down_ && clients_.empty(); }

  // --- read-only views for the admin API and metrics ---
  const locks::LockTable& table() const { return service_ ? service_->table() : table_; }
  const ServerStats& stats() const { return stats_; }
  const ServerConfig& config() const { return config_; }
  std::size_t connection_count() const { return clients_.size(); }
  // Open connections not (yet) authenticated, with auth on (a gauge).
  std::size_t unauthenticated_count() const { return unauth_count_; }
  // The watch index (v1.3, §5c): counts for /v1/status and metrics.
  const WatchHub& watches() const { return watches_; }
  // Watchers closed for unsent output over the cap; `X` pushes sent.
  std::uint64_t watchers_dropped() const { return watchers_dropped_; }
  std::uint64_t lost_notices() const {
    return lost_notices_ + (service_ != nullptr ? service_->lost_notices() : 0);
  }

  // net::ConnectionHandler
  void on_bytes(net::Connection& conn, std::string_view bytes) override;
  void on_pending_write(net::Connection& conn) override;
  void on_closed(net::Connection& conn) override;
  void on_tls_failed(net::Connection& conn, std::string_view error) override;
  void on_tls_established(net::Connection& conn) override;

  // ClientReplies
  std::string* reply_buffer(locks::ClientId client, ReplyKind kind) override;
  void reply_queued(locks::ClientId client) override;

  // PushOutput
  std::string* push_buffer(locks::ClientId client) override;
  void push_queued(locks::ClientId client) override;

 private:
  // Per-connection protocol state.
  struct Client {
    std::unique_ptr<net::Connection> conn;
    proto::LineFramer framer;
    std::unordered_set<locks::WaiterId> waiting;  // its queued acquires
    std::string identity;        // who it authenticated as (auth on)
    bool authenticated = false;  // by its certificate or `H`
    bool handshaking = false;    // counted in tls_handshakes_ (TLS not yet established)
    TimeNs accepted_ns = 0;      // for --auth-timeout-ms
    std::string address;         // source address bytes, the per_address_ key
    // Links of the unauthenticated list (auth on, not yet authenticated),
    // oldest first; null at its ends and when not in it.
    Client* unauth_prev = nullptr;
    Client* unauth_next = nullptr;
    bool in_unauth = false;
  };

  // The unauthenticated connections in accept order: an intrusive list, so
  // that adding, removing and finding the oldest are O(1). Accept order is
  // also deadline order (one --auth-timeout-ms for all), so one timer armed
  // for the front serves every deadline.
  void unauth_push(Client& c);
  void unauth_remove(Client& c);
  // Auth on and `c` now authenticated: leaves the list for good.
  void authenticated(Client& c);
  // Closes `c` for one of the §11a bounds, counted and logged at debug.
  void close_for(Client& c, CloseReason reason);
  // Closes the connections not authenticated in time.
  void on_auth_timer();
  bool auth_required() const { return auth_ != nullptr && auth_->required(); }

  // A socket the listener accepted, from `peer` (accept()'s address).
  void accept(int fd, const sockaddr* peer);
  // Returns whether the request was answered at once (false: it waits).
  bool handle_request(Client& client, const proto::Request& req, TimeNs now);
  // `H <credential>`, or (null) an `H` whose credential breaks §2. False
  // when the connection is to close (refused).
  bool handle_hello(Client& client, const std::string_view* credential);
  // §11 before a request is decided: appends `E unauthenticated <echo>` or
  // `E forbidden <echo>` and returns false when it may not go on.
  bool admitted(Client& client, const proto::Request& req);
  void on_deadline_timer();
  // Closes the connections whose TLS handshake deadline has passed.
  void on_handshake_timer();
  // The connection whose TLS handshake has been in progress longest, or null.
  Client* oldest_handshake();
  // The oldest handshake whose client has not sent a byte (no ClientHello
  // yet), or nullptr.
  Client* oldest_silent_handshake();
  void on_sweep_timer();
  void run_sweep_slice();
  // Appends each Delivery's reply to its client's output.
  void deliver(const std::vector<locks::Delivery>& deliveries);
  void rearm_deadline_timer(TimeNs now);
  // Single mode, `X` (§5c) for a shared holding: looks at `token`'s lease
  // on `key` when it ends (the table keeps whom it was granted to:
  // Holder::granted_to). Exclusive holdings are the table's own lease-end
  // index's (LockTable::track_lost_leases), which calls lease_lost().
  void note_shared_grant(locks::Token token, std::string_view key);
  void note_shared_grant(locks::Token token, std::string_view key, TimeNs expires_at_ns);
  // Sends `X` for every holding whose lease has ended at `now` (the
  // table's index: those that ended in a finished wheel tick).
  void run_lost_notices(TimeNs now);
  // LostObserver: the table says an exclusive holding's lease ended.
  void lease_lost(locks::ClientId client, locks::Token token, std::string_view key) override;
  void compact_lost_if_needed();
  // Cluster: answers the `W`s held until this member applied an entry
  // (or, past their deadline, `E no_leader <key>`).
  void answer_held_watches(TimeNs now);

  event_base* base_;
  ServerConfig config_;
  LockService* service_;  // null in single mode
  const tls::TlsContext* tls_ = nullptr;  // null: plaintext clients
  std::unique_ptr<net::HandshakeWorker> handshake_worker_;  // with tls_
  const auth::Authenticator* auth_ = nullptr;  // null: --auth none
  locks::LockTable table_;
  net::Listener listener_;
  // Lease ends, wait ends and `X`: to the microsecond (PreciseTimer says why).
  net::PreciseTimer deadline_timer_;
  // TLS handshake deadlines in accept order (one timeout for all, so the
  // queue is sorted); an entry whose connection finished its handshake or
  // closed is skipped when it comes up.
  std::deque<std::pair<TimeNs, std::uint64_t>> handshake_deadlines_;
  std::deque<std::uint64_t> silent_handshakes_;  // accept order; stale ones dropped lazily
  net::Timer handshake_timer_;  // armed for the front of handshake_deadlines_
  net::Timer sweep_timer_;     // starts a sweep pass every sweep interval
  net::Timer sweep_continue_;  // runs the next slice of a pass, next turn
  std::unordered_map<std::uint64_t, Client> clients_;  // by connection id
  // Node-based map: a Client's address never changes while it is in it,
  // which the unauthenticated list relies on.
  Client* unauth_head_ = nullptr;  // oldest unauthenticated connection
  Client* unauth_tail_ = nullptr;  // newest
  std::size_t unauth_count_ = 0;
  net::Timer auth_timer_;  // armed for the front of the unauthenticated list
  std::size_t tls_handshakes_ = 0;  // connections whose TLS handshake is in progress
  // Open connections per source address (--max-connections-per-ip).
  std::unordered_map<std::string, std::size_t> per_address_;
  std::vector<net::Connection*> pending_writes_;  // flushed in after_turn()
  std::vector<std::uint64_t> closed_;             // reaped in after_turn()
  std::vector<locks::Delivery> deliveries_;       // reused scratch
  std::uint64_t next_conn_id_ = 1;
  locks::WaiterId next_waiter_id_ = 1;
  std::optional<TimeNs> armed_deadline_ns_;  // what deadline_timer_ is set for
  bool sweeping_ = false;       // a sweep pass is under way
  std::size_t swept_in_pass_ = 0;
  bool shutting_down_ = false;
  ServerStats stats_;
  WatchHub watches_;
  // Single mode `X` for shared holdings: a min-heap of lease ends to look
  // at, one pushed per shared grant (and per `K` that moves a shared
  // lease's end earlier). The table keeps whom each holding was granted
  // to, so an entry is 40 bytes and costs no allocation for a key of up to
  // 23 bytes. An entry whose holding was released (or told) is dropped when
  // it comes up; one whose lease a `K` moved later is pushed again for the
  // new end. (Exclusive holdings: the table's lease-end wheel, no memory
  // beyond the key's node.)
  struct LostDeadline {
    TimeNs at_ns;
    locks::Token token;
    locks::InlineString<24> key;
  };
  struct LostLater {
    bool operator()(const LostDeadline& a, const LostDeadline& b) const { return a.at_ns > b.at_ns; }
  };
  std::vector<LostDeadline> lost_heap_;
  struct HeldWatch {
    std::uint64_t client;
    std::string key;
    TimeNs deadline_ns;
  };
  std::vector<HeldWatch> held_watches_;  // oldest first
  net::Timer held_watch_timer_;
  std::size_t lost_compact_at_ = 4'096;
  std::uint64_t watchers_dropped_ = 0;
  std::uint64_t lost_notices_ = 0;
};

}  // namespace lockd::server
