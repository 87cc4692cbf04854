#include "lockd/admin/admin_server.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <sys/socket.h>
#include <openssl/ssl.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <spdlog/spdlog.h>

#include <charconv>
#include <exception>
#include <optional>
#include <nlohmann/json.hpp>

#include "lockd/admin/metrics.h"
#include "lockd/admin/uri.h"
#include "lockd/common/check.h"
#include "lockd/net/clock.h"
#include "lockd/server/lock_server.h"

namespace lockd::admin {

using json = nlohmann::ordered_json;

namespace {

constexpr std::string_view kJson = "application/json";
constexpr std::string_view kText = "text/plain; charset=utf-8";
constexpr std::string_view kPromText = "text/plain; version=0.0.4; charset=utf-8";
constexpr std::string_view kLocksPrefix = "/v1/locks/";

void send(evhttp_request* req, int code, std::string_view content_type, std::string_view body) {
  evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                    std::string(content_type).c_str());
  evbuffer* buf = evbuffer_new();
  LOCKD_CHECK(buf != nullptr);
  evbuffer_add(buf, body.data(), body.size());
  evhttp_send_reply(req, code, nullptr, buf);
  evbuffer_free(buf);
}

void send_json(evhttp_request* req, int code, const json& j) {
  // Keys and owners are ASCII by the protocol; `replace` only guards the
  // echo of arbitrary request bytes in error messages.
  std::string body = j.dump(-1, ' ', false, json::error_handler_t::replace);
  body.push_back('\n');
  send(req, code, kJson, body);
}

void send_error(evhttp_request* req, int code, std::string_view error, std::string_view message) {
  send_json(req, code, json{{"error", error}, {"message", message}});
}

// A decimal in [1, max]; nullopt when it is not.
std::optional<std::size_t> parse_count(std::string_view s) {
  std::size_t v = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec == std::errc::result_out_of_range && p == s.data() + s.size() && !s.empty()) {
    return SIZE_MAX;  // all digits but huge: clamped by the caller
  }
  if (ec != std::errc() || p != s.data() + s.size() || v == 0) return std::nullopt;
  return v;
}

}  // namespace

AdminServer::AdminServer(event_base* base, const server::LockServer& server, NodeInfo node)
    : server_(server),
      node_(std::move(node)),
      scan_timer_(base, [this] { on_scan_timer(); }),
      accept_pause_(base, "admin"),
      snapshot_export_(base),
      sweep_timer_(base, [this] { sweep_connections(); }) {
  http_ = evhttp_new(base);
  LOCKD_CHECK(http_ != nullptr);
  // Let every method through so a wrong one gets our JSON 405, not evhttp's.
  evhttp_set_allowed_methods(http_, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD |
                                        EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE |
                                        EVHTTP_REQ_OPTIONS | EVHTTP_REQ_TRACE |
                                        EVHTTP_REQ_CONNECT | EVHTTP_REQ_PATCH);
  evhttp_set_max_headers_size(http_, kMaxHeadersBytes);
  evhttp_set_max_body_size(http_, kMaxBodyBytes);
  evhttp_set_timeout(http_, kIdleTimeoutS);
  evhttp_set_gencb(http_, &AdminServer::on_request, this);
  evhttp_set_bevcb(http_, &AdminServer::make_bufferevent, this);
}

AdminServer::~AdminServer() {
  // Pending scans are dropped without a reply; evhttp_free() frees their
  // requests with their connections.
  scans_.clear();
  accept_pause_.detach();
  if (http_ != nullptr) evhttp_free(http_);
  // evhttp has freed every connection: ours are the last references.
  for (Conn& c : conns_) bufferevent_decref(c.bev);
  conns_.clear();
}

void AdminServer::require_tls(const tls::TlsContext* ctx) { tls_ = ctx; }

