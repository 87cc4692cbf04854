// Storage: what a Raft node keeps across a crash, behind a narrow interface.
//
// The core never touches storage while it runs: it reads it once when it is
// built (restart), then hands every change out in a Ready for the driver to
// write (see raft.h and driver.h). So the interface has a read side (open(),
// then the three views, used before the core is built) and one write call
// per Ready, save(), which is a group commit: everything the Ready carries
// becomes durable together with a single sync.
//
// Two kinds of error (STYLE §10):
// - What the disk or an operator can get wrong (a failed write or sync, a
//   corrupt or too-new data directory, a directory locked by another
//   process) is a StorageStatus value naming the file, the offset and what
//   is wrong, in one line. After a failed save() the driver stops the node:
//   it never calls Raft::advance(), since Raft's safety rests on "persisted
//   before acknowledged", and after a failed fsync the page cache cannot be
//   trusted, so the write is not retried either.
// - What only a caller bug can do (a gap in the appended indexes, an append
//   below the snapshot) is a LOCKD_CHECK.
//
// MemoryStorage serves tests and the simulator; a file WAL implements the
// same contract for cluster mode.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "lockd/raft/types.h"

namespace lockd::raft {

// Why storage could not do what was asked.
enum class StorageError {
  kOk = 0,     // done (for save(): durable)
  kIo,         // the device failed (EIO, ENOSPC, ...); the node must stop
  kCorrupt,    // a record failed its checksum, a segment is missing, indexes have a gap
  kVersion,    // the data was written by a newer format version
  kLocked,     // another process holds the data directory
};
std::string_view to_string(StorageError e);

// An error value plus a one-line message (file, offset, what is wrong).
struct StorageStatus {
  StorageError error = StorageError::kOk;
  std::string message;

  bool ok() const { return error == StorageError::kOk; }
  static StorageStatus Ok() { return {}; }
};

// Read side (restart) and write side (driver loop) of a node's durable state.
class Storage {
 public:
  virtual ~Storage() = default;

  // Loads whatever is stored. Called once, before the read side is used and
  // before any save(). A fresh, empty store opens fine.
  virtual StorageStatus open() = 0;

  // --- read side, used by Raft's constructor (after open()) ---
  // The last hard state written; default-constructed on a fresh node.
  virtual HardState hard_state() const = 0;
  // The latest snapshot written (meta.index == 0: none).
  virtual const Snapshot& snapshot() const = 0;
  // Every entry after the snapshot, in index order, contiguous.
  virtual std::span<const Entry> entries() const = 0;

  // --- write side: one call per Ready, or for the state machine's own snapshot ---
  // Makes durable, in this order: `snapshot` (when not null: drops every
  // entry up to snapshot->meta.index, and the whole log if the entry at
  // that index does not have that term; an older snapshot than the stored
  // one is ignored), then `entries` (contiguous; the first one may overwrite
  // a suffix: every stored entry at or after entries.front().index is
  // dropped first), then `hard_state` (when set). Returns once all of it is
  // durable, with one sync for the batch.
  //
  // The state machine's own snapshot (compaction) goes through the same
  // call with no entries and no hard state; the entries after it are kept.
  virtual StorageStatus save(const std::optional<HardState>& hard_state,
                             std::span<const Entry> entries, const Snapshot* snapshot) = 0;
};

// Storage in memory: "durable" means "survives the Raft object", which is
// exactly what the simulator's crash model needs. It cannot fail.
class MemoryStorage final : public Storage {
 public:
  StorageStatus open() override { return StorageStatus::Ok(); }
  HardState hard_state() const override { return hard_state_; }
  const Snapshot& snapshot() const override { return snapshot_; }
  std::span<const Entry> entries() const override { return entries_; }
  StorageStatus save(const std::optional<HardState>& hard_state, std::span<const Entry> entries,
                     const Snapshot* snapshot) override;

  // The three parts of save(), for tests that lay out a disk by hand and
  // for the simulator's torn writes (a crash that keeps only a prefix).
  void set_hard_state(const HardState& hs) { hard_state_ = hs; }
  void append(std::span<const Entry> entries);
  void save_snapshot(const Snapshot& snap);

  Index last_index() const;

 private:
  HardState hard_state_;
  Snapshot snapshot_;
  std::vector<Entry> entries_;  // entries_[i].index == snapshot_.meta.index + 1 + i
};

}  // namespace lockd::raft
