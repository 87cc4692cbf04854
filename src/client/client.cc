#include "lockd/client/client.h"

#include <algorithm>
#include <thread>

#include "lockd/client/watch_session.h"

namespace lockd::client {

namespace {

// protocol.md §2: 1..512 bytes of 0x21..0x7E.
bool valid_credential(std::string_view c) {
  return !c.empty() && c.size() <= 512 &&
         std::all_of(c.begin(), c.end(), [](char ch) { return ch >= 0x21 && ch <= 0x7E; });
}

}  // namespace

Client::Client(Options options) : options_(std::move(options)) {
  for (const std::string& text : options_.addresses) {
    if (auto a = parse_address(text)) {
      addresses_.push_back(*a);
    } else {
      config_error_ = {Code::kInvalidArgument, "bad address '" + text + "' (want host:port)"};
    }
  }
  if (!options_.credential.empty() && !valid_credential(options_.credential)) {
    config_error_ = {Code::kInvalidArgument, "bad credential (want 1..512 visible ASCII bytes, no spaces)"};
  }
  if (addresses_.empty() && config_error_.ok()) {
    config_error_ = {Code::kInvalidArgument, "no address to connect to"};
  }
  rng_.seed(options_.jitter_seed != 0 ? options_.jitter_seed : std::random_device{}());
}

Client::~Client() { close(); }

void Client::close() {
  std::shared_ptr<Connection> conn;
  std::shared_ptr<WatchSession> watches;
  {
    const std::lock_guard lk(mu_);
    closed_ = true;
    conn = std::move(conn_);
    watches = watch_session_;  // kept: a later watch() ends at once
  }
  if (watches) watches->close({Code::kUnreachable, "the client is closed"});
  {
    const std::lock_guard klk(keepers_mu_);
    for (auto& [token, keeper] : keepers_) keeper->halt();
  }
  if (conn) conn->set_push_handler(nullptr);
}

std::unique_ptr<Watch> Client::watch(std::string_view key) { return watch(key, nullptr); }

std::unique_ptr<Watch> Client::watch(std::string_view key, OnState on_state) {
  std::shared_ptr<WatchSession> session;
  bool closed = false;
  {
    const std::lock_guard lk(mu_);
    if (!watch_session_) watch_session_ = std::make_shared<WatchSession>(options_);
    session = watch_session_;
    closed = closed_;
  }
  if (closed) session->close({Code::kUnreachable, "the client is closed"});
  return std::make_unique<Watch>(std::move(session), std::string(key), std::move(on_state));
}

bool Client::closed() const {
  const std::lock_guard lk(mu_);
  return closed_;
}

bool Client::add_keeper(std::uint64_t token, Keeper* keeper) {
  const std::lock_guard klk(keepers_mu_);
  keepers_.emplace(token, keeper);
  return true;
}

void Client::remove_keeper(std::uint64_t token, Keeper* keeper) {
  const std::lock_guard klk(keepers_mu_);
  auto [first, last] = keepers_.equal_range(token);
  for (auto it = first; it != last; ++it) {
    if (it->second == keeper) {
      keepers_.erase(it);
      return;
    }
  }
}

void Client::on_push(const Reply& push) {
  if (push.kind != ReplyKind::kLostNotice) return;  // `V` goes to watches' own connections
  const std::lock_guard klk(keepers_mu_);
  auto [first, last] = keepers_.equal_range(push.token);
  for (auto it = first; it != last; ++it) it->second->lost_notice();
}

std::string Client::identity() const {
  const std::lock_guard lk(mu_);
  return identity_;
}

std::size_t Client::index_of(const Address& address) {
  const auto it = std::find(addresses_.begin(), addresses_.end(), address);
  if (it != addresses_.end()) return static_cast<std::size_t>(it - addresses_.begin());
  addresses_.push_back(address);
  return addresses_.size() - 1;
}

std::chrono::milliseconds Client::jitter(std::chrono::milliseconds ceiling) {
  const std::lock_guard lk(mu_);
  const auto hi = std::max<std::int64_t>(ceiling.count(), 1);
  std::uniform_int_distribution<std::int64_t> d(hi / 2, hi);
  return std::chrono::milliseconds(d(rng_));
}

Result<std::shared_ptr<Connection>> Client::connection_to(std::size_t target) {
  const std::lock_guard lk(mu_);
  if (closed_) return Status{Code::kUnreachable, "the client is closed"};
  const Address address = addresses_[target];
  if (conn_ && !conn_->broken() && conn_->address() == address) return conn_;
  // Connecting under the lock: the other threads want the same
  // connection, and would otherwise race to open several.
  auto opened = Connection::open(address, options_.connect_timeout, options_.credential, options_.tls);
  if (!opened.ok()) return opened.status();
  conn_ = std::shared_ptr<Connection>(std::move(opened.value()));
  // `X` pushes reach the keepers of this client (§5c). The connection
  // never outlives the client's use of it: calls end before ~Client.
  conn_->set_push_handler([this](const Reply& push) { on_push(push); });
  if (!conn_->identity().empty()) identity_ = conn_->identity();
  current_ = target;
  return conn_;
}

Result<Reply> Client::call(const Request& original, Clock::time_point deadline) {
  const auto call_start = Clock::now();
  Request request = original;  // its wait shrinks if it had to queue (below)
  if (!config_error_.ok()) return config_error_;
  if (Status s = validate(request); !s.ok()) return s;
  if (closed()) return Status{Code::kUnreachable, "the client is closed"};
  const auto budget_end = std::min(Clock::now() + options_.no_leader_budget, deadline);
  auto backoff = options_.backoff_initial;
  std::size_t target = 0;
  std::size_t count = 0;
  {
    const std::lock_guard lk(mu_);
    target = current_;
    count = addresses_.size();
  }
  int redirects = 0;
  bool redirected = false;  // `target` is the leader named by the last `M`
  std::size_t unreachable_in_a_row = 0;
  int stale = 0;  // connections found closed before sending
  Status last;
  // Sleeps before the next try, or says the budget is spent.
  const auto back_off = [&]() {
    const auto pause = jitter(backoff);
    backoff = std::min(backoff * 2, options_.backoff_max);
    if (Clock::now() + pause >= budget_end) return false;
    std::this_thread::sleep_for(pause);
    return true;
  };
  for (;;) {
    auto conn = connection_to(target);
    if (!conn.ok() && (conn.code() == Code::kUnauthenticated || conn.code() == Code::kProtocol ||
                       conn.code() == Code::kInvalidArgument)) {
      return conn.status();  // the credential refused, or a TLS file: another node changes nothing
    }
    if (!conn.ok()) {
      // Not sent: safe to try the next node. A whole round of unreachable
      // nodes ends the call (the caller, or a Keeper, decides when to retry).
      last = conn.status();
      {
        const std::lock_guard lk(mu_);
        count = addresses_.size();
      }
      target = (target + 1) % count;
      if (redirected) {
        // The leader an `M` named is down (killed a moment ago: its
        // followers name it until their election timeout). That is no
        // leader for now: back off within the budget, like `E no_leader`,
        // and ask another node, instead of spending the redirect hops.
        redirected = false;
        last = {Code::kNoLeader, "the leader named by M cannot be reached (" + last.message + ")"};
        if (!back_off()) return last;
        redirects = 0;
        continue;
      }
      if (++unreachable_in_a_row >= count) return last;
      continue;
    }
    auto ticket = conn.value()->submit(request);
    if (!ticket.ok() && ticket.code() == Code::kInFlight) {
      // An acquire of the same owner and key is in flight on this
      // connection (another thread sharing the owner): their replies could
      // not be told apart, so this one waits in the client until that one
      // is answered, then goes out with the wait it has left — never a
      // restarted wait (the same answer as the Python and Go clients).
      const auto slot_by =
          std::min(call_start + std::chrono::milliseconds(original.wait_ms) + options_.reply_timeout,
                   deadline);
      if (!conn.value()->await_acquire_slot(request.owner, request.key, slot_by)) {
        if (conn.value()->broken()) continue;  // not sent: over a new connection
        return Status{Code::kTimedOut,
                      "an earlier acquire of this owner and key on the connection was still "
                      "unanswered when the wait ran out (not sent)"};
      }
      if (original.wait_ms > 0) {
        const auto spent = std::chrono::duration_cast<std::chrono::milliseconds>(
                               Clock::now() - call_start).count();
        if (spent >= static_cast<long long>(original.wait_ms)) {
          return Status{Code::kTimedOut,
                        "the wait ran out behind an earlier acquire of this owner and key (not sent)"};
        }
        request.wait_ms = original.wait_ms - static_cast<std::uint64_t>(spent);
      }
      continue;
    }
    if (!ticket.ok()) {
      if (ticket.code() != Code::kUnreachable) return ticket.status();
      // The connection broke before sending (the node closed it while it
      // was idle: restarted or killed): reconnect. Only the reconnect
      // counts toward a round of unreachable nodes; this is bounded apart
      // (a node that closes every connection at once).
      last = ticket.status();
      if (++stale > 3) return last;
      continue;
    }
    const auto reply_by = std::min(
        Clock::now() + std::chrono::milliseconds(request.wait_ms) + options_.reply_timeout, deadline);
    auto reply = conn.value()->wait(ticket.value(), reply_by);
    if (!reply.ok()) {
      // No reply (a paused, partitioned or dead node): the outcome is
      // unknown, so this request is not resent, but the next one goes to
      // the next node rather than to the same silent one (a follower
      // sends it back with `M` if this node still leads).
      const std::lock_guard lk(mu_);
      if (current_ == target) current_ = (target + 1) % addresses_.size();
      return reply.status();
    }
    unreachable_in_a_row = 0;
    redirected = false;
    Reply& r = reply.value();
    if (r.kind == ReplyKind::kMoved) {
      const auto leader = parse_address(r.leader);
      if (!leader) return Status{Code::kProtocol, "M names a bad leader address: " + r.leader};
      if (++redirects > options_.max_redirects) {
        return Status{Code::kNoLeader, "more than " + std::to_string(options_.max_redirects) +
                                           " redirects (last to " + r.leader + ")"};
      }
      const std::lock_guard lk(mu_);
      target = index_of(*leader);
      redirected = true;
      continue;
    }
    if (r.kind == ReplyKind::kError) {
      if (r.error_code == "no_leader") {
        last = {Code::kNoLeader, "no leader known (retried for " +
                                     std::to_string(options_.no_leader_budget.count()) + " ms)"};
        if (!back_off()) return last;
        const std::lock_guard lk(mu_);
        target = (target + 1) % addresses_.size();  // another node may know one
        redirects = 0;
        continue;
      }
      if (r.error_code == "limit_mismatch") {
        return Status{Code::kLimitMismatch,
                      "the key is shared with another limit (its holders and waiters carry it)"};
      }
      if (r.error_code == "indeterminate") {
        return Status{Code::kIndeterminate,
                      "the leader lost leadership before the request committed; it may or may "
                      "not have taken effect"};
      }
      if (r.error_code == "unauthenticated") {
        return Status{Code::kUnauthenticated, "the server wants a credential (Options::credential)"};
      }
      if (r.error_code == "forbidden") {
        return Status{Code::kForbidden, "the ACL does not allow this request on " + request.key};
      }
      return Status{Code::kRejected, "the server answered E " + r.error_code};
    }
    return reply;
  }
}

Result<Lock> Client::acquire(std::string_view owner, std::string_view key, std::uint64_t lease_ms,
                             std::uint64_t wait_ms) {
  Request req;
  req.verb = Verb::kAcquire;
  req.owner = owner;
  req.key = key;
  req.lease_ms = lease_ms;
  req.wait_ms = wait_ms;
  return finish_acquire(req, Clock::now());
}

Result<Lock> Client::acquire_shared(std::string_view owner, std::string_view key,
                                   std::uint32_t limit, std::uint64_t lease_ms,
                                   std::uint64_t wait_ms) {
  Request req;
  req.verb = Verb::kShared;
  req.owner = owner;
  req.key = key;
  req.limit = limit;
  req.lease_ms = lease_ms;
  req.wait_ms = wait_ms;
  return finish_acquire(req, Clock::now());
}

Result<Lock> Client::finish_acquire(const Request& req, Clock::time_point sent_at) {
  auto reply = call(req);
  const auto arrived = Clock::now();
  if (!reply.ok()) return reply.status();
  const bool shared = req.verb == Verb::kShared;
  const ReplyKind want = shared ? ReplyKind::kShared : ReplyKind::kAcquired;
  if (reply->kind == want) {
    Lock lock{reply->token, req.owner, req.key, req.lease_ms, sent_at, arrived, req.wait_ms};
    lock.shared = shared;
    lock.limit = shared ? req.limit : 0;
    return lock;
  }
  switch (reply->kind) {
    case ReplyKind::kTimedOut:
      if (shared) {
        return Status{Code::kTimedOut,
                      req.wait_ms == 0 ? "held exclusively, full, or someone is queued first"
                                       : "not granted before the wait ran out"};
      }
      return Status{Code::kTimedOut, req.wait_ms == 0 ? "held by someone else"
                                                      : "still held when the wait ran out"};
    case ReplyKind::kBusy:
      return Status{Code::kBusy, "the key's wait queue or a server cap is full"};
    default:
      return Status{Code::kProtocol, shared ? "unexpected reply kind to a shared acquire"
                                            : "unexpected reply kind to an acquire"};
  }
}

Status Client::release(const Lock& lock) { return release(lock.token, lock.key); }

Status Client::release(std::uint64_t token, std::string_view key) {
  Request req;
  req.verb = Verb::kRelease;
  req.token = token;
  req.key = key;
  auto reply = call(req);
  if (!reply.ok()) return reply.status();
  if (reply->kind == ReplyKind::kReleased) return Status::Ok();
  if (reply->kind == ReplyKind::kNotHeld) {
    return {Code::kNotHeld, "the token does not hold the key (lease ended or released)"};
  }
  return {Code::kProtocol, "unexpected reply kind to a release"};
}

Status Client::keep(const Lock& lock, std::uint64_t lease_ms) {
  return keep(lock.token, lock.key, lease_ms);
}

Status Client::keep(std::uint64_t token, std::string_view key, std::uint64_t lease_ms) {
  Request req;
  req.verb = Verb::kKeep;
  req.token = token;
  req.key = key;
  req.lease_ms = lease_ms;
  auto reply = call(req);
  if (!reply.ok()) return reply.status();
  if (reply->kind == ReplyKind::kKept) return Status::Ok();
  if (reply->kind == ReplyKind::kNotHeld) {
    return {Code::kNotHeld, "the lease already ended or the token no longer holds the key"};
  }
  return {Code::kProtocol, "unexpected reply kind to a keep"};
}

Result<LockGuard> Client::lock(std::string_view owner, std::string_view key, LockOptions options) {
  if (options.lease_ms == 0) {
    return Status{Code::kInvalidArgument, "lock() needs lease_ms >= 1"};
  }
  auto acquired = acquire(owner, key, options.lease_ms, options.wait_ms);
  return guard(std::move(acquired), std::move(options));
}

Result<SharedGuard> Client::lock_shared(std::string_view owner, std::string_view key,
                                        LockOptions options) {
  return lock_shared(owner, key, 0, std::move(options));
}

Result<SharedGuard> Client::lock_shared(std::string_view owner, std::string_view key,
                                        std::uint32_t limit, LockOptions options) {
  if (options.lease_ms == 0) {
    return Status{Code::kInvalidArgument, "lock_shared() needs lease_ms >= 1"};
  }
  auto acquired = acquire_shared(owner, key, limit, options.lease_ms, options.wait_ms);
  auto g = guard(std::move(acquired), std::move(options));
  if (!g.ok()) return g.status();
  return SharedGuard(std::move(g.value()));
}

Result<LockGuard> Client::guard(Result<Lock> acquired, LockOptions options) {
  if (!acquired.ok()) return acquired.status();
  std::unique_ptr<Keeper> keeper;
  if (options.keep) {
    keeper = std::make_unique<Keeper>(*this, acquired.value(), std::move(options.on_lost));
  }
  return LockGuard(*this, std::move(acquired.value()), std::move(keeper));
}

}  // namespace lockd::client