bufferevent* AdminServer::make_bufferevent(event_base* base, void* arg) {
  auto* self = static_cast<AdminServer*>(arg);
  self->sweep_connections();  // frees the slots of connections closed since the last sweep
  bufferevent* bev = nullptr;
  if (self->tls_ != nullptr) {
    // A client that does not speak TLS fails the handshake; evhttp then
    // closes the connection without a request having been read.
    SSL* ssl = SSL_new(self->tls_->native());
    LOCKD_CHECK(ssl != nullptr);
    bev = bufferevent_openssl_socket_new(base, -1, ssl, BUFFEREVENT_SSL_ACCEPTING,
                                         BEV_OPT_CLOSE_ON_FREE);
  } else {
    bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
  }
  LOCKD_CHECK(bev != nullptr);
  bufferevent_incref(bev);
  Conn c{bev, net::monotonic_now_ns(), false, false};
  bool over_connections = self->open_connections() >= self->max_connections_;
  if (over_connections) {
    // Room is made by closing the oldest connection that has not sent a
    // request yet (a flood of silent sockets cannot keep an operator out);
    // only when every open one has sent one is the new one closed.
    for (Conn& old : self->conns_) {
      if (old.closing || old.requested) continue;
      old.closing = true;
      self->stats_.refused_max_connections += 1;
      self->sweep_timer_.arm_after(0);
      over_connections = false;
      break;
    }
  }
  if (!over_connections && self->tls_ != nullptr && self->tls_handshakes() >= self->max_tls_handshakes_) {
    // Room is made by closing the oldest handshake in progress (as on the
    // client port): sockets that never send a ClientHello cannot keep an
    // operator's lockctl out. The sweep armed below shuts it down.
    for (Conn& old : self->conns_) {
      if (old.closing) continue;
      SSL* ssl = bufferevent_openssl_get_ssl(old.bev);
      if (ssl == nullptr || SSL_is_init_finished(ssl) != 0) continue;
      old.closing = true;
      self->stats_.refused_tls_handshakes += 1;
      self->sweep_timer_.arm_after(0);
      break;
    }
  }
  if (over_connections) {
    // evhttp gives the fd to the bufferevent after this returns: the next
    // sweep (armed for this loop turn) shuts it down, evhttp reads EOF and
    // frees the connection. Nothing it sent is read as a request.
    c.closing = true;
    self->stats_.refused_max_connections += 1;
    self->sweep_timer_.arm_after(0);
  } else {
    self->stats_.accepted += 1;
    if (!self->sweep_timer_.armed()) self->sweep_timer_.arm_after(kConnectionSweepNs);
  }
  self->conns_.push_back(c);
  return bev;
}

std::size_t AdminServer::tls_handshakes() const {
  std::size_t n = 0;
  for (const Conn& c : conns_) {
    if (c.closing) continue;
    SSL* ssl = bufferevent_openssl_get_ssl(c.bev);
    if (ssl != nullptr && SSL_is_init_finished(ssl) == 0) n += 1;
  }
  return n;
}

std::size_t AdminServer::open_connections() const {
  std::size_t n = 0;
  for (const Conn& c : conns_) n += c.closing ? 0 : 1;
  return n;
}

void AdminServer::sweep_connections() {
  const TimeNs now = net::monotonic_now_ns();
  std::erase_if(conns_, [&](Conn& c) {
    bufferevent_event_cb event_cb = nullptr;
    bufferevent_getcb(c.bev, nullptr, nullptr, &event_cb, nullptr);
    const int fd = bufferevent_getfd(c.bev);
    if (event_cb == nullptr && fd >= 0) {
      // evhttp freed it (bufferevent_free() clears the callbacks); ours is
      // the last reference.
      bufferevent_decref(c.bev);
      return true;
    }
    if (fd < 0) return false;  // evhttp has not given it its socket yet
    if (!c.closing && !c.requested && now - c.accepted_ns >= kFirstRequestTimeoutNs) {
      c.closing = true;
      stats_.refused_first_request += 1;
    }
    // Shut down both ways: evhttp reads EOF (or the TLS session fails) and
    // frees the connection; the peer sees it closed.
    if (c.closing) ::shutdown(fd, SHUT_RDWR);
    return false;
  });
  if (!conns_.empty()) sweep_timer_.arm_after(kConnectionSweepNs);
}

void AdminServer::note_request(evhttp_request* req) {
  evhttp_connection* conn = evhttp_request_get_connection(req);
  if (conn == nullptr) return;
  bufferevent* bev = evhttp_connection_get_bufferevent(conn);
  for (Conn& c : conns_) {
    if (c.bev == bev) {
      c.requested = true;
      return;
    }
  }
}

