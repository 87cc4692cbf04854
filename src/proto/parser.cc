#include "lockd/proto/parser.h"

#include <array>
#include <cstring>

namespace lockd::proto {

namespace {

// Most fields any valid request has (`S`); one more is enough to know the
// arity is wrong.
constexpr std::size_t kMaxFields = 6;

// Splits on runs of 0x20. Returns the number of fields, capped at
// kMaxFields + 1 ("too many"). Field ends are found with memchr: the byte
// loop it replaces was the largest single cost in lockd's profile.
std::size_t split_fields(std::string_view line,
                         std::array<std::string_view, kMaxFields + 1>& fields) {
  const char* p = line.data();
  const char* const end = p + line.size();
  std::size_t n = 0;
  while (n < fields.size()) {
    while (p < end && *p == ' ') ++p;
    if (p == end) break;
    const void* space = std::memchr(p, ' ', static_cast<std::size_t>(end - p));
    const char* field_end = space != nullptr ? static_cast<const char*>(space) : end;
    fields[n++] = std::string_view(p, static_cast<std::size_t>(field_end - p));
    p = field_end;
  }
  return n;
}

bool visible_ascii(std::string_view s, std::size_t max_bytes) {
  if (s.empty() || s.size() > max_bytes) return false;
  for (unsigned char c : s) {
    if (c < 0x21 || c > 0x7E) return false;
  }
  return true;
}

}  // namespace

std::string_view error_code(ParseError e) {
  switch (e) {
    case ParseError::kUnknownCommand: return "unknown_command";
    case ParseError::kBadArity: return "bad_arity";
    case ParseError::kBadOwner: return "bad_owner";
    case ParseError::kBadKey: return "bad_key";
    case ParseError::kBadLease: return "bad_lease";
    case ParseError::kBadWait: return "bad_wait";
    case ParseError::kBadToken: return "bad_token";
    case ParseError::kBadLimit: return "bad_limit";
    case ParseError::kLineTooLong: return "line_too_long";
    case ParseError::kBadCredential: return "unauthenticated";
  }
  return "internal";
}

bool parse_u64(std::string_view s, std::uint64_t& out) {
  if (s.empty()) return false;
  std::uint64_t v = 0;
  for (char ch : s) {
    if (ch < '0' || ch > '9') return false;
    const auto d = static_cast<std::uint64_t>(ch - '0');
    // Overflow-checked without a division per digit.
    if (__builtin_mul_overflow(v, std::uint64_t{10}, &v) || __builtin_add_overflow(v, d, &v)) {
      return false;
    }
  }
  out = v;
  return true;
}

ParseResult parse_line(std::string_view line, const ParseLimits& limits) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  std::array<std::string_view, kMaxFields + 1> f;
  const std::size_t n = split_fields(line, f);
  if (n == 0) return Blank{};

  Request req{};
  if (f[0] == "A") {
    if (n < 3 || n > 5) return ParseError::kBadArity;
    if (!visible_ascii(f[1], kMaxOwnerBytes)) return ParseError::kBadOwner;
    if (!visible_ascii(f[2], kMaxKeyBytes)) return ParseError::kBadKey;
    req.verb = Verb::kAcquire;
    req.owner = f[1];
    req.key = f[2];
    req.lease_ms = limits.default_lease_ms;
    if (n >= 4 && (!parse_u64(f[3], req.lease_ms) || req.lease_ms == 0 ||
                   req.lease_ms > limits.max_lease_ms)) {
      return ParseError::kBadLease;
    }
    if (n == 5 && (!parse_u64(f[4], req.wait_ms) || req.wait_ms > limits.max_wait_ms)) {
      return ParseError::kBadWait;
    }
    return req;
  }
  if (f[0] == "R") {
    if (n != 3) return ParseError::kBadArity;
    req.verb = Verb::kRelease;
    if (!parse_u64(f[1], req.token) || req.token == 0) return ParseError::kBadToken;
    if (!visible_ascii(f[2], kMaxKeyBytes)) return ParseError::kBadKey;
    req.key = f[2];
    return req;
  }
  if (f[0] == "K") {
    // Exactly token, key, lease, checked in that order (§7): unlike `A`,
    // the lease has no default, since a keep that silently picked the
    // server's default could shorten a long lease by surprise.
    if (n != 4) return ParseError::kBadArity;
    req.verb = Verb::kKeep;
    if (!parse_u64(f[1], req.token) || req.token == 0) return ParseError::kBadToken;
    if (!visible_ascii(f[2], kMaxKeyBytes)) return ParseError::kBadKey;
    req.key = f[2];
    if (!parse_u64(f[3], req.lease_ms) || req.lease_ms == 0 || req.lease_ms > limits.max_lease_ms) {
      return ParseError::kBadLease;
    }
    return req;
  }
  if (f[0] == "H") {
    if (n != 2) return ParseError::kBadArity;
    if (!visible_ascii(f[1], kMaxCredentialBytes)) return ParseError::kBadCredential;
    req.verb = Verb::kHello;
    req.credential = f[1];
    return req;
  }
  if (f[0] == "S") {
    // Owner, key, limit, then lease and wait as in `A` (§5b, §7).
    if (n < 4 || n > 6) return ParseError::kBadArity;
    if (!visible_ascii(f[1], kMaxOwnerBytes)) return ParseError::kBadOwner;
    if (!visible_ascii(f[2], kMaxKeyBytes)) return ParseError::kBadKey;
    std::uint64_t limit = 0;
    if (!parse_u64(f[3], limit) || limit > kMaxLimit) return ParseError::kBadLimit;
    req.verb = Verb::kShared;
    req.owner = f[1];
    req.key = f[2];
    req.limit = static_cast<std::uint16_t>(limit);
    req.lease_ms = limits.default_lease_ms;
    if (n >= 5 && (!parse_u64(f[4], req.lease_ms) || req.lease_ms == 0 ||
                   req.lease_ms > limits.max_lease_ms)) {
      return ParseError::kBadLease;
    }
    if (n == 6 && (!parse_u64(f[5], req.wait_ms) || req.wait_ms > limits.max_wait_ms)) {
      return ParseError::kBadWait;
    }
    return req;
  }
  if (f[0] == "W" || f[0] == "U") {
    // Exactly one field, the key (§5c, §7).
    if (n != 2) return ParseError::kBadArity;
    if (!visible_ascii(f[1], kMaxKeyBytes)) return ParseError::kBadKey;
    req.verb = f[0] == "W" ? Verb::kWatch : Verb::kUnwatch;
    req.key = f[1];
    return req;
  }
  return ParseError::kUnknownCommand;
}

}  // namespace lockd::proto
