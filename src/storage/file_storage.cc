// FileStorage: segmented WAL + snapshot files; see file_storage.h and
// docs/storage.md.
#include "lockd/storage/file_storage.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <utility>

#include "lockd/common/check.h"
#include "lockd/storage/fd_exhausted.h"
#include "lockd/raft/codec.h"
#include "lockd/storage/wal_format.h"

namespace lockd::storage {
namespace {

using raft::StorageError;
using raft::StorageStatus;

constexpr const char* kLockName = "LOCK";
constexpr std::string_view kTempSuffix = ".tmp";

// Writes all of `bytes` (write() may stop short); 0 or an errno.
int write_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
  return 0;
}

// Writes all of `bytes` at `offset` (pwrite may stop short); 0 or an errno.
int pwrite_all(int fd, std::string_view bytes, std::uint64_t offset) {
  while (!bytes.empty()) {
    const ssize_t n = ::pwrite(fd, bytes.data(), bytes.size(), static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    bytes.remove_prefix(static_cast<std::size_t>(n));
    offset += static_cast<std::uint64_t>(n);
  }
  return 0;
}

// A read-only mapping of a whole file: segments are scanned in place, with
// no copy and no zero-filled buffer (recovery reads every byte once).
class MappedFile {
 public:
  MappedFile() = default;
  ~MappedFile() { reset(); }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  // 0 or an errno.
  int map(const std::string& path) {
    reset();
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno;
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      const int err = errno;
      ::close(fd);
      return err;
    }
    size_ = static_cast<std::size_t>(st.st_size);
    if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        const int err = errno;
        ::close(fd);
        size_ = 0;
        return err;
      }
      ::madvise(p, size_, MADV_SEQUENTIAL);
      data_ = static_cast<const char*>(p);
    }
    ::close(fd);
    return 0;
  }
  void reset() {
    if (data_ != nullptr) ::munmap(const_cast<char*>(data_), size_);
    data_ = nullptr;
    size_ = 0;
  }
  std::string_view view() const { return {data_ == nullptr ? "" : data_, size_}; }

 private:
  const char* data_ = nullptr;
  std::size_t size_ = 0;
};

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

FileStorage::FileStorage(FileStorageOptions options) : options_(std::move(options)) {
  LOCKD_CHECK(!options_.dir.empty());
  LOCKD_CHECK(options_.segment_bytes > 0);
}

FileStorage::~FileStorage() {
  if (seg_fd_ >= 0) ::close(seg_fd_);
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the flock
}

std::string FileStorage::path(std::string_view name) const {
  std::string p = options_.dir;
  p.push_back('/');
  p.append(name);
  return p;
}

std::string FileStorage::temp_path(std::string_view stem) const {
  std::string p = path(stem);
  p.append(kTempSuffix);
  return p;
}

StorageStatus FileStorage::fail(StorageError e, const std::string& file, std::uint64_t offset,
                                const std::string& what) {
  std::string m = "data dir " + options_.dir + ": ";
  if (!file.empty()) m += file + " offset " + std::to_string(offset) + ": ";
  m += what;
  return StorageStatus{e, std::move(m)};
}

StorageStatus FileStorage::fail_io(const std::string& file, std::uint64_t offset, const char* op, int err) {
  return fail(StorageError::kIo, file, offset, std::string(op) + " failed: " + std::strerror(err));
}

