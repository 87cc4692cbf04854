// FileSnapshotBytes: the latest snapshot's bytes read from its file when
// a transfer sends them (raft/snapshot_bytes.h says why they are not kept
// in memory).
//
// Holds a descriptor opened when the snapshot became the latest, so a
// newer snapshot replacing (unlinking) the file does not cut a transfer
// short. The file was checked when it was made (SnapshotWriter reads it
// back against its CRC) or loaded (FileStorage::open), but it is read
// again later, from a disk that may have failed since: the CRC is checked
// again as the chunks go out, and the last chunk is returned only if the
// whole file matches (a follower installs nothing before the last chunk).
// A read error or a mismatch calls on_error, which stops the node.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "lockd/raft/snapshot_bytes.h"
#include "lockd/raft/types.h"

namespace lockd::storage {

// Where the data of the snapshot file open at `fd` lies, and the CRCs to
// check it with, once its header is found to be `meta`'s. Shared by the
// read-back of a new snapshot (SnapshotWriter) and FileSnapshotBytes.
struct SnapshotFileFrame {
  std::uint64_t data_offset = 0;  // the header's length
  std::uint64_t data_bytes = 0;
  std::uint32_t head_crc = 0;      // CRC-32C of the header: a running CRC's seed
  std::uint32_t expected_crc = 0;  // the file's last 4 bytes: CRC-32C of header + data
};
// Empty, with `what` set, when the file cannot be read, is shorter than
// its header, or names another snapshot.
std::optional<SnapshotFileFrame> read_snapshot_frame(int fd, const raft::SnapshotMeta& meta, std::string& what);

class FileSnapshotBytes final : public raft::SnapshotBytes {
 public:
  // Told one line (file, offset, what failed); must not return.
  using OnError = std::function<void(const std::string& message)>;

  // Opens `path`, the snapshot file of `meta`. A file that cannot be
  // opened or does not hold `meta`'s header calls on_error.
  static std::shared_ptr<const FileSnapshotBytes> open(const std::string& path, const raft::SnapshotMeta& meta,
                                                       OnError on_error);
  ~FileSnapshotBytes() override;
  FileSnapshotBytes(const FileSnapshotBytes&) = delete;
  FileSnapshotBytes& operator=(const FileSnapshotBytes&) = delete;

  std::uint64_t size() const override { return size_; }
  std::string read(std::uint64_t offset, std::size_t len) const override;

 private:
  FileSnapshotBytes(int fd, std::string path, std::uint64_t data_offset, std::uint64_t size,
                    std::uint32_t head_crc, std::uint32_t expected_crc, OnError on_error);
  [[noreturn]] void fail(const std::string& what) const;
  void pread_all(char* out, std::size_t len, std::uint64_t file_offset) const;
  // The CRC of the whole data, read again in slices (a transfer that did
  // not read it front to back: a follower rewound it).
  std::uint32_t crc_of_all() const;

  int fd_;
  std::string path_;
  std::uint64_t data_offset_;  // the header's length
  std::uint64_t size_;
  std::uint32_t head_crc_;      // CRC-32C of the header: the running CRC's seed
  std::uint32_t expected_crc_;  // the file's last 4 bytes
  OnError on_error_;
  // The running CRC of data read front to back, up to crc_upto_.
  mutable std::uint32_t crc_;
  mutable std::uint64_t crc_upto_ = 0;
};

}  // namespace lockd::storage
