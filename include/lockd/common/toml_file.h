// Reading a TOML file (toml++, Debian's libtomlplusplus-dev) with errors an
// operator can act on: every message is one line that starts with
// "FILE:LINE: ", like a compiler's, so an editor jumps to it.
//
// For every TOML file lockd reads: the config file (daemon/config_file.h)
// and the security files. toml++ implements TOML 1.0: `10_000` is an
// integer, a key given twice is an error, strings and tables are real.
#pragma once

#include <toml++/toml.h>

#include <optional>
#include <string>
#include <string_view>

namespace lockd {

// Parses `path`. nullopt with `error` set to "FILE:LINE: what" for a file
// that is not TOML, or "FILE: cannot read: why" for one that cannot be read.
std::optional<toml::table> read_toml_file(const std::string& path, std::string& error);

// Parses `text` as if read from `path` (for tests and callers that already
// hold the bytes); nullopt with `error` set to "FILE:LINE: what".
std::optional<toml::table> parse_toml_text(std::string_view text, const std::string& path,
                                           std::string& error);

// "FILE:LINE: " for a node (or key) of a table read from `path`; "FILE: "
// when the parser kept no position.
std::string toml_where(const std::string& path, const toml::source_region& where);

}  // namespace lockd