StorageStatus FileStorage::sync_dir(std::atomic<std::uint64_t>& exhausted) {
  if (!options_.sync) return StorageStatus::Ok();
  const int fd = open_retrying_fds(options_.dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0, exhausted);
  if (fd < 0) return fail(StorageError::kIo, "", 0, std::string("open failed: ") + std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return fail(StorageError::kIo, "", 0, std::string("fsync of the directory failed: ") +
                                                          std::strerror(err));
  return StorageStatus::Ok();
}

// --- open ---

StorageStatus FileStorage::open() {
  LOCKD_CHECK(!opened_);
  if (::mkdir(options_.dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return fail(StorageError::kIo, "", 0, std::string("mkdir failed: ") + std::strerror(errno));
  }
  lock_fd_ = ::open(path(kLockName).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd_ < 0) return fail_io(kLockName, 0, "open", errno);
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) {
      return fail(StorageError::kLocked, "", 0, "locked by another process (" + std::string(kLockName) + ")");
    }
    return fail_io(kLockName, 0, "flock", errno);
  }

  // What the directory holds.
  std::vector<std::uint64_t> seqs;
  std::vector<raft::Index> snaps;
  DIR* d = ::opendir(options_.dir.c_str());
  if (d == nullptr) return fail(StorageError::kIo, "", 0, std::string("opendir failed: ") + std::strerror(errno));
  std::vector<std::string> temps;
  while (const dirent* de = ::readdir(d)) {
    const std::string_view name = de->d_name;
    if (auto s = parse_segment_name(name)) {
      seqs.push_back(*s);
    } else if (auto i = parse_snapshot_name(name)) {
      snaps.push_back(*i);
    } else if (ends_with(name, kTempSuffix)) {
      temps.emplace_back(name);
    }
  }
  ::closedir(d);
  std::sort(seqs.begin(), seqs.end());
  std::sort(snaps.begin(), snaps.end());

  // Leftovers of a crash mid-write: never renamed, so never part of the state.
  for (const std::string& t : temps) {
    if (::unlink(path(t).c_str()) != 0) return fail_io(t, 0, "unlink", errno);
    recovery_.notes.push_back("data dir " + options_.dir + ": removed leftover temporary file " + t);
  }

  // The newest snapshot file. It is complete (renamed only after its sync).
  raft::SnapshotMeta meta;
  if (!snaps.empty()) {
    const std::string name = snapshot_name(snaps.back());
    MappedFile file;
    if (int err = file.map(path(name)); err != 0) return fail_io(name, 0, "read", err);
    const std::string_view bytes = file.view();
    std::string what;
    switch (decode_snapshot_file(bytes, snapshot_, what)) {
      case SnapshotFileError::kOk: break;
      case SnapshotFileError::kCorrupt: return fail(StorageError::kCorrupt, name, 0, what);
      case SnapshotFileError::kVersion: return fail(StorageError::kVersion, name, 0, what);
    }
    if (snapshot_.meta.index != snaps.back()) {
      return fail(StorageError::kCorrupt, name, 0,
                  "holds index " + std::to_string(snapshot_.meta.index) + ", not the one in its name");
    }
    meta = snapshot_.meta;
    recovery_.snapshot_index = meta.index;
    recovery_.snapshot_bytes = bytes.size();
  }

  // Segments must be consecutive: a gap is a lost file, never guessed over.
  for (std::size_t i = 1; i < seqs.size(); ++i) {
    if (seqs[i] != seqs[i - 1] + 1) {
      return fail(StorageError::kCorrupt, "", 0,
                  "missing segment " + segment_name(seqs[i - 1] + 1) + " (found " + segment_name(seqs[i - 1]) +
                      " then " + segment_name(seqs[i]) + ")");
    }
  }

  LogReplay replay(meta);
  MappedFile mapped;
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    const std::string name = segment_name(seqs[i]);
    const bool last = i + 1 == seqs.size();
    if (int err = mapped.map(path(name)); err != 0) return fail_io(name, 0, "read", err);
    const std::string_view bytes = mapped.view();
    Segment seg;
    seg.sequence = seqs[i];
    const SegmentScan scan =
        scan_segment(bytes, last, [&](raft::WalRecord& r, std::size_t, std::string& what) {
          if (r.kind == raft::kEntryRecordKind) seg.max_index = std::max(seg.max_index, r.entry.index);
          return replay.feed(r, what);
        });
    switch (scan.end) {
      case ScanEnd::kClean: break;
      case ScanEnd::kCorrupt: return fail(StorageError::kCorrupt, name, scan.error_offset, scan.what);
      case ScanEnd::kVersion: return fail(StorageError::kVersion, name, scan.error_offset, scan.what);
      case ScanEnd::kTornTail:
        if (scan.valid_bytes < kSegmentHeaderBytes) {
          // The crash hit the segment's creation: nothing in it was acknowledged.
          if (::unlink(path(name).c_str()) != 0) return fail_io(name, 0, "unlink", errno);
          if (StorageStatus s = sync_dir(); !s.ok()) return s;
          recovery_.notes.push_back("data dir " + options_.dir + ": " + name + " offset 0: torn segment header (" +
                                    std::to_string(bytes.size()) + " bytes), removed the segment");
          continue;
        }
        {
          const int fd = ::open(path(name).c_str(), O_WRONLY | O_CLOEXEC);
          if (fd < 0) return fail_io(name, 0, "open", errno);
          int rc = ::ftruncate(fd, static_cast<off_t>(scan.valid_bytes));
          if (rc == 0 && options_.sync) rc = ::fdatasync(fd);
          const int err = errno;
          ::close(fd);
          if (rc != 0) return fail_io(name, scan.valid_bytes, "truncate", err);
        }
        recovery_.notes.push_back("data dir " + options_.dir + ": " + name + " offset " +
                                  std::to_string(scan.error_offset) + ": torn tail (" + scan.what +
                                  "), truncated " + std::to_string(bytes.size() - scan.valid_bytes) +
                                  " bytes");
        break;
    }
    if (scan.sequence != seqs[i]) {
      return fail(StorageError::kCorrupt, name, 0,
                  "header says sequence " + std::to_string(scan.sequence) + ", not the one in its name");
    }
    seg.bytes = scan.valid_bytes;
    if (last) seg_end_ = scan.valid_bytes + scan.zero_tail;
    recovery_.wal_bytes += scan.valid_bytes;
    segments_.push_back(seg);
  }
  replay.finish();
  recovery_.segments = segments_.size();
  recovery_.records = replay.records();

  // Older snapshots are superseded (their removal may not have reached the
  // disk before a crash).
  for (std::size_t i = 0; i + 1 < snaps.size(); ++i) {
    if (::unlink(path(snapshot_name(snaps[i])).c_str()) != 0) return fail_io(snapshot_name(snaps[i]), 0, "unlink", errno);
  }

  hard_state_ = replay.hard_state();
  entries_ = std::move(replay.entries());

  if (!segments_.empty()) {
    const std::string name = segment_name(segments_.back().sequence);
    seg_fd_ = ::open(path(name).c_str(), O_WRONLY | O_CLOEXEC);
    if (seg_fd_ < 0) return fail_io(name, 0, "open", errno);
  }
  opened_ = true;
  return StorageStatus::Ok();
}

