// Seeding a data dir from a backup file; see restore.h.
#include "lockd/cluster/restore.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fmt/format.h>
#include <fstream>
#include <sstream>

#include "lockd/cluster/backup_file.h"
#include "lockd/cluster/peer_handshake.h"
#include "lockd/common/crc32c.h"

namespace lockd::cluster {
namespace {

// The whole file, or nullopt with `error` set.
std::optional<std::string> read_file(const std::string& path, std::string& error) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    error = std::strerror(errno);
    return std::nullopt;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<std::uint64_t>(st.st_size) > kMaxBackupBytes) {
    error = ::fstat(fd, &st) != 0 ? std::strerror(errno) : "larger than a backup can be";
    ::close(fd);
    return std::nullopt;
  }
  std::string out(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t got = 0;
  while (got < out.size()) {
    const ssize_t n = ::read(fd, out.data() + got, out.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      error = n < 0 ? std::strerror(errno) : "changed size while being read";
      ::close(fd);
      return std::nullopt;
    }
    got += static_cast<std::size_t>(n);
  }
  ::close(fd);
  return out;
}

// Written to a temporary name, synced, renamed, directory synced.
std::string write_marker(const std::string& dir, const std::string& line, bool sync) {
  const std::string path = dir + "/" + kRestoredFile;
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return "cannot write " + tmp + ": " + std::strerror(errno);
  const bool ok = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size()) &&
                  (!sync || ::fsync(fd) == 0);
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) return "cannot write " + path + ": " + std::strerror(errno);
  if (sync) {
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0 || ::fsync(dfd) != 0) {
      if (dfd >= 0) ::close(dfd);
      return "cannot sync " + dir + ": " + std::strerror(errno);
    }
    ::close(dfd);
  }
  return {};
}

std::string read_marker(const std::string& dir) {
  std::ifstream in(dir + "/" + kRestoredFile);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

std::string restore_from_backup(storage::FileStorage& storage, const std::string& dir,
                                const std::string& file, const locks::Limits& limits, bool sync) {
  const std::string where = "--restore-from " + file + ": ";
  std::string error;
  const std::optional<std::string> bytes = read_file(file, error);
  if (!bytes) return where + "cannot read it: " + error;
  const std::optional<DecodedBackup> backup = decode_backup(*bytes, error);
  if (!backup) return where + error;
  LockStateMachine sm(limits);
  BackupSummary summary;
  if (!load_backup(*backup, sm, summary, error)) return where + error;
  const BackupMeta& m = backup->meta;
  // The file's own checksum names its contents (a CRC over bytes that end
  // in their CRC is a constant, so not that).
  const std::uint32_t file_crc = crc32c(std::string_view(*bytes).substr(0, bytes->size() - 4));
  const std::string marker =
      fmt::format("lockd restored from index {} term {} crc {:08x}\n", m.index, m.term, file_crc);
  const bool empty = storage.snapshot().meta.index == 0 && storage.last_index() == 0 &&
                     storage.hard_state() == raft::HardState{};
  if (!empty) {
    // A stale flag (v1.3, protocol.md §10 rule 2): the data dir decides.
    // Re-seeding a member's data dir would let it vote with its votes
    // and acknowledgements forgotten.
    spdlog::info("data dir {} already holds {}: --restore-from {} is ignored", dir,
                 read_marker(dir) == marker ? "this restore" : "a node's data", file);
    return {};
  }
  // A new group: a new cluster id, the same on every member seeded from
  // this file (derived from its checksum, so an old member is refused),
  // and its first leader raises the token base (lock_state_machine.h).
  const std::uint64_t old_id = sm.cluster_id();
  sm.start_restored_group((static_cast<std::uint64_t>(file_crc) << 32) ^ m.index ^ m.cluster_id);
  // The marker first: a crash after it and before the save leaves an empty
  // log, which the next start seeds again.
  if (std::string err = write_marker(dir, marker, sync); !err.empty()) return where + err;
  const raft::Snapshot snap{raft::SnapshotMeta{m.index, m.term}, sm.snapshot()};
  const raft::StorageStatus st = storage.save(raft::HardState{m.term, raft::kNoNode, m.index}, {}, &snap);
  if (!st.ok()) return where + st.message;
  spdlog::info("restored from {}: {} snapshot at index {} term {} (cluster {}), {} keys, token floor {}; "
               "this is a new group, cluster {}; its first leader starts tokens above its wall clock",
               file, m.source == BackupSource::kSingle ? "single-mode" : "cluster", m.index, m.term,
               old_id == 0 ? std::string("none") : cluster_id_text(old_id), summary.keys, m.token_floor,
               cluster_id_text(sm.cluster_id()));
  return {};
}

}  // namespace lockd::cluster
