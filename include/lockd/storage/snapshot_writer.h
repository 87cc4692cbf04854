// SnapshotWriter: takes a state-machine snapshot without stalling the loop,
// by fork() — the child gets a copy-on-write image of the table frozen at
// the applied index, serializes it and writes the snapshot file; the
// parent keeps serving and only pays for fork() itself (page tables: a few
// ms for a 1 M-lock table, see docs/storage.md) and for reading the bytes
// back in bounded slices.
//
// Why fork and not serializing in slices across loop turns: the table keeps
// changing between slices, so a sliced snapshot needs its own copy-on-write
// at key level (or a pause in applying) to be consistent with one index.
// The kernel already does that copy-on-write for us, for every structure at
// once, with no code in the lock table.
//
// Use from the daemon's loop (one snapshot at a time):
//
//   storage::SnapshotWriter writer(file_storage);
//   // when applied - last snapshot >= N entries (or bytes_since_snapshot() >= B):
//   writer.start({applied_index, term_of_applied},
//                [&] { return locks::serialize(table, app_header); });   // runs in the child
//   // every loop turn / timer tick while writer.busy():
//   if (auto done = writer.poll()) {
//     if (!done->status.ok()) { log done->status.message; exit non-zero; }   // device failure
//     raft.compact(done->meta.index, std::move(done->data));
//   }
//
// poll() never blocks: it reaps the child (waitpid WNOHANG), then reads at
// most `max_read_bytes` of the file per call, then adopts the file into the
// storage (rename, directory sync, WAL mark with one fdatasync, covered
// segments deleted — FileStorage::adopt_snapshot_file). The produce callback
// runs in a forked child of a single-threaded process: it may allocate, but
// must not touch sockets or other threads' state, and must not exit.
//
// A child that fails (write error, crash) is a kIo status; the half-written
// temp file is removed here or by the next open().
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <functional>
#include <optional>
#include <string>

#include "lockd/storage/file_storage.h"

namespace lockd::storage {

class SnapshotWriter {
 public:
  // Builds the state machine's snapshot bytes; runs in the child.
  using Produce = std::function<std::string()>;

  struct Done {
    raft::StorageStatus status;  // ok: the snapshot is durable and the log compacted on disk
    raft::SnapshotMeta meta;
    std::string data;  // the bytes produce() returned, for Raft::compact
  };

  explicit SnapshotWriter(FileStorage& storage, std::size_t max_read_bytes = 4u << 20);
  ~SnapshotWriter();  // kills and reaps a running child
  SnapshotWriter(const SnapshotWriter&) = delete;
  SnapshotWriter& operator=(const SnapshotWriter&) = delete;

  // Forks the child. Checks (a caller bug otherwise) that none is running
  // and that meta.index is beyond the stored snapshot. A failed fork is kIo.
  raft::StorageStatus start(raft::SnapshotMeta meta, const Produce& produce);
  bool busy() const { return state_ != State::kIdle; }
  pid_t child() const { return pid_; }
  // Advances; returns the result once the snapshot is durable (or failed).
  std::optional<Done> poll();

  // Last snapshot's timings, for logs and the benchmark.
  struct Timing {
    double fork_ms = 0;     // parent: the fork() call
    double child_ms = 0;    // start() to child exit observed
    double read_ms = 0;     // parent: reading the file back, summed over slices
    double adopt_ms = 0;    // parent: rename + dir sync + WAL mark + segment drop
    std::uint64_t bytes = 0;
  };
  const Timing& timing() const { return timing_; }

 private:
  enum class State { kIdle, kChild, kReading };
  Done finish(raft::StorageStatus status);

  FileStorage& storage_;
  std::size_t max_read_bytes_;
  State state_ = State::kIdle;
  pid_t pid_ = -1;
  int fd_ = -1;
  std::string temp_;
  raft::SnapshotMeta meta_;
  std::string data_;  // the snapshot's data read back so far
  std::uint64_t data_bytes_ = 0;
  std::uint32_t crc_ = 0;           // running CRC-32C of header + data read
  std::uint32_t expected_crc_ = 0;  // the file's last 4 bytes
  double started_ms_ = 0;
  Timing timing_;
};

}  // namespace lockd::storage