// --- save ---

raft::SnapshotMark FileStorage::apply_snapshot(const raft::SnapshotMeta& meta, std::string data) {
  // Same rule as MemoryStorage::save_snapshot: keep the entries after the
  // snapshot only if the log holds its last entry with the same term.
  const raft::Index s = snapshot_.meta.index;
  bool matches = meta.index <= last_index() && meta.index > s && entries_[meta.index - s - 1].term == meta.term;
  if (matches) {
    entries_.erase(entries_.begin(), entries_.begin() + static_cast<std::ptrdiff_t>(meta.index - s));
  } else {
    entries_.clear();
  }
  snapshot_.meta = meta;
  if (keep_payloads_) {
    snapshot_.data = std::move(data);
  } else {
    snapshot_.data.clear();
  }
  bytes_since_snapshot_ = 0;
  return raft::SnapshotMark{meta, last_index()};
}

StorageStatus FileStorage::write_snapshot_file(const raft::Snapshot& snap) {
  const std::string tmp = temp_path("snap");
  const std::string tmp_name = std::string("snap") + std::string(kTempSuffix);
  std::string head;
  encode_snapshot_header(snap.meta, snap.data.size(), head);
  std::string tail;
  const std::uint32_t crc = raft::crc32c(snap.data, raft::crc32c(head));
  for (int i = 0; i < 4; ++i) tail.push_back(static_cast<char>(crc >> (8 * i)));

  // A leader's snapshot arrives inside a save(): retried in place like a
  // WAL segment (fd_exhausted.h), not put off.
  const int fd = open_retrying_fds(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600,
                                   fd_exhausted_snapshot);
  if (fd < 0) return fail_io(tmp_name, 0, "open", errno);
  int err = write_all(fd, head);
  if (err == 0) err = write_all(fd, snap.data);
  if (err == 0) err = write_all(fd, tail);
  if (err != 0) {
    ::close(fd);
    return fail_io(tmp_name, 0, "write", err);
  }
  if (options_.sync && ::fdatasync(fd) != 0) {
    err = errno;
    ::close(fd);
    return fail_io(tmp_name, 0, "fdatasync", err);
  }
  ::close(fd);
  const std::string name = snapshot_name(snap.meta.index);
  if (::rename(tmp.c_str(), path(name).c_str()) != 0) return fail_io(name, 0, "rename", errno);
  return sync_dir(fd_exhausted_snapshot);
}

StorageStatus FileStorage::write(const std::optional<raft::HardState>& hard_state,
                                 std::span<const raft::Entry> entries, bool& sync_pending) {
  LOCKD_CHECK(opened_);
  LOCKD_CHECK(!pending_);
  sync_pending = false;
  if (!failed_.ok()) return failed_;
  if (entries.empty() && !hard_state) return StorageStatus::Ok();
  StorageStatus s = append_records(hard_state, entries, nullptr, std::string(), Sync::kLeaveToCaller);
  sync_pending = pending_.has_value();
  return s;
}

