// Pure on-disk format of a data directory; see wal_format.h.
#include "lockd/storage/wal_format.h"

#include "lockd/raft/membership.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>

#include "lockd/common/byte_io.h"

namespace lockd::storage {
namespace {

enum class Fail { kOk, kShort };

bool all_zero(std::string_view bytes) {
  return std::all_of(bytes.begin(), bytes.end(), [](char c) { return c == '\0'; });
}
using Reader = ByteReader<Fail>;

std::optional<std::uint64_t> parse_hex_name(std::string_view name, std::string_view prefix,
                                            std::string_view suffix) {
  if (name.size() != prefix.size() + 16 + suffix.size()) return std::nullopt;
  if (name.substr(0, prefix.size()) != prefix) return std::nullopt;
  if (name.substr(prefix.size() + 16) != suffix) return std::nullopt;
  std::uint64_t v = 0;
  for (char c : name.substr(prefix.size(), 16)) {
    int d;
    if (c >= '0' && c <= '9') {
      d = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      d = c - 'a' + 10;
    } else {
      return std::nullopt;
    }
    v = (v << 4) | static_cast<std::uint64_t>(d);
  }
  return v;
}

std::string hex_name(std::string_view prefix, std::uint64_t v, std::string_view suffix) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
  std::string s(prefix);
  s.append(buf, 16);
  s.append(suffix);
  return s;
}

std::string_view describe(raft::DecodeError e) {
  switch (e) {
    case raft::DecodeError::kTruncated: return "record cut short";
    case raft::DecodeError::kTooLarge: return "record length out of range";
    case raft::DecodeError::kBadVersion: return "record from a newer format version";
    case raft::DecodeError::kBadKind: return "unknown record kind";
    case raft::DecodeError::kBadChecksum: return "bad checksum";
    case raft::DecodeError::kBadField: return "field out of range";
    case raft::DecodeError::kTrailingBytes: return "record longer than its fields";
    case raft::DecodeError::kOk: break;
  }
  return "ok";
}

// Splits off the frame at `pos` and decodes it.
raft::DecodeError decode_at(std::string_view bytes, std::size_t pos, raft::WalRecord& rec,
                            std::size_t& frame_bytes) {
  std::string_view rest = bytes.substr(pos);
  frame_bytes = raft::frame_size(rest);
  if (frame_bytes == 0) return raft::DecodeError::kTruncated;
  if (frame_bytes == SIZE_MAX) return raft::DecodeError::kTooLarge;
  if (frame_bytes > rest.size()) return raft::DecodeError::kTruncated;
  return raft::decode_wal_record(rest.substr(0, frame_bytes), rec);
}

// Whether any well-formed record starts after `from`: what tells a torn
// tail (nothing valid after the cut) from a damaged record in the middle.
bool valid_record_after(std::string_view bytes, std::size_t from) {
  raft::WalRecord rec;
  for (std::size_t pos = from; pos + raft::kFrameLengthBytes <= bytes.size(); ++pos) {
    std::size_t n = 0;
    if (decode_at(bytes, pos, rec, n) == raft::DecodeError::kOk) return true;
  }
  return false;
}

}  // namespace

void encode_segment_header(std::uint64_t sequence, std::string& out) {
  std::string h;
  ByteWriter w(h);
  h.append(kSegmentMagic);
  w.u32(kFormatVersion);
  w.u32(static_cast<std::uint32_t>(kSegmentHeaderBytes));
  w.u64(sequence);
  w.u32(0);
  w.u32(raft::crc32c(h));
  out.append(h);
}

std::string segment_name(std::uint64_t sequence) { return hex_name("wal-", sequence, ".log"); }
std::optional<std::uint64_t> parse_segment_name(std::string_view name) {
  return parse_hex_name(name, "wal-", ".log");
}
std::string snapshot_name(raft::Index index) { return hex_name("snap-", index, ".snap"); }
std::optional<raft::Index> parse_snapshot_name(std::string_view name) {
  return parse_hex_name(name, "snap-", ".snap");
}

