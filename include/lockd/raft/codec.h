// A stable binary encoding for Raft messages and log entries.
//
// Every record is a frame:
//
//   u32 body_len | u8 version | u8 kind | body ... | u32 crc32c
//
// little-endian, where body_len counts the bytes from `version` up to and
// including the CRC, and the CRC (CRC-32C, Castagnoli) covers version, kind
// and body. The same frame carries a peer message (kind = the MessageType)
// or a WAL record (kind = kEntryRecordKind). Version 1 is the only one so
// far; a decoder refuses versions it does not know instead of guessing.
//
// Decoding is for input we do not trust (a peer, a disk): it never
// asserts, never reads out of bounds, caps every length before allocating,
// and answers a DecodeError value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "lockd/raft/message.h"
#include "lockd/raft/types.h"

namespace lockd::raft {

constexpr std::uint8_t kCodecVersion = 1;
// A peer message whose snapshot meta carries a configuration (membership,
// issue 20): the version-1 body followed by the configuration as a u32
// length and membership.h's encoding. Only messages use it.
constexpr std::uint8_t kCodecVersionWithConf = 2;
// Frame kinds of WAL records (outside the MessageType range): a log entry,
// a hard state, and a snapshot mark (see SnapshotMark).
constexpr std::uint8_t kEntryRecordKind = 0x80;
constexpr std::uint8_t kHardStateRecordKind = 0x81;
constexpr std::uint8_t kSnapshotMarkRecordKind = 0x82;
// Bytes before the body: the length word.
constexpr std::size_t kFrameLengthBytes = 4;
// Largest frame we accept; bounds allocation on garbage input. A batch of
// kMaxEntriesPerAppend entries or one snapshot chunk fits well inside.
constexpr std::size_t kMaxFrameBytes = 64u << 20;
// Largest number of entries a decoded kAppend may claim.
constexpr std::size_t kMaxDecodedEntries = 1u << 16;

// Why a buffer was refused.
enum class DecodeError {
  kOk = 0,         // decoded fine
  kTruncated,      // fewer bytes than the frame or a field claims
  kTooLarge,       // a length beyond kMaxFrameBytes / kMaxDecodedEntries
  kBadVersion,     // a version this build does not speak
  kBadKind,        // unknown message type or record kind
  kBadChecksum,    // CRC mismatch: corrupted in flight or on disk
  kBadField,       // a field out of its range (a bool that is 7, an entry type 9 in a WAL
                   // record; a message keeps unknown entry types: types.h known_entry_type)
  kTrailingBytes,  // the frame is longer than its fields
};

std::string_view to_string(DecodeError e);

// CRC-32C (Castagnoli); see common/crc32c.h (hardware-assisted where available).
// `crc` lets callers chain buffers; start from 0.
std::uint32_t crc32c(std::span<const std::uint8_t> bytes, std::uint32_t crc = 0);
std::uint32_t crc32c(std::string_view bytes, std::uint32_t crc = 0);

// Appends one framed message to `out`.
void encode_message(const Message& m, std::string& out);
// Decodes exactly one frame that spans all of `bytes`.
DecodeError decode_message(std::string_view bytes, Message& out);

// Appends one framed WAL record for `e` to `out`.
void encode_entry(const Entry& e, std::string& out);
// Decodes exactly one entry frame that spans all of `bytes`.
DecodeError decode_entry(std::string_view bytes, Entry& out);

// A WAL record saying "a snapshot ending at meta was made durable here, and
// after it the log ended at last_kept" (meta.index when the snapshot
// replaced the whole log, the old last index when the log matched it).
// Carrying the outcome lets recovery replay it without the entries it
// dropped (see docs/storage.md).
struct SnapshotMark {
  SnapshotMeta meta;
  Index last_kept = 0;

  bool operator==(const SnapshotMark&) const = default;
};

// Appends one framed WAL record for a hard state / a snapshot mark.
void encode_hard_state(const HardState& hs, std::string& out);
void encode_snapshot_mark(const SnapshotMark& mark, std::string& out);

// Any one WAL record; `kind` says which member is set.
struct WalRecord {
  std::uint8_t kind = 0;  // kEntryRecordKind, kHardStateRecordKind or kSnapshotMarkRecordKind
  Entry entry;
  HardState hard_state;
  SnapshotMark mark;
};
// Decodes exactly one WAL record frame (of any of the three kinds) that
// spans all of `bytes`; the checksum is computed once.
DecodeError decode_wal_record(std::string_view bytes, WalRecord& out);

// How long the frame at the start of `bytes` is in total, for a reader
// splitting a stream: 0 when even the length word is not there yet, or
// SIZE_MAX when the length word is beyond kMaxFrameBytes.
std::size_t frame_size(std::string_view bytes);

}  // namespace lockd::raft