void AdminServer::append_admin_metrics(std::string& out) const {
  MetricsWriter w(out);
  w.single("lockd_admin_connections", "gauge", "Open admin HTTP connections.",
           static_cast<std::uint64_t>(open_connections()));
  w.single("lockd_admin_connections_accepted_total", "counter",
           "Admin HTTP connections accepted (within --admin-max-connections).", stats_.accepted);
  w.family("lockd_admin_refused_total", "counter",
           "Admin connections closed and requests answered 403 before they were read, by "
           "reason: max_connections (over --admin-max-connections), first_request_timeout (no "
           "request within 10 s), max_tls_handshakes (over --max-tls-handshakes with --admin-tls), host, origin, content_type (a changing request or the "
           "snapshot that a web page could have sent).");
  w.sample("lockd_admin_refused_total", {{"reason", "max_connections"}},
           stats_.refused_max_connections);
  w.sample("lockd_admin_refused_total", {{"reason", "first_request_timeout"}},
           stats_.refused_first_request);
  w.sample("lockd_admin_refused_total", {{"reason", "max_tls_handshakes"}},
           stats_.refused_tls_handshakes);
  w.sample("lockd_admin_refused_total", {{"reason", "host"}}, stats_.refused_host);
  w.sample("lockd_admin_refused_total", {{"reason", "origin"}}, stats_.refused_origin);
  w.sample("lockd_admin_refused_total", {{"reason", "content_type"}},
           stats_.refused_content_type);
}

void AdminServer::start_scan(evhttp_request* req, std::unique_ptr<KeyScan> scan) {
  const locks::LockTable& table = server_.table();
  if (table.bucket_count() <= kScanBucketsPerSlice) {
    send_json(req, 200, scan_all(table, *scan, table_time(node_, net::monotonic_now_ns())));
    return;
  }
  if (scans_.size() >= kMaxPendingScans) {
    send_error(req, 503, "busy", "too many listings in progress; retry");
    return;
  }
  // If the client leaves meanwhile, evhttp detaches the request from its
  // connection but keeps it for us: the reply at the end then just frees
  // it. So a scan always runs to its end (bounded by kMaxPendingScans).
  scans_.push_back(std::make_unique<PendingScan>(
      PendingScan{req, std::move(scan), 0, table.bucket_count(), 0}));
  if (!scan_timer_.armed()) scan_timer_.arm_after(0);
}

void AdminServer::on_scan_timer() {
  if (scans_.empty()) return;
  std::unique_ptr<PendingScan> p = std::move(scans_.front());
  scans_.pop_front();
  const locks::LockTable& table = server_.table();
  const TimeNs now = table_time(node_, net::monotonic_now_ns());
  if (table.bucket_count() != p->buckets) {  // rehashed: buckets moved
    p->scan->reset();
    p->cursor = 0;
    p->buckets = table.bucket_count();
    ++p->restarts;
  }
  const std::size_t end = p->restarts > kMaxScanRestarts
                              ? p->buckets
                              : std::min(p->buckets, p->cursor + kScanBucketsPerSlice);
  table.for_each_in_buckets(p->cursor, end, [&](std::string_view k, const locks::KeyState& s) {
    p->scan->offer(k, s, now);
  });
  p->cursor = end;
  if (p->cursor >= p->buckets) {
    send_json(p->req, 200, p->scan->finish(now));
  } else {
    scans_.push_back(std::move(p));
  }
  if (!scans_.empty()) scan_timer_.arm_after(0);
}

bool AdminServer::listen(const net::Endpoint& ep, std::string& error) {
  evhttp_bound_socket* sock = evhttp_bind_socket_with_handle(http_, ep.host.c_str(), ep.port);
  if (sock == nullptr) {
    error = "cannot listen on admin address " + ep.to_string();
    return false;
  }
  bound_ = net::local_endpoint(evhttp_bound_socket_get_fd(sock));
  configured_host_ = ep.host;
  // evhttp sets no accept error callback: out of descriptors, libevent
  // would log a line per retry. Pause like the other listeners.
  accept_pause_.attach(evhttp_bound_socket_get_listener(sock));
  return true;
}

void AdminServer::on_request(evhttp_request* req, void* arg) {
  auto* self = static_cast<AdminServer*>(arg);
  try {
    self->note_request(req);
    self->handle(req);
  } catch (const std::exception& e) {
    // Only our bug or memory exhaustion lands here; a request must never
    // take the lock server down, so answer 500 and carry on.
    spdlog::error("admin: {} failed: {}", evhttp_request_get_uri(req), e.what());
    send_error(req, 500, "internal", e.what());
  }
}

