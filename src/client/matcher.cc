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

Status Matcher::add(Id id, const Request& request) {
  // `A` and `S` share one echo (`owner key`): an exclusive and a shared
  // acquire of one owner and key in flight at once are refused like two `A`s.
  const bool acquire = is_acquire(request.verb);
  std::string echo = acquire ? acquire_echo(request.owner, request.key)
                             : token_echo(request.token, request.key);
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
  const Request& r = it->request;
  const std::string echo = is_acquire(r.verb) ? acquire_echo(r.owner, r.key)
                                              : token_echo(r.token, r.key);
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

std::optional<Matcher::Entry> Matcher::match(const Reply& reply) {
  std::optional<Iter> it;
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
        // Answered at once: the oldest request that could have drawn this
        // code and cannot still be waiting (an acquire with a wait can).
        const auto could_draw = [&](const Request& r) {
          if (reply.error_code == "bad_wait") return is_acquire(r.verb) && r.wait_ms > 0;
          if (reply.error_code == "bad_lease") {
            return r.verb == Verb::kKeep || (is_acquire(r.verb) && r.lease_ms > 0);
          }
          if (reply.error_code == "bad_limit") return r.verb == Verb::kShared;
          return true;
        };
        for (auto i = order_.begin(); i != order_.end() && !it; ++i) {
          if (could_draw(i->request) && !(is_acquire(i->request.verb) && i->request.wait_ms > 0)) {
            it = i;
          }
        }
        for (auto i = order_.begin(); i != order_.end() && !it; ++i) {
          if (could_draw(i->request)) it = i;
        }
      }
      break;
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
