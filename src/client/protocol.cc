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
    case 'T':
    case 'B':
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
      if (f.size() != 2 && f.size() != 4) return std::nullopt;
      r.kind = ReplyKind::kError;
      r.error_code = f[1];
      if (f.size() == 4) {
        r.echo_first = f[2];
        r.key = f[3];
      }
      return r;
    default:
      return std::nullopt;
  }
}

}  // namespace lockd::client
