// Strict URI helpers for the admin API: percent-decoding of a path segment
// or query value, and splitting a query string.
//
// Why our own and not evhttp_uridecode(): that one passes malformed `%`
// escapes through silently and may turn `+` into a space; keys may contain
// `+` and a malformed escape must be a 400, not a lookup of a wrong key.
// Pure functions; no I/O.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace lockd::admin {

// Decodes `%XX` escapes (hex, either case); every other byte, `+` included,
// stands for itself. Returns nullopt on a truncated or non-hex escape.
std::optional<std::string> percent_decode(std::string_view in);

// Encodes every byte outside the RFC 3986 unreserved set as `%XX`, so the
// result is safe as one path segment or query value.
std::string percent_encode(std::string_view in);

// Splits `a=1&b=2` into decoded (name, value) pairs in order; a part with no
// `=` has an empty value, empty parts are skipped. Returns nullopt if any
// name or value is malformed.
std::optional<std::vector<std::pair<std::string, std::string>>> parse_query(std::string_view q);

}  // namespace lockd::admin
