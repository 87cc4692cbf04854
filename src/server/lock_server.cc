#include "lockd/server/lock_server.h"

#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <variant>

#include "lockd/common/check.h"
#include "lockd/net/clock.h"
#include "lockd/net/keepalive.h"
#include "lockd/proto/reply.h"

namespace lockd::server {

LockServer::LockServer(event_base* base, const ServerConfig& config, locks::Token first_token,
                       LockService* service)
    : base_(base),
      config_(config),
      service_(service),
      table_(config.locks, first_token),
      listener_(base, [this](int fd, const sockaddr* peer, int) { accept(fd, peer); }),
      deadline_timer_(base, [this] { on_deadline_timer(); }),
      handshake_timer_(base, [this] { on_handshake_timer(); }),
      sweep_timer_(base, [this] { on_sweep_timer(); }),
      sweep_continue_(base, [this] { run_sweep_slice(); }),
      auth_timer_(base, [this] { on_auth_timer(); }),
      next_conn_id_(config.first_client_id),
      watches_(config.watches, service != nullptr, first_token),
      held_watch_timer_(base, [this] { answer_held_watches(net::monotonic_now_ns()); }) {
  if (service_ != nullptr) {
    service_->attach(*this);
    service_->attach_watches(watches_, *this);
    return;  // the service owns every deadline; there is nothing to sweep here
  }
  table_.set_observer(&watches_);
  table_.track_lost_leases(this);
  sweep_timer_.arm_every(config_.sweep_interval_ns);
}

LockServer::~LockServer() = default;

void LockServer::require_tls(const tls::TlsContext* ctx) {
  tls_ = ctx;
  if (tls_ != nullptr && handshake_worker_ == nullptr) {
    handshake_worker_ = std::make_unique<net::HandshakeWorker>(base_);
  }
}

bool LockServer::listen(const net::Endpoint& ep, std::string& error) {
  if (!listener_.listen(ep, error)) return false;
  // Every accepted client socket inherits it (§11a: a vanished host's
  // connection is reaped).
  net::enable_keepalive(listener_.fd());
  return true;
}

namespace {

// Most unsent output an unauthenticated connection may have (its refusals,
// `E unauthenticated <echo>`) before it is closed: a client that sends
// without reading must not pin the server's memory (§11a). Above what one
// read (16 KiB of the shortest requests) can produce, so a client that
// reads its replies is never closed by it.
constexpr std::size_t kMaxUnauthenticatedOutputBytes = 64 * 1024;

// Connections a timeout closes in one loop turn; the rest follow in the
// next turns (a zero-delay timer is not ready before the loop polls again,
// so the turn ends and its replies go out first): thousands timing out
// together (a flood's idle sockets) never hold a client's reply up for
// more than a few closes.
constexpr int kTimeoutClosesPerTurn = 16;

// The source address of an accepted socket (as accept() gave it) as bytes
// (an IPv4-mapped IPv6 address as its IPv4 one), the key of the
// per-address count; "" when unknown (never capped).
std::string source_address(const sockaddr* peer) {
  if (peer == nullptr) return {};
  if (peer->sa_family == AF_INET) {
    const auto& a = reinterpret_cast<const sockaddr_in*>(peer)->sin_addr;
    return std::string(reinterpret_cast<const char*>(&a), sizeof a);
  }
  if (peer->sa_family == AF_INET6) {
    const auto& a = reinterpret_cast<const sockaddr_in6*>(peer)->sin6_addr;
    const char* b = reinterpret_cast<const char*>(&a);
    if (IN6_IS_ADDR_V4MAPPED(&a)) return std::string(b + 12, 4);
    return std::string(b, sizeof a);
  }
  return {};
}

}  // namespace

void LockServer::accept(int fd, const sockaddr* peer) {
  // Connections closed this turn (one just closed to make room, say) are
  // still in clients_ until after_turn() reaps them; they hold no slot.
  if (shutting_down_ || clients_.size() - closed_.size() >= config_.max_connections) {
    ++stats_.connections_rejected;
    ::close(fd);
    return;
  }
  std::string address = source_address(peer);
  if (config_.max_connections_per_ip != 0 && !address.empty()) {
    auto it = per_address_.find(address);
    if (it != per_address_.end() && it->second >= config_.max_connections_per_ip) {
      stats_.count(CloseReason::kPerIp);
      spdlog::debug("client connection refused: over --max-connections-per-ip {} from its address",
                    config_.max_connections_per_ip);
      ::close(fd);
      return;
    }
  }
  if (tls_ != nullptr && tls_handshakes_ >= config_.max_tls_handshakes) {
    // The oldest handshake in progress makes room, as for unauthenticated
    // connections: closing the new one instead let a few silent sockets
    // (that never send a ClientHello) keep every new TLS client out until
    // their --tls-handshake-timeout-ms (the hostile chaos run found it).
    // A silent one goes first: a real client's handshake, in progress on
    // the worker, outlives a flood of idle sockets (docs/security.md).
    Client* oldest = oldest_silent_handshake();
    if (oldest == nullptr) oldest = oldest_handshake();
    if (oldest != nullptr) {
      close_for(*oldest, CloseReason::kTlsHandshakes);
    } else {
      stats_.count(CloseReason::kTlsHandshakes);
      ::close(fd);
      return;
    }
  }
  const TimeNs now = net::monotonic_now_ns();
  if (auth_required() && unauth_count_ >= config_.max_unauthenticated && unauth_head_ != nullptr) {
    // The oldest unauthenticated connection makes room: a flood of idle
    // ones then cannot keep out a client that authenticates at once.
    close_for(*unauth_head_, CloseReason::kUnauthenticatedCap);
  }
  ++stats_.connections_accepted;  // keepalive: inherited from the listener (listen())
  const std::uint64_t id = next_conn_id_++;
  Client& c = clients_[id];
  c.accepted_ns = now;
  if (!address.empty()) ++per_address_[address];
  c.address = std::move(address);
  c.conn = std::make_unique<net::Connection>(
      base_, fd, id, *this, config_.output,
      tls_ != nullptr ? tls::TlsSession::accept(*tls_) : nullptr);
  if (tls_ != nullptr) {
    c.conn->offload_handshake(handshake_worker_.get());
    c.handshaking = true;
    ++tls_handshakes_;
    handshake_deadlines_.emplace_back(now + config_.tls_handshake_timeout_ns, id);
    silent_handshakes_.push_back(id);
    if (!handshake_timer_.armed()) handshake_timer_.arm_after(config_.tls_handshake_timeout_ns);
  }
  if (auth_required()) {
    unauth_push(c);
    if (!auth_timer_.armed()) auth_timer_.arm_after(config_.auth_timeout_ns);
  }
}

void LockServer::unauth_push(Client& c) {
  LOCKD_CHECK(!c.in_unauth);
  c.in_unauth = true;
  c.unauth_prev = unauth_tail_;
  c.unauth_next = nullptr;
  if (unauth_tail_ != nullptr) {
    unauth_tail_->unauth_next = &c;
  } else {
    unauth_head_ = &c;
  }
  unauth_tail_ = &c;
  ++unauth_count_;
}

void LockServer::unauth_remove(Client& c) {
  if (!c.in_unauth) return;
  c.in_unauth = false;
  (c.unauth_prev != nullptr ? c.unauth_prev->unauth_next : unauth_head_) = c.unauth_next;
  (c.unauth_next != nullptr ? c.unauth_next->unauth_prev : unauth_tail_) = c.unauth_prev;
  c.unauth_prev = c.unauth_next = nullptr;
  --unauth_count_;
}

void LockServer::authenticated(Client& c) {
  c.authenticated = true;
  unauth_remove(c);
}

void LockServer::close_for(Client& c, CloseReason reason) {
  stats_.count(reason);
  spdlog::debug("client connection {}: closing ({})", c.conn->id(), to_string(reason));
  c.conn->close();  // on_closed() takes it out of every count
}

void LockServer::on_auth_timer() {
  const TimeNs now = net::monotonic_now_ns();
  int closed = 0;
  while (unauth_head_ != nullptr && unauth_head_->accepted_ns + config_.auth_timeout_ns <= now) {
    if (closed++ == kTimeoutClosesPerTurn) {
      auth_timer_.arm_after(0);  // the rest next turn: this turn's replies go out first
      return;
    }
    close_for(*unauth_head_, CloseReason::kAuthTimeout);
  }
  if (unauth_head_ != nullptr) {
    auth_timer_.arm_after(unauth_head_->accepted_ns + config_.auth_timeout_ns - now);
  }
}

LockServer::Client* LockServer::oldest_silent_handshake() {
  while (!silent_handshakes_.empty()) {
    auto it = clients_.find(silent_handshakes_.front());
    if (it != clients_.end() && !it->second.conn->closed() && it->second.handshaking &&
        !it->second.conn->heard()) {
      return &it->second;
    }
    silent_handshakes_.pop_front();  // closed, done, or it spoke: never silent again
  }
  return nullptr;
}

LockServer::Client* LockServer::oldest_handshake() {
  // handshake_deadlines_ is in accept order (one timeout for all); entries
  // of connections closed or past their handshake are dropped on the way.
  while (!handshake_deadlines_.empty()) {
    auto it = clients_.find(handshake_deadlines_.front().second);
    if (it != clients_.end() && !it->second.conn->closed() && it->second.handshaking) {
      return &it->second;
    }
    handshake_deadlines_.pop_front();
  }
  return nullptr;
}

void LockServer::on_handshake_timer() {
  const TimeNs now = net::monotonic_now_ns();
  int closed = 0;
  while (!handshake_deadlines_.empty() && handshake_deadlines_.front().first <= now) {
    if (closed == kTimeoutClosesPerTurn) {
      handshake_timer_.arm_after(0);  // the rest next turn: this turn's replies go out first
      return;
    }
    const std::uint64_t id = handshake_deadlines_.front().second;
    handshake_deadlines_.pop_front();
    auto it = clients_.find(id);
    if (it == clients_.end() || it->second.conn->closed()) continue;
    net::Connection& conn = *it->second.conn;
    if (!conn.handshaking()) continue;
    ++stats_.tls_handshake_timeouts;
    spdlog::debug("client connection {}: TLS handshake not done in {} ms, closing", id,
                  config_.tls_handshake_timeout_ns / kNsPerMs);
    conn.close();
    ++closed;
  }
  if (!handshake_deadlines_.empty()) {
    handshake_timer_.arm_after(handshake_deadlines_.front().first - now);
  }
  oldest_silent_handshake();  // drops what is stale at its front: it stays bounded
}

void LockServer::on_bytes(net::Connection& conn, std::string_view bytes) {
  auto it = clients_.find(conn.id());
  LOCKD_CHECK(it != clients_.end());
  Client& client = it->second;
  const TimeNs now = net::monotonic_now_ns();
  // Latency is measured per request from the end of the previous one (or
  // the read), so each request costs one clock read, not two.
  TimeNs start_ns = now;
  // A lease that ended since the last timer: its `X` goes before anything
  // this read can do to the key (a takeover would remove the holder first).
  if ((!lost_heap_.empty() && lost_heap_.front().at_ns <= now) || table_.lost_leases_due(now)) {
    run_lost_notices(now);
  }
  client.framer.feed(bytes);
  std::string_view line;
  for (;;) {
    const auto status = client.framer.next(line);
    if (status == proto::LineFramer::Status::kNeedMore) break;
    if (status == proto::LineFramer::Status::kTooLong) {
      ++stats_.lines_too_long;
      stats_.count(ReplyKind::kError);
      proto::append_error(conn.out(), proto::ParseError::kLineTooLong);
      if (conn.reply_queued()) conn.close_after_flush();
      return;
    }
    const proto::ParseResult parsed = proto::parse_line(line, config_.parse);
    bool answered = false;  // a waiting acquire is not timed: its wait is the client's
    if (const auto* req = std::get_if<proto::Request>(&parsed)) {
      if (req->verb == proto::Verb::kHello) {
        if (!handle_hello(client, &req->credential)) {
          if (conn.reply_queued()) conn.close_after_flush();
          return;  // nothing after a refused credential is read
        }
        answered = true;
      } else if (!admitted(client, *req)) {
        answered = true;  // refused: its key is not counted in /v1/top either
      } else {
        stats_.recent_keys.record(req->key);
        answered = handle_request(client, *req, now);
      }
    } else if (const auto* err = std::get_if<proto::ParseError>(&parsed);
               err != nullptr && *err == proto::ParseError::kBadCredential) {
      // An `H` whose credential breaks §2: answered as any `H` is.
      if (!handle_hello(client, nullptr)) {
        if (conn.reply_queued()) conn.close_after_flush();
        return;
      }
      answered = true;
    } else if (err != nullptr) {
      ++stats_.requests_malformed;
      stats_.count(ReplyKind::kError);
      proto::append_error(conn.out(), *err, line);  // v1.3 §7: echo on lease/wait/limit
      answered = true;
    }
    const TimeNs end_ns = net::monotonic_now_ns();
    if (answered) stats_.latency.record(end_ns - start_ns);
    start_ns = end_ns;
    if (conn.closed()) return;  // overflowed while delivering
    if (client.in_unauth && conn.unsent_bytes() > kMaxUnauthenticatedOutputBytes) {
      close_for(client, CloseReason::kUnauthenticatedOutput);
      return;
    }
  }
  conn.reply_queued();
}

namespace {

// The verb's letter, as the ACL names it. A switch without default, so a
// new verb does not compile until it says how the ACL sees it.
char acl_verb(proto::Verb v) {
  switch (v) {
    case proto::Verb::kAcquire: return 'A';
    case proto::Verb::kRelease: return 'R';
    case proto::Verb::kKeep: return 'K';
    case proto::Verb::kShared: return 'S';
    case proto::Verb::kHello: return 'H';  // never checked against the ACL
    case proto::Verb::kWatch:
    case proto::Verb::kUnwatch: return 'W';  // v1.3: watching, and stopping it
  }
  return '?';
}

}  // namespace

bool LockServer::handle_hello(Client& client, const std::string_view* credential) {
  std::string& out = client.conn->out();
  ++stats_.requests_hello;
  if (auth_ == nullptr || !auth_->required()) {
    // §11: with authentication off, `H` answers `H anonymous` whatever its
    // credential.
    stats_.count(ReplyKind::kHello);
    out.append("H anonymous\n");
    return true;
  }
  // §11: a credential that breaks §2 is refused like a wrong one.
  std::optional<std::string> identity =
      credential != nullptr ? auth_->by_credential(*credential) : std::nullopt;
  if (!identity) {
    ++stats_.auth_failures;
    stats_.count(ReplyKind::kError);
    spdlog::debug("client connection {}: H with a credential that is not accepted",
                  client.conn->id());
    out.append("E unauthenticated\n");
    return false;
  }
  stats_.count(ReplyKind::kHello);
  client.identity = std::move(*identity);
  authenticated(client);
  out.append("H ");
  out.append(client.identity);
  out.push_back('\n');
  return true;
}

bool LockServer::admitted(Client& client, const proto::Request& req) {
  if (auth_ == nullptr || !auth_->required()) return true;
  const char* refusal = nullptr;
  if (!client.authenticated) {
    refusal = "unauthenticated";
  } else {
    if (!auth_->allows(client.identity, acl_verb(req.verb), req.key)) refusal = "forbidden";
  }
  if (refusal == nullptr) return true;
  ++stats_.requests_refused;
  stats_.count(ReplyKind::kError);
  proto::append_error_echo(client.conn->out(), refusal, req);
  return false;
}

bool LockServer::handle_request(Client& client, const proto::Request& req, TimeNs now) {
  std::string& out = client.conn->out();
  if (req.verb == proto::Verb::kWatch) {
    ++stats_.requests_watch;
    if (service_ != nullptr && watches_.rev() == 0) {
      // Cluster: nothing of the group applied here yet, so no state to
      // show (§5c: rev is never 0). Held until an entry is applied, or
      // answered `E no_leader <key>` after one election timeout.
      held_watches_.push_back(
          {client.conn->id(), std::string(req.key), now + config_.watch_apply_wait_ns});
      if (!held_watch_timer_.armed()) held_watch_timer_.arm_after(config_.watch_apply_wait_ns);
      return false;
    }
    const auto r = watches_.watch(client.conn->id(), req.key, table(), *this, out);
    stats_.count(r == WatchHub::WatchOutcome::kWatching ? ReplyKind::kWatching
                                                        : ReplyKind::kWatchBusy);
    return true;
  }
  if (req.verb == proto::Verb::kUnwatch) {
    ++stats_.requests_unwatch;
    stats_.count(ReplyKind::kUnwatched);
    watches_.unwatch(client.conn->id(), req.key, out);
    return true;
  }
  if (service_ != nullptr) {
    switch (req.verb) {
      case proto::Verb::kAcquire: ++stats_.requests_acquire; break;
      case proto::Verb::kShared: ++stats_.requests_shared; break;
      case proto::Verb::kKeep: ++stats_.requests_keep; break;
      case proto::Verb::kRelease: ++stats_.requests_release; break;
      case proto::Verb::kHello:
      case proto::Verb::kWatch:
      case proto::Verb::kUnwatch: break;  // answered before it gets here
    }
    return service_->handle(client.conn->id(), req, now, out, stats_);
  }
  if (req.verb == proto::Verb::kAcquire || req.verb == proto::Verb::kShared) {
    const bool shared = req.verb == proto::Verb::kShared;
    ++(shared ? stats_.requests_shared : stats_.requests_acquire);
    const locks::WaiterId waiter = next_waiter_id_++;
    const locks::AcquireResult r = table_.acquire(
        now, {req.owner, req.key, req.lease_ms, req.wait_ms, client.conn->id(), waiter, shared,
              req.limit});
    switch (r.outcome) {
      case locks::AcquireOutcome::kGranted:
        // The table set this expiry (grant: now + lease): no second lookup.
        if (shared) note_shared_grant(r.token, req.key, now + ms_to_ns(req.lease_ms));
        stats_.count(ServerStats::granted(shared));
        if (shared) {
          proto::append_shared(out, r.token, req.owner, req.key);
        } else {
          proto::append_acquired(out, r.token, req.owner, req.key);
        }
        break;
      case locks::AcquireOutcome::kHeld:
        stats_.count(ServerStats::held(shared));
        proto::append_held(out, req.owner, req.key);
        break;
      case locks::AcquireOutcome::kBusy:
        stats_.count(ServerStats::busy(shared));
        proto::append_busy(out, req.owner, req.key);
        break;
      case locks::AcquireOutcome::kLimitMismatch:
        stats_.count(ReplyKind::kError);
        proto::append_error_echo(out, "limit_mismatch", req);
        break;
      case locks::AcquireOutcome::kQueued:
        client.waiting.insert(waiter);
        return false;
    }
    return true;
  }
  if (req.verb == proto::Verb::kKeep) {
    ++stats_.requests_keep;
    // Moving an expiry hands nothing off (the new one is at least 1 ms
    // away); the deadline timer is re-armed after the turn as usual.
    locks::LockTable::KeptLease kept;
    if (table_.keep(now, req.token, req.key, req.lease_ms, &kept) == locks::KeepOutcome::kKept) {
      // A later end needs nothing: the entry of the old one pushes it again.
      // An earlier one needs an entry of its own.
      // (An exclusive holding's index entry moved with it, in the table.)
      if (kept.shared && kept.holder->expires_at_ns < kept.previous_end_ns &&
          kept.holder->granted_to != 0) {
        note_shared_grant(req.token, req.key, kept.holder->expires_at_ns);
      }
      stats_.count(ReplyKind::kKept);
      proto::append_kept(out, req.token, req.key);
    } else {
      stats_.count(ReplyKind::kNotKept);
      proto::append_not_released(out, req.token, req.key);
    }
    return true;
  }
  ++stats_.requests_release;
  deliveries_.clear();
  const auto outcome = table_.release(now, req.token, req.key, deliveries_);
  if (outcome == locks::ReleaseOutcome::kReleased) {
    stats_.count(ReplyKind::kReleased);
    proto::append_released(out, req.token, req.key);
  } else {
    stats_.count(ReplyKind::kNotReleased);
    proto::append_not_released(out, req.token, req.key);
  }
  // The releaser's `R` goes first; a hand-off to a waiter on this same
  // connection follows it.
  deliver(deliveries_);
  return true;
}

void LockServer::deliver(const std::vector<locks::Delivery>& deliveries) {
  for (const locks::Delivery& d : deliveries) {
    auto it = clients_.find(d.client);
    // A closed connection cancels its waiters before it goes, so every
    // Delivery has a live client.
    LOCKD_CHECK(it != clients_.end());
    Client& c = it->second;
    c.waiting.erase(d.waiter);
    if (d.kind == locks::DeliveryKind::kGranted) {
      if (service_ == nullptr && d.shared) note_shared_grant(d.token, d.key);
      stats_.count(ServerStats::granted(d.shared));
      if (d.shared) {
        proto::append_shared(c.conn->out(), d.token, d.owner, d.key);
      } else {
        proto::append_acquired(c.conn->out(), d.token, d.owner, d.key);
      }
    } else {
      stats_.count(ServerStats::held(d.shared));
      proto::append_held(c.conn->out(), d.owner, d.key);
    }
    c.conn->reply_queued();
  }
}

void LockServer::on_pending_write(net::Connection& conn) { pending_writes_.push_back(&conn); }

void LockServer::on_closed(net::Connection& conn) {
  auto it = clients_.find(conn.id());
  LOCKD_CHECK(it != clients_.end());
  if (conn.overflowed()) {
    ++stats_.output_overflows;
    spdlog::warn("closing connection {}: unsent output over {} bytes", conn.id(),
                 config_.output.max_bytes);
  }
  Client& client = it->second;
  unauth_remove(client);
  if (client.handshaking) {
    client.handshaking = false;
    --tls_handshakes_;
  }
  if (!client.address.empty()) {
    auto n = per_address_.find(client.address);
    LOCKD_CHECK(n != per_address_.end() && n->second > 0);
    if (--n->second == 0) per_address_.erase(n);
  }
  if (watches_.watches(conn.id())) {
    if (conn.overflowed()) ++watchers_dropped_;
    watches_.client_closed(conn.id());  // its watches end with it (§5c)
  }
  // A waiter belongs to its connection (§9): cancel without a reply.
  if (service_ != nullptr) service_->client_closed(conn.id());
  if (!it->second.waiting.empty()) {
    // All of them at once, so none is handed a key on its way out; the
    // front leaving may hand the key to waiters of other connections.
    const std::vector<locks::WaiterId> ids(it->second.waiting.begin(), it->second.waiting.end());
    it->second.waiting.clear();
    // Its own vector: a close can happen inside deliver() (an output
    // overflow), which is iterating deliveries_.
    std::vector<locks::Delivery> handed;
    table_.cancel_waiters(net::monotonic_now_ns(), ids, handed);
    deliver(handed);
  }
  closed_.push_back(conn.id());
}

void LockServer::on_tls_established(net::Connection& conn) {
  auto it = clients_.find(conn.id());
  LOCKD_CHECK(it != clients_.end());
  if (it->second.handshaking) {
    it->second.handshaking = false;
    --tls_handshakes_;
  }
  if (!auth_required()) return;
  const auto& cert = conn.tls()->peer_certificate();
  if (!cert) return;
  if (std::optional<std::string> identity = auth_->by_certificate(*cert)) {
    it->second.identity = std::move(*identity);
    authenticated(it->second);
  }
}

void LockServer::on_tls_failed(net::Connection& conn, std::string_view error) {
  ++stats_.tls_failures;
  spdlog::debug("client connection {}: TLS: {}", conn.id(), error);
}

std::string* LockServer::reply_buffer(locks::ClientId client, ReplyKind kind) {
  auto it = clients_.find(client);
  if (it == clients_.end() || it->second.conn->closed()) return nullptr;
  stats_.count(kind);
  return &it->second.conn->out();
}

void LockServer::reply_queued(locks::ClientId client) {
  auto it = clients_.find(client);
  if (it != clients_.end() && !it->second.conn->closed()) it->second.conn->reply_queued();
}

std::string* LockServer::push_buffer(locks::ClientId client) {
  auto it = clients_.find(client);
  if (it == clients_.end() || it->second.conn->closed()) return nullptr;
  return &it->second.conn->out();
}

void LockServer::push_queued(locks::ClientId client) { reply_queued(client); }

void LockServer::note_shared_grant(locks::Token token, std::string_view key) {
  const locks::KeyState* s = table_.find(key);
  const locks::Holder* h = s != nullptr ? s->holder_with(token) : nullptr;
  if (h != nullptr) note_shared_grant(token, key, h->expires_at_ns);
}

void LockServer::note_shared_grant(locks::Token token, std::string_view key, TimeNs expires_at_ns) {
  lost_heap_.push_back({expires_at_ns, token, locks::InlineString<24>(key)});
  std::push_heap(lost_heap_.begin(), lost_heap_.end(), LostLater{});
  compact_lost_if_needed();
}

void LockServer::compact_lost_if_needed() {
  // Entries of released tokens stay until they come up, and `K`s that move
  // a lease back and forth add more: when the heap doubles, rebuild it with
  // one entry per holding still to be told, at its end now (amortized O(1)
  // a push; the heap stays within twice the holdings).
  if (lost_heap_.size() < lost_compact_at_) return;
  std::erase_if(lost_heap_, [&](LostDeadline& d) {
    const locks::KeyState* s = table_.find(d.key.view());
    const locks::Holder* h = s != nullptr ? s->holder_with(d.token) : nullptr;
    if (h == nullptr || h->granted_to == 0) return true;
    d.at_ns = h->expires_at_ns;
    return false;
  });
  // One entry per token: sorted in place, so the rebuild needs no memory
  // beside the heap (a set of a million tokens would be ~40 MB for a moment).
  auto by_token = [](const LostDeadline& a, const LostDeadline& b) { return a.token < b.token; };
  std::sort(lost_heap_.begin(), lost_heap_.end(), by_token);
  lost_heap_.erase(std::unique(lost_heap_.begin(), lost_heap_.end(),
                               [](const LostDeadline& a, const LostDeadline& b) { return a.token == b.token; }),
                   lost_heap_.end());
  std::make_heap(lost_heap_.begin(), lost_heap_.end(), LostLater{});
  lost_compact_at_ = std::max<std::size_t>(4'096, 2 * lost_heap_.size());
}

void LockServer::lease_lost(locks::ClientId client, locks::Token token, std::string_view key) {
  if (std::string* out = push_buffer(client)) {
    proto::append_lost(*out, token, key);
    ++lost_notices_;
    push_queued(client);
  }
}

void LockServer::run_lost_notices(TimeNs now) {
  table_.run_lost_leases(now);
  while (!lost_heap_.empty() && lost_heap_.front().at_ns <= now) {
    std::pop_heap(lost_heap_.begin(), lost_heap_.end(), LostLater{});
    LostDeadline d = std::move(lost_heap_.back());
    lost_heap_.pop_back();
    const locks::KeyState* s = table_.find(d.key.view());
    const locks::Holder* h = s != nullptr ? s->holder_with(d.token) : nullptr;
    // Released, gone some other way, or already told: nothing to do.
    if (h == nullptr || h->granted_to == 0) continue;
    if (h->expires_at_ns > now) {  // a `K` moved the lease's end on
      d.at_ns = h->expires_at_ns;
      lost_heap_.push_back(std::move(d));
      std::push_heap(lost_heap_.begin(), lost_heap_.end(), LostLater{});
      continue;
    }
    // The lease has ended: that is decided (a `K` now answers `N`). The
    // holder stays registered until the sweep, a takeover or a hand-off
    // removes it (§8), which is when watchers see the key change. Told
    // once: the table forgets whom it was granted to.
    lease_lost(table_.take_granted_to(d.key.view(), d.token), d.token, d.key.view());
  }
}

void LockServer::on_deadline_timer() {
  armed_deadline_ns_.reset();
  const TimeNs now = net::monotonic_now_ns();
  // `X` first: a hand-off at lease end below removes the holder.
  run_lost_notices(now);
  deliveries_.clear();
  table_.advance(now, deliveries_);
  deliver(deliveries_);
}

void LockServer::on_sweep_timer() {
  if (sweeping_) return;  // the previous pass is still going (a huge table)
  sweeping_ = true;
  swept_in_pass_ = 0;
  run_sweep_slice();
}

void LockServer::run_sweep_slice() {
  // Buckets visited per loop turn: about a millisecond of cache misses, so
  // a sweep never adds more than that to any request's latency.
  constexpr std::size_t kSweepBucketsPerTurn = 4096;
  run_lost_notices(net::monotonic_now_ns());  // before the sweep removes a holder
  if (!table_.sweep_step(net::monotonic_now_ns(), kSweepBucketsPerTurn, swept_in_pass_)) {
    sweep_continue_.arm_after(0);
    return;
  }
  sweeping_ = false;
  if (swept_in_pass_ > 0) spdlog::debug("sweep freed {} expired keys", swept_in_pass_);
}

void LockServer::rearm_deadline_timer(TimeNs now) {
  std::optional<TimeNs> next = table_.next_deadline();
  if (!lost_heap_.empty() && (!next || lost_heap_.front().at_ns < *next)) {
    next = lost_heap_.front().at_ns;
  }
  if (const auto lost = table_.next_lost_check(); lost && (!next || *lost < *next)) next = lost;
  if (next == armed_deadline_ns_) return;
  armed_deadline_ns_ = next;
  if (next) {
    deadline_timer_.arm_at(*next, now);
  } else {
    deadline_timer_.cancel();
  }
}

void LockServer::answer_held_watches(TimeNs now) {
  std::size_t kept = 0;
  for (std::size_t i = 0; i < held_watches_.size(); ++i) {
    HeldWatch& h = held_watches_[i];
    auto it = clients_.find(h.client);
    if (it == clients_.end() || it->second.conn->closed()) continue;
    if (watches_.rev() == 0 && h.deadline_ns > now) {
      if (kept != i) held_watches_[kept] = std::move(h);  // never a self-move
      ++kept;
      continue;
    }
    std::string& out = it->second.conn->out();
    if (watches_.rev() == 0) {
      stats_.count(ReplyKind::kError);
      out.append("E no_leader ").append(h.key).push_back('\n');
    } else {
      const auto r = watches_.watch(h.client, h.key, table(), *this, out);
      stats_.count(r == WatchHub::WatchOutcome::kWatching ? ReplyKind::kWatching
                                                          : ReplyKind::kWatchBusy);
    }
    it->second.conn->reply_queued();
  }
  held_watches_.resize(kept);
  if (held_watches_.empty()) {
    held_watch_timer_.cancel();
  } else {
    held_watch_timer_.arm_after(std::max<TimeNs>(held_watches_.front().deadline_ns - now, 0));
  }
}

void LockServer::flush_replies() {
  if (!held_watches_.empty() && watches_.rev() != 0) answer_held_watches(net::monotonic_now_ns());
  watches_.flush(table(), *this);  // pushes go out with the turn's replies
  for (std::size_t i = 0; i < pending_writes_.size(); ++i) pending_writes_[i]->flush();
  pending_writes_.clear();
}

void LockServer::after_turn() {
  const bool timed = !shutting_down_ && service_ == nullptr;
  const TimeNs now = timed ? net::monotonic_now_ns() : 0;
  if (timed && armed_deadline_ns_ && now >= *armed_deadline_ns_) {
    // Due by the clock though the timerfd has not fired: the clock jumped
    // forward (libfaketime in the chaos runs) after the delay was set. Run
    // it now, as a libevent timer would at its next look, before this
    // turn's replies go out.
    on_deadline_timer();
  }
  // Flushing may close connections (peer gone), so flush before reaping.
  flush_replies();
  for (const std::uint64_t id : closed_) clients_.erase(id);
  closed_.clear();
  if (timed) rearm_deadline_timer(now);
}

void LockServer::begin_shutdown() {
  if (shutting_down_) return;
  shutting_down_ = true;
  listener_.close();
  deadline_timer_.cancel();
  handshake_timer_.cancel();
  handshake_deadlines_.clear();
  auth_timer_.cancel();
  sweep_timer_.cancel();
  sweep_continue_.cancel();
  held_watch_timer_.cancel();
  for (auto& [id, c] : clients_) c.conn->close_after_flush();
}

}  // namespace lockd::server