StorageStatus FileStorage::synced(int err) {
  LOCKD_CHECK(pending_);
  const PendingSync p = std::move(*pending_);
  pending_.reset();
  if (!failed_.ok()) return failed_;
  if (err != 0) return failed_ = fail_io(p.name, p.offset, "fdatasync", err);
  ++stats_.syncs;
  stats_.sync_latency.record(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - p.started).count());
  return StorageStatus::Ok();
}

StorageStatus FileStorage::save(const std::optional<raft::HardState>& hard_state,
                                std::span<const raft::Entry> entries, const raft::Snapshot* snapshot) {
  LOCKD_CHECK(opened_);
  LOCKD_CHECK(!pending_);
  if (!failed_.ok()) return failed_;
  if (snapshot != nullptr && snapshot->meta.index <= snapshot_.meta.index) snapshot = nullptr;
  if (snapshot == nullptr && entries.empty() && !hard_state) return StorageStatus::Ok();
  if (snapshot != nullptr) {
    if (StorageStatus s = write_snapshot_file(*snapshot); !s.ok()) return failed_ = s;
    ++stats_.snapshots;
  }
  return append_records(hard_state, entries, snapshot ? &snapshot->meta : nullptr,
                        snapshot && keep_payloads_ ? snapshot->data : std::string(), Sync::kNow);
}

void FileStorage::release_read_side() {
  keep_payloads_ = false;
  for (raft::Entry& e : entries_) std::string().swap(e.data);
  std::string().swap(snapshot_.data);
}

std::string FileStorage::snapshot_path(raft::Index index) const { return path(snapshot_name(index)); }

StorageStatus FileStorage::adopt_snapshot_file(const raft::SnapshotMeta& meta, std::string data) {
  LOCKD_CHECK(opened_);
  LOCKD_CHECK(!pending_);
  if (!failed_.ok()) return failed_;
  if (meta.index <= snapshot_.meta.index) {
    // A snapshot from the leader overtook this one while it was written.
    // An older file is just garbage; one at the same index is the live
    // snapshot's name (same index, same committed state): leave it.
    if (meta.index < snapshot_.meta.index) ::unlink(snapshot_path(meta.index).c_str());
    return StorageStatus::Ok();
  }
  ++stats_.snapshots;
  return append_records(std::nullopt, {}, &meta, std::move(data), Sync::kNow);
}

StorageStatus FileStorage::append_records(const std::optional<raft::HardState>& hard_state,
                                          std::span<const raft::Entry> entries,
                                          const raft::SnapshotMeta* snap_meta, std::string snap_data,
                                          Sync sync) {
  std::string batch;
  const bool roll = seg_fd_ < 0 || segments_.back().bytes >= options_.segment_bytes;
  if (roll) {
    // A new segment restates the snapshot and hard state so that older
    // segments can be deleted once a snapshot covers their entries.
    const std::uint64_t seq = segments_.empty() ? 1 : segments_.back().sequence + 1;
    encode_segment_header(seq, batch);
    if (snapshot_.meta.index > 0) raft::encode_snapshot_mark({snapshot_.meta, last_index()}, batch);
    raft::encode_hard_state(hard_state_, batch);
  }
  const raft::Index old_snapshot = snapshot_.meta.index;
  if (snap_meta != nullptr) raft::encode_snapshot_mark(apply_snapshot(*snap_meta, std::move(snap_data)), batch);

  raft::Index max_index = 0;
  if (!entries.empty()) {
    // The core never re-sends compacted entries and never leaves a gap.
    const raft::Index first = entries.front().index;
    LOCKD_CHECK(first > snapshot_.meta.index);
    LOCKD_CHECK(first <= last_index() + 1);
    entries_.resize(first - snapshot_.meta.index - 1);
    const std::size_t before = batch.size();
    for (const raft::Entry& e : entries) {
      LOCKD_CHECK(e.index == last_index() + 1);
      if (keep_payloads_) {
        entries_.push_back(e);
      } else {
        entries_.push_back(raft::Entry{e.term, e.index, e.type, {}});
      }
      raft::encode_entry(e, batch);
    }
    max_index = entries.back().index;
    bytes_since_snapshot_ += batch.size() - before;
  }
  if (hard_state) {
    raft::encode_hard_state(*hard_state, batch);
    hard_state_ = *hard_state;
  }

  if (StorageStatus s = write_batch(batch, roll, max_index, entries.size(), sync); !s.ok()) return failed_ = s;
  if (snap_meta != nullptr) {
    // The mark is durable: older snapshot files and the segments the new
    // snapshot covers are no longer needed.
    if (old_snapshot > 0) {
      const std::string old = snapshot_name(old_snapshot);
      if (::unlink(path(old).c_str()) != 0 && errno != ENOENT) return failed_ = fail_io(old, 0, "unlink", errno);
    }
    if (StorageStatus s = drop_covered(); !s.ok()) return failed_ = s;
  }
  return StorageStatus::Ok();
}