void AdminServer::handle(evhttp_request* req) {
  const TimeNs now = net::monotonic_now_ns();
  const evhttp_uri* uri = evhttp_request_get_evhttp_uri(req);
  const char* raw_path = uri != nullptr ? evhttp_uri_get_path(uri) : nullptr;
  const char* raw_query = uri != nullptr ? evhttp_uri_get_query(uri) : nullptr;
  const std::string_view path = raw_path != nullptr && raw_path[0] != '\0' ? raw_path : "/";
  const std::string_view query = raw_query != nullptr ? raw_query : "";

  enum class Route {
    kHealth,   // /healthz
    kReady,    // /readyz
    kStatus,   // /v1/status
    kLocks,    // /v1/locks?prefix=&after=&limit=
    kLock,     // /v1/locks/KEY
    kCluster,  // /v1/cluster (404 in single mode)
    kMetrics,  // /metrics
    kTop,      // /v1/top?limit=
    kSnapshot, // /v1/snapshot (a backup file)
    kNone,     // unknown path: 404
  };
  Route route = Route::kNone;
  if (path == "/healthz") {
    route = Route::kHealth;
  } else if (path == "/readyz") {
    route = Route::kReady;
  } else if (path == "/v1/status") {
    route = Route::kStatus;
  } else if (path == "/v1/locks") {
    route = Route::kLocks;
  } else if (path.starts_with(kLocksPrefix)) {
    route = Route::kLock;
  } else if (path == "/v1/cluster") {
    route = Route::kCluster;
  } else if (path == "/metrics") {
    route = Route::kMetrics;
  } else if (path == "/v1/top") {
    route = Route::kTop;
  } else if (path == "/v1/snapshot") {
    route = Route::kSnapshot;
  }
  // POST /v1/cluster/init (v1.3): its own check, explicit here: any
  // authenticated identity may form a group that does not exist yet (a
  // node that belongs to a formed group answers 409 and changes nothing).
  if (path == "/v1/cluster/init") {
    if (!authorize_admin(req, auth_, AdminAccess::kIdentity)) return;
    handle_member_change(req, path);
    return;
  }
  // Before anything else, so a refused request learns nothing (not even
  // whether the path exists) and changes nothing. First what a web page
  // could have sent (§11a), with authentication on or off.
  if (needs_web_checks(evhttp_request_get_command(req), path)) {
    const std::string_view why = web_origin_refusal(req, configured_host_);
    if (!why.empty()) {
      std::string message;
      if (why == "host") {
        stats_.refused_host += 1;
        message = "the Host header must name the admin address, a loopback address or localhost";
      } else if (why == "origin") {
        stats_.refused_origin += 1;
        message = "a request from a web page (Origin) of another site";
      } else {
        stats_.refused_content_type += 1;
        message = "a request with a body must say Content-Type: application/json";
      }
      spdlog::info("admin API: {} refused: {}", evhttp_request_get_uri(req), message);
      send_error(req, 403, "forbidden", message);
      return;
    }
  }
  // POST /v1/cluster/init (lifecycle): pass `in_formed_group` false to
  // admin_access_for() on a node that belongs to no formed group (§11a).
  std::optional<std::string> identity;
  if (!authorize_admin(req, auth_, admin_access_for(evhttp_request_get_command(req), path),
                       &identity)) {
    return;
  }
  // Which keys and tokens this identity may see (§11a).
  const KeyViewFn view = [auth = auth_, identity](std::string_view key) {
    return key_view(auth, identity, key);
  };
  if (path == "/v1/cluster/leader" || path == "/v1/cluster/members" ||
      path.starts_with("/v1/cluster/members/")) {
    handle_member_change(req, path);
    return;
  }
  if (route == Route::kNone) {
    send_error(req, 404, "not_found", "no such endpoint");
    return;
  }
  const evhttp_cmd_type method = evhttp_request_get_command(req);
  if (method != EVHTTP_REQ_GET && method != EVHTTP_REQ_HEAD) {
    evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", "GET, HEAD");
    send_error(req, 405, "method_not_allowed", "only GET and HEAD are allowed");
    return;
  }
  const auto params = parse_query(query);
  if (!params) {
    send_error(req, 400, "bad_query", "malformed percent-encoding in the query string");
    return;
  }

  switch (route) {
    case Route::kHealth:
      send(req, 200, kText, "ok");
      return;
    case Route::kReady:
      // Single mode can always serve A/R, until a graceful stop begins;
      // a cluster node when it leads or knows the leader.
      if (draining_) {
        send(req, 503, kText, "stopping");
      } else if (!node_ready(node_, now)) {
        send(req, 503, kText, "no leader");
      } else {
        send(req, 200, kText, "ok");
      }
      return;
    case Route::kStatus:
      send_json(req, 200, status_json(server_, node_, now));
      return;
    case Route::kLocks: {
      ListQuery q;
      for (const auto& [name, value] : *params) {
        if (name == "prefix") {
          q.prefix = value;
        } else if (name == "after") {
          q.after = value;
        } else if (name == "limit") {
          const auto n = parse_count(value);
          if (!n) {
            send_error(req, 400, "bad_limit", "limit must be a positive integer");
            return;
          }
          q.limit = std::min(*n, kMaxListLimit);
        }
      }
      start_scan(req, std::make_unique<ListScan>(server_.table(), std::move(q), view));
      return;
    }
    case Route::kLock: {
      const auto key = percent_decode(path.substr(kLocksPrefix.size()));
      if (!key || key->empty()) {
        send_error(req, 400, "bad_key", "the key must be non-empty and percent-encoded");
        return;
      }
      if (auto j = lock_json(server_.table(), *key, table_time(node_, now), view)) {
        send_json(req, 200, *j);
      } else {
        send_json(req, 404, json{{"error", "not_found"}, {"key", *key}});
      }
      return;
    }
    case Route::kCluster:
      if (!node_.cluster) {
        send_error(req, 404, "not_found", "single mode: there is no cluster");
        return;
      }
      send_json(req, 200, cluster_json(node_.cluster(now)));
      return;
    case Route::kMetrics: {
      std::string text = render_metrics(server_, node_, now);
      append_admin_metrics(text);
      send(req, 200, kPromText, text);
      return;
    }
    case Route::kTop: {
      std::size_t limit = kDefaultTopLimit;
      for (const auto& [name, value] : *params) {
        if (name != "limit") continue;
        const auto n = parse_count(value);
        if (!n) {
          send_error(req, 400, "bad_limit", "limit must be a positive integer");
          return;
        }
        limit = std::min(*n, kMaxTopLimit);
      }
      start_scan(req, std::make_unique<TopScan>(server_, node_, limit, now, view));
      return;
    }
    case Route::kSnapshot: {
      if (!node_.snapshot) {
        send_error(req, 404, "not_found", "this node cannot export a snapshot");
        return;
      }
      SnapshotSource src = node_.snapshot();
      if (src.not_leader) {
        // Only the leader's applied state holds every acknowledged grant.
        json body{{"error", "not_leader"}, {"leader_admin", nullptr}};
        if (src.leader_admin) body["leader_admin"] = *src.leader_admin;
        send_json(req, 503, body);
        return;
      }
      if (!src.refused.empty()) {
        send_error(req, 409, "cannot_export", src.refused);
        return;
      }
      snapshot_export_.request(req, src.produce, src.filename);
      return;
    }
    case Route::kNone:
      break;
  }
  LOCKD_CHECK(false);
}

