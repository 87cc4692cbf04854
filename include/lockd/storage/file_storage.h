// FileStorage: the Raft Storage contract (raft/storage.h) on disk — a
// segmented write-ahead log plus snapshot files in one data directory.
//
//   DIR/LOCK                      flock()ed for the life of the process
//   DIR/wal-<seq, 16 hex>.log     segments, consecutive sequence numbers
//   DIR/snap-<index, 16 hex>.snap snapshots (normally one)
//
// Every record (entry, hard state, snapshot mark) is a codec frame (length,
// version, kind, body, CRC-32C). save() appends one Ready's records with a
// single write() and makes them durable with a single fdatasync(): the
// group commit. docs/storage.md has the bytes, the sync points and the
// recovery rules.
//
// Use:
//   storage::FileStorage st({.dir = "/var/lib/lockd"});
//   raft::StorageStatus s = st.open();        // refusals: print s.message, exit 2
//   for (auto& line : st.recovery().notes) log it;   // torn tails truncated, leftovers removed
//   ... restore the state machine from st.snapshot(), build Raft(cfg, st) ...
//   per Ready: raft::drive_ready() -> persist_ready(st, rd) -> st.save(...)
//   a failed save(): log s.message, exit non-zero, never advance()
//   own snapshot: st.save(std::nullopt, {}, &snap) then raft.compact(index, data)
//     (or SnapshotWriter for big tables, snapshot_writer.h)
//
// Errors: open() and save() return raft::StorageStatus; messages are one
// line, "data dir DIR: FILE offset N: what is wrong". A failed save() is
// final: the storage refuses every later save() with the same status (a
// failed fsync leaves the page cache in an unknown state; retrying could
// acknowledge data that is not on disk). Caller bugs are LOCKD_CHECKs.
//
// Runs on the node's loop thread; not thread-safe. save() blocks for the
// write and the sync (~0.2 ms on an idle SSD); write() leaves the sync to
// the caller (the daemon's sync thread).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "lockd/common/latency_histogram.h"
#include "lockd/raft/codec.h"
#include "lockd/raft/storage.h"
#include "lockd/storage/fd_exhausted.h"

namespace lockd::storage {

struct FileStorageOptions {
  std::string dir;
  // A segment is closed and a new one started once it reaches this size
  // (checked between saves, so one large save can overshoot it).
  std::size_t segment_bytes = 64u << 20;
  // Test-only: skip fdatasync/fsync (tests that model crashes by cutting
  // files do not need the device). Never false in the daemon, except in a
  // measurement build (CMake option LOCKD_UNSAFE_NO_FSYNC).
  bool sync = true;
  // Zeros written ahead of the records, this many at a time, so that most
  // saves overwrite blocks the file already has: their fdatasync flushes
  // data only, with no journal commit for a size change (docs/storage.md,
  // "Preallocation"). 0: plain appends.
  std::size_t runway_bytes = 1u << 20;
};

// Counters for metrics; only grow. entries / syncs is the group-commit
// factor (entries made durable per fdatasync).
struct StorageStats {
  std::uint64_t saves = 0;             // save() calls that wrote anything
  std::uint64_t syncs = 0;             // fdatasync() calls on segments
  std::uint64_t entries = 0;           // log entries written
  std::uint64_t bytes = 0;             // WAL bytes written (records and headers)
  std::uint64_t snapshots = 0;         // snapshot files written
  std::uint64_t segments_created = 0;
  std::uint64_t segments_removed = 0;
  LatencyHistogram sync_latency;       // write + fdatasync of one save (write(): until synced())
};

// What open() found, for the startup log.
struct RecoveryInfo {
  std::size_t segments = 0;
  std::size_t records = 0;
  std::uint64_t wal_bytes = 0;
  raft::Index snapshot_index = 0;
  std::uint64_t snapshot_bytes = 0;
  std::vector<std::string> notes;  // torn tails truncated, leftovers removed: log each line
};

class FileStorage final : public raft::Storage {
 public:
  explicit FileStorage(FileStorageOptions options);
  ~FileStorage() override;

  FileStorage(const FileStorage&) = delete;
  FileStorage& operator=(const FileStorage&) = delete;

  // Creates DIR if missing, takes the lock, loads the newest snapshot and
  // replays the WAL. Refuses (kCorrupt, kVersion, kLocked, kIo) with one
  // line; truncates a torn tail of the last segment (noted in recovery()).
  raft::StorageStatus open() override;

  raft::HardState hard_state() const override { return hard_state_; }
  const raft::Snapshot& snapshot() const override { return snapshot_; }
  std::span<const raft::Entry> entries() const override { return entries_; }
  raft::StorageStatus save(const std::optional<raft::HardState>& hard_state,
                           std::span<const raft::Entry> entries,
                           const raft::Snapshot* snapshot) override;

