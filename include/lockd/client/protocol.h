// The client side of the text protocol (spec protocol.md), as pure
// functions: a request to its line, a reply line to a value. No I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "lockd/client/status.h"

namespace lockd::client {

// Field limits of protocol.md §2, checked before a request is sent so a
// malformed request (whose `E` reply carries no echo) is never on the wire.
constexpr std::size_t kMaxOwnerBytes = 64;
constexpr std::size_t kMaxKeyBytes = 250;
// Longest reply line accepted: an `M` carries an address plus the longest
// echo; anything longer is a protocol error, not a reason to buffer more.
constexpr std::size_t kMaxReplyLineBytes = 1024;

// Largest `limit` of a shared acquire (protocol.md §2); 0 means no cap.
constexpr std::uint32_t kMaxLimit = 65'535;

// The verbs a client sends (protocol.md §3).
enum class Verb : char {
  kAcquire = 'A',  // A owner key [lease_ms [wait_ms]]
  kRelease = 'R',  // R token key
  kKeep = 'K',     // K token key lease_ms (v1.1, §6a)
  kShared = 'S',   // S owner key limit [lease_ms [wait_ms]] (v1.2, §5b)
  kWatch = 'W',    // W key (v1.3, §5c)
  kUnwatch = 'U',  // U key (v1.3, §5c)
};

// True for the verbs that ask for a grant (`A`, `S`): they carry an owner,
// may wait, and are answered by `A`/`S`/`T`/`B` echoing `owner key`.
constexpr bool is_acquire(Verb v) { return v == Verb::kAcquire || v == Verb::kShared; }
// `W` and `U` carry only a key and are answered (or refused) echoing it.
constexpr bool is_watch(Verb v) { return v == Verb::kWatch || v == Verb::kUnwatch; }

struct Request {
  Verb verb = Verb::kAcquire;
  std::string owner;          // A and S
  std::string key;
  std::uint64_t token = 0;    // R and K
  std::uint64_t lease_ms = 0; // A, S: 0 = the server's default lease; K: required (>= 1)
  std::uint64_t wait_ms = 0;  // A and S
  std::uint32_t limit = 0;    // S only: 0 = a read lock (no cap), N = a semaphore of N permits
};

// kInvalidArgument naming the first field the protocol would refuse.
Status validate(const Request& request);
// The request line, ending in `\n`. The request must be valid.
std::string format_request(const Request& request);

// The reply kinds (protocol.md §4).
enum class ReplyKind : char {
  kAcquired = 'A',  // A token owner key
  kShared = 'S',    // S token owner key: acquired shared (v1.2)
  kTimedOut = 'T',  // T owner key
  kBusy = 'B',      // B owner key
  kReleased = 'R',  // R token key
  kNotHeld = 'N',   // N token key
  kKept = 'K',      // K token key
  kMoved = 'M',     // M leader_addr <echo>
  kError = 'E',     // E code [<echo>]
  kWatching = 'W',  // W key rev state (v1.3, §5c)
  kUnwatched = 'U', // U key (v1.3, §5c)
  // Pushes (§5c): never replies, routed before matching.
  kChanged = 'V',   // V key rev state
  kLostNotice = 'X',  // X token key: the holding of `token` ended by expiry
};

// Who holds a watched key (§5c `<state>`).
struct KeyState {
  enum class Kind : char { kFree = 'f', kHeld = 'h', kShared = 's' };
  Kind kind = Kind::kFree;
  std::string owner;        // kHeld
  std::uint64_t token = 0;  // kHeld
  std::uint32_t limit = 0;  // kShared
  std::uint32_t count = 0;  // kShared
  bool operator==(const KeyState&) const = default;
};

// One parsed reply line. Which fields are set depends on the kind; for `M`
// and `E` the echo is kept raw (`echo_first`, `key`) because it is
// `owner key` for an acquire and `token key` for a release or keep.
struct Reply {
  ReplyKind kind = ReplyKind::kError;
  std::uint64_t token = 0;  // A, S, R, N, K
  std::string owner;        // A, S, T, B
  std::string key;          // every kind with an echo
  std::string echo_first;   // M, E: first echo field (owner or token), empty if none
  std::string leader;       // M: the leader's client host:port
  std::string error_code;   // E: no_leader, indeterminate, bad_lease ...
  std::uint64_t rev = 0;    // W, V
  KeyState state;           // W, V
  // `E`/`M`/`B` echoing a `W`/`U` request: the echo is the key alone.
  bool key_only_echo = false;
  bool has_echo() const { return !key.empty(); }
  // `V` or `X`: a push (§5c), never the answer to a request.
  bool is_push() const { return kind == ReplyKind::kChanged || kind == ReplyKind::kLostNotice; }
  // `A` or `S`: the server granted the key (and a token).
  bool is_grant() const { return kind == ReplyKind::kAcquired || kind == ReplyKind::kShared; }
};

// Parses one reply line (without `\n`; a trailing `\r` is ignored).
// nullopt when the line is not a reply of the protocol.
std::optional<Reply> parse_reply(std::string_view line);

// Parses a decimal token (1 .. 2^64-1) or lease; nullopt if not one.
std::optional<std::uint64_t> parse_u64(std::string_view text);

}  // namespace lockd::client
