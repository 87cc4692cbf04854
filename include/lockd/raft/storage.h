// Storage: what a Raft node keeps across a crash, behind a narrow interface.
//
// The core never touches storage while it runs: it reads it once when it is
// built (restart), then hands every change out in a Ready for the caller to
// write (see raft.h). So the interface has one read side, used by the
// constructor, and one write side, used by the driver loop. The memory
// implementation serves tests and the simulator; a file WAL (one framed
// record per entry, codec.h, fsync before Raft::advance) fits the same
// contract in cluster mode.
//
// Errors: the memory implementation cannot fail. A disk implementation
// reports a failed write as a StorageError; the driver must then stop the
// node (never call advance()), since Raft's safety rests on "persisted
// before acknowledged".
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "lockd/raft/types.h"

namespace lockd::raft {

// Outcome of a storage write.
enum class StorageError {
  kOk = 0,      // durable
  kIo,          // the device failed; the node must stop
  kCorrupt,     // a record failed its checksum while loading
  kOutOfOrder,  // caller bug in a disk implementation: a gap in the log
};

// Read side (restart) and write side (driver loop) of a node's durable state.
class Storage {
 public:
  virtual ~Storage() = default;

  // --- read side, used by Raft's constructor ---
  // The last hard state written; default-constructed on a fresh node.
  virtual HardState hard_state() const = 0;
  // The latest snapshot written (meta.index == 0: none).
  virtual const Snapshot& snapshot() const = 0;
  // Every entry after the snapshot, in index order, contiguous.
  virtual std::span<const Entry> entries() const = 0;

  // --- write side, used by the driver after Raft::ready() ---
  virtual StorageError set_hard_state(const HardState& hs) = 0;
  // Appends `entries` (contiguous); the first one may overwrite a suffix:
  // every stored entry at or after entries.front().index is dropped first.
  virtual StorageError append(std::span<const Entry> entries) = 0;
  // Installs a snapshot: drops every entry up to snap.meta.index, and the
  // whole log if the entry at that index does not have that term.
  virtual StorageError save_snapshot(const Snapshot& snap) = 0;
};

// Storage in memory: "durable" means "survives the Raft object", which is
// exactly what the simulator's crash model needs.
class MemoryStorage final : public Storage {
 public:
  HardState hard_state() const override { return hard_state_; }
  const Snapshot& snapshot() const override { return snapshot_; }
  std::span<const Entry> entries() const override { return entries_; }

  StorageError set_hard_state(const HardState& hs) override;
  StorageError append(std::span<const Entry> entries) override;
  StorageError save_snapshot(const Snapshot& snap) override;

  Index last_index() const;

 private:
  HardState hard_state_;
  Snapshot snapshot_;
  std::vector<Entry> entries_;  // entries_[i].index == snapshot_.meta.index + 1 + i
};

}  // namespace lockd::raft
