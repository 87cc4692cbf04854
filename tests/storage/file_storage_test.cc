// FileStorage: round trips, torn tails, corruption, version and lock
// refusals, compaction, and a randomized comparison with MemoryStorage.
#include "lockd/storage/file_storage.h"

#include <gtest/gtest.h>

#include <memory>
#include <random>

#include "lockd/storage/wal_format.h"
#include "temp_dir.h"

namespace lockd::storage {
namespace {

using raft::Entry;
using raft::EntryType;
using raft::HardState;
using raft::Snapshot;
using raft::StorageError;
using test::TempDir;

Entry entry(raft::Index i, raft::Term t, std::string data = "") {
  if (data.empty()) data = "cmd-" + std::to_string(i) + "-" + std::to_string(t);
  return Entry{t, i, EntryType::kCommand, std::move(data)};
}

// Most tests model a crash by cutting or editing the file, so they run the
// WAL in plain-append mode (runway 0); the "Runway" tests below cover the
// zero runway the daemon uses.
FileStorageOptions options(const std::string& dir, std::size_t segment_bytes = 64u << 20,
                           std::size_t runway_bytes = 0) {
  FileStorageOptions o{dir, segment_bytes, false};
  o.runway_bytes = runway_bytes;
  return o;
}

std::unique_ptr<FileStorage> open_ok(const std::string& dir, std::size_t segment_bytes = 64u << 20,
                                     std::size_t runway_bytes = 0) {
  auto st = std::make_unique<FileStorage>(options(dir, segment_bytes, runway_bytes));
  raft::StorageStatus s = st->open();
  EXPECT_TRUE(s.ok()) << s.message;
  return st;
}

raft::StorageStatus open_status(const std::string& dir, std::size_t runway_bytes = 0) {
  FileStorage st(options(dir, 64u << 20, runway_bytes));
  return st.open();
}

std::vector<Entry> entries_of(const raft::Storage& st) { return {st.entries().begin(), st.entries().end()}; }

// Everything a restart sees.
struct State {
  HardState hs;
  Snapshot snap;
  std::vector<Entry> entries;
  bool operator==(const State&) const = default;
};
State state_of(const raft::Storage& st) { return State{st.hard_state(), st.snapshot(), entries_of(st)}; }

void expect_one_line(const raft::StorageStatus& s) {
  EXPECT_FALSE(s.message.empty());
  EXPECT_EQ(s.message.find('\n'), std::string::npos) << s.message;
}

TEST(FileStorage, FreshDirectoryOpensEmpty) {
  TempDir dir;
  auto st = open_ok(dir.sub("data"));
  EXPECT_EQ(st->hard_state(), HardState{});
  EXPECT_EQ(st->snapshot().meta.index, 0u);
  EXPECT_TRUE(st->entries().empty());
}

// Issue 23: once the core holds the log, the storage keeps indexes and
// terms only; saves, overwrites and a snapshot's term check work the same,
// and every payload is still on disk for the next start.
TEST(FileStorage, ReleasedReadSideKeepsTermsOnlyAndWritesTheSame) {
  TempDir dir;
  {
    auto st = open_ok(dir.path());
    ASSERT_TRUE(st->save(HardState{1, 1, 0}, std::vector<Entry>{entry(1, 1), entry(2, 1)}, nullptr).ok());
    st->release_read_side();
    for (const Entry& e : st->entries()) EXPECT_TRUE(e.data.empty());
    ASSERT_TRUE(st->save(std::nullopt, std::vector<Entry>{entry(3, 1), entry(4, 1)}, nullptr).ok());
    // An overwrite of a suffix, then a snapshot whose term matches entry 3
    // (the entries after it are kept) and one that does not match.
    ASSERT_TRUE(st->save(HardState{2, 2, 3}, std::vector<Entry>{entry(4, 2), entry(5, 2)}, nullptr).ok());
    ASSERT_EQ(st->last_index(), 5u);
    for (const Entry& e : st->entries()) EXPECT_TRUE(e.data.empty());
    Snapshot snap{{3, 1}, "state at 3"};
    ASSERT_TRUE(st->save(std::nullopt, {}, &snap).ok());
    EXPECT_EQ(st->last_index(), 5u);
    EXPECT_TRUE(st->snapshot().data.empty());
    EXPECT_EQ(st->snapshot().meta.index, 3u);
  }
  auto again = open_ok(dir.path());
  EXPECT_EQ(again->snapshot().data, "state at 3");
  EXPECT_EQ(entries_of(*again), (std::vector<Entry>{entry(4, 2), entry(5, 2)}));
  EXPECT_EQ(again->hard_state(), (HardState{2, 2, 3}));
}

// Pipelined saves (issue 23): write() leaves the segment's one sync to the
// caller, refuses everything until synced(), and a failed sync is final.

// A syncing storage in `dir` with entry 1 durable and `second` written,
// its sync pending.
std::unique_ptr<FileStorage> open_with_a_pending_sync(const std::string& dir,
                                                      const std::optional<HardState>& hs,
                                                      std::vector<Entry> second) {
  FileStorageOptions o = options(dir);
  o.sync = true;
  auto st = std::make_unique<FileStorage>(o);
  EXPECT_TRUE(st->open().ok());
  bool pending = false;
  EXPECT_TRUE(st->write(HardState{1, 1, 0}, std::vector<Entry>{entry(1, 1)}, pending).ok());
  // The first write starts a segment: its sync points are all done there.
  EXPECT_FALSE(pending);
  EXPECT_TRUE(st->write(hs, second, pending).ok());
  EXPECT_TRUE(pending);
  return st;
}

TEST(FileStorage, WriteLeavesTheSyncToTheCallerUntilSynced) {
  TempDir dir;
  {
    auto owned = open_with_a_pending_sync(dir.path(), HardState{1, 1, 1}, {entry(2, 1), entry(3, 1)});
    FileStorage& st = *owned;
    bool pending = true;
    EXPECT_TRUE(st.sync_pending());
    ASSERT_GE(st.sync_fd(), 0);
    const std::uint64_t syncs = st.stats().syncs;
    EXPECT_DEATH((void)st.write(std::nullopt, std::vector<Entry>{entry(4, 1)}, pending), "internal check failed");
    EXPECT_DEATH((void)st.save(std::nullopt, std::vector<Entry>{entry(4, 1)}, nullptr), "internal check failed");
    ASSERT_EQ(::fdatasync(st.sync_fd()), 0);
    ASSERT_TRUE(st.synced(0).ok());
    EXPECT_FALSE(st.sync_pending());
    EXPECT_EQ(st.stats().syncs, syncs + 1);
    // Nothing to write: nothing pending.
    ASSERT_TRUE(st.write(std::nullopt, {}, pending).ok());
    EXPECT_FALSE(pending);
  }
  auto again = open_ok(dir.path());
  EXPECT_EQ(entries_of(*again), (std::vector<Entry>{entry(1, 1), entry(2, 1), entry(3, 1)}));
  EXPECT_EQ(again->hard_state(), (HardState{1, 1, 1}));
}

TEST(FileStorage, AFailedPendingSyncIsFinal) {
  TempDir dir;
  auto owned = open_with_a_pending_sync(dir.path(), std::nullopt, {entry(2, 1)});
  FileStorage& st = *owned;
  bool pending = true;
  const raft::StorageStatus failed = st.synced(EIO);
  EXPECT_EQ(failed.error, StorageError::kIo);
  expect_one_line(failed);
  EXPECT_NE(failed.message.find("fdatasync"), std::string::npos) << failed.message;
  // Never retried: every later write and save gets the same answer.
  EXPECT_EQ(st.write(std::nullopt, std::vector<Entry>{entry(3, 1)}, pending).message, failed.message);
  EXPECT_FALSE(pending);
  EXPECT_EQ(st.save(std::nullopt, std::vector<Entry>{entry(3, 1)}, nullptr).message, failed.message);
}

TEST(FileStorage, RoundTripsEveryRecordType) {
  TempDir dir;
  State want;
  {
    auto st = open_ok(dir.path());
    std::vector<Entry> es = {entry(1, 1), entry(2, 1), Entry{1, 3, EntryType::kNoop, ""},
                             entry(4, 2, std::string(1000, 'x'))};
    ASSERT_TRUE(st->save(HardState{2, 3, 2}, es, nullptr).ok());
    // A snapshot that matches the log keeps the entries after it.
    Snapshot snap{{2, 1}, std::string("\0snapshot bytes\xff", 16)};
    ASSERT_TRUE(st->save(std::nullopt, {}, &snap).ok());
    ASSERT_TRUE(st->save(HardState{2, 3, 4}, std::vector<Entry>{entry(5, 2)}, nullptr).ok());
    want = state_of(*st);
    EXPECT_EQ(want.entries.size(), 3u);
    EXPECT_EQ(want.entries.front().index, 3u);
    EXPECT_EQ(want.entries.front().type, EntryType::kNoop);
    EXPECT_EQ(st->stats().entries, 5u);
    EXPECT_EQ(st->stats().syncs, 3u);
    EXPECT_EQ(st->stats().snapshots, 1u);
  }
  auto again = open_ok(dir.path());
  EXPECT_EQ(state_of(*again), want);
  EXPECT_EQ(again->hard_state(), (HardState{2, 3, 4}));
}

TEST(FileStorage, OverwriteOfASuffixSurvivesRestart) {
  TempDir dir;
  {
    auto st = open_ok(dir.path());
    ASSERT_TRUE(st->save(HardState{1, 1, 0}, std::vector<Entry>{entry(1, 1), entry(2, 1), entry(3, 1)}, nullptr).ok());
    ASSERT_TRUE(st->save(HardState{2, 0, 1}, std::vector<Entry>{entry(2, 2)}, nullptr).ok());
  }
  auto st = open_ok(dir.path());
  EXPECT_EQ(entries_of(*st), (std::vector<Entry>{entry(1, 1), entry(2, 2)}));
}

TEST(FileStorage, ReceivedSnapshotThatDoesNotMatchDropsTheLog) {
  TempDir dir;
  {
    auto st = open_ok(dir.path());
    ASSERT_TRUE(st->save(HardState{1, 1, 0}, std::vector<Entry>{entry(1, 1), entry(2, 1), entry(3, 1)}, nullptr).ok());
    Snapshot snap{{5, 3}, "five"};
    ASSERT_TRUE(st->save(HardState{3, 0, 5}, {}, &snap).ok());
    EXPECT_TRUE(st->entries().empty());
    ASSERT_TRUE(st->save(std::nullopt, std::vector<Entry>{entry(6, 3)}, nullptr).ok());
  }
  auto st = open_ok(dir.path());
  EXPECT_EQ(st->snapshot(), (Snapshot{{5, 3}, "five"}));
  EXPECT_EQ(entries_of(*st), (std::vector<Entry>{entry(6, 3)}));
  EXPECT_EQ(test::list_dir(dir.path()),
            (std::vector<std::string>{"LOCK", snapshot_name(5), segment_name(1)}));
}

// Writes a few saves and returns (the wal path, its size before the last
// save, the state before the last save, the state after).
struct LastSave {
  std::string wal;
  std::uint64_t before = 0;
  std::uint64_t after = 0;
  State state_before;
  State state_after;
};

LastSave write_history(const std::string& dir, bool last_is_hard_state) {
  LastSave r;
  auto st = open_ok(dir);
  for (raft::Index i = 1; i <= 6; ++i) {
    EXPECT_TRUE(st->save(HardState{1, 1, i - 1}, std::vector<Entry>{entry(i, 1)}, nullptr).ok());
  }
  r.wal = dir + "/" + segment_name(1);
  r.before = test::file_size(r.wal);
  r.state_before = state_of(*st);
  if (last_is_hard_state) {
    EXPECT_TRUE(st->save(HardState{2, 3, 6}, {}, nullptr).ok());
  } else {
    EXPECT_TRUE(st->save(std::nullopt, std::vector<Entry>{entry(7, 1, std::string(300, 'z'))}, nullptr).ok());
  }
  r.after = test::file_size(r.wal);
  r.state_after = state_of(*st);
  return r;
}

// A crash cuts the last write anywhere: the restart sees the state before it.
TEST(FileStorage, TruncationAtEveryByteOfTheLastRecordRecoversThePreviousRecord) {
  for (bool hs : {false, true}) {
    TempDir dir;
    const LastSave h = write_history(dir.sub("orig"), hs);
    ASSERT_GT(h.after, h.before);
    for (std::uint64_t cut = h.before; cut < h.after; ++cut) {
      test::copy_dir(dir.sub("orig"), dir.sub("cut"));
      test::truncate_file(dir.sub("cut") + "/" + segment_name(1), cut);
      auto st = open_ok(dir.sub("cut"));
      ASSERT_EQ(state_of(*st), h.state_before) << "cut at " << cut;
      if (cut > h.before) {
        ASSERT_EQ(st->recovery().notes.size(), 1u);
        EXPECT_NE(st->recovery().notes[0].find("torn tail"), std::string::npos) << st->recovery().notes[0];
      }
      // The truncated log takes new writes and keeps them.
      ASSERT_TRUE(st->save(HardState{5, 0, 1}, {}, nullptr).ok());
      st.reset();
      auto again = open_ok(dir.sub("cut"));
      EXPECT_EQ(again->hard_state(), (HardState{5, 0, 1}));
      EXPECT_TRUE(again->recovery().notes.empty());
    }
    // The uncut copy has the last record.
    auto st = open_ok(dir.sub("orig"));
    EXPECT_EQ(state_of(*st), h.state_after);
  }
}

// A flipped bit anywhere before the last record is rot, not a torn write:
// refuse to start, naming the file and the offset.
TEST(FileStorage, AFlippedBitInAnyEarlierRecordRefusesToStart) {
  TempDir dir;
  const LastSave h = write_history(dir.sub("orig"), false);
  for (std::uint64_t off = 0; off < h.before; ++off) {
    test::copy_dir(dir.sub("orig"), dir.sub("rot"));
    test::flip_bit(dir.sub("rot") + "/" + segment_name(1), off, static_cast<int>(off % 8));
    const raft::StorageStatus s = open_status(dir.sub("rot"));
    ASSERT_EQ(s.error, StorageError::kCorrupt) << "offset " << off << ": " << s.message;
    expect_one_line(s);
    EXPECT_NE(s.message.find("data dir " + dir.sub("rot") + ": " + segment_name(1) + " offset "),
              std::string::npos)
        << s.message;
  }
}

TEST(FileStorage, MessageNamesTheRecordOffset) {
  TempDir dir;
  const LastSave h = write_history(dir.path(), false);
  // The first record after the 32-byte header is the first entry.
  test::flip_bit(h.wal, kSegmentHeaderBytes + 20, 0);
  const raft::StorageStatus s = open_status(dir.path());
  EXPECT_EQ(s.message, "data dir " + dir.path() + ": " + segment_name(1) + " offset 32: bad checksum (valid records follow it: not a torn tail)");
}

TEST(FileStorage, NewerFormatVersionIsRefused) {
  TempDir dir;
  write_history(dir.path(), false);
  const std::string wal = dir.path() + "/" + segment_name(1);
  std::string b = test::read_all(wal);
  std::string header;
  encode_segment_header(1, header);
  header[8] = 2;  // version 2, with a valid header CRC
  std::string body = header.substr(0, kSegmentHeaderBytes - 4);
  const std::uint32_t crc = raft::crc32c(body);
  for (int i = 0; i < 4; ++i) body.push_back(static_cast<char>(crc >> (8 * i)));
  b.replace(0, kSegmentHeaderBytes, body);
  test::write_all(wal, b);
  const raft::StorageStatus s = open_status(dir.path());
  EXPECT_EQ(s.error, StorageError::kVersion) << s.message;
  EXPECT_EQ(s.message, "data dir " + dir.path() + ": " + segment_name(1) +
                           " offset 0: format version 2 is newer than this build's 1");
}

TEST(FileStorage, MissingSegmentIsRefused) {
  TempDir dir;
  {
    auto st = open_ok(dir.path(), 200);  // tiny segments: one per save or two
    for (raft::Index i = 1; i <= 20; ++i) {
      ASSERT_TRUE(st->save(HardState{1, 1, i}, std::vector<Entry>{entry(i, 1)}, nullptr).ok());
    }
    ASSERT_GE(st->segment_count(), 4u);
  }
  std::filesystem::remove(dir.path() + "/" + segment_name(2));
  const raft::StorageStatus s = open_status(dir.path());
  EXPECT_EQ(s.error, StorageError::kCorrupt);
  EXPECT_EQ(s.message, "data dir " + dir.path() + ": missing segment " + segment_name(2) + " (found " +
                           segment_name(1) + " then " + segment_name(3) + ")");
}

TEST(FileStorage, GapInIndexesIsRefused) {
  TempDir dir;
  {
    auto st = open_ok(dir.path());
    ASSERT_TRUE(st->save(std::nullopt, std::vector<Entry>{entry(1, 1)}, nullptr).ok());
  }
  // Append a well-formed record for entry 3 by hand.
  std::string rec;
  raft::encode_entry(entry(3, 1), rec);
  const std::string wal = dir.path() + "/" + segment_name(1);
  const std::uint64_t at = test::file_size(wal);
  test::write_all(wal, test::read_all(wal) + rec);
  const raft::StorageStatus s = open_status(dir.path());
  EXPECT_EQ(s.error, StorageError::kCorrupt);
  EXPECT_EQ(s.message, "data dir " + dir.path() + ": " + segment_name(1) + " offset " + std::to_string(at) +
                           ": gap in indexes: entry 3 after 1");
}

TEST(FileStorage, SecondOpenOfTheSameDirectoryIsRefused) {
  TempDir dir;
  auto first = open_ok(dir.path());
  const raft::StorageStatus s = open_status(dir.path());
  EXPECT_EQ(s.error, StorageError::kLocked);
  EXPECT_EQ(s.message, "data dir " + dir.path() + ": locked by another process (LOCK)");
  first.reset();
  EXPECT_TRUE(open_status(dir.path()).ok());
}

TEST(FileStorage, SnapshotCompactsAndDeletesCoveredSegments) {
  TempDir dir;
  State want;
  {
    auto st = open_ok(dir.path(), 256);
    for (raft::Index i = 1; i <= 40; ++i) {
      ASSERT_TRUE(st->save(HardState{1, 1, i}, std::vector<Entry>{entry(i, 1)}, nullptr).ok());
    }
    const std::size_t before = st->segment_count();
    ASSERT_GE(before, 8u);
    Snapshot snap{{30, 1}, "state at 30"};
    ASSERT_TRUE(st->save(std::nullopt, {}, &snap).ok());
    EXPECT_LT(st->segment_count(), before);
    EXPECT_GT(st->stats().segments_removed, 0u);
    ASSERT_EQ(st->entries().size(), 10u);
    ASSERT_TRUE(st->save(HardState{1, 1, 41}, std::vector<Entry>{entry(41, 1)}, nullptr).ok());
    want = state_of(*st);
  }
  auto st = open_ok(dir.path(), 256);
  EXPECT_EQ(state_of(*st), want);
  EXPECT_EQ(st->entries().front().index, 31u);
}

TEST(FileStorage, TornSegmentHeaderIsRemoved) {
  TempDir dir;
  State want;
  {
    auto st = open_ok(dir.path(), 100);
    ASSERT_TRUE(st->save(HardState{1, 1, 0}, std::vector<Entry>{entry(1, 1, std::string(200, 'a'))}, nullptr).ok());
    want = state_of(*st);
    ASSERT_TRUE(st->save(HardState{1, 1, 1}, std::vector<Entry>{entry(2, 1)}, nullptr).ok());
    ASSERT_EQ(st->segment_count(), 2u);
  }
  test::truncate_file(dir.path() + "/" + segment_name(2), 10);
  auto st = open_ok(dir.path(), 100);
  EXPECT_EQ(state_of(*st), want);
  EXPECT_EQ(st->segment_count(), 1u);
  ASSERT_EQ(st->recovery().notes.size(), 1u);
  EXPECT_NE(st->recovery().notes[0].find("torn segment header"), std::string::npos);
}

// A crash after the snapshot file was renamed into place but before the
// WAL mark was durable: the snapshot is applied at open, as save() would.
TEST(FileStorage, SnapshotFileWithoutItsMarkIsApplied) {
  TempDir dir;
  {
    auto st = open_ok(dir.path());
    ASSERT_TRUE(st->save(HardState{1, 1, 5},
                         std::vector<Entry>{entry(1, 1), entry(2, 1), entry(3, 1), entry(4, 1), entry(5, 1)}, nullptr)
                    .ok());
  }
  std::string file;
  encode_snapshot_header({3, 1}, 5, file);
  file += "three";
  const std::uint32_t crc = raft::crc32c(file);
  for (int i = 0; i < 4; ++i) file.push_back(static_cast<char>(crc >> (8 * i)));
  test::write_all(dir.path() + "/" + snapshot_name(3), file);
  test::write_all(dir.path() + "/snap.tmp", "half a snapshot");
  auto st = open_ok(dir.path());
  EXPECT_EQ(st->snapshot(), (Snapshot{{3, 1}, "three"}));
  EXPECT_EQ(entries_of(*st), (std::vector<Entry>{entry(4, 1), entry(5, 1)}));
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/snap.tmp"));
}

TEST(FileStorage, CorruptSnapshotFileIsRefused) {
  TempDir dir;
  {
    auto st = open_ok(dir.path());
    ASSERT_TRUE(st->save(std::nullopt, std::vector<Entry>{entry(1, 1), entry(2, 1)}, nullptr).ok());
    Snapshot snap{{2, 1}, "two"};
    ASSERT_TRUE(st->save(std::nullopt, {}, &snap).ok());
  }
  test::flip_bit(dir.path() + "/" + snapshot_name(2), 41, 3);
  const raft::StorageStatus s = open_status(dir.path());
  EXPECT_EQ(s.error, StorageError::kCorrupt);
  EXPECT_EQ(s.message, "data dir " + dir.path() + ": " + snapshot_name(2) + " offset 0: bad checksum");
}

TEST(FileStorage, StatsCountEntriesPerSync) {
  TempDir dir;
  auto st = open_ok(dir.path());
  std::vector<Entry> batch;
  for (raft::Index i = 1; i <= 64; ++i) batch.push_back(entry(i, 1));
  ASSERT_TRUE(st->save(HardState{1, 1, 0}, batch, nullptr).ok());
  EXPECT_EQ(st->stats().syncs, 1u);
  EXPECT_EQ(st->stats().entries, 64u);
  EXPECT_EQ(st->stats().sync_latency.count(), 1u);
  EXPECT_EQ(st->stats().bytes, test::file_size(dir.path() + "/" + segment_name(1)));
}

// --- the zero runway (FileStorageOptions::runway_bytes) ---

constexpr std::size_t kRunway = 4096;

// Overwrites [from, to) of a file with zeros: a write that reached the disk
// only up to `from` over the runway.
void zero_range(const std::string& path, std::uint64_t from, std::uint64_t to) {
  std::string bytes = test::read_all(path);
  std::fill(bytes.begin() + static_cast<std::ptrdiff_t>(from), bytes.begin() + static_cast<std::ptrdiff_t>(to), '\0');
  test::write_all(path, bytes);
}

TEST(FileStorage, RunwaySavesOverwriteZerosAndReopenClean) {
  TempDir dir;
  const std::string wal = dir.path() + "/" + segment_name(1);
  State want;
  {
    auto st = open_ok(dir.path(), 64u << 20, kRunway);
    ASSERT_TRUE(st->save(HardState{1, 1, 0}, std::vector<Entry>{entry(1, 1)}, nullptr).ok());
    const std::uint64_t size = test::file_size(wal);
    EXPECT_EQ(size, st->live_segment_bytes() + kRunway);
    for (raft::Index i = 2; i <= 5; ++i) {
      ASSERT_TRUE(st->save(HardState{1, 1, i - 1}, std::vector<Entry>{entry(i, 1)}, nullptr).ok());
    }
    EXPECT_EQ(test::file_size(wal), size);  // written over the runway: no growth
    want = state_of(*st);
  }
  auto st = open_ok(dir.path(), 64u << 20, kRunway);
  EXPECT_EQ(state_of(*st), want);
  EXPECT_TRUE(st->recovery().notes.empty());  // zeros after the records are a clean end
  // Past the runway, the next one is laid down and reopening still works.
  ASSERT_TRUE(st->save(std::nullopt, std::vector<Entry>{entry(6, 1, std::string(2 * kRunway, 'r'))}, nullptr).ok());
  EXPECT_EQ(test::file_size(wal), st->live_segment_bytes() + kRunway);
  want = state_of(*st);
  st.reset();
  auto again = open_ok(dir.path(), 64u << 20, kRunway);
  EXPECT_EQ(state_of(*again), want);
  EXPECT_TRUE(again->recovery().notes.empty());
}

// A crash cuts the last write over the runway anywhere: the rest of its
// bytes are still zeros, and the restart sees the state before it.
TEST(FileStorage, RunwayCrashAtEveryByteOfTheLastRecordRecoversThePreviousRecord) {
  for (bool hs : {false, true}) {
    TempDir dir;
    std::uint64_t before = 0, after = 0;
    State state_before, state_after;
    {
      auto st = open_ok(dir.sub("orig"), 64u << 20, kRunway);
      for (raft::Index i = 1; i <= 6; ++i) {
        ASSERT_TRUE(st->save(HardState{1, 1, i - 1}, std::vector<Entry>{entry(i, 1)}, nullptr).ok());
      }
      before = st->live_segment_bytes();
      state_before = state_of(*st);
      if (hs) {
        ASSERT_TRUE(st->save(HardState{2, 3, 6}, {}, nullptr).ok());
      } else {
        ASSERT_TRUE(st->save(std::nullopt, std::vector<Entry>{entry(7, 1, std::string(300, 'z'))}, nullptr).ok());
      }
      after = st->live_segment_bytes();
      state_after = state_of(*st);
    }
    ASSERT_GT(after, before);
    for (std::uint64_t cut = before; cut < after; ++cut) {
      test::copy_dir(dir.sub("orig"), dir.sub("cut"));
      zero_range(dir.sub("cut") + "/" + segment_name(1), cut, after);
      auto st = open_ok(dir.sub("cut"), 64u << 20, kRunway);
      ASSERT_EQ(state_of(*st), state_before) << "cut at " << cut;
      if (cut > before) {
        ASSERT_EQ(st->recovery().notes.size(), 1u) << "cut at " << cut;
        EXPECT_NE(st->recovery().notes[0].find("torn tail"), std::string::npos) << st->recovery().notes[0];
      } else {
        EXPECT_TRUE(st->recovery().notes.empty());
      }
      ASSERT_TRUE(st->save(HardState{5, 0, 1}, {}, nullptr).ok());
      st.reset();
      auto again = open_ok(dir.sub("cut"), 64u << 20, kRunway);
      EXPECT_EQ(again->hard_state(), (HardState{5, 0, 1}));
      EXPECT_TRUE(again->recovery().notes.empty());
    }
    auto st = open_ok(dir.sub("orig"), 64u << 20, kRunway);
    EXPECT_EQ(state_of(*st), state_after);
  }
}

TEST(FileStorage, RunwayFlippedBitInAnEarlierRecordRefusesToStart) {
  TempDir dir;
  std::uint64_t end = 0;
  {
    auto st = open_ok(dir.sub("orig"), 64u << 20, kRunway);
    for (raft::Index i = 1; i <= 4; ++i) {
      ASSERT_TRUE(st->save(HardState{1, 1, i - 1}, std::vector<Entry>{entry(i, 1)}, nullptr).ok());
    }
    end = st->live_segment_bytes();
  }
  // Every byte but the last record's (a torn tail may end anywhere in it).
  const std::uint64_t last_record = end - 40;
  for (std::uint64_t off = 0; off < last_record; ++off) {
    test::copy_dir(dir.sub("orig"), dir.sub("rot"));
    test::flip_bit(dir.sub("rot") + "/" + segment_name(1), off, static_cast<int>(off % 8));
    const raft::StorageStatus s = open_status(dir.sub("rot"), kRunway);
    ASSERT_EQ(s.error, StorageError::kCorrupt) << "offset " << off << ": " << s.message;
  }
  // Zeros where records were, with records after them, are not the runway
  // (an earlier page lost, a later one kept): refused, never cut short.
  for (std::uint64_t from = kSegmentHeaderBytes; from < last_record; from += 7) {
    test::copy_dir(dir.sub("orig"), dir.sub("hole"));
    zero_range(dir.sub("hole") + "/" + segment_name(1), from, std::min<std::uint64_t>(from + 64, last_record));
    const raft::StorageStatus s = open_status(dir.sub("hole"), kRunway);
    ASSERT_EQ(s.error, StorageError::kCorrupt) << "zeros from " << from << ": " << s.message;
  }
}

TEST(FileStorage, RunwayOnlySegmentIsRemoved) {
  TempDir dir;
  State want;
  {
    auto st = open_ok(dir.path(), 100, kRunway);
    ASSERT_TRUE(st->save(HardState{1, 1, 0}, std::vector<Entry>{entry(1, 1, std::string(200, 'a'))}, nullptr).ok());
    want = state_of(*st);
    ASSERT_TRUE(st->save(HardState{1, 1, 1}, std::vector<Entry>{entry(2, 1)}, nullptr).ok());
    ASSERT_EQ(st->segment_count(), 2u);
  }
  // The crash kept the new segment's runway but not its header or records.
  const std::string second = dir.path() + "/" + segment_name(2);
  zero_range(second, 0, test::file_size(second));
  auto st = open_ok(dir.path(), 100, kRunway);
  EXPECT_EQ(state_of(*st), want);
  EXPECT_EQ(st->segment_count(), 1u);
  ASSERT_EQ(st->recovery().notes.size(), 1u);
  EXPECT_NE(st->recovery().notes[0].find("torn segment header"), std::string::npos) << st->recovery().notes[0];
}

// A closed segment loses its runway when the next one starts, so zeros
// after the records of any segment but the last are still corruption.
TEST(FileStorage, RunwayIsCutFromClosedSegmentsAndRefusedThere) {
  TempDir dir;
  const std::string first = dir.path() + "/" + segment_name(1);
  std::uint64_t first_bytes = 0;
  State want;
  {
    auto st = open_ok(dir.path(), 100, kRunway);
    ASSERT_TRUE(st->save(HardState{1, 1, 0}, std::vector<Entry>{entry(1, 1, std::string(200, 'a'))}, nullptr).ok());
    first_bytes = st->live_segment_bytes();
    ASSERT_TRUE(st->save(HardState{1, 1, 1}, std::vector<Entry>{entry(2, 1)}, nullptr).ok());
    ASSERT_EQ(st->segment_count(), 2u);
    want = state_of(*st);
  }
  EXPECT_EQ(test::file_size(first), first_bytes);
  auto st = open_ok(dir.path(), 100, kRunway);
  EXPECT_EQ(state_of(*st), want);
  EXPECT_TRUE(st->recovery().notes.empty());
  st.reset();
  test::write_all(first, test::read_all(first) + std::string(64, '\0'));
  const raft::StorageStatus s = open_status(dir.path(), kRunway);
  EXPECT_EQ(s.error, StorageError::kCorrupt) << s.message;
}

// Random histories against MemoryStorage, reopening as we go, with small
// segments so rolls and compactions happen often.
TEST(FileStorage, MatchesMemoryStorageOverRandomHistories) {
  for (std::uint32_t seed = 1; seed <= 30; ++seed) {
    TempDir dir;
    std::mt19937_64 rng(seed);
    raft::MemoryStorage model;
    auto st = open_ok(dir.path(), 512);
    raft::Term term = 1;
    for (int step = 0; step < 200; ++step) {
      const int op = static_cast<int>(rng() % 10);
      std::optional<HardState> hs;
      std::vector<Entry> es;
      std::optional<Snapshot> snap;
      const raft::Index first = model.snapshot().meta.index + 1;
      const raft::Index last = model.last_index();
      if (op < 5) {
        // Append, sometimes overwriting a suffix.
        raft::Index from = last + 1;
        if (rng() % 4 == 0 && last >= first) from = first + rng() % (last - first + 1);
        if (rng() % 3 == 0) ++term;
        const std::size_t n = 1 + rng() % 5;
        for (std::size_t k = 0; k < n; ++k) es.push_back(entry(from + k, term));
      } else if (op < 7) {
        hs = HardState{term, rng() % 4, last};
      } else if (op < 8 && last >= first) {
        // Own snapshot of a prefix.
        const raft::Index at = first + rng() % (last - first + 1);
        snap = Snapshot{{at, model.entries()[at - first].term}, "own@" + std::to_string(at)};
      } else if (op < 9) {
        // Received snapshot, maybe beyond the log or with another term.
        const raft::Index at = model.snapshot().meta.index + 1 + rng() % 8;
        snap = Snapshot{{at, term + rng() % 2}, "recv@" + std::to_string(at)};
      } else {
        st.reset();
        st = open_ok(dir.path(), 512);
        ASSERT_EQ(state_of(*st), state_of(model)) << "seed " << seed << " step " << step;
        continue;
      }
      ASSERT_TRUE(model.save(hs, es, snap ? &*snap : nullptr).ok());
      ASSERT_TRUE(st->save(hs, es, snap ? &*snap : nullptr).ok());
      ASSERT_EQ(state_of(*st), state_of(model)) << "seed " << seed << " step " << step;
    }
    st.reset();
    st = open_ok(dir.path(), 512);
    ASSERT_EQ(state_of(*st), state_of(model)) << "seed " << seed;
  }
}

}  // namespace
}  // namespace lockd::storage
