#include "lockd_codec.h"

#include <array>
#include <charconv>

namespace lockbench {
namespace {

// Most fields a reply has: `A <token> <owner> <key>` and `M <addr> <a> <b>`.
constexpr std::size_t kMaxReplyFields = 4;

void append_u64(std::string& out, std::uint64_t v) {
  char buf[24];
  const auto res = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, res.ptr);
}

bool to_u64(std::string_view s, std::uint64_t& v) {
  if (s.empty()) return false;
  const auto res = std::from_chars(s.data(), s.data() + s.size(), v);
  return res.ec == std::errc{} && res.ptr == s.data() + s.size();
}

// Splits on runs of spaces; false if there are more than kMaxReplyFields.
bool split(std::string_view line, std::array<std::string_view, kMaxReplyFields>& fields,
           std::size_t& n) {
  n = 0;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && line[i] == ' ') ++i;
    if (i == line.size()) break;
    std::size_t j = i;
    while (j < line.size() && line[j] != ' ') ++j;
    if (n == kMaxReplyFields) return false;
    fields[n++] = line.substr(i, j - i);
    i = j;
  }
  return true;
}

// Fills token/owner/key from an echo of either request shape: `<token>
// <key>` when the first field is a number, else `<owner> <key>`.
void set_echo(std::string_view a, std::string_view b, LockdReply& out) {
  if (!to_u64(a, out.token)) out.owner = a;
  out.key = b;
}

}  // namespace

void encode_lockd_acquire(std::string& out, std::string_view owner, std::string_view key,
                          std::uint64_t lease_ms, std::uint64_t wait_ms) {
  out.append("A ", 2);
  out.append(owner);
  out.push_back(' ');
  out.append(key);
  out.push_back(' ');
  append_u64(out, lease_ms);
  if (wait_ms != 0) {
    out.push_back(' ');
    append_u64(out, wait_ms);
  }
  out.push_back('\n');
}

void encode_lockd_shared(std::string& out, std::string_view owner, std::string_view key,
                         std::uint32_t limit, std::uint64_t lease_ms, std::uint64_t wait_ms) {
  out.append("S ", 2);
  out.append(owner);
  out.push_back(' ');
  out.append(key);
  out.push_back(' ');
  append_u64(out, limit);
  out.push_back(' ');
  append_u64(out, lease_ms);
  if (wait_ms != 0) {
    out.push_back(' ');
    append_u64(out, wait_ms);
  }
  out.push_back('\n');
}

void encode_lockd_release(std::string& out, std::uint64_t token, std::string_view key) {
  out.append("R ", 2);
  append_u64(out, token);
  out.push_back(' ');
  out.append(key);
  out.push_back('\n');
}

void encode_lockd_keep(std::string& out, std::uint64_t token, std::string_view key,
                       std::uint64_t lease_ms) {
  out.append("K ", 2);
  append_u64(out, token);
  out.push_back(' ');
  out.append(key);
  out.push_back(' ');
  append_u64(out, lease_ms);
  out.push_back('\n');
}

bool parse_lockd_reply_line(std::string_view line, LockdReply& out) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  std::array<std::string_view, kMaxReplyFields> f;
  std::size_t n = 0;
  if (!split(line, f, n) || n == 0 || f[0].size() != 1) return false;
  out = LockdReply{};
  switch (f[0][0]) {
    case 'A':
    case 'S':
      out.kind = LockdReplyKind::kAcquired;
      if (n != 4 || !to_u64(f[1], out.token) || out.token == 0) return false;
      out.owner = f[2];
      out.key = f[3];
      return true;
    case 'T':
    case 'B':
      out.kind = f[0][0] == 'T' ? LockdReplyKind::kHeld : LockdReplyKind::kBusy;
      if (n != 3) return false;
      out.owner = f[1];
      out.key = f[2];
      return true;
    case 'R':
    case 'N':
    case 'K':
      out.kind = f[0][0] == 'R'   ? LockdReplyKind::kReleased
                 : f[0][0] == 'N' ? LockdReplyKind::kNotReleased
                                  : LockdReplyKind::kKept;
      if (n != 3 || !to_u64(f[1], out.token)) return false;
      out.key = f[2];
      return true;
    case 'M':
      out.kind = LockdReplyKind::kMoved;
      if (n != 4) return false;
      out.code = f[1];
      set_echo(f[2], f[3], out);
      return true;
    case 'E':
      out.kind = LockdReplyKind::kError;
      if (n != 2 && n != 4) return false;
      out.code = f[1];
      if (n == 4) set_echo(f[2], f[3], out);
      return true;
    default:
      return false;
  }
}

DecodeStatus decode_lockd_reply(std::string_view in, std::size_t& consumed, LockdReply& out) {
  std::size_t skipped = 0;
  for (;;) {
    const std::string_view rest = in.substr(skipped);
    const std::size_t nl = rest.find('\n');
    if (nl == std::string_view::npos) {
      return rest.size() >= kMaxLockdReplyBytes ? DecodeStatus::kMalformed : DecodeStatus::kNeedMore;
    }
    if (nl + 1 > kMaxLockdReplyBytes) return DecodeStatus::kMalformed;
    // Pushes (protocol.md §5c: V for a watch, X when a lease this
    // connection was granted ended) are never replies: skipped. lockbench
    // watches nothing, but its holders' leases can end.
    if (rest.starts_with("V ") || rest.starts_with("X ")) {
      skipped += nl + 1;
      continue;
    }
    if (!parse_lockd_reply_line(rest.substr(0, nl), out)) return DecodeStatus::kMalformed;
    consumed = skipped + nl + 1;
    return DecodeStatus::kReply;
  }
}

}  // namespace lockbench
