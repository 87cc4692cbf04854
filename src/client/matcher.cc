#include "lockd/client/matcher.h"

#include "lockd/common/check.h"

namespace lockd::client {

std::string Matcher::acquire_echo(std::string_view owner, std::string_view key) {
  std::string s = "A ";
  s += owner;
  s += ' ';
  s += key;
  return s;
}

std::string Matcher::token_echo(std::uint64_t token, std::string_view key) {
  std::string s = "T ";
  s += std::to_string(token);
  s += ' ';
  s += key;
  return s;
}

std::string Matcher::key_echo(std::string_view key) {
  std::string s = "W ";
  s += key;
  return s;
}

std::string Matcher::echo_of(const Request& r) {
  if (is_acquire(r.verb)) return acquire_echo(r.owner, r.key);
  if (is_watch(r.verb)) return key_echo(r.key);
  return token_echo(r.token, r.key);
}

Status Matcher::add(Id id, const Request& request) {
  // `A` and `S` share one echo (`owner key`): an exclusive and a shared
  // acquire of one owner and key in flight at once are refused like two `A`s.
  const bool acquire = is_acquire(request.verb);
  std::string echo = echo_of(request);
  auto& same = by_echo_[echo];
  if (acquire && !same.empty()) {
    return {Code::kInFlight,
            "an acquire by this owner for this key is already in flight on the connection"};
  }
  order_.push_back(Entry{id, request});
  same.push_back(std::prev(order_.end()));
  return Status::Ok();
}

Matcher::Entry Matcher::take(Iter it) {
  const std::string echo = echo_of(it->request);
  auto found = by_echo_.find(echo);
  LOCKD_CHECK(found != by_echo_.end());
  found->second.remove(it);
  if (found->second.empty()) by_echo_.erase(found);
  Entry e = std::move(*it);
  order_.erase(it);
  return e;
}

std::optional<Matcher::Iter> Matcher::find(const std::string& echo, std::optional<Verb> prefer) {
  const auto found = by_echo_.find(echo);
  if (found == by_echo_.end()) return std::nullopt;
  if (prefer) {
    for (const Iter it : found->second) {
      if (it->request.verb == *prefer) return it;
    }
  }
  return found->second.front();
}

bool Matcher::could_draw(const Reply& reply, const Request& r) {
  if (is_watch(r.verb)) {
    // A W/U refusal carries its key; without one it is a server that does
    // not know the verb (older than v1.3: unknown_command).
    return reply.error_code != "bad_wait" && reply.error_code != "bad_lease" &&
           reply.error_code != "bad_limit";
  }
  if (reply.error_code == "bad_wait") return is_acquire(r.verb) && r.wait_ms > 0;
  if (reply.error_code == "bad_lease") {
    return r.verb == Verb::kKeep || (is_acquire(r.verb) && r.lease_ms > 0);
  }
  if (reply.error_code == "bad_limit") return r.verb == Verb::kShared;
  return true;
}

std::vector<Matcher::Id> Matcher::candidates(const Reply& reply) const {
  std::vector<Id> ids;
  for (const Entry& e : order_) {
    if (could_draw(reply, e.request)) ids.push_back(e.id);
  }
  return ids;
}

std::optional<Matcher::Entry> Matcher::match(const Reply& reply) {
  std::optional<Iter> it;
  if (reply.is_push()) return std::nullopt;  // never a reply (§5c)
  if (reply.key_only_echo || reply.kind == ReplyKind::kWatching ||
      reply.kind == ReplyKind::kUnwatched) {
    std::optional<Verb> prefer;
    if (reply.kind == ReplyKind::kWatching) prefer = Verb::kWatch;
    if (reply.kind == ReplyKind::kUnwatched) prefer = Verb::kUnwatch;
    it = find(key_echo(reply.key), prefer);
    if (!it) return std::nullopt;
    return take(*it);
  }
  switch (reply.kind) {
    case ReplyKind::kAcquired:
    case ReplyKind::kShared:
    case ReplyKind::kTimedOut:
    case ReplyKind::kBusy:
      it = find(acquire_echo(reply.owner, reply.key), std::nullopt);
      break;
    case ReplyKind::kReleased:
      it = find(token_echo(reply.token, reply.key), Verb::kRelease);
      break;
    case ReplyKind::kKept:
      it = find(token_echo(reply.token, reply.key), Verb::kKeep);
      break;
    case ReplyKind::kNotHeld:
      it = find(token_echo(reply.token, reply.key), std::nullopt);
      break;
    case ReplyKind::kMoved:
    case ReplyKind::kError:
      if (reply.has_echo()) {
        // The echo is `owner key` or `token key`; an owner may look like
        // a token, so try the acquire reading first, then the other.
        it = find(acquire_echo(reply.echo_first, reply.key), std::nullopt);
        if (!it) {
          if (const auto token = parse_u64(reply.echo_first)) {
            it = find(token_echo(*token, reply.key), std::nullopt);
          }
        }
      } else {
        // No echo (a v1.2 server's range error): pinned only on the one
        // request that could have drawn it, never guessed among several.
        std::size_t n = 0;
        for (auto i = order_.begin(); i != order_.end() && n < 2; ++i) {
          if (could_draw(reply, i->request)) {
            ++n;
            it = i;
          }
        }
        if (n != 1) return std::nullopt;
      }
      break;
    case ReplyKind::kWatching:
    case ReplyKind::kUnwatched:
    case ReplyKind::kChanged:
    case ReplyKind::kLostNotice:
      break;  // handled above
  }
  if (!it) return std::nullopt;
  return take(*it);
}

std::vector<Matcher::Id> Matcher::drain() {
  std::vector<Id> ids;
  ids.reserve(order_.size());
  for (const Entry& e : order_) ids.push_back(e.id);
  order_.clear();
  by_echo_.clear();
  return ids;
}

}  // namespace lockd::client