SegmentScan scan_segment(std::string_view bytes, bool last, const RecordFn& on_record) {
  SegmentScan scan;
  if (bytes.size() < kSegmentHeaderBytes) {
    scan.end = last ? ScanEnd::kTornTail : ScanEnd::kCorrupt;
    scan.what = "segment shorter than its header";
    return scan;
  }
  if (last && all_zero(bytes)) {
    // The crash hit the creation after the runway's zeros reached the disk
    // and before the header did: nothing in it was acknowledged.
    scan.end = ScanEnd::kTornTail;
    scan.what = "segment never written (zeros only)";
    return scan;
  }
  if (bytes.substr(0, kSegmentMagic.size()) != kSegmentMagic) {
    scan.end = ScanEnd::kCorrupt;
    scan.what = "not a lockd WAL segment (bad magic)";
    return scan;
  }
  Reader h(bytes.substr(kSegmentMagic.size(), kSegmentHeaderBytes - kSegmentMagic.size()), Fail::kOk,
           Fail::kShort);
  const std::uint32_t version = h.u32();
  const std::uint32_t header_bytes = h.u32();
  scan.sequence = h.u64();
  h.u32();
  const std::uint32_t crc = h.u32();
  // The 32 header bytes and their CRC are fixed in every version, so the
  // CRC is checked first: a flipped bit is corruption, not a new version.
  if (crc != raft::crc32c(bytes.substr(0, kSegmentHeaderBytes - 4))) {
    scan.end = ScanEnd::kCorrupt;
    scan.what = "bad segment header checksum";
    return scan;
  }
  if (version > kFormatVersion) {
    scan.end = ScanEnd::kVersion;
    scan.what = "format version " + std::to_string(version) + " is newer than this build's " +
                std::to_string(kFormatVersion);
    return scan;
  }
  if (version == 0 || header_bytes != kSegmentHeaderBytes) {
    scan.end = ScanEnd::kCorrupt;
    scan.what = "bad segment header";
    return scan;
  }

  std::size_t pos = kSegmentHeaderBytes;
  raft::WalRecord rec;
  while (pos < bytes.size()) {
    if (last && bytes[pos] == '\0' && all_zero(bytes.substr(pos))) {
      scan.zero_tail = bytes.size() - pos;  // the runway: no record was ever written here
      break;
    }
    std::size_t n = 0;
    const raft::DecodeError e = decode_at(bytes, pos, rec, n);
    if (e != raft::DecodeError::kOk) {
      scan.error_offset = pos;
      scan.what = describe(e);
      if (e == raft::DecodeError::kBadVersion) {
        scan.end = ScanEnd::kVersion;
      } else if (last && !valid_record_after(bytes, pos + 1)) {
        scan.end = ScanEnd::kTornTail;
      } else {
        scan.end = ScanEnd::kCorrupt;
        if (last) scan.what += " (valid records follow it: not a torn tail)";
      }
      scan.valid_bytes = pos;
      return scan;
    }
    std::string what;
    if (!on_record(rec, pos, what)) {
      scan.end = ScanEnd::kCorrupt;
      scan.error_offset = pos;
      scan.what = what;
      scan.valid_bytes = pos;
      return scan;
    }
    pos += n;
  }
  scan.valid_bytes = pos;
  return scan;
}

// --- replay ---

bool LogReplay::feed(raft::WalRecord& r, std::string& what) {
  ++records_;
  switch (r.kind) {
    case raft::kHardStateRecordKind:
      hard_state_ = r.hard_state;
      return true;
    case raft::kEntryRecordKind: {
      raft::Entry& e = r.entry;
      if (e.index == 0) {
        what = "entry with index 0";
        return false;
      }
      if (e.index <= snap_.index) {
        if (mark_seen_) {
          what = "entry " + std::to_string(e.index) + " at or below the snapshot at " +
                 std::to_string(snap_.index);
          return false;
        }
        // Overwrites from e.index on: nothing after S survives it.
        tail_.clear();
        if (e.index == snap_.index) {
          term_at_snap_ = e.term;
        } else {
          term_at_snap_.reset();
        }
        return true;
      }
      if (e.index > last() + 1) {
        what = "gap in indexes: entry " + std::to_string(e.index) + " after " + std::to_string(last());
        return false;
      }
      tail_.resize(e.index - snap_.index - 1);
      tail_.push_back(std::move(e));
      return true;
    }
    case raft::kSnapshotMarkRecordKind: {
      const raft::SnapshotMark& m = r.mark;
      if (m.meta.index > max_mark_) max_mark_ = m.meta.index;
      if (m.meta.index > snap_.index) {
        what = "snapshot mark for index " + std::to_string(m.meta.index) +
               " but no snapshot file that new";
        return false;
      }
      if (m.last_kept < m.meta.index) {
        what = "snapshot mark keeps the log up to " + std::to_string(m.last_kept) +
               ", below its own index " + std::to_string(m.meta.index);
        return false;
      }
      if (m.meta.index == snap_.index) {
        if (m.meta.term != snap_.term) {
          what = "snapshot mark for index " + std::to_string(m.meta.index) + " has term " +
                 std::to_string(m.meta.term) + ", the snapshot file " + std::to_string(snap_.term);
          return false;
        }
        mark_seen_ = true;
        term_at_snap_ = snap_.term;
      }
      // After the mark the log ends at last_kept.
      if (m.last_kept <= snap_.index) {
        tail_.clear();
        if (m.last_kept < snap_.index) term_at_snap_.reset();
        return true;
      }
      if (m.last_kept != last()) {
        what = "snapshot mark says the log ends at " + std::to_string(m.last_kept) +
               ", the replayed log ends at " + std::to_string(last());
        return false;
      }
      return true;
    }
    default:
      what = "unknown record kind";
      return false;
  }
}

