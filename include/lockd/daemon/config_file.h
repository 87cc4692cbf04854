// The config file (`--config FILE`): TOML whose top-level keys are lockd's
// long flags without the dashes (`max-keys = 10_000`, `peer = ["1=…", …]`).
//
// Every flag registered on the CLI11 app is a key, so adding a flag adds
// its key: nothing to list here. A key the command line also gives is
// checked but not applied (the command line wins; a repeatable flag such as
// --peer is replaced whole, not appended to).
//
// Refused, each with "FILE:LINE: …": TOML syntax errors, a key given twice,
// unknown keys (with a hint when `max_keys` was meant as `max-keys`),
// tables (`[server]`, `[[peer]]`, inline tables: the file is flat, one key
// per flag), a value of the wrong TOML type (`max-keys = "10"`, `admin =
// 7071`), an array for a flag taken once, and whatever the flag's own check
// refuses (`mode = "triple"`).
#pragma once

#include <CLI/CLI.hpp>

#include <map>
#include <string>

namespace lockd::daemon {

// Where each flag set by the file came from: "--max-keys" -> "FILE:LINE".
using ConfigOrigins = std::map<std::string, std::string>;

// Applies `path` to `app` after app.parse() took the command line. Returns
// "" or the one-line error ("FILE:LINE: what").
std::string apply_config_file(CLI::App& app, const std::string& path, ConfigOrigins& origins);

}  // namespace lockd::daemon
