// Backend: what differs between benchmarking lockd and Redis: the bytes of
// a request and the meaning of a reply. Everything else (sockets, the event
// loop, buffers, workloads, timing) is shared, so that a comparison is of
// servers, not of clients.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "decode_status.h"

namespace lockbench {

// What an outstanding request asked for; decides how its reply is read.
enum class ReqKind : std::uint8_t {
  kHandshake,  // Redis: SCRIPT LOAD of the release and keep scripts, per connection
  kAcquire,    // lockd `A`; Redis `SET key owner NX PX lease`
  kRelease,    // lockd `R`; Redis `EVALSHA <release script> 1 key owner`
  kFence,      // a no-op round trip: lockd `R 1 <fence key>`, Redis `PING`
  kKeep,       // lockd `K`; Redis `EVALSHA <keep script> 1 key owner lease`
};

// A reply in backend-neutral terms.
enum class Outcome : std::uint8_t {
  kGranted,      // lockd `A`; Redis `+OK` to SET NX
  kNotGranted,   // lockd `T`; Redis nil to SET NX
  kBusy,         // lockd `B` (queue or a cap full); Redis has none
  kReleased,     // lockd `R`; Redis `:1`
  kNotReleased,  // lockd `N`; Redis `:0` (to a release or a keep)
  kKept,         // lockd `K`; Redis `:1` to the keep script
  kHandshakeOk,  // Redis: the script's SHA
  kPong,         // Redis `+PONG`
  kMoved,        // lockd cluster `M <leader> <echo>`: ask the leader (detail: its address)
  kNoLeader,     // lockd cluster `E no_leader <echo>`: an election is under way
  kIndeterminate,  // lockd cluster `E indeterminate <echo>`: leadership lost mid-request
  kError,        // lockd `E`, a Redis error, or a reply of the wrong type
};

// One decoded reply. Views point into the connection's input buffer.
struct Reply {
  Outcome outcome = Outcome::kError;
  // lockd only: the echo that names the request it answers (replies to a
  // waiting acquire can come out of order). `has_echo` false means "the
  // oldest outstanding request".
  bool has_echo = false;
  std::uint64_t token = 0;  // lockd A/R/N, or a release echo
  std::string_view owner;   // an acquire echo
  std::string_view key;
  std::string_view detail;  // for messages: the error code or text
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  // True when every reply answers the oldest outstanding request (Redis).
  // False when replies carry an echo to match (lockd).
  virtual bool in_order() const = 0;
  // True when the server queues a waiting acquire (lockd); false when the
  // client must poll with retries (Redis).
  virtual bool server_queues() const = 0;
  // How many kHandshake requests each connection starts with (0: none).
  virtual std::uint32_t handshakes() const = 0;

  // Encodes set-up request `i` (0 <= i < handshakes()).
  virtual void encode_handshake(std::string& out, std::uint32_t i) = 0;
  virtual void encode_acquire(std::string& out, std::string_view owner, std::string_view key,
                              std::uint64_t lease_ms, std::uint64_t wait_ms) = 0;
  virtual void encode_release(std::string& out, std::uint64_t token, std::string_view owner,
                              std::string_view key) = 0;
  virtual void encode_fence(std::string& out, std::string_view fence_key) = 0;
  virtual void encode_keep(std::string& out, std::uint64_t token, std::string_view owner,
                           std::string_view key, std::uint64_t lease_ms) = 0;

  // Decodes the first reply in `in`. `oldest` is the kind of the oldest
  // outstanding request (what an in-order reply answers).
  virtual DecodeStatus decode(std::string_view in, std::size_t& consumed, ReqKind oldest,
                              Reply& out) = 0;
  // Called with set-up request `i`'s kHandshakeOk detail (Redis: a script SHA).
  virtual void on_handshake(std::uint32_t, std::string_view) {}
};

enum class BackendKind : std::uint8_t {
  kLockd,  // lockd's text protocol
  kRedis,  // RESP2: SET NX PX + Lua compare-and-delete
};

std::unique_ptr<Backend> make_backend(BackendKind kind);

// The compare-and-delete release script every Redis lock guide gives.
inline constexpr std::string_view kRedisReleaseScript =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) "
    "else return 0 end";

// The guarded lease extension of Redis locks (Redisson's watchdog renews
// with the same compare-then-PEXPIRE, on its hash-shaped lock).
inline constexpr std::string_view kRedisKeepScript =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) "
    "else return 0 end";

}  // namespace lockbench
