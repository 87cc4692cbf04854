// SnapshotWriter: takes a state-machine snapshot without stalling the loop,
// by fork() — the child gets a copy-on-write image of the table frozen at
// the applied index, serializes it and writes the snapshot file; the
// parent keeps serving and only pays for fork() itself (page tables: a few
// ms for a 1 M-lock table, see docs/storage.md) and for reading the file
// back in bounded slices to check it (the bytes are not kept: Raft reads
// them from the file if a follower needs them, raft/snapshot_bytes.h).
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
//   if (!writer.busy() && policy.due(applied, file_storage.snapshot().meta.index,
//                                    file_storage.bytes_since_snapshot(), last_snapshot_bytes))
//     writer.start({applied_index, term_of_applied},
//                [&] { return locks::serialize(table, app_header); });   // runs in the child
//   // every loop turn / timer tick while writer.busy():
//   if (auto done = writer.poll()) {
//     if (!done->status.ok()) { log done->status.message; exit non-zero; }   // device failure
//     raft.compact(done->meta.index,
//                  FileSnapshotBytes::open(file_storage.snapshot_path(done->meta.index), done->meta, stop));
//   }
//
// The child does every slow durable step: serialize, write the file under a
// temporary name, fdatasync, rename into place, fsync the directory.
// poll() never blocks: it reaps the child (waitpid WNOHANG), then reads at
// most `max_read_bytes` of the file per call (checking its CRC as it goes),
// then adopts it (FileStorage::adopt_snapshot_file: the WAL mark with one
// fdatasync, covered segments deleted). The produce callback
// runs in a forked child of a single-threaded process: it may allocate, but
// must not touch sockets or other threads' state, and must not exit.
//
// A child that fails (write error, crash) is a kIo status; the half-written
// temp file is removed here or by the next open().
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "lockd/raft/raft.h"
#include "lockd/storage/file_storage.h"

namespace lockd::storage {

// When to snapshot: after `every_entries` applied entries or `every_bytes`
// of log written since the last snapshot, whichever comes first (0 turns a
// bound off) — and, with `log_percent` > 0, never before the log written
// since the last snapshot is at least `log_percent`% of that snapshot's
// size (the Raft thesis §5.1.1, LogCabin's snapshotRatio). A snapshot costs
// O(table) however few entries it covers (a fork, the serialized table
// written and synced, the parent's copy-on-write faults while the child
// runs); the ratio makes that cost O(1) per byte of log: with 1 M held
// locks (a ~60 MB snapshot) and a 10,000-entry spacing the daemon
// snapshotted about every second and its loop stalled past the election
// timeout (docs/cluster.md "Snapshots"). The daemon's flags
// (--snapshot-entries; the cluster sets log_percent 25).
struct SnapshotPolicy {
  std::uint64_t every_entries = 100'000;
  std::uint64_t every_bytes = 256u << 20;
  std::uint64_t log_percent = 0;

  bool due(raft::Index applied, raft::Index snapshot_index, std::uint64_t bytes_since_snapshot,
           std::uint64_t last_snapshot_bytes = 0) const {
    if (applied <= snapshot_index) return false;
    if (log_percent > 0 && bytes_since_snapshot * 100 < log_percent * last_snapshot_bytes) return false;
    return (every_entries > 0 && applied - snapshot_index >= every_entries) ||
           (every_bytes > 0 && bytes_since_snapshot >= every_bytes);
  }
};

// Leader: whether a due snapshot waits for a member that is catching up.
// A member receiving the leader's snapshot, or replaying the log after it,
// needs that log: compacting it away under it sends the whole snapshot
// again (a learner joining a group with 1 M locks was sent two 60 MB
// snapshots in a row, docs/benchmarks/membership.md). So the snapshot waits while a
// member heard from this election period is in the snapshot state, or is
// a learner more than `lag_entries` behind `applied` — as long as the log
// written since the last snapshot stays under `max_log_percent`% of that
// snapshot (the memory bound; past it the member is sent a snapshot as
// before). Returns the member waited for, or kNoNode. A member not heard
// from for more than `max_silent_ticks` holds nothing (dead, partitioned),
// nor does a voter that merely lags (a loaded follower: holding for it
// measurably raised the leader's memory at 1 M locks, and it is not why
// learners were sent snapshots twice). Silence is counted in ticks, not
// by the election period's activity flag: a learner decoding a 60 MB
// snapshot on its loop answers nothing for a second or two, and with the
// flag the hold ended then, the log was compacted under it, and it was
// sent the whole snapshot a second time (docs/benchmarks/membership.md, "sent the snapshot twice").
struct CatchUpHold {
  std::uint64_t lag_entries = 10'000;
  std::uint64_t max_log_percent = 50;
  std::uint64_t max_silent_ticks = 200;  // the daemon: kCatchUpHoldSilenceNs in ticks

