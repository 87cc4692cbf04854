// Reading the security files with toml++ (a real TOML 1.0 parser): one-line
// errors that start with "FILE:LINE: " where the parser knows the line.
// Private to src/auth.
#pragma once

#include <toml++/toml.h>

#include <optional>
#include <string>
#include <string_view>

namespace lockd::auth::detail {

// The file's bytes, or nullopt with `error` "FILE: cannot read: why".
std::optional<std::string> read_file(const std::string& path, std::string& error);
// Parses `text`; nullopt with `error` "FILE:LINE: what".
std::optional<toml::table> parse_toml(std::string_view text, const std::string& path,
                                      std::string& error);
// "FILE:LINE: " of a node.
std::string where(const std::string& path, const toml::node& node);

}  // namespace lockd::auth::detail
