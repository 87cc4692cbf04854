// The whole state of a LockTable as bytes, for Raft snapshots: keys,
// holders, tokens, leases, wait queues (waiter and client ids, owners,
// leases, deadlines, in FIFO order), the deadline index as it is (so equal
// deadlines fire in the same order after a restore) and the token counter.
// Not included: the operator's Limits (each node's own config), the
// counters (LockStats: per-process metrics) and the position of a sweep in
// progress (a new pass starts; sweeps decide nothing replicated).
//
//   std::string bytes = locks::serialize(table, app_header);
//   LockTable fresh(limits, 1);
//   std::string header, error;
//   if (!locks::restore(bytes, fresh, header, error)) { refuse: error is one line }
//
// `app_header` is opaque to the table: the replicated state machine stores
// its own extra state there (token base, clock offset, applied index ...)
// and gets it back from restore().
//
// Layout (little-endian; docs/storage.md has the table):
//   u8 version (2) | bytes app_header | u64 next_token | u64 key count |
//   keys | u64 deadline count | deadlines | u32 crc32c of all before
// where `bytes` is u32 length + bytes, a key is
//   bytes key | u8 mode (0 exclusive, 1 shared) | u32 limit |
//   u32 holder count | holders (bytes owner | u64 token |
//   i64 expires_at_ns | u64 lease_ms), oldest first | u32 waiter count |
//   waiters (u64 id | u64 client | bytes owner | u64 lease_ms |
//   i64 wait_deadline_ns | u8 mode | u32 limit), front first
// and a deadline is i64 at_ns | u8 kind (0 lease, 1 wait) | u64 id | bytes key.
// Version 1 (v1.1; still read, and still written for a table with no
// shared key and no `S` waiter, so an older node can load it) has neither
// mode nor limit: a key is one holder (bytes owner | u64 token |
// i64 expires_at_ns | u64 lease_ms) and waiters stop after the deadline.
//
// restore() treats the bytes as untrusted input: it checks the CRC, every
// length, and the table's invariants (unique keys and waiter ids, tokens
// below the counter, caps within the table's Limits) and answers false with
// a one-line error instead of asserting. On false the table is left empty.
#pragma once

#include <string>
#include <string_view>

#include "lockd/locks/lock_table.h"

namespace lockd::locks {

constexpr std::uint8_t kTableSnapshotVersion = 2;

std::string serialize(const LockTable& table, std::string_view app_header = {});

// `table` must be freshly constructed (no keys, no waiters); its Limits
// stay. On success it holds the snapshot's state and `app_header` the
// caller's header.
bool restore(std::string_view bytes, LockTable& table, std::string& app_header, std::string& error);

}  // namespace lockd::locks
