// Snapshot bytes a hostile or buggy leader could send (issue 21): they pass
// the lock table codec's own checks (CRC, lengths, limits) but not the
// replicated state machine's, because a waiter's id is beyond the index
// the snapshot is labelled with. Applying the entry at that index later
// would queue a second waiter under the same id (an assertion).
#pragma once

#include <cstdint>
#include <string>

#include "lockd/common/byte_io.h"
#include "lockd/locks/lock_table.h"
#include "lockd/locks/lock_table_snapshot.h"

namespace lockd::cluster::testing {

// A state machine snapshot taken at `index` (token base `base`): key "k"
// held by "a", and one waiter "b" whose id is `waiter_id`.
inline std::string snapshot_with_waiter(std::uint64_t index, std::uint64_t waiter_id,
                                        std::uint64_t base = 1'800'000'000'000'000'000ull) {
  locks::LockTable table(locks::Limits{}, base + 1);
  locks::AcquireRequest holder{"a", "k", 60'000, 0, 0, 0};
  table.acquire(1'000, holder);
  locks::AcquireRequest waiter{"b", "k", 60'000, 60'000, 0, waiter_id};
  table.acquire(1'000, waiter);
  // The state machine header (lock_state_machine.cc): version 1, applied
  // index, token base, clock offset, floor, clock term.
  std::string header;
  ByteWriter w(header);
  w.u8(1);
  w.u64(index);
  w.u64(base);
  w.u64(0);
  w.u64(1'000);
  w.u64(1);
  return locks::serialize(table, header);
}

}  // namespace lockd::cluster::testing