  // Pipelined saves (issue 23, raft/driver.h start_ready): like save()
  // without a snapshot, but when all that is left is the live segment's
  // fdatasync, it is left to the caller: `sync_pending` comes back true,
  // the caller runs fdatasync(sync_fd()) (from any thread; -1: a test
  // storage that never syncs) and reports it with synced(). Until then
  // save(), write() and adopt_snapshot_file() are refused (checked). A
  // write that starts a new segment is made durable in full (its sync
  // points are in order: old segment, new one, directory).
  raft::StorageStatus write(const std::optional<raft::HardState>& hard_state,
                            std::span<const raft::Entry> entries, bool& sync_pending);
  bool sync_pending() const { return pending_.has_value(); }
  int sync_fd() const { return options_.sync ? seg_fd_ : -1; }
  // The pending sync ended: `err` is fdatasync's errno (0: durable). A
  // failure is final, as for save().
  raft::StorageStatus synced(int err);

  // Adopts a snapshot file already durable in DIR under its final name
  // (snapshot_path(meta.index): written, synced, renamed, directory synced —
  // by SnapshotWriter's child): records it in the WAL with one fdatasync and
  // drops the covered segments — the same as save() with that snapshot,
  // without the bytes passing through this process. `data` becomes the
  // read-side snapshot().data (may be left empty: the read side is only
  // used at startup, and Raft keeps its own copy). A snapshot that is not
  // newer than the stored one (a leader's snapshot arrived meanwhile) is
  // dropped and the call succeeds; Raft::compact() ignores it likewise.
  raft::StorageStatus adopt_snapshot_file(const raft::SnapshotMeta& meta, std::string data);
  std::string snapshot_path(raft::Index index) const;

  // Ends the read side (issue 23): the Raft core built from it holds the
  // log itself, so from now on this keeps only what save() needs of each
  // entry (index and term, for a snapshot's term check) and drops every
  // payload and the snapshot's bytes, instead of a second copy of the log.
  // entries() then returns entries with empty data; snapshot() its meta only.
  void release_read_side();

  const StorageStats& stats() const { return stats_; }
  const RecoveryInfo& recovery() const { return recovery_; }
  const FileStorageOptions& options() const { return options_; }
  raft::Index last_index() const { return snapshot_.meta.index + entries_.size(); }
  // Log bytes written since the last snapshot (for "snapshot every N bytes").
  std::uint64_t bytes_since_snapshot() const { return bytes_since_snapshot_; }
  std::size_t segment_count() const { return segments_.size(); }
  // Bytes of header and records in the newest segment (its runway not counted).
  std::uint64_t live_segment_bytes() const { return segments_.empty() ? 0 : segments_.back().bytes; }
  // A path inside DIR for a temporary file (removed by open() if a crash leaves it).
  std::string temp_path(std::string_view stem) const;

 private:
  struct Segment {
    std::uint64_t sequence = 0;
    raft::Index max_index = 0;  // largest entry index written into it (0: none)
    std::uint64_t bytes = 0;
  };

  raft::StorageStatus fail(raft::StorageError e, const std::string& file, std::uint64_t offset,
                           const std::string& what);
  raft::StorageStatus fail_io(const std::string& file, std::uint64_t offset, const char* op, int err);
  raft::StorageStatus write_snapshot_file(const raft::Snapshot& snap);
  // Applies a snapshot to the in-memory log; returns the mark to write.
  raft::SnapshotMark apply_snapshot(const raft::SnapshotMeta& meta, std::string data);
  // Who syncs a batch written to the live segment: write_batch itself
  // (save) or the caller (write(), which leaves it pending). A new
  // segment is always synced in full.
  enum class Sync { kNow, kLeaveToCaller };
  raft::StorageStatus append_records(const std::optional<raft::HardState>& hard_state,
                                     std::span<const raft::Entry> entries,
                                     const raft::SnapshotMeta* snap_meta, std::string snap_data, Sync sync);
  raft::StorageStatus write_batch(const std::string& batch, bool roll, raft::Index max_index,
                                  std::size_t entry_count, Sync sync);
  raft::StorageStatus drop_covered();
  // Zeros from `from` to `from + runway_bytes` of the live segment `fd`.
  int write_runway(int fd, std::uint64_t from);
  // `exhausted`: where an open out of descriptors counts (fd_exhausted.h).
  raft::StorageStatus sync_dir(std::atomic<std::uint64_t>& exhausted = fd_exhausted_wal);
  std::string path(std::string_view name) const;

  FileStorageOptions options_;
  int lock_fd_ = -1;
  int seg_fd_ = -1;  // the last segment, open for writing at segments_.back().bytes
  std::uint64_t seg_end_ = 0;  // its size: records, then zeros (the runway) up to here
  bool opened_ = false;
  raft::StorageStatus failed_;  // sticky after a failed save
  // write(): the sync left to the caller, if any.
  struct PendingSync {
    std::string name;  // the segment (for the error line)
    std::uint64_t offset = 0;
    std::chrono::steady_clock::time_point started;
  };
  std::optional<PendingSync> pending_;
  std::vector<Segment> segments_;
  raft::HardState hard_state_;
  raft::Snapshot snapshot_;
  std::vector<raft::Entry> entries_;  // entries_[i].index == snapshot_.meta.index + 1 + i
  bool keep_payloads_ = true;         // false after release_read_side(): entries_ hold no data
  std::uint64_t bytes_since_snapshot_ = 0;
  StorageStats stats_;
  RecoveryInfo recovery_;
};

}  // namespace lockd::storage
