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

// The log entry encodings (the first byte of every command) this binary
// applies. A node that meets a committed entry outside this range, or one
// that does not decode, stops with one line naming the index and the
// version (cluster_node.h); it never skips it. The leader proposes a
// version only once every member's handshake says it applies it
// (ReplicatedLockService::cluster_supports).
//   2: lockd 1.1 (kinds 1..7)
//   3: lockd 1.2 with kConfig (the cluster-wide caps, the token floor)
//   4: lockd 1.2 with kAcquireShared (`S`, its limit)
//   5: lockd 1.3 with kCancelWaiters (a departing client's waiters, one entry)
//   6+: test builds only (-DLOCKD_ENTRY_VERSION_MAX=6, bin/lockd-next): the
//       layout of 5 under a new number, to test rolling upgrades and the stop.
// A build with -DLOCKD_ENTRY_VERSION_MAX=3 is a 1.2 node from before `S`
// (it answers `S` with E no_leader); one with 4 is a 1.2 node from before
// kCancelWaiters (a leader then cancels a departing client's waiters one
// kCancelWaiter entry each).
constexpr std::uint16_t kEntryVersionMin = 2;
constexpr std::uint16_t kEntryVersionConfig = 3;  // the first with kConfig
constexpr std::uint16_t kEntryVersionShared = 4;  // the first with kAcquireShared
constexpr std::uint16_t kEntryVersionCancelWaiters = 5;  // the first with kCancelWaiters
// The highest version this binary writes and applies: 5, or what the build
// says. Defined in src/cluster/entry_version.cc, the one file that reads
// LOCKD_ENTRY_VERSION_MAX / LOCKD_ENTRY_VERSION_NEXT, so that lockd-next
// recompiles that file alone instead of the whole cluster layer.
extern const std::uint16_t kEntryVersionMax;

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
  kConfig = 8,        // (version 3) replicated configuration: the caps every replica
                      // applies with, and the token floor (docs/cluster.md "What is
                      // cluster-wide")
  kAcquireShared = 9, // (version 4) LockTable::acquire of an `S` (v1.2, §5b): as
                      // kAcquire, plus `limit`. Proposed only once every member
                      // applies version 4 (ReplicatedLockService::shared_entries_allowed()).
  kCancelWaiters = 10,  // (version 5) LockTable::cancel_waiters(waiters): every waiter of
                        // a client that went away, taken out together before any
                        // hand-off (as single mode does), so none of them is granted
                        // the key its neighbour in the list gave up. Proposed only once
                        // every member applies version 5; before that, one
                        // kCancelWaiter each.
};
constexpr std::uint8_t kMaxLockCommandType = 10;
// The last kind each entry version knows.
constexpr std::uint8_t max_lock_command_type(std::uint16_t version) {
  return version >= kEntryVersionCancelWaiters ? 10
         : version >= kEntryVersionShared      ? 9
         : version >= kEntryVersionConfig      ? 8
                                               : 7;
}

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
  // kConfig:
  std::uint64_t max_keys = 0;     // the caps (>= 1) every replica applies entries with
  std::uint64_t max_waiters_per_key = 0;
  std::uint64_t max_waiters = 0;
  std::uint64_t token_floor = 0;  // every later token is above it (0: none)
  std::uint16_t limit = 0;       // kAcquireShared: the `S` limit (encoded for that type only)
  std::vector<locks::WaiterId> waiters;  // kCancelWaiters: 1..kMaxCancelWaiters ids (that type only)

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

// Most waiter ids one kCancelWaiters carries (8 bytes each: 32 KiB at
// most); a client with more waiters is cancelled in several entries.
constexpr std::size_t kMaxCancelWaiters = 4096;

// Largest cap a kConfig may carry (far above any memory a node has).
constexpr std::uint64_t kMaxConfigCap = 1ull << 40;

// Encodes `c` as entry version `version` (kEntryVersionMin..kEntryVersionMax;
// a kConfig needs kEntryVersionConfig or later: checked).
std::string encode_lock_command(const LockCommand& c, std::uint16_t version = kEntryVersionMin);
// Decodes and validates: a command that decodes is one LockStateMachine can
// apply without tripping any of the lock table's checks.
LockCommandError decode_lock_command(std::string_view bytes, LockCommand& out);
// The encoding version an entry's bytes claim (their first byte; 0 when empty).
std::uint16_t lock_command_version(std::string_view bytes);

}  // namespace lockd::cluster
