// The pure WAL format: record round trips, names, segment scans.
#include "lockd/storage/wal_format.h"

#include <gtest/gtest.h>

namespace lockd::storage {
namespace {

using raft::WalRecord;

TEST(WalFormat, EveryRecordKindRoundTrips) {
  std::string buf;
  const raft::Entry e{7, 42, raft::EntryType::kNoop, std::string("a\0b", 3)};
  const raft::HardState hs{9, 2, 41};
  const raft::SnapshotMark mark{{40, 7}, 42};
  raft::encode_entry(e, buf);
  const std::size_t a = buf.size();
  raft::encode_hard_state(hs, buf);
  const std::size_t b = buf.size();
  raft::encode_snapshot_mark(mark, buf);

  WalRecord r;
  ASSERT_EQ(raft::decode_wal_record(std::string_view(buf).substr(0, a), r), raft::DecodeError::kOk);
  EXPECT_EQ(r.kind, raft::kEntryRecordKind);
  EXPECT_EQ(r.entry, e);
  ASSERT_EQ(raft::decode_wal_record(std::string_view(buf).substr(a, b - a), r), raft::DecodeError::kOk);
  EXPECT_EQ(r.kind, raft::kHardStateRecordKind);
  EXPECT_EQ(r.hard_state, hs);
  ASSERT_EQ(raft::decode_wal_record(std::string_view(buf).substr(b), r), raft::DecodeError::kOk);
  EXPECT_EQ(r.kind, raft::kSnapshotMarkRecordKind);
  EXPECT_EQ(r.mark, mark);
  // An entry record still decodes with the entry-only decoder.
  raft::Entry back;
  EXPECT_EQ(raft::decode_entry(std::string_view(buf).substr(0, a), back), raft::DecodeError::kOk);
  EXPECT_EQ(back, e);
}

TEST(WalFormat, NamesRoundTrip) {
  EXPECT_EQ(segment_name(0x2a), "wal-000000000000002a.log");
  EXPECT_EQ(parse_segment_name("wal-000000000000002a.log"), 0x2au);
  EXPECT_EQ(parse_segment_name("wal-000000000000002A.log"), std::nullopt);
  EXPECT_EQ(parse_segment_name("wal-2a.log"), std::nullopt);
  EXPECT_EQ(snapshot_name(16), "snap-0000000000000010.snap");
  EXPECT_EQ(parse_snapshot_name("snap-0000000000000010.snap"), 16u);
  EXPECT_EQ(parse_snapshot_name("snap-0000000000000010.snap.tmp"), std::nullopt);
}

TEST(WalFormat, ScanStopsAtGarbageOnlyInTheLastSegment) {
  std::string seg;
  encode_segment_header(3, seg);
  raft::encode_hard_state({1, 1, 0}, seg);
  const std::size_t good = seg.size();
  seg += std::string(5, '\xee');
  auto count = [](std::size_t& n) {
    return [&n](WalRecord&, std::size_t, std::string&) {
      ++n;
      return true;
    };
  };
  std::size_t n = 0;
  SegmentScan last = scan_segment(seg, true, count(n));
  EXPECT_EQ(last.end, ScanEnd::kTornTail);
  EXPECT_EQ(last.valid_bytes, good);
  EXPECT_EQ(last.sequence, 3u);
  EXPECT_EQ(n, 1u);
  n = 0;
  SegmentScan middle = scan_segment(seg, false, count(n));
  EXPECT_EQ(middle.end, ScanEnd::kCorrupt);
  EXPECT_EQ(middle.error_offset, good);
}

TEST(WalFormat, ReplayRefusesAMarkNewerThanTheSnapshot) {
  LogReplay replay({0, 0});
  WalRecord r;
  r.kind = raft::kSnapshotMarkRecordKind;
  r.mark = {{5, 1}, 5};
  std::string what;
  EXPECT_FALSE(replay.feed(r, what));
  EXPECT_EQ(what, "snapshot mark for index 5 but no snapshot file that new");
}

}  // namespace
}  // namespace lockd::storage

namespace lockd::storage {
namespace {

std::string snapshot_file(const raft::SnapshotMeta& meta, const std::string& data) {
  std::string file;
  encode_snapshot_header(meta, data.size(), file);
  file += data;
  const std::uint32_t crc = raft::crc32c(file);
  for (int i = 0; i < 4; ++i) file.push_back(static_cast<char>(crc >> (8 * i)));
  return file;
}

// Membership (issue 20): a snapshot keeps the configuration in force at its
// index, so a node restarted after compaction still knows the members; a
// group that never changed membership writes the version-1 bytes.
TEST(WalFormat, SnapshotFileKeepsItsConfiguration) {
  raft::SnapshotMeta meta{9, 2, {}};
  meta.conf.members = {{1, true, "127.0.0.1:1", "127.0.0.1:2"}, {4, false, "h:3", "h:4"}};
  meta.conf.removed = {2};
  const std::string v2 = snapshot_file(meta, "state");
  EXPECT_EQ(v2.size(), snapshot_header_bytes(meta) + 5 + 4);
  raft::Snapshot out;
  std::string what;
  ASSERT_EQ(decode_snapshot_file(v2, out, what), SnapshotFileError::kOk) << what;
  EXPECT_EQ(out.meta, meta);
  EXPECT_EQ(out.data, "state");
  const std::string v1 = snapshot_file(raft::SnapshotMeta{9, 2, {}}, "state");
  EXPECT_EQ(v1.size(), kSnapshotHeaderBytes + 5 + 4);
  EXPECT_EQ(v1[8], '\x01');  // format version 1
  ASSERT_EQ(decode_snapshot_file(v1, out, what), SnapshotFileError::kOk) << what;
  EXPECT_TRUE(out.meta.conf.empty());
  // A configuration that does not decode is corruption, not a guess.
  std::string bad = v2;
  bad[kSnapshotHeaderBytes] = '\x7f';  // its encoding version
  bad.resize(bad.size() - 4);
  const std::uint32_t crc = raft::crc32c(bad);
  for (int i = 0; i < 4; ++i) bad.push_back(static_cast<char>(crc >> (8 * i)));
  EXPECT_EQ(decode_snapshot_file(bad, out, what), SnapshotFileError::kCorrupt);
}

}  // namespace
}  // namespace lockd::storage
