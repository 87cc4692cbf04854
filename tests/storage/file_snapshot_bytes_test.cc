// FileSnapshotBytes: the snapshot file as the chunks Raft sends a follower.
#include "lockd/storage/file_snapshot_bytes.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "lockd/storage/file_storage.h"
#include "lockd/storage/wal_format.h"
#include "temp_dir.h"

namespace lockd::storage {
namespace {

using test::TempDir;

// A snapshot file at index 7 written as the daemon writes a leader's.
std::string write_snapshot(const std::string& dir, const std::string& data) {
  FileStorage st(FileStorageOptions{dir, 64u << 20, false});
  EXPECT_TRUE(st.open().ok());
  raft::Snapshot snap{{7, 2}, data};
  EXPECT_TRUE(st.save(raft::HardState{2, 0, 7}, {}, &snap).ok());
  return st.snapshot_path(7);
}

std::string data_of(std::size_t n) {
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>(i * 131 + 7);
  return s;
}

// As the daemon's: one line, then the process ends.
[[noreturn]] void stop(const std::string& what) {
  std::fprintf(stderr, "stopping: %s\n", what.c_str());
  std::_Exit(3);
}

std::string read_in_chunks(const raft::SnapshotBytes& b, std::size_t chunk) {
  std::string out;
  for (std::uint64_t at = 0; at < b.size(); at += chunk) {
    out += b.read(at, static_cast<std::size_t>(std::min<std::uint64_t>(chunk, b.size() - at)));
  }
  return out;
}

TEST(FileSnapshotBytes, ReadsTheDataInChunksEvenAfterTheFileIsReplaced) {
  TempDir dir;
  const std::string data = data_of(100'000);
  const std::string path = write_snapshot(dir.path(), data);
  const auto bytes = FileSnapshotBytes::open(path, {7, 2}, stop);
  EXPECT_EQ(bytes->size(), data.size());
  EXPECT_EQ(read_in_chunks(*bytes, 4096), data);
  // A newer snapshot unlinks this file: a transfer under way goes on.
  ASSERT_EQ(::unlink(path.c_str()), 0);
  EXPECT_EQ(read_in_chunks(*bytes, 30'000), data);
  // A follower that rewinds reads out of order; the end is checked in full.
  EXPECT_EQ(bytes->read(50'000, 10), data.substr(50'000, 10));
  EXPECT_EQ(bytes->read(99'990, 10), data.substr(99'990, 10));
}

TEST(FileSnapshotBytes, RotInTheFileStopsTheNodeBeforeTheLastChunkLeaves) {
  TempDir dir;
  const std::string data = data_of(10'000);
  const std::string path = write_snapshot(dir.path(), data);
  const auto bytes = FileSnapshotBytes::open(path, {7, 2}, stop);
  // The disk returns other bytes than were written, after the open.
  test::flip_bit(path, snapshot_header_bytes({7, 2}) + 5000, 3);
  EXPECT_EXIT(read_in_chunks(*bytes, 1000), ::testing::ExitedWithCode(3), "bad checksum");
  // Read out of order, the last chunk is checked against the whole file.
  EXPECT_EXIT(bytes->read(9000, 1000), ::testing::ExitedWithCode(3), "bad checksum");
  // Every chunk but the last still reads: only the end is held back.
  EXPECT_EQ(bytes->read(0, 1000), data.substr(0, 1000));
}

TEST(FileSnapshotBytes, AFileThatIsNotTheSnapshotStopsTheNodeAtOpen) {
  TempDir dir;
  const std::string path = write_snapshot(dir.path(), data_of(100));
  EXPECT_EXIT(FileSnapshotBytes::open(path, {8, 2}, stop), ::testing::ExitedWithCode(3),
              "header does not match the snapshot at index 8");
  EXPECT_EXIT(FileSnapshotBytes::open(dir.path() + "/missing", {7, 2}, stop), ::testing::ExitedWithCode(3),
              "missing: open failed");
}

}  // namespace
}  // namespace lockd::storage
