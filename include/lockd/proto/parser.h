// The request parser: a pure function from one line to a Request or a
// ParseError, with the limits it checks passed in (STYLE §8).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <variant>

#include "lockd/proto/request.h"

namespace lockd::proto {

// Longest accepted line, terminator included (§1).
constexpr std::size_t kMaxLineBytes = 1024;
constexpr std::size_t kMaxOwnerBytes = 64;
constexpr std::size_t kMaxKeyBytes = 250;
constexpr std::size_t kMaxCredentialBytes = 512;
// Largest `S` limit (§2, v1.2).
constexpr std::uint64_t kMaxLimit = 65'535;

// Server settings the parser enforces.
struct ParseLimits {
  std::uint64_t default_lease_ms = 30'000;
  std::uint64_t max_lease_ms = 3'600'000;
  std::uint64_t max_wait_ms = 300'000;
};

// The line is blank (empty or only spaces): no request, no reply (§1).
struct Blank {};

using ParseResult = std::variant<Request, ParseError, Blank>;

// Parses one line without its terminator (no `\n`; a trailing `\r` is
// ignored here). Never fails on any byte sequence.
ParseResult parse_line(std::string_view line, const ParseLimits& limits);

// Parses a plain unsigned decimal (leading zeros allowed, no sign). Returns
// false if `s` is empty, has a non-digit, or exceeds 2^64-1.
bool parse_u64(std::string_view s, std::uint64_t& out);

}  // namespace lockd::proto
