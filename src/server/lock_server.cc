#include "lockd/server/lock_server.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <variant>

#include "lockd/common/check.h"
#include "lockd/net/clock.h"
#include "lockd/proto/reply.h"

namespace lockd::server {

LockServer::LockServer(event_base* base, const ServerConfig& config, locks::Token first_token,
                       LockService* service)
    : base_(base),
      config_(config),
      service_(service),
      table_(config.locks, first_token),
      listener_(base, [this](int fd) { accept(fd); }),
      deadline_timer_(base, [this] { on_deadline_timer(); }),
      handshake_timer_(base, [this] { on_handshake_timer(); }),
      sweep_timer_(base, [this] { on_sweep_timer(); }),
      sweep_continue_(base, [this] { run_sweep_slice(); }),
      next_conn_id_(config.first_client_id),
      watches_(config.watches, service != nullptr) {
  if (service_ != nullptr) {
    service_->attach(*this);
    service_->attach_watches(watches_, *this);
    return;  // the service owns every deadline; there is nothing to sweep here
  }
  table_.set_observer(&watches_);
  sweep_timer_.arm_every(config_.sweep_interval_ns);
}

LockServer::~LockServer() = default;

bool LockServer::listen(const net::Endpoint& ep, std::string& error) {
  return listener_.listen(ep, error);
}

void LockServer::accept(int fd) {
  if (shutting_down_ || clients_.size() >= config_.max_connections) {
    ++stats_.connections_rejected;
    ::close(fd);
    return;
  }
  ++stats_.connections_accepted;
  const std::uint64_t id = next_conn_id_++;
  Client& c = clients_[id];
  c.conn = std::make_unique<net::Connection>(
      base_, fd, id, *this, config_.output,
      tls_ != nullptr ? tls::TlsSession::accept(*tls_) : nullptr);
  if (tls_ != nullptr) {
    handshake_deadlines_.emplace_back(net::monotonic_now_ns() + config_.tls_handshake_timeout_ns, id);
    if (!handshake_timer_.armed()) handshake_timer_.arm_after(config_.tls_handshake_timeout_ns);
  }
}

void LockServer::on_handshake_timer() {
  const TimeNs now = net::monotonic_now_ns();
  while (!handshake_deadlines_.empty() && handshake_deadlines_.front().first <= now) {
    const std::uint64_t id = handshake_deadlines_.front().second;
    handshake_deadlines_.pop_front();
    auto it = clients_.find(id);
    if (it == clients_.end() || it->second.conn->closed()) continue;
    net::Connection& conn = *it->second.conn;
    if (conn.tls() == nullptr || conn.tls()->handshake_done()) continue;
    ++stats_.tls_handshake_timeouts;
    spdlog::debug("client connection {}: TLS handshake not done in {} ms, closing", id,
                  config_.tls_handshake_timeout_ns / kNsPerMs);
    conn.close();
  }
  if (!handshake_deadlines_.empty()) {
    handshake_timer_.arm_after(handshake_deadlines_.front().first - now);
  }
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
  if (!lost_heap_.empty() && lost_heap_.front().at_ns <= now) run_lost_notices(now);
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
      } else {
        stats_.recent_keys.record(req->key);
        answered = !admitted(client, *req) || handle_request(client, *req, now);
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
      proto::append_error(conn.out(), *err);
      answered = true;
    }
    const TimeNs end_ns = net::monotonic_now_ns();
    if (answered) stats_.latency.record(end_ns - start_ns);
    start_ns = end_ns;
    if (conn.closed()) return;  // overflowed while delivering
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
  client.authenticated = true;
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
      // Cluster: nothing of the group applied here yet, so no state to show
      // (§5c: rev is never 0). The client retries, here or elsewhere.
      stats_.count(ReplyKind::kError);
      proto::append_error_echo(out, "no_leader", req);
      return true;
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
        note_grant(client.conn->id(), r.token, req.key);
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
    if (table_.keep(now, req.token, req.key, req.lease_ms) == locks::KeepOutcome::kKept) {
      if (granted_by_.contains(req.token)) {
        // The lease may now end earlier than the entry armed for it.
        const locks::Holder* h = table_.find(req.key)->holder_with(req.token);
        lost_heap_.push_back({h->expires_at_ns, req.token, std::string(req.key)});
        std::push_heap(lost_heap_.begin(), lost_heap_.end(), LostLater{});
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
    granted_by_.erase(req.token);  // no `X` for a release
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
      if (service_ == nullptr) note_grant(d.client, d.token, d.key);
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
  if (auth_ == nullptr || !auth_->required()) return;
  const auto& cert = conn.tls()->peer_certificate();
  if (!cert) return;
  auto it = clients_.find(conn.id());
  LOCKD_CHECK(it != clients_.end());
  if (std::optional<std::string> identity = auth_->by_certificate(*cert)) {
    it->second.identity = std::move(*identity);
    it->second.authenticated = true;
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

void LockServer::note_grant(locks::ClientId client, locks::Token token, std::string_view key) {
  const locks::KeyState* s = table_.find(key);
  const locks::Holder* h = s != nullptr ? s->holder_with(token) : nullptr;
  if (h == nullptr) return;
  granted_by_.emplace(token, client);
  lost_heap_.push_back({h->expires_at_ns, token, std::string(key)});
  std::push_heap(lost_heap_.begin(), lost_heap_.end(), LostLater{});
  compact_lost_if_needed();
}

void LockServer::compact_lost_if_needed() {
  // Entries of released tokens stay until they come up; when they are
  // most of the heap, drop them in one pass (amortized O(1) a grant).
  if (lost_heap_.size() < lost_compact_at_) return;
  std::erase_if(lost_heap_, [this](const LostDeadline& d) {
    if (!granted_by_.contains(d.token)) return true;
    const locks::KeyState* s = table_.find(d.key);
    const locks::Holder* h = s != nullptr ? s->holder_with(d.token) : nullptr;
    return h == nullptr || h->expires_at_ns != d.at_ns;
  });
  std::make_heap(lost_heap_.begin(), lost_heap_.end(), LostLater{});
  lost_compact_at_ = std::max<std::size_t>(4'096, 2 * lost_heap_.size());
}

void LockServer::run_lost_notices(TimeNs now) {
  while (!lost_heap_.empty() && lost_heap_.front().at_ns <= now) {
    std::pop_heap(lost_heap_.begin(), lost_heap_.end(), LostLater{});
    LostDeadline d = std::move(lost_heap_.back());
    lost_heap_.pop_back();
    auto g = granted_by_.find(d.token);
    if (g == granted_by_.end()) continue;  // released, or already told
    const locks::KeyState* s = table_.find(d.key);
    const locks::Holder* h = s != nullptr ? s->holder_with(d.token) : nullptr;
    if (h == nullptr) {
      granted_by_.erase(g);  // gone some other way: nobody to tell
      continue;
    }
    // A `K` moved the lease on: the entry it armed comes up then.
    if (h->expires_at_ns > now) continue;
    const locks::ClientId client = g->second;
    granted_by_.erase(g);
    // The lease has ended: that is decided (a `K` now answers `N`). The
    // holder stays registered until the sweep, a takeover or a hand-off
    // removes it (§8), which is when watchers see the key change.
    if (std::string* out = push_buffer(client)) {
      proto::append_lost(*out, d.token, d.key);
      ++lost_notices_;
      push_queued(client);
    }
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
  if (next == armed_deadline_ns_) return;
  armed_deadline_ns_ = next;
  if (next) {
    deadline_timer_.arm_after(*next - now);
  } else {
    deadline_timer_.cancel();
  }
}

void LockServer::flush_replies() {
  watches_.flush(table(), *this);  // pushes go out with the turn's replies
  for (std::size_t i = 0; i < pending_writes_.size(); ++i) pending_writes_[i]->flush();
  pending_writes_.clear();
}

void LockServer::after_turn() {
  // Flushing may close connections (peer gone), so flush before reaping.
  flush_replies();
  for (const std::uint64_t id : closed_) clients_.erase(id);
  closed_.clear();
  if (!shutting_down_ && service_ == nullptr) rearm_deadline_timer(net::monotonic_now_ns());
}

void LockServer::begin_shutdown() {
  if (shutting_down_) return;
  shutting_down_ = true;
  listener_.close();
  deadline_timer_.cancel();
  handshake_timer_.cancel();
  handshake_deadlines_.clear();
  sweep_timer_.cancel();
  sweep_continue_.cancel();
  for (auto& [id, c] : clients_) c.conn->close_after_flush();
}

}  // namespace lockd::server