void LogReplay::finish() {
  if (mark_seen_ || snap_.index == 0) return;
  // save() wrote the snapshot file, then crashed before the WAL mark was
  // durable: apply the snapshot as save() does (keep the log after it only
  // if the log has the snapshot's last entry with the same term).
  if (!term_at_snap_ || *term_at_snap_ != snap_.term) tail_.clear();
}

// --- snapshot files ---

void encode_snapshot_header(const raft::SnapshotMeta& meta, std::uint64_t data_bytes, std::string& out) {
  ByteWriter w(out);
  const std::string conf = meta.conf.empty() ? std::string() : raft::encode_membership(meta.conf);
  out.append(kSnapshotMagic);
  w.u32(conf.empty() ? kFormatVersion : kSnapshotConfVersion);
  w.u32(static_cast<std::uint32_t>(conf.size()));
  w.u64(meta.index);
  w.u64(meta.term);
  w.u64(data_bytes);
  out.append(conf);
}

std::size_t snapshot_header_bytes(const raft::SnapshotMeta& meta) {
  return kSnapshotHeaderBytes + (meta.conf.empty() ? 0 : raft::encode_membership(meta.conf).size());
}

SnapshotFileError decode_snapshot_file(std::string_view bytes, raft::Snapshot& out, std::string& what) {
  if (bytes.size() < kSnapshotHeaderBytes + 4) {
    what = "snapshot file shorter than its header";
    return SnapshotFileError::kCorrupt;
  }
  if (bytes.substr(0, kSnapshotMagic.size()) != kSnapshotMagic) {
    what = "not a lockd snapshot file (bad magic)";
    return SnapshotFileError::kCorrupt;
  }
  Reader r(bytes.substr(kSnapshotMagic.size(), kSnapshotHeaderBytes - kSnapshotMagic.size()), Fail::kOk,
           Fail::kShort);
  const std::uint32_t version = r.u32();
  const std::uint32_t conf_bytes = r.u32();
  raft::SnapshotMeta meta;
  meta.index = r.u64();
  meta.term = r.u64();
  const std::uint64_t n = r.u64();
  // Every version ends the file with the CRC of the rest: check it first.
  Reader c(bytes.substr(bytes.size() - 4), Fail::kOk, Fail::kShort);
  if (c.u32() != raft::crc32c(bytes.substr(0, bytes.size() - 4))) {
    what = "bad checksum";
    return SnapshotFileError::kCorrupt;
  }
  if (version > kSnapshotConfVersion) {
    what = "format version " + std::to_string(version) + " is newer than this build's " +
           std::to_string(kSnapshotConfVersion);
    return SnapshotFileError::kVersion;
  }
  // Version 1 wrote 0 in the word version 2 uses for the configuration.
  const std::size_t head = kSnapshotHeaderBytes + (version >= kSnapshotConfVersion ? conf_bytes : 0);
  if (head > bytes.size() - 4 || n != bytes.size() - head - 4) {
    what = "snapshot length " + std::to_string(n) + " does not match the file";
    return SnapshotFileError::kCorrupt;
  }
  if (version == 0 || meta.index == 0 || (version >= kSnapshotConfVersion && conf_bytes == 0)) {
    what = "bad snapshot header";
    return SnapshotFileError::kCorrupt;
  }
  if (version >= kSnapshotConfVersion) {
    std::string why;
    if (!raft::decode_membership(bytes.substr(kSnapshotHeaderBytes, conf_bytes), meta.conf, why)) {
      what = "the snapshot's configuration does not decode: " + why;
      return SnapshotFileError::kCorrupt;
    }
  }
  out.meta = meta;
  out.data.assign(bytes.substr(head, n));
  return SnapshotFileError::kOk;
}

}  // namespace lockd::storage
