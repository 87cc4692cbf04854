#include "lockd/server/watch_hub.h"

#include <algorithm>

namespace lockd::server {

proto::WatchState watch_state_of(const locks::KeyState* state) {
  proto::WatchState w;
  if (state == nullptr || state->holder_count() == 0) return w;
  if (state->shared()) {
    w.kind = proto::WatchState::Kind::kShared;
    w.limit = state->extra->limit;
    w.count = static_cast<std::uint32_t>(state->holder_count());
    return w;
  }
  w.kind = proto::WatchState::Kind::kHeld;
  w.owner = state->owner.view();
  w.token = state->token;
  return w;
}

void WatchHub::key_changed(std::string_view key) {
  if (!log_revs_) ++rev_;
  if (keys_.empty()) return;
  auto it = keys_.find(key);
  if (it == keys_.end()) return;
  Entry& e = it->second;
  e.change_rev = rev_;
  if (!e.dirty) {
    e.dirty = true;
    dirty_.push_back(&*it);
  }
}

void WatchHub::all_changed() {
  for (auto& node : keys_) {
    node.second.change_rev = rev_;
    if (!node.second.dirty) {
      node.second.dirty = true;
      dirty_.push_back(&node);
    }
  }
}

void WatchHub::push_if_changed(Node& node, proto::WatchState state, PushOutput& push) {
  Entry& e = node.second;
  if (state == e.last) return;
  e.last = std::move(state);
  // A push may close its connection (output cap), which removes it from
  // e.watchers: walk a copy.
  scratch_.assign(e.watchers.begin(), e.watchers.end());
  const std::uint64_t rev = std::max<std::uint64_t>(e.change_rev, 1);
  for (const locks::ClientId c : scratch_) {
    std::string* out = push.push_buffer(c);
    if (out == nullptr) continue;
    proto::append_watch_state(*out, 'V', node.first, rev, e.last);
    ++stats_.pushes;
    push.push_queued(c);
  }
}

WatchHub::WatchOutcome WatchHub::watch(locks::ClientId client, std::string_view key,
                                       const locks::LockTable& table, PushOutput& push,
                                       std::string& out) {
  auto it = keys_.find(key);
  const proto::WatchState now = watch_state_of(table.find(key));
  if (it != keys_.end()) {
    std::vector<locks::ClientId>& w = it->second.watchers;
    if (std::find(w.begin(), w.end(), client) != w.end()) {
      // Already watched: the state now, still one watch. A pending change
      // goes to every watcher (this one included) first, in order.
      push_if_changed(*it, now, push);
      proto::append_watch_state(out, 'W', key, rev_, now);
      return WatchOutcome::kWatching;
    }
  }
  auto& mine = by_client_[client];
  if (mine.size() >= limits_.max_per_connection || total_ >= limits_.max_total) {
    if (mine.empty()) by_client_.erase(client);
    ++stats_.refused;
    proto::append_watch_busy(out, key);
    return WatchOutcome::kBusy;
  }
  if (it == keys_.end()) {
    it = keys_.emplace(std::string(key), Entry{}).first;
    it->second.last = now;
  } else {
    // The watchers there already learn of a pending change before this one
    // joins (it is told the state now in its reply).
    push_if_changed(*it, now, push);
  }
  it->second.watchers.push_back(client);
  mine.push_back(&*it);
  ++total_;
  ++stats_.watches_added;
  proto::append_watch_state(out, 'W', key, rev_, now);
  return WatchOutcome::kWatching;
}

void WatchHub::remove_watcher(Node& node, locks::ClientId client) {
  std::vector<locks::ClientId>& w = node.second.watchers;
  auto pos = std::find(w.begin(), w.end(), client);
  if (pos == w.end()) return;
  *pos = w.back();
  w.pop_back();
  --total_;
}

void WatchHub::erase_if_unused(Node& node) {
  if (!node.second.watchers.empty() || node.second.dirty) return;
  keys_.erase(node.first);
}

void WatchHub::unwatch(locks::ClientId client, std::string_view key, std::string& out) {
  proto::append_unwatched(out, key);
  auto it = keys_.find(key);
  auto mine = by_client_.find(client);
  if (it == keys_.end() || mine == by_client_.end()) return;
  std::vector<Node*>& v = mine->second;
  auto pos = std::find(v.begin(), v.end(), &*it);
  if (pos == v.end()) return;
  *pos = v.back();
  v.pop_back();
  if (v.empty()) by_client_.erase(mine);
  remove_watcher(*it, client);
  erase_if_unused(*it);
}

void WatchHub::client_closed(locks::ClientId client) {
  auto mine = by_client_.find(client);
  if (mine == by_client_.end()) return;
  const std::vector<Node*> nodes = std::move(mine->second);
  by_client_.erase(mine);
  for (Node* node : nodes) {
    remove_watcher(*node, client);
    erase_if_unused(*node);
  }
}

void WatchHub::flush(const locks::LockTable& table, PushOutput& push) {
  if (dirty_.empty() || flushing_) return;
  flushing_ = true;
  // By index: a push that closes a connection can cancel its waiters, and
  // a hand-off that causes marks more keys dirty (appended here).
  for (std::size_t i = 0; i < dirty_.size(); ++i) {
    Node& node = *dirty_[i];
    if (!node.second.watchers.empty()) push_if_changed(node, watch_state_of(table.find(node.first)), push);
    node.second.dirty = false;
    erase_if_unused(node);
  }
  dirty_.clear();
  flushing_ = false;
}

}  // namespace lockd::server
