// MemoryStorage: the Storage contract held in vectors.
#include "lockd/common/check.h"
#include "lockd/raft/storage.h"

namespace lockd::raft {

std::string_view to_string(StorageError e) {
  switch (e) {
    case StorageError::kOk: return "ok";
    case StorageError::kIo: return "io";
    case StorageError::kCorrupt: return "corrupt";
    case StorageError::kVersion: return "version";
    case StorageError::kLocked: return "locked";
  }
  return "unknown";
}

Index MemoryStorage::last_index() const {
  return entries_.empty() ? snapshot_.meta.index : entries_.back().index;
}

StorageStatus MemoryStorage::save(const std::optional<HardState>& hard_state,
                                  std::span<const Entry> entries, const Snapshot* snapshot) {
  if (snapshot != nullptr) save_snapshot(*snapshot);
  append(entries);
  if (hard_state) set_hard_state(*hard_state);
  return StorageStatus::Ok();
}

void MemoryStorage::append(std::span<const Entry> entries) {
  if (entries.empty()) return;
  Index first = entries.front().index;
  // The core never re-sends compacted entries, and never leaves a gap.
  LOCKD_CHECK(first > snapshot_.meta.index);
  LOCKD_CHECK(first <= last_index() + 1);
  entries_.resize(first - snapshot_.meta.index - 1);
  for (const Entry& e : entries) {
    LOCKD_CHECK(e.index == last_index() + 1);
    entries_.push_back(e);
  }
}

void MemoryStorage::save_snapshot(const Snapshot& snap) {
  if (snap.meta.index <= snapshot_.meta.index) return;
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
}

}  // namespace lockd::raft
