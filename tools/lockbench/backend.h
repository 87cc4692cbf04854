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

// What kind of hold an acquire or release is about (v1.2 shared keys).
// lockd: kPlain and kWrite are `A`, kRead is `S key 0`, kSemaphore `S key N`;
// every release is `R`. Redis: kPlain is SET NX; kRead/kWrite are
// Redisson's RReadWriteLock scripts, kSemaphore its RPermitExpirableSemaphore.
enum class Flavor : std::uint8_t {
  kPlain,      // an exclusive lock (every workload before v1.2)
  kRead,       // the read side of a reader-writer lock
  kWrite,      // the write side of a reader-writer lock
  kSemaphore,  // one permit of a semaphore of `limit`
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
  // A hold of `flavor` (kPlain: the two above). `limit`: kSemaphore's permits.
  virtual void encode_acquire_as(std::string& out, Flavor flavor, std::uint32_t limit,
                                 std::string_view owner, std::string_view key,
                                 std::uint64_t lease_ms, std::uint64_t wait_ms) = 0;
  virtual void encode_release_as(std::string& out, Flavor flavor, std::uint64_t token,
                                 std::string_view owner, std::string_view key) = 0;
  virtual void encode_fence(std::string& out, std::string_view fence_key) = 0;
  virtual void encode_keep(std::string& out, std::uint64_t token, std::string_view owner,
                           std::string_view key, std::uint64_t lease_ms) = 0;

  // Decodes the first reply in `in`. `oldest` is the kind of the oldest
  // outstanding request (what an in-order reply answers).
  virtual DecodeStatus decode(std::string_view in, std::size_t& consumed, ReqKind oldest,
                              Flavor oldest_flavor, Reply& out) = 0;
  // Called with set-up request `i`'s kHandshakeOk detail (Redis: a script SHA).
  virtual void on_handshake(std::uint32_t, std::string_view) {}
};

enum class BackendKind : std::uint8_t {
  kLockd,  // lockd's text protocol
  kRedis,  // RESP2: SET NX PX + Lua compare-and-delete
  kZooKeeper,  // the ZooKeeper C client, lock recipe (zk_runner.h); not a Backend codec
};

inline const char* backend_name(BackendKind kind) {
  switch (kind) {
    case BackendKind::kRedis: return "redis";
    case BackendKind::kZooKeeper: return "zookeeper";
    case BackendKind::kLockd: break;
  }
  return "lockd";
}

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

// Redisson's reader-writer lock and permit-expirable semaphore, as its
// published Lua (RedissonReadLock, RedissonWriteLock,
// RedissonPermitExpirableSemaphore), with our key and argument layout:
//   rw: KEYS[1] = lock hash, KEYS[2] = this holder's reader-timeout prefix
//       ({key}:owner:rwlock_timeout), KEYS[3] = the key's timeout prefix
//       ({key}), KEYS[4] = channel; ARGV[1] = lease ms, ARGV[2] = holder
//       name (owner), ARGV[3] = its write name (owner:write).
//   semaphore: KEYS[1] = permits counter, KEYS[2] = timeouts zset,
//       KEYS[3] = channel; ARGV[1] = limit, ARGV[2] = lease ms, ARGV[3] =
//       permit id (owner).
// Two deviations, both in Redis's favour or neutral: the scripts read the
// server's TIME instead of a client clock, and trySetPermits (a separate
// SETNX of the limit, once per key) is folded into the acquire.
inline constexpr std::string_view kRedissonReadLockScript =
    "local mode = redis.call('hget', KEYS[1], 'mode'); "
    "if (mode == false) then "
    "redis.call('hset', KEYS[1], 'mode', 'read'); "
    "redis.call('hset', KEYS[1], ARGV[2], 1); "
    "redis.call('set', KEYS[2] .. ':1', 1); "
    "redis.call('pexpire', KEYS[2] .. ':1', ARGV[1]); "
    "redis.call('pexpire', KEYS[1], ARGV[1]); "
    "return nil; end; "
    "if (mode == 'read') or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then "
    "local ind = redis.call('hincrby', KEYS[1], ARGV[2], 1); "
    "local key = KEYS[2] .. ':' .. ind; "
    "redis.call('set', key, 1); "
    "redis.call('pexpire', key, ARGV[1]); "
    "local remainTime = redis.call('pttl', KEYS[1]); "
    "redis.call('pexpire', KEYS[1], math.max(remainTime, ARGV[1])); "
    "return nil; end; "
    "return redis.call('pttl', KEYS[1]);";

