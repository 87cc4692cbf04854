// The bytes of a data directory, as pure functions: segment headers,
// segment scanning, the replay that turns a sequence of WAL records back
// into (snapshot, entries, hard state), and the snapshot file format.
// No I/O here, so the fuzz target and the tests drive it with plain
// buffers; FileStorage (file_storage.h) does the files.
//
// docs/storage.md describes every byte and the recovery rules.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lockd/raft/codec.h"
#include "lockd/raft/types.h"

namespace lockd::storage {

// Format version of segments and snapshot files. A reader refuses a newer
// one rather than guess what changed.
constexpr std::uint32_t kFormatVersion = 1;

// --- segments ---
// Header: "LOCKDWAL" | u32 version | u32 header bytes (32) | u64 sequence |
// u32 reserved (0) | u32 crc32c of the 28 bytes before it.
constexpr std::size_t kSegmentHeaderBytes = 32;
constexpr std::string_view kSegmentMagic = "LOCKDWAL";

void encode_segment_header(std::uint64_t sequence, std::string& out);

// "wal-<sequence as 16 hex digits>.log"; parse returns nullopt for other names.
std::string segment_name(std::uint64_t sequence);
std::optional<std::uint64_t> parse_segment_name(std::string_view name);

// How a scan of one segment ended.
enum class ScanEnd {
  kClean,     // every byte is a good record
  kTornTail,  // the last segment ends in a cut or garbled record with nothing valid after it
  kCorrupt,   // a bad record or header that is not a torn tail: refuse to start
  kVersion,   // written by a newer format version: refuse to start
};

struct SegmentScan {
  ScanEnd end = ScanEnd::kClean;
  std::uint64_t sequence = 0;   // from the header (when it was readable)
  std::size_t valid_bytes = 0;  // header plus every good record before the end
  std::size_t error_offset = 0; // where the torn tail / bad record starts
  std::size_t zero_tail = 0;    // kClean, last segment: zero bytes after the records (the runway)
  std::string what;             // what is wrong there, for the one-line message
};

// Called for each good record, in order, with its offset in the segment.
// Returns false (and sets `what`) to refuse the record: the scan then ends
// kCorrupt at that offset.
// The record may be moved from.
using RecordFn = std::function<bool(raft::WalRecord& record, std::size_t offset, std::string& what)>;

// Scans a whole segment. A failed record is a torn tail only in the last
// segment (`last`) and only when no valid record starts anywhere after it
// (a crash cuts the end of the last write; a flipped bit in the middle
// leaves good records behind it). A last segment shorter than its header is
// a torn tail at offset 0 (the crash hit its creation), and so is a last
// segment of zeros only (its runway reached the disk, its header did not). In the last
// segment, zero bytes from a record boundary to the end of the file are
// the preallocated runway (FileStorage writes zeros ahead of its records):
// a clean end, reported in `zero_tail`.
SegmentScan scan_segment(std::string_view bytes, bool last, const RecordFn& on_record);

// --- replay ---
// Rebuilds the log from the records of the remaining segments, relative to
// the snapshot the node restarts from (index S, term T). Only entries after
// S are kept; every rule that could drop or overwrite them is re-applied in
// record order (see docs/storage.md "Recovery"). Refuses (returns false,
// sets `what`) on a gap in indexes, a snapshot mark that disagrees with the
// log, or a mark newer than the snapshot (its file is missing).
class LogReplay {
 public:
  explicit LogReplay(raft::SnapshotMeta snapshot) : snap_(snapshot) {}

  // Takes the record's entry (moves it).
  bool feed(raft::WalRecord& record, std::string& what);
  // Ends the replay. When no mark for the snapshot was seen (a crash after
  // its file was renamed into place and before the WAL said so) the
  // snapshot is applied now, as save() would have.
  void finish();

  const raft::HardState& hard_state() const { return hard_state_; }
  std::vector<raft::Entry>& entries() { return tail_; }  // index S+1 onward
  raft::Index max_mark_index() const { return max_mark_; }
  std::size_t records() const { return records_; }

 private:
  raft::Index last() const { return snap_.index + tail_.size(); }

  raft::SnapshotMeta snap_;
  std::vector<raft::Entry> tail_;
  std::optional<raft::Term> term_at_snap_;  // the log's entry at S, when the replay saw it
  bool mark_seen_ = false;
  raft::Index max_mark_ = 0;
  raft::HardState hard_state_;
  std::size_t records_ = 0;
};

// --- snapshot files ---
// "LOCKDSNP" | u32 version | u32 reserved (0) | u64 index | u64 term |
// u64 data bytes | data | u32 crc32c of everything before it.
// Version 2 (written only when the snapshot records a configuration, so a
// group that never changed membership writes the version-1 bytes): the
// reserved word is the length L of the configuration (raft/membership.h
// encoding), which follows the 40 bytes, before the data. The header is
// then 40 + L bytes.
constexpr std::size_t kSnapshotHeaderBytes = 40;
constexpr std::uint32_t kSnapshotConfVersion = 2;
constexpr std::string_view kSnapshotMagic = "LOCKDSNP";

// "snap-<index as 16 hex digits>.snap".
std::string snapshot_name(raft::Index index);
std::optional<raft::Index> parse_snapshot_name(std::string_view name);

// The header that precedes `data_bytes` of data; the file is this, the
// data, then the CRC-32C of both (chain crc32c over the pieces). Its size
// is snapshot_header_bytes(meta).
void encode_snapshot_header(const raft::SnapshotMeta& meta, std::uint64_t data_bytes, std::string& out);
std::size_t snapshot_header_bytes(const raft::SnapshotMeta& meta);

enum class SnapshotFileError { kOk, kCorrupt, kVersion };
// Decodes a whole snapshot file; on failure `what` says why.
SnapshotFileError decode_snapshot_file(std::string_view bytes, raft::Snapshot& out, std::string& what);

}  // namespace lockd::storage
