// DeferredFree: destroys a large batch of objects a slice at a time.
//
// Dropping O(table) memory at once — a compacted Raft log of 100,000
// entries, each with its own heap payload — is one free() per object,
// and after a snapshot's fork() nearly every page it touches faults
// first: measured at 45-263 ms on one loop turn with 1 M locks held,
// long enough to miss heartbeats (docs/benchmarks/membership.md, "The end of a snapshot at 1 M locks"). Redis frees big
// values lazily for the same reason. Here the batch is parked and
// destroyed a few thousand objects per loop turn, from the back (no
// moves); the memory is back in the allocator a few dozen turns later.
#pragma once

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

namespace lockd {

template <typename T>
class DeferredFree {
 public:
  void add(std::vector<T> batch) {
    if (batch.empty()) return;
    pending_ += batch.size();
    batches_.push_back(std::move(batch));
  }

  // Destroys up to `max_objects` of what was added; true while some remain.
  bool free_some(std::size_t max_objects) {
    while (max_objects > 0 && !batches_.empty()) {
      std::vector<T>& b = batches_.back();
      const std::size_t n = std::min(max_objects, b.size());
      b.erase(b.end() - static_cast<std::ptrdiff_t>(n), b.end());
      pending_ -= n;
      max_objects -= n;
      if (b.empty()) {
        // The largest emptied buffer is kept for take_spare(); others are freed.
        if (b.capacity() > spare_.capacity()) spare_ = std::move(b);
        batches_.pop_back();
      }
    }
    return !batches_.empty();
  }

  // The largest emptied buffer since the last call (capacity 0 if none),
  // for the producer to fill again: its pages are already the process's,
  // where a new allocation of that size faults every page in again.
  std::vector<T> take_spare() { return std::exchange(spare_, {}); }

  std::size_t pending() const { return pending_; }
  bool empty() const { return batches_.empty(); }

 private:
  std::vector<std::vector<T>> batches_;
  std::vector<T> spare_;
  std::size_t pending_ = 0;
};

}  // namespace lockd
