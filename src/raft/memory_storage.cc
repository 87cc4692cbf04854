// MemoryStorage: the Storage contract held in vectors.
#include "lockd/common/check.h"
#include "lockd/raft/storage.h"

namespace lockd::raft {

StorageError MemoryStorage::set_hard_state(const HardState& hs) {
  hard_state_ = hs;
  return StorageError::kOk;
}

Index MemoryStorage::last_index() const {
  return entries_.empty() ? snapshot_.meta.index : entries_.back().index;
}

StorageError MemoryStorage::append(std::span<const Entry> entries) {
  if (entries.empty()) return StorageError::kOk;
  Index first = entries.front().index;
  // The core never re-sends compacted entries, and never leaves a gap.
  LOCKD_CHECK(first > snapshot_.meta.index);
  LOCKD_CHECK(first <= last_index() + 1);
  entries_.resize(first - snapshot_.meta.index - 1);
  for (const Entry& e : entries) {
    LOCKD_CHECK(e.index == last_index() + 1);
    entries_.push_back(e);
  }
  return StorageError::kOk;
}

StorageError MemoryStorage::save_snapshot(const Snapshot& snap) {
  if (snap.meta.index <= snapshot_.meta.index) return StorageError::kOk;
  std::vector<Entry> kept;
  bool matches = false;
  for (const Entry& e : entries_) {
    if (e.index == snap.meta.index && e.term == snap.meta.term) matches = true;
  }
  if (matches) {
    for (Entry& e : entries_) {
      if (e.index > snap.meta.index) kept.push_back(std::move(e));
    }
  }
  entries_ = std::move(kept);
  snapshot_ = snap;
  return StorageError::kOk;
}

}  // namespace lockd::raft
