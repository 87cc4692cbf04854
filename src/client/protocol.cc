#include "lockd/client/protocol.h"

#include <charconv>
#include <vector>

namespace lockd::client {

namespace {

bool visible(std::string_view s, std::size_t max_bytes) {
  if (s.empty() || s.size() > max_bytes) return false;
  for (const char c : s) {
    if (c < 0x21 || c > 0x7E) return false;
  }
  return true;
}

Status invalid(std::string message) { return {Code::kInvalidArgument, std::move(message)}; }

// Splits on runs of spaces (protocol.md §1).
std::vector<std::string_view> split(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && line[i] == ' ') ++i;
    if (i == line.size()) break;
    const std::size_t start = i;
    while (i < line.size() && line[i] != ' ') ++i;
    out.push_back(line.substr(start, i - start));
  }
  return out;
}

}  // namespace

std::optional<std::uint64_t> parse_u64(std::string_view text) {
  if (text.empty()) return std::nullopt;
  std::uint64_t v = 0;
  const auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || p != text.data() + text.size()) return std::nullopt;
  return v;
}

Status validate(const Request& r) {
  if (is_watch(r.verb)) {
    if (!visible(r.key, kMaxKeyBytes)) {
      return invalid("key must be 1..250 visible ASCII bytes without spaces");
    }
    return Status::Ok();
  }
  const bool acquire = is_acquire(r.verb);
  if (acquire && !visible(r.owner, kMaxOwnerBytes)) {
    return invalid("owner must be 1..64 visible ASCII bytes without spaces");
  }
  if (!acquire && r.token == 0) return invalid("token must be 1 or more");
  if (!visible(r.key, kMaxKeyBytes)) {
    return invalid("key must be 1..250 visible ASCII bytes without spaces");
  }
  if (r.verb == Verb::kShared && r.limit > kMaxLimit) {
    return invalid("limit must be 0..65535 (0: no cap)");
  }
  if (r.verb == Verb::kKeep && r.lease_ms == 0) return invalid("keep needs lease_ms >= 1");
  if (acquire && r.lease_ms == 0 && r.wait_ms != 0) {
    return invalid("a wait needs an explicit lease_ms (the protocol puts lease before wait)");
  }
  return Status::Ok();
}

std::string format_request(const Request& r) {
  std::string line(1, static_cast<char>(r.verb));
  line += ' ';
  switch (r.verb) {
    case Verb::kAcquire:
    case Verb::kShared:
      line += r.owner;
      line += ' ';
      line += r.key;
      if (r.verb == Verb::kShared) {
        line += ' ';
        line += std::to_string(r.limit);
      }
      if (r.lease_ms != 0) {
        line += ' ';
        line += std::to_string(r.lease_ms);
        if (r.wait_ms != 0) {
          line += ' ';
          line += std::to_string(r.wait_ms);
        }
      }
      break;
    case Verb::kWatch:
    case Verb::kUnwatch:
      line += r.key;
      break;
    case Verb::kRelease:
    case Verb::kKeep:
      line += std::to_string(r.token);
      line += ' ';
      line += r.key;
      if (r.verb == Verb::kKeep) {
        line += ' ';
        line += std::to_string(r.lease_ms);
      }
      break;
  }
  line += '\n';
  return line;
}

std::optional<Reply> parse_reply(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  const auto f = split(line);
  if (f.empty() || f[0].size() != 1) return std::nullopt;
  Reply r;
  const auto token_at = [&](std::size_t i) {
    const auto t = parse_u64(f[i]);
    if (t) r.token = *t;
    return t.has_value() && *t != 0;
  };
  switch (f[0][0]) {
    case 'A':
    case 'S':
      if (f.size() != 4 || !token_at(1)) return std::nullopt;
      r.kind = f[0][0] == 'A' ? ReplyKind::kAcquired : ReplyKind::kShared;
      r.owner = f[2];
      r.key = f[3];
      return r;
    case 'B':
      if (f.size() == 2) {  // `B <key>`: a `W` past a watch limit (§5c)
        r.kind = ReplyKind::kBusy;
        r.key = f[1];
        r.key_only_echo = true;
        return r;
      }
      [[fallthrough]];
    case 'T':
      if (f.size() != 3) return std::nullopt;
      r.kind = f[0][0] == 'T' ? ReplyKind::kTimedOut : ReplyKind::kBusy;
      r.owner = f[1];
      r.key = f[2];
      return r;
    case 'R':
    case 'N':
    case 'K':
      if (f.size() != 3 || !token_at(1)) return std::nullopt;
      r.kind = static_cast<ReplyKind>(f[0][0]);
      r.key = f[2];
      return r;
    case 'M':
      if (f.size() != 4) return std::nullopt;
      r.kind = ReplyKind::kMoved;
      r.leader = f[1];
      r.echo_first = f[2];
      r.key = f[3];
      return r;
    case 'E':
      if (f.size() < 2 || f.size() > 4) return std::nullopt;
      r.kind = ReplyKind::kError;
      r.error_code = f[1];
      if (f.size() == 3) {  // `E <code> <key>`: a refused `W`/`U` (§5c)
        r.key = f[2];
        r.key_only_echo = true;
      } else if (f.size() == 4) {
        r.echo_first = f[2];
        r.key = f[3];
      }
      return r;
    case 'W':
    case 'V': {
      // `W|V <key> <rev> free | held <owner> <token> | shared <limit> <count>`
      if (f.size() < 4) return std::nullopt;
      const auto rev = parse_u64(f[2]);
      if (!rev || *rev == 0) return std::nullopt;
      r.kind = f[0][0] == 'W' ? ReplyKind::kWatching : ReplyKind::kChanged;
      r.key = f[1];
      r.rev = *rev;
      if (f[3] == "free" && f.size() == 4) {
        r.state.kind = KeyState::Kind::kFree;
      } else if (f[3] == "held" && f.size() == 6) {
        const auto t = parse_u64(f[5]);
        if (!t || *t == 0) return std::nullopt;
        r.state.kind = KeyState::Kind::kHeld;
        r.state.owner = f[4];
        r.state.token = *t;
      } else if (f[3] == "shared" && f.size() == 6) {
        const auto limit = parse_u64(f[4]);
        const auto count = parse_u64(f[5]);
        if (!limit || !count || *limit > kMaxLimit || *count == 0 || *count > 0xffffffffULL) {
          return std::nullopt;
        }
        r.state.kind = KeyState::Kind::kShared;
        r.state.limit = static_cast<std::uint32_t>(*limit);
        r.state.count = static_cast<std::uint32_t>(*count);
      } else {
        return std::nullopt;
      }
      return r;
    }
    case 'U':
      if (f.size() != 2) return std::nullopt;
      r.kind = ReplyKind::kUnwatched;
      r.key = f[1];
      return r;
    case 'X':
      if (f.size() != 3 || !token_at(1)) return std::nullopt;
      r.kind = ReplyKind::kLostNotice;
      r.key = f[2];
      return r;
    default:
      return std::nullopt;
  }
}

}  // namespace lockd::client