void AdminServer::handle_member_change(evhttp_request* req, std::string_view path) {
  const evhttp_cmd_type method = evhttp_request_get_command(req);
  if (!node_.change_members) {
    send_error(req, 404, "not_found", "single mode: there is no cluster");
    return;
  }
  MemberChangeRequest c;
  const char* allow = "POST";
  bool ok_method = method == EVHTTP_REQ_POST;
  bool needs_body = false;
  if (path == "/v1/cluster/init") {
    c.op = MemberChangeOp::kInit;
  } else if (path == "/v1/cluster/leader") {
    c.op = MemberChangeOp::kTransfer;
  } else if (path == "/v1/cluster/members") {
    c.op = MemberChangeOp::kAdd;
    needs_body = true;
  } else {
    // /v1/cluster/members/ID or /v1/cluster/members/ID/promote
    std::string_view rest = path.substr(std::string_view("/v1/cluster/members/").size());
    bool promote = false;
    if (rest.ends_with("/promote")) {
      promote = true;
      rest.remove_suffix(std::string_view("/promote").size());
    }
    std::uint64_t id = 0;
    const auto [p, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), id);
    if (ec != std::errc() || p != rest.data() + rest.size() || id == 0 || rest.starts_with('+')) {
      send_error(req, 404, "not_found", "no such endpoint (a member id is a positive number)");
      return;
    }
    c.id = id;
    if (promote) {
      c.op = MemberChangeOp::kPromote;
    } else {
      c.op = MemberChangeOp::kRemove;
      allow = "DELETE";
      ok_method = method == EVHTTP_REQ_DELETE;
    }
  }
  if (!ok_method) {
    evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", allow);
    send_error(req, 405, "method_not_allowed", std::string("only ") + allow + " is allowed here");
    return;
  }
  if (c.op == MemberChangeOp::kInit) {
    // `{}` (or nothing): no fields yet.
    evbuffer* in = evhttp_request_get_input_buffer(req);
    std::string body(evbuffer_get_length(in), '\0');
    if (!body.empty()) evbuffer_copyout(in, body.data(), body.size());
    const bool blank = body.find_first_not_of(" \t\r\n") == std::string::npos;
    const json j = blank ? json::object() : json::parse(body, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      send_error(req, 400, "bad_request", "the body must be empty or the JSON object {}");
      return;
    }
  }
  if (c.op == MemberChangeOp::kAdd || c.op == MemberChangeOp::kTransfer) {
    evbuffer* in = evhttp_request_get_input_buffer(req);
    std::string body(evbuffer_get_length(in), '\0');
    if (!body.empty()) evbuffer_copyout(in, body.data(), body.size());
    const bool blank = body.find_first_not_of(" \t\r\n") == std::string::npos;
    json j = blank ? json::object() : json::parse(body, nullptr, false);
    if (j.is_discarded() || !j.is_object() || (needs_body && blank)) {
      send_error(req, 400, "bad_request",
                 needs_body ? "the body must be a JSON object {\"id\",\"client_addr\",\"raft_addr\"}"
                            : "the body must be empty or a JSON object {\"id\"}");
      return;
    }
    const auto id_of = [](const json& v) -> std::optional<std::uint64_t> {
      if (v.is_number_unsigned() && v.get<std::uint64_t>() > 0) return v.get<std::uint64_t>();
      if (v.is_number_integer() && v.get<std::int64_t>() > 0) {
        return static_cast<std::uint64_t>(v.get<std::int64_t>());
      }
      return std::nullopt;
    };
    if (c.op == MemberChangeOp::kAdd) {
      const auto id = j.contains("id") ? id_of(j["id"]) : std::nullopt;
      if (!id || !j.contains("client_addr") || !j["client_addr"].is_string() ||
          !j.contains("raft_addr") || !j["raft_addr"].is_string()) {
        send_error(req, 400, "bad_request",
                   "expected {\"id\": a positive number, \"client_addr\": \"host:port\", "
                   "\"raft_addr\": \"host:port\"}");
        return;
      }
      c.id = *id;
      c.client_addr = j["client_addr"].get<std::string>();
      c.raft_addr = j["raft_addr"].get<std::string>();
    } else if (j.contains("id") && !j["id"].is_null()) {
      const auto id = id_of(j["id"]);
      if (!id) {
        send_error(req, 400, "bad_request", "\"id\" must be a positive number (or absent)");
        return;
      }
      c.id = *id;
    }
  }
  // Answered when the change commits (or fails): maybe right now. If the
  // client leaves meanwhile, evhttp keeps the request for our reply.
  node_.change_members(c, [this, req](const MemberChangeReply& r) {
    if (r.status == 200) {
      send_json(req, 200, cluster_json(node_.cluster(net::monotonic_now_ns())));
      return;
    }
    json body{{"error", r.error}};
    if (r.error == "not_leader") {
      body["leader_admin"] = r.leader_admin ? json(*r.leader_admin) : json(nullptr);
    }
    if (!r.message.empty()) body["message"] = r.message;
    send_json(req, r.status, body);
  });
}

}  // namespace lockd::admin