inline constexpr std::string_view kRedissonReadUnlockScript =
    "local mode = redis.call('hget', KEYS[1], 'mode'); "
    "if (mode == false) then redis.call('publish', KEYS[4], 0); return 1; end; "
    "local lockExists = redis.call('hexists', KEYS[1], ARGV[2]); "
    "if (lockExists == 0) then return nil; end; "
    "local counter = redis.call('hincrby', KEYS[1], ARGV[2], -1); "
    "if (counter == 0) then redis.call('hdel', KEYS[1], ARGV[2]); end; "
    "redis.call('del', KEYS[2] .. ':' .. (counter+1)); "
    "if (redis.call('hlen', KEYS[1]) > 1) then "
    "local maxRemainTime = -3; "
    "local keys = redis.call('hkeys', KEYS[1]); "
    "for n, key in ipairs(keys) do "
    "counter = tonumber(redis.call('hget', KEYS[1], key)); "
    "if type(counter) == 'number' then "
    "for i=counter, 1, -1 do "
    "local remainTime = redis.call('pttl', KEYS[3] .. ':' .. key .. ':rwlock_timeout:' .. i); "
    "maxRemainTime = math.max(remainTime, maxRemainTime); "
    "end; end; end; "
    "if maxRemainTime > 0 then redis.call('pexpire', KEYS[1], maxRemainTime); return 0; end; "
    "if mode == 'write' then return 0; end; "
    "end; "
    "redis.call('del', KEYS[1]); "
    "redis.call('publish', KEYS[4], 0); "
    "return 1;";

inline constexpr std::string_view kRedissonWriteLockScript =
    "local mode = redis.call('hget', KEYS[1], 'mode'); "
    "if (mode == false) then "
    "redis.call('hset', KEYS[1], 'mode', 'write'); "
    "redis.call('hset', KEYS[1], ARGV[3], 1); "
    "redis.call('pexpire', KEYS[1], ARGV[1]); "
    "return nil; end; "
    "if (mode == 'write') then "
    "if (redis.call('hexists', KEYS[1], ARGV[3]) == 1) then "
    "redis.call('hincrby', KEYS[1], ARGV[3], 1); "
    "local currentExpire = redis.call('pttl', KEYS[1]); "
    "redis.call('pexpire', KEYS[1], currentExpire + ARGV[1]); "
    "return nil; end; end; "
    "return redis.call('pttl', KEYS[1]);";

inline constexpr std::string_view kRedissonWriteUnlockScript =
    "local mode = redis.call('hget', KEYS[1], 'mode'); "
    "if (mode == false) then redis.call('publish', KEYS[4], 0); return 1; end; "
    "if (mode == 'write') then "
    "local lockExists = redis.call('hexists', KEYS[1], ARGV[3]); "
    "if (lockExists == 0) then return nil; "
    "else local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); "
    "if (counter > 0) then redis.call('pexpire', KEYS[1], ARGV[1]); return 0; "
    "else redis.call('hdel', KEYS[1], ARGV[3]); "
    "if (redis.call('hlen', KEYS[1]) == 1) then "
    "redis.call('del', KEYS[1]); redis.call('publish', KEYS[4], 0); "
    "else redis.call('hset', KEYS[1], 'mode', 'read'); end; "
    "return 1; end; end; end; "
    "return nil;";

inline constexpr std::string_view kRedissonSemaphoreAcquireScript =
    "redis.call('set', KEYS[1], ARGV[1], 'NX'); "
    "local t = redis.call('time'); "
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000); "
    "local expiredIds = redis.call('zrangebyscore', KEYS[2], 0, now, 'limit', 0, 1); "
    "if #expiredIds > 0 then "
    "redis.call('zrem', KEYS[2], unpack(expiredIds)); "
    "local value = redis.call('incrby', KEYS[1], #expiredIds); "
    "if tonumber(value) > 0 then redis.call('publish', KEYS[3], value); end; "
    "end; "
    "local value = redis.call('get', KEYS[1]); "
    "if (value ~= false and tonumber(value) >= 1) then "
    "redis.call('decrby', KEYS[1], 1); "
    "redis.call('zadd', KEYS[2], now + tonumber(ARGV[2]), ARGV[3]); "
    "local ttl = redis.call('pttl', KEYS[1]); "
    "if ttl > 0 then redis.call('pexpire', KEYS[2], ttl); end; "
    "return ARGV[3]; end; "
    "local v = redis.call('zrange', KEYS[2], 0, 0, 'WITHSCORES'); "
    "if v[1] ~= nil then return ':' .. tostring(v[2]); end; "
    "return nil;";

inline constexpr std::string_view kRedissonSemaphoreReleaseScript =
    "local removed = redis.call('zrem', KEYS[2], ARGV[3]); "
    "if tonumber(removed) ~= 1 then return 0; end; "
    "local value = redis.call('incrby', KEYS[1], 1); "
    "redis.call('publish', KEYS[3], value); "
    "return 1;";

}  // namespace lockbench
