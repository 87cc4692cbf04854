// `lockctl snapshot save FILE` and `lockctl snapshot verify FILE`: backups
// (cluster/backup_file.h, docs/operations.md "Backup and restore").
#pragma once

#include <string>

#include "commands.h"

namespace lockd::lockctl {

// Seconds one snapshot download may go without a byte (a big table takes
// the server a few seconds to serialize).
constexpr int kSnapshotTimeoutMs = 120'000;

// Creates FILE.tmp.PID first (a FILE that cannot be written is said before
// the server is asked), GETs /v1/snapshot (following a follower's
// `leader_admin` once), checks the whole file (checksum, then every key,
// token and deadline), and only then writes FILE atomically: the temp
// file, fsync, rename, fsync of the directory. Prints one summary line (or
// the file's fields as JSON with --json) once FILE is in place, never
// before. Exit 0 saved; 1 refused by the server or a damaged download
// (FILE untouched); 2 FILE cannot be written (one line on stderr, nothing
// on stdout, no temp file left); 3 unreachable.
int cmd_snapshot_save(const Globals& g, const std::string& file);

// Checks a saved FILE the same way and prints the same line. Exit 0 good,
// 1 damaged, 2 unreadable.
int cmd_snapshot_verify(const Globals& g, const std::string& file);

}  // namespace lockd::lockctl
