// Restore: a new cluster started from a backup file (cluster/backup_file.h;
// docs/operations.md, "Backup and restore").
//
// Every member of the new group is started once with `--restore-from FILE`
// (the same file) on an empty data dir. Before anything else, each seeds
// its data dir with the file's state as a Raft snapshot at the file's
// (index, term) and a hard state (term, no vote, commit = index), all in
// one durable save — as etcdutl snapshot restore does. Every member then
// starts exactly like a node restarted after compacting its whole log:
// identical logs, so any of them may be elected, and a member added later
// gets the snapshot from the leader.
//
// What this gives, by construction rather than by extra state:
// - Every lock in the file is held with its token: the table is the file's.
// - Every new token is above the file's token floor: the file's token base
//   and token counter are kept, tokens are at least base + entry index and
//   above the counter, and every new entry's index is above the file's
//   index (backup_file.h: floor = the largest token granted, which is
//   base + index or, after a hand-off to several readers, the counter - 1).
// - It is a new group (LockStateMachine::start_restored_group): a new
//   cluster id derived from the file's checksum, the same on every member
//   seeded from it, so the old group's members are refused at the
//   handshake; and the group's first LeaderStart raises the token base to
//   its leader's wall clock, above every token the old group granted, also
//   after the backup (its tokens are its first leader's clock + one per
//   entry).
// - Leases resume where the file left them: table time restarts at the
//   file's latest applied table time (the new leader's first entry maps
//   its clock there), so a lease never ends early because of a restore.
//   Waiters are dropped by that first entry (their clients were on the old
//   group).
//
// v1.3 (protocol.md §10 "A node's lifecycle"): seeding only *stages* the
// file. The node then waits like an empty one (start_gate.h: a staged
// restore), and POST /v1/cluster/init on one member forms the restored
// group from it; the other members join as founding voters (seeded from
// the same file, or empty: they get the snapshot from the leader). A data
// dir that holds data ignores the flag (a unit file that still carries
// it); a wiped member that re-seeds itself from a stale flag is staged,
// and refused by the start gate like any wiped member.
#pragma once

#include <string>

#include "lockd/locks/lock_table.h"
#include "lockd/storage/file_storage.h"

namespace lockd::cluster {

inline constexpr const char* kRestoredFile = "RESTORED";

// Seeds `storage` (opened, in `dir`) from the backup `file`. Returns an
// empty string when the node may start (seeded now, or seeded from this
// same file before), else the one line to print (a file that does not
// decode or fails its checksum, a state that does not fit `limits`, a data
// dir holding other data, a failed write). `sync`: fsync (false only in
// tests).
std::string restore_from_backup(storage::FileStorage& storage, const std::string& dir,
                                const std::string& file, const locks::Limits& limits,
                                bool sync = true);

}  // namespace lockd::cluster
