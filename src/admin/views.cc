#include "lockd/admin/views.h"

#include <algorithm>
#include <queue>
#include <unordered_map>

#include "lockd/server/lock_server.h"

namespace lockd::admin {

using json = nlohmann::ordered_json;

namespace {

// The time a holder got its lease.
TimeNs granted_at_ns(const locks::KeyState& s) { return s.expires_at_ns - ms_to_ns(s.lease_ms); }

std::int64_t floor_div(std::int64_t a, std::int64_t b) {
  const std::int64_t q = a / b;
  return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

json requests_json(const server::ServerStats& st) {
  return json{
      {"A", st.requests_acquire},
      {"R", st.requests_release},
      {"invalid", st.requests_malformed + st.lines_too_long},
  };
}

json replies_json(const server::ServerStats& st) {
  using server::ReplyKind;
  const auto r = [&st](ReplyKind k) { return st.replies[static_cast<std::size_t>(k)]; };
  return json{{"A", r(ReplyKind::kAcquired)},   {"T", r(ReplyKind::kHeld)},
              {"B", r(ReplyKind::kBusy)},       {"R", r(ReplyKind::kReleased)},
              {"N", r(ReplyKind::kNotReleased)}, {"E", r(ReplyKind::kError)},
              {"M", r(ReplyKind::kMoved)}};
}

// Keeps the `limit` smallest elements under `less`, in a max-heap.
template <typename T, typename Less>
class BoundedTop {
 public:
  BoundedTop(std::size_t limit, Less less) : limit_(limit), less_(less) {}
  void offer(const T& v) {
    if (limit_ == 0) return;
    if (heap_.size() < limit_) {
      heap_.push_back(v);
      std::push_heap(heap_.begin(), heap_.end(), less_);
    } else if (less_(v, heap_.front())) {
      std::pop_heap(heap_.begin(), heap_.end(), less_);
      heap_.back() = v;
      std::push_heap(heap_.begin(), heap_.end(), less_);
    }
  }
  std::vector<T> sorted() && {
    std::sort_heap(heap_.begin(), heap_.end(), less_);
    return std::move(heap_);
  }

 private:
  std::size_t limit_;
  Less less_;
  std::vector<T> heap_;
};

}  // namespace

std::int64_t ms_until(TimeNs at_ns, TimeNs now_ns) { return floor_div(at_ns - now_ns, kNsPerMs); }

std::size_t count_holders(const locks::LockTable& table, TimeNs now_ns) {
  std::size_t n = 0;
  table.for_each([&](const std::string&, const locks::KeyState& s) {
    if (s.expires_at_ns > now_ns) ++n;
  });
  return n;
}

std::size_t holders_bounded(const locks::LockTable& table, TimeNs now_ns, bool& exact) {
  exact = table.key_count() <= kExactHoldersMaxKeys;
  return exact ? count_holders(table, now_ns) : table.key_count();
}

json status_json(const server::LockServer& server, const NodeInfo& node, TimeNs now_ns) {
  const locks::LockTable& table = server.table();
  bool exact = false;
  const std::size_t holders = holders_bounded(table, now_ns, exact);
  return json{
      {"mode", node.mode},
      {"node_id", nullptr},
      {"role", "single"},
      {"term", 0},
      {"leader", nullptr},
      {"keys", table.key_count()},
      {"holders", holders},
      {"waiters", table.waiter_count()},
      {"connections", server.connection_count()},
      {"commit_index", 0},
      {"applied_index", 0},
      {"uptime_ms", floor_div(now_ns - node.started_ns, kNsPerMs)},
      {"version", node.version},
      {"listen", node.listen},
      {"holders_exact", exact},
      {"requests", requests_json(server.stats())},
      {"replies", replies_json(server.stats())},
  };
}

std::vector<KeyRef> select_locks(const locks::LockTable& table, const ListQuery& q,
                                 bool& truncated) {
  // One more than asked, to know whether the page is the last.
  const auto by_key = [](const KeyRef& a, const KeyRef& b) { return *a.first < *b.first; };
  BoundedTop<KeyRef, decltype(by_key)> top(q.limit + 1, by_key);
  table.for_each([&](const std::string& key, const locks::KeyState& s) {
    if (!key.starts_with(q.prefix)) return;
    if (!q.after.empty() && key <= q.after) return;
    top.offer({&key, &s});
  });
  std::vector<KeyRef> out = std::move(top).sorted();
  truncated = out.size() > q.limit;
  if (truncated) out.resize(q.limit);
  return out;
}

json list_locks_json(const locks::LockTable& table, const ListQuery& q, TimeNs now_ns) {
  bool truncated = false;
  const std::vector<KeyRef> refs = select_locks(table, q, truncated);
  json locks = json::array();
  for (const auto& [key, s] : refs) {
    locks.push_back(json{{"key", *key},
                         {"owner", s->owner},
                         {"token", s->token},
                         {"expires_in_ms", ms_until(s->expires_at_ns, now_ns)},
                         {"waiters", s->waiter_count()}});
  }
  json out{{"locks", std::move(locks)}, {"truncated", truncated}};
  if (truncated && !refs.empty()) out["next_after"] = *refs.back().first;
  return out;
}

std::optional<json> lock_json(const locks::LockTable& table, std::string_view key,
                              TimeNs now_ns) {
  const locks::KeyState* s = table.find(key);
  if (s == nullptr) return std::nullopt;
  json waiters = json::array();
  if (s->waiters) {
    for (const locks::Waiter& w : *s->waiters) {
      if (waiters.size() >= kMaxWaitersListed) break;
      waiters.push_back(json{{"owner", w.owner},
                             {"lease_ms", w.lease_ms},
                             {"wait_left_ms", std::max<std::int64_t>(
                                                  0, ms_until(w.wait_deadline_ns, now_ns))}});
    }
  }
  return json{{"key", key},
              {"owner", s->owner},
              {"token", s->token},
              {"expires_in_ms", ms_until(s->expires_at_ns, now_ns)},
              {"expired", s->expires_at_ns <= now_ns},
              {"lease_ms", s->lease_ms},
              {"held_ms", floor_div(now_ns - granted_at_ns(*s), kNsPerMs)},
              {"waiter_count", s->waiter_count()},
              {"waiters", std::move(waiters)}};
}

json top_json(const server::LockServer& server, const NodeInfo& node, std::size_t limit,
              TimeNs now_ns) {
  const locks::LockTable& table = server.table();
  const auto row = [&](std::string_view key, const locks::KeyState& s) {
    return json{{"key", key},
                {"owner", s.owner},
                {"waiters", s.waiter_count()},
                {"held_ms", floor_div(now_ns - granted_at_ns(s), kNsPerMs)},
                {"expires_in_ms", ms_until(s.expires_at_ns, now_ns)}};
  };

  // One scan: the longest queues and the oldest live holders.
  const auto more_waiters = [](const KeyRef& a, const KeyRef& b) {
    const std::size_t wa = a.second->waiter_count(), wb = b.second->waiter_count();
    return wa != wb ? wa > wb : *a.first < *b.first;
  };
  const auto older = [](const KeyRef& a, const KeyRef& b) {
    const TimeNs ga = granted_at_ns(*a.second), gb = granted_at_ns(*b.second);
    return ga != gb ? ga < gb : *a.first < *b.first;
  };
  BoundedTop<KeyRef, decltype(more_waiters)> queues(limit, more_waiters);
  BoundedTop<KeyRef, decltype(older)> oldest(limit, older);
  table.for_each([&](const std::string& key, const locks::KeyState& s) {
    if (s.waiter_count() > 0) queues.offer({&key, &s});
    if (s.expires_at_ns > now_ns) oldest.offer({&key, &s});
  });
  json longest_queues = json::array();
  for (const auto& [key, s] : std::move(queues).sorted()) longest_queues.push_back(row(*key, *s));
  json oldest_holders = json::array();
  for (const auto& [key, s] : std::move(oldest).sorted()) oldest_holders.push_back(row(*key, *s));

  // The busiest keys among the latest requests (a bounded ring).
  const RecentKeys& recent = server.stats().recent_keys;
  std::unordered_map<std::string_view, std::uint64_t> counts;
  counts.reserve(recent.size());
  for (std::size_t i = 0; i < recent.size(); ++i) ++counts[recent.at(i)];
  std::vector<std::pair<std::string_view, std::uint64_t>> by_count(counts.begin(), counts.end());
  const std::size_t n = std::min(limit, by_count.size());
  std::partial_sort(by_count.begin(), by_count.begin() + static_cast<std::ptrdiff_t>(n),
                    by_count.end(), [](const auto& a, const auto& b) {
                      return a.second != b.second ? a.second > b.second : a.first < b.first;
                    });
  json busiest = json::array();
  for (std::size_t i = 0; i < n; ++i) {
    const auto& [key, count] = by_count[i];
    json r{{"key", key}, {"requests", count}};
    if (const locks::KeyState* s = table.find(key)) {
      r["owner"] = s->owner;
      r["waiters"] = s->waiter_count();
      r["expires_in_ms"] = ms_until(s->expires_at_ns, now_ns);
    } else {
      r["owner"] = nullptr;
      r["waiters"] = 0;
    }
    busiest.push_back(std::move(r));
  }

  return json{{"status", status_json(server, node, now_ns)},
              {"sampled_requests", recent.size()},
              {"busiest", std::move(busiest)},
              {"longest_queues", std::move(longest_queues)},
              {"oldest_holders", std::move(oldest_holders)}};
}

}  // namespace lockd::admin
