// The client side of lockd's text protocol (spec/protocol.md §3, §4):
// request encoding and an incremental reply decoder.
//
// Why our own and not src/proto: the server's code parses requests and
// formats replies; a benchmark must do the opposite, and must not share a
// bug with the thing it measures. Pure functions, no allocation on the
// decode path (views point into the caller's input).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "decode_status.h"

namespace lockbench {

// The longest reply line we accept: `E <code> <token> <key>` and
// `A <token> <owner> <key>` are far below it; anything longer is not lockd.
constexpr std::size_t kMaxLockdReplyBytes = 1024;

enum class LockdReplyKind : std::uint8_t {
  kAcquired,     // `A <token> <owner> <key>`, or `S <token> <owner> <key>` (shared, v1.2)
  kHeld,         // `T <owner> <key>`: held by someone else / wait ran out
  kBusy,         // `B <owner> <key>`: queue or a server cap is full
  kReleased,     // `R <token> <key>`
  kNotReleased,  // `N <token> <key>` (to an `R` or a `K`)
  kKept,         // `K <token> <key>` (v1.1)
  kMoved,        // `M <addr> <echo>`: cluster, not the leader
  kError,        // `E <code> [<echo>]`
};

// One decoded reply. Views point into the decoder's input.
struct LockdReply {
  LockdReplyKind kind = LockdReplyKind::kError;
  std::uint64_t token = 0;  // A, R, N, K; also E/M with a release/keep echo
  std::string_view owner;   // A, T, B; also E/M with an acquire echo
  std::string_view key;     // every kind except a bare `E <code>`
  std::string_view code;    // E: the error code; M: the leader address
};

// Appends `A <owner> <key> <lease_ms>[ <wait_ms>]\n` (wait omitted when 0).
void encode_lockd_acquire(std::string& out, std::string_view owner, std::string_view key,
                          std::uint64_t lease_ms, std::uint64_t wait_ms);
// Appends `S <owner> <key> <limit> <lease_ms>[ <wait_ms>]\n` (v1.2).
void encode_lockd_shared(std::string& out, std::string_view owner, std::string_view key,
                         std::uint32_t limit, std::uint64_t lease_ms, std::uint64_t wait_ms);
// Appends `R <token> <key>\n`.
void encode_lockd_release(std::string& out, std::uint64_t token, std::string_view key);
// Appends `K <token> <key> <lease_ms>\n`.
void encode_lockd_keep(std::string& out, std::uint64_t token, std::string_view key,
                       std::uint64_t lease_ms);

// Decodes the first reply line of `in`. kNeedMore when no `\n` yet (and
// the partial line is within kMaxLockdReplyBytes); kMalformed when the line
// is not a lockd reply.
DecodeStatus decode_lockd_reply(std::string_view in, std::size_t& consumed, LockdReply& out);

// Parses one reply line without its terminator; false if malformed.
bool parse_lockd_reply_line(std::string_view line, LockdReply& out);

}  // namespace lockbench