StorageStatus FileStorage::write_batch(const std::string& batch, bool roll, raft::Index max_index,
                                       std::size_t entry_count, Sync sync) {
  const auto t0 = std::chrono::steady_clock::now();
  int fd = seg_fd_;
  std::uint64_t offset = roll ? 0 : segments_.back().bytes;
  std::string name = roll ? segment_name(segments_.empty() ? 1 : segments_.back().sequence + 1)
                          : segment_name(segments_.back().sequence);
  if (roll) {
    // The closed segment keeps its records only: recovery reads a zero
    // runway as a clean end in the last segment alone.
    if (seg_fd_ >= 0 && seg_end_ > segments_.back().bytes) {
      const std::string old = segment_name(segments_.back().sequence);
      if (::ftruncate(seg_fd_, static_cast<off_t>(segments_.back().bytes)) != 0) {
        return fail_io(old, segments_.back().bytes, "truncate", errno);
      }
      if (options_.sync && ::fdatasync(seg_fd_) != 0) return fail_io(old, segments_.back().bytes, "fdatasync", errno);
      seg_end_ = segments_.back().bytes;
    }
    // Out of descriptors (a client flood): retried briefly, never a
    // storage failure by itself (fd_exhausted.h).
    fd = open_retrying_fds(path(name).c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600, fd_exhausted_wal);
    if (fd < 0) return fail_io(name, 0, "open", errno);
  }
  const std::uint64_t end = offset + batch.size();
  const std::uint64_t old_end = roll ? 0 : seg_end_;
  // Past the runway: lay the next one down in the same sync (one size
  // change per runway_bytes of log instead of one per save).
  if (end > old_end && options_.runway_bytes > 0) {
    if (int err = write_runway(fd, end); err != 0) {
      if (roll) ::close(fd);
      return fail_io(name, end, "write", err);
    }
  }
  if (int err = pwrite_all(fd, batch, offset); err != 0) {
    if (roll) ::close(fd);
    return fail_io(name, offset, "write", err);
  }
  // write(): the one sync left is the caller's (a new segment's are not).
  const bool defer = sync == Sync::kLeaveToCaller && !roll;
  if (defer) {
    pending_ = PendingSync{name, offset, t0};
  } else if (options_.sync && ::fdatasync(fd) != 0) {
    const int err = errno;
    if (roll) ::close(fd);
    return fail_io(name, offset, "fdatasync", err);
  }
  seg_end_ = end > old_end ? end + options_.runway_bytes : old_end;
  if (roll) {
    if (seg_fd_ >= 0) ::close(seg_fd_);
    seg_fd_ = fd;
    segments_.push_back(Segment{segments_.empty() ? 1 : segments_.back().sequence + 1, 0, 0});
    ++stats_.segments_created;
    // The new name must survive a crash before anything in it counts.
    if (StorageStatus s = sync_dir(); !s.ok()) return s;
  }
  Segment& seg = segments_.back();
  seg.bytes += batch.size();
  seg.max_index = std::max(seg.max_index, max_index);
  ++stats_.saves;
  stats_.entries += entry_count;
  stats_.bytes += batch.size();
  if (defer) return StorageStatus::Ok();  // synced() counts the sync
  ++stats_.syncs;
  stats_.sync_latency.record(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
  return StorageStatus::Ok();
}

int FileStorage::write_runway(int fd, std::uint64_t from) {
  static const std::string kZeros(64u << 10, '\0');
  for (std::uint64_t done = 0; done < options_.runway_bytes;) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(kZeros.size(), options_.runway_bytes - done));
    if (int err = pwrite_all(fd, std::string_view(kZeros).substr(0, n), from + done); err != 0) return err;
    done += n;
  }
  return 0;
}

StorageStatus FileStorage::drop_covered() {
  // Oldest first, the directory synced after each, so a crash never leaves
  // a hole in the sequence (which open() would refuse).
  while (segments_.size() > 1 && segments_.front().max_index <= snapshot_.meta.index) {
    const std::string name = segment_name(segments_.front().sequence);
    if (::unlink(path(name).c_str()) != 0) return fail_io(name, 0, "unlink", errno);
    if (StorageStatus s = sync_dir(); !s.ok()) return s;
    segments_.erase(segments_.begin());
    ++stats_.segments_removed;
  }
  return StorageStatus::Ok();
}

}  // namespace lockd::storage
