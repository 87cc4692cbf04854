// LockCommand: one lock-table mutation as it travels through the Raft log.
//
// In cluster mode the leader turns a client's request into a LockCommand,
// stamps it with its own clock (`now_ns`), proposes the encoding, and every
// replica applies the committed command to its LockTable. Since the table
// is a pure function of its command sequence and the stamped times, all
// replicas reach the same state and hand out the same tokens.
//
// "Enqueue" is an Acquire with wait_ms > 0: the table queues it under
// `waiter` when the key is held.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "lockd/common/time.h"
#include "lockd/locks/lock_table.h"

namespace lockd::cluster {

// Which LockTable operation a command replays.
enum class LockCommandType : std::uint8_t {
  kAcquire = 1,       // LockTable::acquire (queues when wait_ms > 0)
  kRelease = 2,       // LockTable::release(token, key)
  kExpire = 3,        // LockTable::expire(key, token), proposed by the leader's lease heap
  kCancelWaiter = 4,  // LockTable::cancel_waiter(waiter): its client went away, or
                      // its wait ran out (the leader answers `T` once this commits)
  kKeep = 5,          // LockTable::keep(token, key, lease_ms) (v1.1)
  kLeaderStart = 6,   // a new leader's first entry: moves every lease onto its
                      // clock (§8), drops every queued waiter (§10), and sets
                      // the token base if the cluster has none yet
  kClock = 7,         // the leader's clock reading, nothing else: keeps "the
                      // latest old-leader reading" fresh while idle (§8)
  kAcquireShared = 8, // LockTable::acquire of an `S` (v1.2, §5b): as kAcquire,
                      // plus `limit`. Encoded as entry version
                      // kSharedEntryVersion, which a node of an older build
                      // cannot apply: proposed only once every member can
                      // (ReplicatedLockService::shared_entries_allowed()).
};
constexpr std::uint8_t kMaxLockCommandType = 8;

// The log entry encodings (the first byte of every command) this binary
// applies. Version 2 is lockd 1.1's. A node refuses to start applying an
// entry outside this range: it stops with one line (cluster_node.h); the
// leader proposes a version only once every member's handshake says it
// applies it (ReplicatedLockService::cluster_supports).
constexpr std::uint16_t kEntryVersionMin = 2;
#ifdef LOCKD_ENTRY_VERSION_MAX
constexpr std::uint16_t kEntryVersionMax = LOCKD_ENTRY_VERSION_MAX;
#else
constexpr std::uint16_t kEntryVersionMax = 3;
#endif
// Version 3 (v1.2) adds kAcquireShared and its limit; every other command
// is still written as version 2, so a log without `S` stays readable by a
// 1.1 node.
constexpr std::uint16_t kSharedEntryVersion = 3;

// One command; which fields matter depends on `type`.
struct LockCommand {
  LockCommandType type = LockCommandType::kAcquire;
  TimeNs now_ns = 0;           // the proposing leader's clock
  std::string owner;           // kAcquire, kAcquireShared
  std::string key;             // kAcquire, kAcquireShared, kRelease, kExpire, kKeep
  std::uint64_t lease_ms = 0;  // kAcquire, kAcquireShared, kKeep
  std::uint64_t wait_ms = 0;   // kAcquire, kAcquireShared
  locks::ClientId client = 0;  // kAcquire, kAcquireShared: who gets a later Delivery
  locks::WaiterId waiter = 0;  // kAcquire, kAcquireShared (if it waits), kCancelWaiter
  locks::Token token = 0;      // kRelease, kExpire, kKeep
  std::uint64_t token_base = 0;  // kLeaderStart: wall-clock ns, the token base if none is set yet
  std::uint16_t limit = 0;       // kAcquireShared: the `S` limit (encoded for that type only)

  bool operator==(const LockCommand&) const = default;
};

// Bounds on decoded strings (the protocol's own limits are far smaller).
constexpr std::size_t kMaxLockCommandField = 4096;
// Longest lease or wait a command may carry: far above any --max-lease-ms
// an operator would set, far below where now + lease overflows.
constexpr std::uint64_t kMaxLockCommandMs = 366ull * 24 * 3600 * 1000;
// Range of a LeaderStart token base (wall-clock ns): 2001-09-09 .. 2262,
// so that base + any log index still fits in a token.
constexpr std::uint64_t kMinTokenBase = 1'000'000'000'000'000'000ull;
constexpr std::uint64_t kMaxTokenBase = 1ull << 63;

// Why bytes were not a LockCommand.
enum class LockCommandError {
  kOk = 0,      // decoded
  kTruncated,   // ran out of bytes
  kBadVersion,  // unknown encoding version
  kBadType,     // unknown command type
  kTooLong,     // a string field beyond kMaxLockCommandField
  kBadField,    // a field outside what the lock table accepts (empty or
                // over-long key/owner, lease 0, lease or wait too long,
                // a clock reading that is negative or near overflow)
  kTrailing,    // bytes left over
};

std::string encode_lock_command(const LockCommand& c);
// Decodes and validates: a command that decodes is one LockStateMachine can
// apply without tripping any of the lock table's checks.
LockCommandError decode_lock_command(std::string_view bytes, LockCommand& out);

}  // namespace lockd::cluster
