#include "lockd/storage/file_snapshot_bytes.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "lockd/raft/codec.h"
#include "lockd/storage/fd_exhausted.h"
#include "lockd/storage/wal_format.h"

namespace lockd::storage {

namespace {
constexpr std::size_t kCheckSliceBytes = 1u << 20;
}  // namespace

std::optional<SnapshotFileFrame> read_snapshot_frame(int fd, const raft::SnapshotMeta& meta, std::string& what) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    what = std::string("stat failed: ") + std::strerror(errno);
    return std::nullopt;
  }
  const auto file_bytes = static_cast<std::uint64_t>(st.st_size);
  const std::size_t head_bytes = snapshot_header_bytes(meta);
  if (file_bytes < head_bytes + 4) {
    what = "shorter than its header";
    return std::nullopt;
  }
  std::string expected;
  encode_snapshot_header(meta, file_bytes - head_bytes - 4, expected);
  std::string head(head_bytes, '\0');
  char tail[4];
  if (::pread(fd, head.data(), head.size(), 0) != static_cast<ssize_t>(head.size()) ||
      ::pread(fd, tail, 4, static_cast<off_t>(file_bytes - 4)) != 4) {
    what = "read failed";
    return std::nullopt;
  }
  if (head != expected) {
    what = "header does not match the snapshot at index " + std::to_string(meta.index);
    return std::nullopt;
  }
  SnapshotFileFrame f;
  f.data_offset = head_bytes;
  f.data_bytes = file_bytes - head_bytes - 4;
  f.head_crc = raft::crc32c(head);
  for (int i = 0; i < 4; ++i) f.expected_crc |= static_cast<std::uint32_t>(static_cast<unsigned char>(tail[i])) << (8 * i);
  return f;
}

std::shared_ptr<const FileSnapshotBytes> FileSnapshotBytes::open(const std::string& path,
                                                                 const raft::SnapshotMeta& meta, OnError on_error) {
  // Read to send or compact against, on the loop: retried in place like a
  // WAL segment when descriptors run short (fd_exhausted.h).
  const int fd = open_retrying_fds(path.c_str(), O_RDONLY | O_CLOEXEC, 0, fd_exhausted_snapshot);
  if (fd < 0) {
    on_error(path + ": open failed: " + std::strerror(errno));
    std::abort();  // on_error must not return
  }
  std::string what;
  const std::optional<SnapshotFileFrame> f = read_snapshot_frame(fd, meta, what);
  if (!f) {
    ::close(fd);
    on_error(path + ": " + what);
    std::abort();
  }
  return std::shared_ptr<const FileSnapshotBytes>(new FileSnapshotBytes(
      fd, path, f->data_offset, f->data_bytes, f->head_crc, f->expected_crc, std::move(on_error)));
}

FileSnapshotBytes::FileSnapshotBytes(int fd, std::string path, std::uint64_t data_offset, std::uint64_t size,
                                     std::uint32_t head_crc, std::uint32_t expected_crc, OnError on_error)
    : fd_(fd),
      path_(std::move(path)),
      data_offset_(data_offset),
      size_(size),
      head_crc_(head_crc),
      expected_crc_(expected_crc),
      on_error_(std::move(on_error)),
      crc_(head_crc) {}

FileSnapshotBytes::~FileSnapshotBytes() { ::close(fd_); }

void FileSnapshotBytes::fail(const std::string& what) const {
  on_error_(path_ + ": " + what);
  std::abort();  // on_error must not return
}

void FileSnapshotBytes::pread_all(char* out, std::size_t len, std::uint64_t file_offset) const {
  std::size_t got = 0;
  while (got < len) {
    const ssize_t n = ::pread(fd_, out + got, len - got, static_cast<off_t>(file_offset + got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      fail("offset " + std::to_string(file_offset + got) + ": read failed" +
           (n < 0 ? std::string(": ") + std::strerror(errno) : std::string(" (file shorter than it was)")));
    }
    got += static_cast<std::size_t>(n);
  }
}

std::uint32_t FileSnapshotBytes::crc_of_all() const {
  std::uint32_t crc = head_crc_;
  std::string slice;
  for (std::uint64_t at = 0; at < size_;) {
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(kCheckSliceBytes, size_ - at));
    slice.resize(n);
    pread_all(slice.data(), n, data_offset_ + at);
    crc = raft::crc32c(slice, crc);
    at += n;
  }
  return crc;
}

std::string FileSnapshotBytes::read(std::uint64_t offset, std::size_t len) const {
  if (offset > size_ || len > size_ - offset) fail("read past the end (a caller bug)");
  std::string out(len, '\0');
  pread_all(out.data(), len, data_offset_ + offset);
  // Chunks usually go out front to back: checksum them on the way.
  if (offset == 0) {
    crc_ = head_crc_;
    crc_upto_ = 0;
  }
  if (offset == crc_upto_) {
    crc_ = raft::crc32c(out, crc_);
    crc_upto_ += len;
  }
  if (offset + len == size_) {
    const std::uint32_t crc = crc_upto_ == size_ ? crc_ : crc_of_all();
    if (crc != expected_crc_) fail("bad checksum reading it for a transfer; nothing of it installed anywhere");
  }
  return out;
}

}  // namespace lockd::storage
