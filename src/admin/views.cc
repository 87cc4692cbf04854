#include "lockd/admin/views.h"

#include <algorithm>
#include <unordered_map>
#include <nlohmann/json.hpp>

#include "lockd/server/lock_server.h"

namespace lockd::admin {

using json = nlohmann::ordered_json;

namespace {

// The time a holder got its lease.
TimeNs granted_at_ns(const locks::Holder& h) { return h.expires_at_ns - ms_to_ns(h.lease_ms); }

const char* mode_name(bool shared) { return shared ? "shared" : "exclusive"; }

// A key's holders, oldest grant first, at most `max` of them.
// `tokens` false: every `token` is null (§11a: tokens are shown only to
// an identity that may R the key).
json holders_json(const locks::KeyState& s, TimeNs now_ns, std::size_t max, bool tokens) {
  json out = json::array();
  s.for_each_holder([&](const locks::Holder& h) {
    if (out.size() >= max) return;
    out.push_back(json{{"owner", h.owner.view()},
                       {"token", tokens ? json(h.token) : json(nullptr)},
                       {"expires_in_ms", ms_until(h.expires_at_ns, now_ns)}});
  });
  return out;
}

// The fields every lock view shares (v1.2): the oldest holder's owner,
// token and expiry, the mode, the limit of a shared key, and its holders.
void put_holders(json& j, const locks::KeyState& s, TimeNs now_ns, std::size_t max_listed,
                 bool tokens) {
  const locks::Holder& oldest = s.oldest();
  j["owner"] = oldest.owner.view();
  j["token"] = tokens ? json(oldest.token) : json(nullptr);
  j["expires_in_ms"] = ms_until(oldest.expires_at_ns, now_ns);
  j["mode"] = mode_name(s.shared());
  if (s.shared()) j["limit"] = s.limit();
  j["holder_count"] = s.holder_count();
  j["holders"] = holders_json(s, now_ns, max_listed, tokens);
}

std::int64_t floor_div(std::int64_t a, std::int64_t b) {
  const std::int64_t q = a / b;
  return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

json requests_json(const server::ServerStats& st) {
  return json{
      {"A", st.requests_acquire},
      {"R", st.requests_release},
      {"K", st.requests_keep},
      {"S", st.requests_shared},
      {"invalid", st.requests_malformed + st.lines_too_long},
  };
}

json replies_json(const server::ServerStats& st) {
  using server::ReplyKind;
  const auto r = [&st](ReplyKind k) { return st.replies[static_cast<std::size_t>(k)]; };
  return json{{"A", r(ReplyKind::kAcquired)},   {"T", r(ReplyKind::kHeld)},
              {"B", r(ReplyKind::kBusy)},       {"R", r(ReplyKind::kReleased)},
              {"N", r(ReplyKind::kNotReleased) + r(ReplyKind::kNotKept)},
              {"K", r(ReplyKind::kKept)},       {"E", r(ReplyKind::kError)},
              {"M", r(ReplyKind::kMoved)},      {"H", r(ReplyKind::kHello)},
              {"S", r(ReplyKind::kShared)},     {"T_to_S", r(ReplyKind::kSharedHeld)},
              {"B_to_S", r(ReplyKind::kSharedBusy)}, {"W", r(ReplyKind::kWatching)},
              {"B_to_W", r(ReplyKind::kWatchBusy)}, {"U", r(ReplyKind::kUnwatched)}};
}

// Keeps the `limit` smallest elements of `heap` (a max-heap under `less`).
template <typename T, typename Less>
void keep_smallest(std::vector<T>& heap, std::size_t limit, T v, Less less) {
  if (limit == 0) return;
  if (heap.size() < limit) {
    heap.push_back(std::move(v));
    std::push_heap(heap.begin(), heap.end(), less);
  } else if (less(v, heap.front())) {
    std::pop_heap(heap.begin(), heap.end(), less);
    heap.back() = std::move(v);
    std::push_heap(heap.begin(), heap.end(), less);
  }
}

}  // namespace

bool node_ready(const NodeInfo& node, TimeNs now_ns) {
  if (!node.cluster) return true;
  const ClusterStatus c = node.cluster(now_ns);
  return c.role == "leader" ? c.serving : !c.leader_addr.empty();
}

TimeNs table_time(const NodeInfo& node, TimeNs now_ns) {
  return node.table_now ? node.table_now(now_ns) : now_ns;
}

std::int64_t ms_until(TimeNs at_ns, TimeNs now_ns) { return floor_div(at_ns - now_ns, kNsPerMs); }

std::size_t count_holders(const locks::LockTable& table, TimeNs now_ns) {
  std::size_t n = 0;
  table.for_each([&](std::string_view, const locks::KeyState& s) {
    s.for_each_holder([&](const locks::Holder& h) { n += h.expires_at_ns > now_ns ? 1 : 0; });
  });
  return n;
}

std::size_t holders_bounded(const locks::LockTable& table, TimeNs now_ns, bool& exact) {
  exact = table.key_count() <= kExactHoldersMaxKeys;
  return exact ? count_holders(table, now_ns) : table.holder_count();
}

json cluster_json(const ClusterStatus& c) {
  json members = json::array();
  for (const ClusterMember& m : c.members) {
    members.push_back(json{
        {"id", m.id},
        {"client_addr", m.client_addr},
        {"raft_addr", m.raft_addr},
        {"role", m.role},
        {"voter", m.voter},
        {"match_index", m.match_index ? json(*m.match_index) : json(nullptr)},
        {"last_contact_ms", m.last_contact_ms ? json(*m.last_contact_ms) : json(nullptr)},
        {"link", m.link_up ? json(*m.link_up ? "up" : "down") : json(nullptr)},
        {"last_heard_ms", m.last_heard_ms ? json(*m.last_heard_ms) : json(nullptr)},
    });
  }
  return json{
      {"node_id", c.node_id},
      {"leader_id", c.leader_id == 0 ? json(nullptr) : json(c.leader_id)},
      {"term", c.term},
      {"commit_index", c.commit_index},
      {"members", std::move(members)},
      // Beyond the spec's fields: what this node itself is and has applied.
      {"role", c.role},
      {"leader", c.leader_addr.empty() ? json(nullptr) : json(c.leader_addr)},
      {"applied_index", c.applied_index},
  };
}

// The bounds a request is checked against, so a client that got
// `E bad_lease` can say what the server allows (lockctl does).
static json limits_json(const server::ServerConfig& c) {
  return json{{"default_lease_ms", c.parse.default_lease_ms},
              {"max_lease_ms", c.parse.max_lease_ms},
              {"max_wait_ms", c.parse.max_wait_ms}};
}

json status_json(const server::LockServer& server, const NodeInfo& node, TimeNs now_ns,
                 std::optional<std::size_t> exact_holders) {
  const locks::LockTable& table = server.table();
  bool exact = exact_holders.has_value();
  const std::size_t holders =
      exact ? *exact_holders : holders_bounded(table, table_time(node, now_ns), exact);
  json j;
  if (node.cluster) {
    const ClusterStatus c = node.cluster(now_ns);
    j = json{
        {"mode", node.mode},
        {"node_id", c.node_id},
        {"role", c.role},
        {"term", c.term},
        {"leader", c.leader_addr.empty() ? json(nullptr) : json(c.leader_addr)},
        {"keys", table.key_count()},
        {"holders", holders},
        {"waiters", table.waiter_count()},
        {"connections", server.connection_count()},
        {"watches", server.watches().watch_count()},
        {"watchers", server.watches().watcher_count()},
        {"commit_index", c.commit_index},
        {"applied_index", c.applied_index},
        {"uptime_ms", floor_div(now_ns - node.started_ns, kNsPerMs)},
        {"version", node.version},
        {"listen", node.listen},
        {"leader_id", c.leader_id == 0 ? json(nullptr) : json(c.leader_id)},
        {"serving", c.serving},
        {"holders_exact", exact},
        {"requests", requests_json(server.stats())},
        {"replies", replies_json(server.stats())},
        {"limits", limits_json(server.config())},
    };
  } else {
    j = json{
      {"mode", node.mode},
      {"node_id", nullptr},
      {"role", "single"},
      {"term", 0},
      {"leader", nullptr},
      {"keys", table.key_count()},
      {"holders", holders},
      {"waiters", table.waiter_count()},
      {"connections", server.connection_count()},
      {"watches", server.watches().watch_count()},
      {"watchers", server.watches().watcher_count()},
      {"commit_index", 0},
      {"applied_index", 0},
      {"uptime_ms", floor_div(now_ns - node.started_ns, kNsPerMs)},
      {"version", node.version},
      {"listen", node.listen},
      {"holders_exact", exact},
      {"requests", requests_json(server.stats())},
      {"replies", replies_json(server.stats())},
      {"limits", limits_json(server.config())},
    };
  }
  // The descriptor budget (daemon/fd_limit.h): a limit below the need is
  // also the one warning lockd logged at start.
  if (node.fds.limit != 0) {
    j["fd_limit"] = node.fds.limit;
    j["fds_needed"] = node.fds.needed;
    j["fd_limit_low"] = node.fds.limit < node.fds.needed;
  }
  return j;
}

ListScan::ListScan(const locks::LockTable& table, ListQuery q, KeyViewFn view)
    : table_(table), q_(std::move(q)), view_(std::move(view)) {}

void ListScan::offer(std::string_view key, const locks::KeyState&, TimeNs) {
  if (!key.starts_with(q_.prefix)) return;
  if (!q_.after.empty() && key <= q_.after) return;
  if (view_ && view_(key) == KeyView::kHidden) return;
  // Cheap reject before copying: the heap is full of smaller keys.
  if (heap_.size() > q_.limit && key >= heap_.front()) return;
  // One more than asked, to know whether the page is the last.
  keep_smallest(heap_, q_.limit + 1, std::string(key), std::less<>());
}

json ListScan::finish(TimeNs now_ns) {
  std::sort_heap(heap_.begin(), heap_.end());
  const bool truncated = heap_.size() > q_.limit;
  if (truncated) heap_.resize(q_.limit);
  json locks = json::array();
  for (const std::string& key : heap_) {
    const locks::KeyState* s = table_.find(key);
    if (s == nullptr) continue;  // deleted during a split scan
    json row{{"key", key}};
    put_holders(row, *s, now_ns, kMaxHoldersListedPerKey,
                !view_ || view_(key) == KeyView::kFull);
    row["waiters"] = s->waiter_count();
    locks.push_back(std::move(row));
  }
  json out{{"locks", std::move(locks)}, {"truncated", truncated}};
  if (truncated && !heap_.empty()) out["next_after"] = heap_.back();
  return out;
}

json scan_all(const locks::LockTable& table, KeyScan& scan, TimeNs now_ns) {
  table.for_each_in_buckets(0, table.bucket_count(),
                            [&](std::string_view k, const locks::KeyState& s) {
                              scan.offer(k, s, now_ns);
                            });
  return scan.finish(now_ns);
}

json list_locks_json(const locks::LockTable& table, const ListQuery& q, TimeNs now_ns) {
  ListScan scan(table, q);
  return scan_all(table, scan, now_ns);
}

std::optional<json> lock_json(const locks::LockTable& table, std::string_view key,
                              TimeNs now_ns, const KeyViewFn& view) {
  const KeyView v = view ? view(key) : KeyView::kFull;
  if (v == KeyView::kHidden) return std::nullopt;
  const locks::KeyState* s = table.find(key);
  if (s == nullptr) return std::nullopt;
  json waiters = json::array();
  if (const std::list<locks::Waiter>* queue = s->waiters()) {
    for (const locks::Waiter& w : *queue) {
      if (waiters.size() >= kMaxWaitersListed) break;
      json row{{"owner", w.owner},
               {"lease_ms", w.lease_ms},
               {"wait_left_ms", std::max<std::int64_t>(0, ms_until(w.wait_deadline_ns, now_ns))},
               {"mode", mode_name(w.shared)}};
      if (w.shared) row["limit"] = w.limit;
      waiters.push_back(std::move(row));
    }
  }
  const locks::Holder& oldest = s->oldest();
  json out{{"key", key}};
  put_holders(out, *s, now_ns, kMaxHoldersListed, v == KeyView::kFull);
  // Expired: no holder's lease is running (each shared holder's own lease
  // shows in `holders`).
  bool expired = true;
  s->for_each_holder([&](const locks::Holder& h) { expired = expired && h.expires_at_ns <= now_ns; });
  out["expired"] = expired;
  out["lease_ms"] = oldest.lease_ms;
  out["held_ms"] = floor_div(now_ns - granted_at_ns(oldest), kNsPerMs);
  out["waiter_count"] = s->waiter_count();
  out["waiters"] = std::move(waiters);
  return out;
}

TopScan::TopScan(const server::LockServer& server, const NodeInfo& node, std::size_t limit,
                 TimeNs started_ns, KeyViewFn view)
    : server_(server), node_(node), limit_(limit), started_ns_(started_ns), view_(std::move(view)) {}

void TopScan::keep(std::vector<Ranked>& heap, Ranked r) {
  if (heap.size() >= limit_ && !(r < heap.front())) return;  // reject before copying more
  keep_smallest(heap, limit_, std::move(r), std::less<>());
}

void TopScan::offer(std::string_view key, const locks::KeyState& s, TimeNs now_ns) {
  bool live = false;
  s.for_each_holder([&](const locks::Holder& h) {
    if (h.expires_at_ns <= now_ns) return;
    ++holders_;
    live = true;
  });
  if (view_ && view_(key) == KeyView::kHidden) return;  // counted above, never named
  if (s.waiter_count() > 0) keep(queues_, {-static_cast<std::int64_t>(s.waiter_count()), std::string(key)});
  if (live) keep(oldest_, {granted_at_ns(s.oldest()), std::string(key)});
}

void TopScan::reset() {
  queues_.clear();
  oldest_.clear();
  holders_ = 0;
}

json TopScan::finish(TimeNs now_ns) {
  const locks::LockTable& table = server_.table();
  const auto rows = [&](std::vector<Ranked>& heap) {
    std::sort_heap(heap.begin(), heap.end());
    json out = json::array();
    for (const auto& [rank, key] : heap) {
      const locks::KeyState* s = table.find(key);
      if (s == nullptr) continue;  // gone since it was seen
      const locks::Holder& oldest = s->oldest();
      out.push_back(json{{"key", key},
                         {"owner", oldest.owner.view()},
                         {"waiters", s->waiter_count()},
                         {"held_ms", floor_div(now_ns - granted_at_ns(oldest), kNsPerMs)},
                         {"expires_in_ms", ms_until(oldest.expires_at_ns, now_ns)},
                         {"mode", mode_name(s->shared())},
                         {"holder_count", s->holder_count()}});
    }
    return out;
  };

  // The busiest keys among the latest requests (a bounded ring).
  const RecentKeys& recent = server_.stats().recent_keys;
  std::unordered_map<std::string_view, std::uint64_t> counts;
  counts.reserve(recent.size());
  for (std::size_t i = 0; i < recent.size(); ++i) ++counts[recent.at(i)];
  std::vector<std::pair<std::string_view, std::uint64_t>> by_count;
  by_count.reserve(counts.size());
  for (const auto& kc : counts) {
    if (!view_ || view_(kc.first) != KeyView::kHidden) by_count.push_back(kc);
  }
  const std::size_t n = std::min(limit_, by_count.size());
  std::partial_sort(by_count.begin(), by_count.begin() + static_cast<std::ptrdiff_t>(n),
                    by_count.end(), [](const auto& a, const auto& b) {
                      return a.second != b.second ? a.second > b.second : a.first < b.first;
                    });
  json busiest = json::array();
  for (std::size_t i = 0; i < n; ++i) {
    const auto& [key, count] = by_count[i];
    json r{{"key", key}, {"requests", count}};
    if (const locks::KeyState* s = table.find(key)) {
      r["owner"] = s->oldest().owner.view();
      r["waiters"] = s->waiter_count();
      r["expires_in_ms"] = ms_until(s->oldest().expires_at_ns, now_ns);
      r["mode"] = mode_name(s->shared());
    } else {
      r["owner"] = nullptr;
      r["waiters"] = 0;
    }
    busiest.push_back(std::move(r));
  }

  return json{{"status", status_json(server_, node_, started_ns_, holders_)},
              {"sampled_requests", recent.size()},
              {"busiest", std::move(busiest)},
              {"longest_queues", rows(queues_)},
              {"oldest_holders", rows(oldest_)}};
}

}  // namespace lockd::admin
