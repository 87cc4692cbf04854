// Binary codec for Raft frames; see codec.h for the layout.
#include "lockd/raft/codec.h"

#include "lockd/common/byte_io.h"
#include "lockd/common/crc32c.h"
#include "lockd/raft/membership.h"

#include <array>
#include <cstring>
#include <limits>

namespace lockd::raft {
namespace {

using Writer = ByteWriter;

// Reads Raft frames; a failure is a DecodeError.
class Reader : public ByteReader<DecodeError> {
 public:
  explicit Reader(std::string_view in)
      : ByteReader(in, DecodeError::kOk, DecodeError::kTruncated) {}
  // A byte that must be 0 or 1.
  bool boolean() {
    const std::uint8_t v = u8();
    if (v > 1) fail(DecodeError::kBadField);
    return v == 1;
  }
  // Strings are bounded by the frame itself (kMaxFrameBytes).
  std::string bytes() { return ByteReader::bytes(kMaxFrameBytes, DecodeError::kTooLarge); }
};

void write_entry_fields(Writer& w, const Entry& e) {
  w.u64(e.term);
  w.u64(e.index);
  w.u8(static_cast<std::uint8_t>(e.type));
  w.bytes(e.data);
}

// `any_type`: a peer's message keeps an entry type this build does not
// know (a newer version's), so the node can stop naming it rather than
// refuse the whole message for ever (cluster_node.cc); the core refuses
// such an entry (validate_message), so it is never stored. The WAL holds
// only known types.
void read_entry_fields(Reader& r, Entry& e, bool any_type = false) {
  e.term = r.u64();
  e.index = r.u64();
  std::uint8_t t = r.u8();
  if (!any_type && !known_entry_type(t)) r.fail(DecodeError::kBadField);
  e.type = static_cast<EntryType>(t);
  e.data = r.bytes();
}

// Frames `body` (which starts with version and kind) into `out`.
void finish_frame(std::string_view body, std::string& out) {
  Writer w(out);
  w.u32(static_cast<std::uint32_t>(body.size() + 4));
  out.append(body);
  w.u32(crc32c(body));
}

// Checks length, CRC and version of a frame spanning `bytes`; on success
// points `body` at the bytes after version (kind first).
DecodeError open_frame(std::string_view bytes, std::string_view& body, std::uint8_t* version_out = nullptr) {
  if (bytes.size() < kFrameLengthBytes) return DecodeError::kTruncated;
  Reader r(bytes.substr(0, kFrameLengthBytes));
  std::uint32_t len = r.u32();
  if (len > kMaxFrameBytes) return DecodeError::kTooLarge;
  if (len < 2 + 4) return DecodeError::kTruncated;  // version, kind, crc
  if (bytes.size() < kFrameLengthBytes + len) return DecodeError::kTruncated;
  if (bytes.size() > kFrameLengthBytes + len) return DecodeError::kTrailingBytes;
  std::string_view covered = bytes.substr(kFrameLengthBytes, len - 4);
  Reader crc_reader(bytes.substr(kFrameLengthBytes + len - 4));
  if (crc_reader.u32() != crc32c(covered)) return DecodeError::kBadChecksum;
  const auto version = static_cast<std::uint8_t>(covered[0]);
  if (version != kCodecVersion && (version != kCodecVersionWithConf || version_out == nullptr)) {
    return DecodeError::kBadVersion;  // WAL records are version 1 only
  }
  if (version_out != nullptr) *version_out = version;
  body = covered.substr(1);
  return DecodeError::kOk;
}

}  // namespace

std::string_view to_string(MessageType t) {
  switch (t) {
    case MessageType::kPreVote: return "PreVote";
    case MessageType::kPreVoteResp: return "PreVoteResp";
    case MessageType::kVote: return "Vote";
    case MessageType::kVoteResp: return "VoteResp";
    case MessageType::kAppend: return "Append";
    case MessageType::kAppendResp: return "AppendResp";
    case MessageType::kHeartbeat: return "Heartbeat";
    case MessageType::kHeartbeatResp: return "HeartbeatResp";
    case MessageType::kSnapshot: return "Snapshot";
    case MessageType::kSnapshotResp: return "SnapshotResp";
    case MessageType::kTimeoutNow: return "TimeoutNow";
  }
  return "?";
}

std::string_view to_string(DecodeError e) {
  switch (e) {
    case DecodeError::kOk: return "ok";
    case DecodeError::kTruncated: return "truncated";
    case DecodeError::kTooLarge: return "too_large";
    case DecodeError::kBadVersion: return "bad_version";
    case DecodeError::kBadKind: return "bad_kind";
    case DecodeError::kBadChecksum: return "bad_checksum";
    case DecodeError::kBadField: return "bad_field";
    case DecodeError::kTrailingBytes: return "trailing_bytes";
  }
  return "?";
}

std::uint32_t crc32c(std::span<const std::uint8_t> bytes, std::uint32_t crc) {
  return lockd::crc32c(bytes.data(), bytes.size(), crc);
}

std::uint32_t crc32c(std::string_view bytes, std::uint32_t crc) { return lockd::crc32c(bytes, crc); }

void encode_message(const Message& m, std::string& out) {
  std::string body;
  Writer w(body);
  // A snapshot's configuration travels in a version-2 frame only when the
  // snapshot has one, so frames of a group that never changed membership
  // are byte for byte those of version 1.
  const bool with_conf = !m.snapshot.conf.empty();
  w.u8(with_conf ? kCodecVersionWithConf : kCodecVersion);
  w.u8(static_cast<std::uint8_t>(m.type));
  w.u64(m.from);
  w.u64(m.to);
  w.u64(m.term);
  w.u64(m.log_term);
  w.u64(m.index);
  w.u64(m.commit);
  w.u8(m.reject ? 1 : 0);
  w.u64(m.reject_hint);
  w.u8(m.transfer ? 1 : 0);
  w.u32(static_cast<std::uint32_t>(m.entries.size()));
  for (const Entry& e : m.entries) write_entry_fields(w, e);
  w.u64(m.snapshot.index);
  w.u64(m.snapshot.term);
  w.u64(m.offset);
  w.u64(m.total_bytes);
  w.u8(m.done ? 1 : 0);
  w.bytes(m.chunk);
  if (with_conf) w.bytes(encode_membership(m.snapshot.conf));
  finish_frame(body, out);
}

DecodeError decode_message(std::string_view bytes, Message& out) {
  std::string_view body;
  std::uint8_t version = 0;
  if (DecodeError e = open_frame(bytes, body, &version); e != DecodeError::kOk) return e;
  Reader r(body);
  std::uint8_t kind = r.u8();
  if (kind < 1 || kind > kMaxMessageType) return DecodeError::kBadKind;
  Message m;
  m.type = static_cast<MessageType>(kind);
  m.from = r.u64();
  m.to = r.u64();
  m.term = r.u64();
  m.log_term = r.u64();
  m.index = r.u64();
  m.commit = r.u64();
  m.reject = r.boolean();
  m.reject_hint = r.u64();
  m.transfer = r.boolean();
  std::uint32_t n = r.u32();
  if (n > kMaxDecodedEntries) return DecodeError::kTooLarge;
  // Each entry takes at least 21 bytes: refuse counts the frame cannot hold
  // before reserving memory for them.
  if (static_cast<std::size_t>(n) * 21 > r.remaining()) return DecodeError::kTruncated;
  m.entries.resize(n);
  for (Entry& e : m.entries) read_entry_fields(r, e, /*any_type=*/true);
  m.snapshot.index = r.u64();
  m.snapshot.term = r.u64();
  m.offset = r.u64();
  m.total_bytes = r.u64();
  m.done = r.boolean();
  m.chunk = r.bytes();
  if (version == kCodecVersionWithConf) {
    std::string conf = r.bytes();
    std::string error;
    if (r.error() == DecodeError::kOk && !decode_membership(conf, m.snapshot.conf, error)) {
      return DecodeError::kBadField;
    }
  }
  if (r.error() != DecodeError::kOk) return r.error();
  if (r.remaining() != 0) return DecodeError::kTrailingBytes;
  out = std::move(m);
  return DecodeError::kOk;
}

void encode_entry(const Entry& e, std::string& out) {
  std::string body;
  Writer w(body);
  w.u8(kCodecVersion);
  w.u8(kEntryRecordKind);
  write_entry_fields(w, e);
  finish_frame(body, out);
}

DecodeError decode_entry(std::string_view bytes, Entry& out) {
  std::string_view body;
  if (DecodeError e = open_frame(bytes, body); e != DecodeError::kOk) return e;
  Reader r(body);
  if (r.u8() != kEntryRecordKind) return DecodeError::kBadKind;
  Entry e;
  read_entry_fields(r, e);
  if (r.error() != DecodeError::kOk) return r.error();
  if (r.remaining() != 0) return DecodeError::kTrailingBytes;
  out = std::move(e);
  return DecodeError::kOk;
}

void encode_hard_state(const HardState& hs, std::string& out) {
  std::string body;
  Writer w(body);
  w.u8(kCodecVersion);
  w.u8(kHardStateRecordKind);
  w.u64(hs.term);
  w.u64(hs.vote);
  w.u64(hs.commit);
  finish_frame(body, out);
}

void encode_snapshot_mark(const SnapshotMark& mark, std::string& out) {
  std::string body;
  Writer w(body);
  w.u8(kCodecVersion);
  w.u8(kSnapshotMarkRecordKind);
  w.u64(mark.meta.index);
  w.u64(mark.meta.term);
  w.u64(mark.last_kept);
  finish_frame(body, out);
}

DecodeError decode_wal_record(std::string_view bytes, WalRecord& out) {
  std::string_view body;
  if (DecodeError e = open_frame(bytes, body); e != DecodeError::kOk) return e;
  Reader r(body);
  const std::uint8_t kind = r.u8();
  switch (kind) {
    case kEntryRecordKind: read_entry_fields(r, out.entry); break;
    case kHardStateRecordKind:
      out.hard_state.term = r.u64();
      out.hard_state.vote = r.u64();
      out.hard_state.commit = r.u64();
      break;
    case kSnapshotMarkRecordKind:
      out.mark.meta.index = r.u64();
      out.mark.meta.term = r.u64();
      out.mark.last_kept = r.u64();
      break;
    default: return DecodeError::kBadKind;
  }
  if (r.error() != DecodeError::kOk) return r.error();
  if (r.remaining() != 0) return DecodeError::kTrailingBytes;
  out.kind = kind;
  return DecodeError::kOk;
}

std::size_t frame_size(std::string_view bytes) {
  if (bytes.size() < kFrameLengthBytes) return 0;
  Reader r(bytes.substr(0, kFrameLengthBytes));
  std::uint32_t len = r.u32();
  if (len > kMaxFrameBytes) return std::numeric_limits<std::size_t>::max();
  return kFrameLengthBytes + len;
}

}  // namespace lockd::raft