  raft::NodeId waits_for(const std::vector<raft::PeerProgress>& members, raft::Index applied,
                         std::uint64_t bytes_since_snapshot, std::uint64_t last_snapshot_bytes) const {
    if (max_log_percent == 0 || bytes_since_snapshot * 100 >= max_log_percent * last_snapshot_bytes) {
      return raft::kNoNode;
    }
    for (const raft::PeerProgress& p : members) {
      if (p.ticks_since_contact > max_silent_ticks) continue;
      if (p.state == raft::ProgressState::kSnapshot ||
          (!p.voter && p.match < applied && applied - p.match > lag_entries)) {
        return p.id;
      }
    }
    return raft::kNoNode;
  }
};

class SnapshotWriter {
 public:
  // Builds the state machine's snapshot bytes; runs in the child, or on
  // the calling thread (Where::kThread).
  using Produce = std::function<std::string()>;

  struct Done {
    raft::StorageStatus status;  // ok: the snapshot is durable and the log compacted on disk
    raft::SnapshotMeta meta;
    std::uint64_t bytes = 0;  // the size of what produce() returned (its data, without the file's header)
  };

  explicit SnapshotWriter(FileStorage& storage, std::size_t max_read_bytes = 1u << 20);
  ~SnapshotWriter();  // kills and reaps a running child
  SnapshotWriter(const SnapshotWriter&) = delete;
  SnapshotWriter& operator=(const SnapshotWriter&) = delete;

  // Where the snapshot is made. kChild forks: the child builds the bytes
  // and writes the file, so O(table) work stays off the loop; the loop
  // pays the fork and then a copy-on-write fault for every page it writes
  // (on this project's VMs a page fault costs ~25 µs). kThread builds the
  // bytes on the calling thread, from the table as it is now, and leaves
  // the file's writes and syncs to a thread: for a small table much
  // cheaper than a fork (docs/storage.md "Snapshots of a small table").
  enum class Where { kChild, kThread };

  // Starts the snapshot. Checks (a caller bug otherwise) that none is
  // running and that meta.index is beyond the stored snapshot. A failed
  // fork, or no thread, is kIo. Either way poll() then reads the file back
  // and adopts it. The file (and the directory, to sync it) is opened here,
  // on the caller's thread; out of descriptors (EMFILE/ENFILE) is no
  // failure (§11a): it is counted in lockd_fd_exhausted_total
  // {what="snapshot"} and the snapshot is put off — Ok, not busy(), and
  // start() does nothing until a back-off (10 ms doubling to 1 s) passed,
  // so the caller simply asks again. poll()'s read-back open backs off
  // the same way.
  raft::StorageStatus start(raft::SnapshotMeta meta, const Produce& produce, Where where = Where::kChild);
  bool busy() const { return state_ != State::kIdle; }
  pid_t child() const { return pid_; }
  // Advances; returns the result once the snapshot is durable (or failed).
  std::optional<Done> poll();

  // Last snapshot's timings, for logs and the benchmark.
  struct Timing {
    double fork_ms = 0;     // parent: the fork() call (kChild)
    bool on_thread = false;  // Where::kThread: no fork; child_ms is the thread's time
    double child_ms = 0;    // start() to the child's exit (or the thread's end) observed
    double read_ms = 0;     // parent: reading the file back, summed over slices
    double adopt_ms = 0;    // parent: WAL mark (one fdatasync) + covered segments dropped
    std::uint64_t bytes = 0;
  };
  const Timing& timing() const { return timing_; }

 private:
  enum class State { kIdle, kChild, kThread, kWritten, kReading };
  Done finish(raft::StorageStatus status, bool adopted = false);
  // An open failed for want of descriptors: count it and wait a while.
  void out_of_descriptors(const std::string& what);
  bool backing_off() const;

  FileStorage& storage_;
  std::size_t max_read_bytes_;
  State state_ = State::kIdle;
  pid_t pid_ = -1;
  std::thread thread_;                   // Where::kThread
  std::atomic<bool> thread_done_{false};
  int thread_step_ = 0;                  // write_snapshot_file's result, read after join
  int thread_errno_ = 0;
  int fd_ = -1;
  std::string temp_;
  std::string final_;
  raft::SnapshotMeta meta_;
  std::string slice_;  // the slice of the file read back last (checked, then dropped)
  std::uint64_t data_read_ = 0;
  std::uint64_t data_bytes_ = 0;
  std::size_t head_bytes_ = 0;   // the snapshot file's header (version 2: with its configuration)
  std::uint32_t crc_ = 0;           // running CRC-32C of header + data read
  std::uint32_t expected_crc_ = 0;  // the file's last 4 bytes
  double started_ms_ = 0;
  Timing timing_;
  // Out of descriptors: no open is tried before retry_at_ms_.
  double retry_at_ms_ = 0;
  int fd_failures_in_row_ = 0;
};

}  // namespace lockd::storage
