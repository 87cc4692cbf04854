// The backup file: what `GET /v1/snapshot` serves and `lockctl snapshot
// save` writes, and what `lockd --restore-from FILE` starts a new cluster
// from (docs/operations.md, "Backup and restore").
//
// One self-describing file: a fixed header naming where the state came
// from (cluster id, Raft index and term, the largest token it can hold),
// the replicated state machine's snapshot bytes
// (cluster/lock_state_machine.h) and a CRC-32C over everything before it.
// The same bytes whether a leader or a single-mode lockd served them, so
// either can seed a new cluster.
//
//   off  len
//     0    8  magic "LOCKDBAK"
//     8    4  format version, 1
//    12    4  source: 1 single mode, 2 cluster
//    16    8  cluster id (0: none — single mode, or a cluster without one)
//    24    8  index: the state machine's applied index
//    32    8  term of that index
//    40    8  token floor: no token in the file, nor any granted before
//                it was taken, is above it
//    48    8  taken at, Unix time in ms (informational)
//    56    8  n, length of the data
//    64    n  data: LockStateMachine::snapshot() bytes at `index`
//  64+n    4  CRC-32C of bytes [0, 64+n)
//
// Pure: bytes in, bytes out. The daemon, lockctl and the tests share it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "lockd/cluster/lock_state_machine.h"
#include "lockd/locks/lock_table.h"

namespace lockd::cluster {

inline constexpr std::string_view kBackupMagic = "LOCKDBAK";
inline constexpr std::uint32_t kBackupVersion = 1;
inline constexpr std::size_t kBackupHeaderBytes = 64;
// Largest file lockctl downloads and lockd restores (a 1 M-key table is
// ~100 MiB; the bound only keeps a wrong URL or file from eating memory).
inline constexpr std::uint64_t kMaxBackupBytes = 4ull << 30;

// Where a backup's state came from.
enum class BackupSource : std::uint32_t {
  kSingle = 1,   // a single-mode lockd (index 1, term 1 by convention)
  kCluster = 2,  // a cluster leader's applied state
};

struct BackupMeta {
  BackupSource source = BackupSource::kCluster;
  std::uint64_t cluster_id = 0;
  raft::Index index = 0;
  raft::Term term = 0;
  std::uint64_t token_floor = 0;
  std::uint64_t taken_unix_ms = 0;
};

// Header + data + CRC.
std::string encode_backup(const BackupMeta& meta, std::string_view data);

// A decoded file: `data` views into the bytes passed to decode_backup().
struct DecodedBackup {
  BackupMeta meta;
  std::string_view data;
};

// Checks magic, version, lengths and the CRC; nullopt with a one-line
// `error` (no file name: the caller prefixes it) when any fails.
std::optional<DecodedBackup> decode_backup(std::string_view bytes, std::string& error);

// What a full check of a decoded file found (lockctl prints it).
struct BackupSummary {
  std::size_t keys = 0;
  std::size_t holders = 0;
  locks::Token largest_token = 0;  // the largest token a key holds (0: none)
};

// Decodes the data into a state machine (every check restore() does:
// lengths, keys, tokens, deadlines) with the given limits and checks the
// header against it (the token floor covers every held token). False with
// a one-line `error` otherwise; `sm` then holds nothing useful.
bool load_backup(const DecodedBackup& backup, LockStateMachine& sm, BackupSummary& summary,
                 std::string& error);

// Limits no real table exceeds, for checking a file without a node's
// configuration (lockctl).
locks::Limits unbounded_limits();

}  // namespace lockd::cluster
