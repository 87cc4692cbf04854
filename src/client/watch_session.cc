#include "lockd/client/watch_session.h"

#include <algorithm>
#include <optional>
#include <random>

#include "lockd/client/client.h"
#include "lockd/client/watch.h"

namespace lockd::client {

namespace {

constexpr auto kFirstPause = std::chrono::milliseconds(50);
constexpr auto kMaxPause = std::chrono::milliseconds(1000);
// How often an idle session looks whether its connection ended.
constexpr auto kIdleLook = std::chrono::milliseconds(50);

// A refusal of `W` that asking again (here or on another node) cannot
// change: the key's Watches end with it.
Status final_refusal(const Reply& reply, const std::string& key) {
  if (reply.kind == ReplyKind::kBusy) {
    return {Code::kBusy, "the server's watch limit is reached (per connection or per server)"};
  }
  if (reply.kind != ReplyKind::kError) return Status::Ok();
  if (reply.error_code == "forbidden") return {Code::kForbidden, "the ACL does not allow W on " + key};
  if (reply.error_code == "unauthenticated") {
    return {Code::kUnauthenticated, "the server wants a credential to watch"};
  }
  if (reply.error_code == "unknown_command") {
    return {Code::kRejected, "the server does not know W (older than protocol v1.3)"};
  }
  return Status::Ok();
}

}  // namespace

WatchSession::WatchSession(const Options& options)
    : connect_timeout_(options.connect_timeout),
      reply_timeout_(options.reply_timeout),
      credential_(options.credential),
      tls_(options.tls) {
  for (const std::string& text : options.addresses) {
    if (auto a = parse_address(text)) addresses_.push_back(*a);
  }
  if (addresses_.empty()) {
    closed_ = true;
    end_ = {Code::kInvalidArgument, "no valid address to watch from"};
    return;
  }
  thread_ = std::thread([this] { run(); });
}

WatchSession::~WatchSession() { close({Code::kUnreachable, "the watch session is closed"}); }

void WatchSession::add(Watch* watch) {
  {
    const std::lock_guard lk(mu_);
    if (closed_ || !end_.ok()) {
      watch->end(end_);
      return;
    }
    watches_[watch->key()].push_back(watch);
    fresh_.insert(watch->key());
    dirty_.insert(watch->key());
    if (watch->has_on_state() && !deliverer_.joinable()) deliverer_ = std::thread([this] { deliver(); });
  }
  cv_.notify_all();
}

void WatchSession::remove(Watch* watch) {
  {
    std::unique_lock lk(mu_);
    if (watch->ready_) {
      std::erase(ready_, watch);
      watch->ready_ = false;
    }
    // Its OnState running on the delivering thread: no call after this
    // returns (from within that call: it is the last, as the watch stops).
    if (delivering_ == watch && std::this_thread::get_id() != deliverer_.get_id()) {
      deliver_cv_.wait(lk, [&] { return delivering_ != watch; });
    }
    auto it = watches_.find(watch->key());
    if (it == watches_.end()) return;
    auto& list = it->second;
    const auto w = std::find(list.begin(), list.end(), watch);
    if (w == list.end()) return;
    list.erase(w);
    if (!list.empty()) return;
    watches_.erase(it);
    dirty_.insert(watch->key());  // the next batch sends U if the server watches it
  }
  cv_.notify_all();
}

void WatchSession::close(const Status& why) {
  {
    const std::lock_guard lk(mu_);
    if (!closed_) {
      closed_ = true;
      if (end_.ok()) end_ = why;
      end_all(end_);
      if (conn_) conn_->shut_down();  // ends a wait() for a batch's replies
    }
  }
  cv_.notify_all();
  deliver_cv_.notify_all();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
  // After the ends are handed over (OnState watches hear of the close).
  if (deliverer_.joinable() && deliverer_.get_id() != std::this_thread::get_id()) deliverer_.join();
}

std::uint64_t WatchSession::connections() const {
  const std::lock_guard lk(mu_);
  return connections_;
}

std::size_t WatchSession::watched_keys() const {
  const std::lock_guard lk(mu_);
  return watched_.size();
}

void WatchSession::end_key(const std::string& key, const Status& why) {
  auto it = watches_.find(key);
  if (it == watches_.end()) return;
  for (Watch* w : it->second) {
    w->end(why);
    if (w->has_on_state()) ready(w);
  }
  watches_.erase(it);
  fresh_.erase(key);
}

void WatchSession::end_all(const Status& why) {
  for (auto& [key, list] : watches_) {
    for (Watch* w : list) {
      w->end(why);
      if (w->has_on_state()) ready(w);
    }
  }
  watches_.clear();
  fresh_.clear();
  dirty_.clear();
}

void WatchSession::on_push(const Reply& push) {
  if (push.kind != ReplyKind::kChanged) return;
  // Offered under mu_: remove() cannot return while a Watch is being
  // offered to, so none is reached after it stopped.
  const std::lock_guard lk(mu_);
  auto it = watches_.find(push.key);
  if (it == watches_.end()) return;
  for (Watch* w : it->second) offer_to(w, push.rev, push.state);
}

void WatchSession::offer_to(Watch* watch, std::uint64_t rev, const KeyState& state) {
  if (watch->offer(rev, state) && watch->has_on_state()) ready(watch);
}

void WatchSession::ready(Watch* watch) {
  if (watch->ready_) return;
  watch->ready_ = true;
  ready_.push_back(watch);
  deliver_cv_.notify_all();
}

void WatchSession::deliver() {
  std::unique_lock lk(mu_);
  for (;;) {
    deliver_cv_.wait(lk, [&] { return closed_ || !ready_.empty(); });
    if (ready_.empty()) return;  // closed, every end handed over
    Watch* w = ready_.front();
    ready_.pop_front();
    w->ready_ = false;
    delivering_ = w;
    lk.unlock();
    // Everything it has now; what comes meanwhile queues it again. remove()
    // waits for this loop, so `w` lives through it.
    while (auto item = w->take()) w->on_state_(*item);
    lk.lock();
    delivering_ = nullptr;
    deliver_cv_.notify_all();
  }
}

bool WatchSession::send_batch(std::unique_lock<std::mutex>& lk) {
  struct Item {
    std::string key;
    bool watch;  // W, else U
    Connection::Ticket ticket = 0;
    std::optional<Result<Reply>> reply{};
  };
  std::vector<Item> batch;
  for (const std::string& key : dirty_) {
    if (watches_.contains(key)) {
      if (fresh_.erase(key) > 0) batch.push_back({key, true});
    } else if (watched_.erase(key) > 0) {
      batch.push_back({key, false});  // the server stops pushing it now
    }
  }
  dirty_.clear();
  if (batch.empty()) return true;
  std::shared_ptr<Connection> conn = conn_;
  lk.unlock();
  // Pipelined: every request out, then the replies, in order.
  std::size_t sent = 0;
  for (Item& item : batch) {
    Request r;
    r.verb = item.watch ? Verb::kWatch : Verb::kUnwatch;
    r.key = item.key;
    auto t = conn->submit(r);
    if (!t.ok()) break;
    item.ticket = t.value();
    ++sent;
  }
  for (std::size_t i = 0; i < sent; ++i) {
    batch[i].reply.emplace(conn->wait(batch[i].ticket, Clock::now() + reply_timeout_));
  }
  lk.lock();
  bool good = sent == batch.size();
  for (std::size_t i = 0; i < batch.size(); ++i) {
    Item& item = batch[i];
    if (!item.watch) continue;  // U's reply says nothing new
    if (i >= sent || !item.reply->ok()) {
      // Not sent or not answered: watched again on the next connection.
      good = false;
      continue;
    }
    const Reply& reply = item.reply->value();
    if (reply.kind == ReplyKind::kWatching) {
      watched_.insert(item.key);
      auto it = watches_.find(item.key);
      if (it == watches_.end()) {
        dirty_.insert(item.key);  // every Watch of it stopped meanwhile: U next
        continue;
      }
      for (Watch* w : it->second) offer_to(w, reply.rev, reply.state);
      continue;
    }
    if (Status end = final_refusal(reply, item.key); !end.ok()) {
      end_key(item.key, end);
      continue;
    }
    // `E no_leader` (a member that has applied nothing yet) or anything
    // else: this node cannot serve the key now; another one may.
    good = false;
  }
  return good;
}

void WatchSession::run() {
  std::mt19937_64 rng{std::random_device{}()};
  std::size_t target = 0;
  auto pause = kFirstPause;
  std::unique_lock lk(mu_);
  // Sleeps up to `pause` (jittered, so sessions that failed together do not
  // retry together), or until close(); the next pause is longer.
  const auto rest = [&] {
    std::uniform_int_distribution<std::int64_t> dist(pause.count() / 2, pause.count());
    cv_.wait_for(lk, std::chrono::milliseconds(dist(rng)), [&] { return closed_; });
    pause = std::min(pause * 2, kMaxPause);
  };
  // Drops the connection (its watches end at the server with it).
  const auto drop = [&] {
    std::shared_ptr<Connection> old = std::move(conn_);
    watched_.clear();
    drop_conn_ = false;
    lk.unlock();
    old->set_push_handler(nullptr);  // waits for a push being handed out
    old.reset();
    lk.lock();
  };
  while (!closed_) {
    if (conn_ && (drop_conn_ || conn_->broken())) {
      drop();
      rest();
      continue;
    }
    if (!conn_) {
      if (watches_.empty()) {
        cv_.wait(lk, [&] { return closed_ || !watches_.empty(); });
        continue;
      }
      const Address address = addresses_[target];
      target = (target + 1) % addresses_.size();
      lk.unlock();
      auto opened = Connection::open(address, connect_timeout_, credential_, tls_);
      std::shared_ptr<Connection> conn;
      if (opened.ok()) {
        conn = std::move(opened.value());
        conn->set_push_handler([this](const Reply& push) { on_push(push); });
      }
      lk.lock();
      if (closed_) break;
      if (!opened.ok()) {
        if (opened.code() == Code::kUnauthenticated || opened.code() == Code::kInvalidArgument) {
          // Every node shares the credentials and the TLS files: no other
          // node answers differently.
          end_ = opened.status();
          end_all(end_);
          continue;
        }
        rest();
        continue;
      }
      conn_ = std::move(conn);
      ++connections_;
      // Every key is watched again; its Watches drop what is not newer.
      for (const auto& [key, list] : watches_) {
        fresh_.insert(key);
        dirty_.insert(key);
      }
      continue;
    }
    if (dirty_.empty()) {
      cv_.wait_for(lk, kIdleLook, [&] { return closed_ || !dirty_.empty(); });
      continue;
    }
    if (send_batch(lk)) {
      pause = kFirstPause;
    } else {
      drop_conn_ = true;
      for (const auto& [key, list] : watches_) fresh_.insert(key);
    }
  }
  if (conn_) drop();
}

}  // namespace lockd::client
