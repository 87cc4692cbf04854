// NodePool and PoolAllocator: the lock table's hash nodes in blocks of
// their exact size, without malloc's per-chunk header and rounding.
//
// Why: a held lock is one hash node (next pointer, key, state, cached hash:
// 128 bytes). From malloc, 128 bytes cost a 144-byte chunk (an 8-byte
// header, rounded to 16); from a pool carved out of 64 KiB slabs they cost
// 128. Those 16 bytes per lock pay for the two links of the lease-end index
// (KeyState::lease_next/lease_pprev) that single mode's lost notice `X`
// needs, so a held lock costs what it did before `X` existed.
//
// A pool hands out blocks of one size, fixed by the first single-object
// request of kMinBlock bytes or more (the table's node); any other request
// (the bucket array, a smaller rebound type) goes to operator new. Freed
// blocks go on a free list and are reused; the slabs are returned only when
// the pool is destroyed (a table that once held a million locks keeps their
// memory for the next million, as malloc mostly would too). In ASan builds
// a block is poisoned while free. Not thread-safe: one table, one thread.
#pragma once

#include <cstddef>
#include <memory>
#include <new>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define LOCKD_POOL_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define LOCKD_POOL_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define LOCKD_POOL_POISON(p, n) ((void)(p), (void)(n))
#define LOCKD_POOL_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace lockd::locks {

class NodePool {
 public:
  static constexpr std::size_t kSlabBytes = 64 * 1024;
  static constexpr std::size_t kMinBlock = 64;
  static constexpr std::size_t kMaxBlock = kSlabBytes / 16;

  NodePool() = default;
  NodePool(const NodePool&) = delete;
  NodePool& operator=(const NodePool&) = delete;
  ~NodePool() {
    for (void* slab : slabs_) {
      LOCKD_POOL_UNPOISON(slab, kSlabBytes);
      ::operator delete(slab, std::align_val_t{kAlign});
    }
  }

  // One block of `bytes` (aligned to `align`), or nullptr when this pool
  // does not serve that size: the caller falls back to operator new.
  void* allocate(std::size_t bytes, std::size_t align) {
    if (align > kAlign || !serves(bytes)) return nullptr;
    if (block_ == 0) block_ = rounded(bytes);
    if (free_ != nullptr) {
      void* p = free_;
      LOCKD_POOL_UNPOISON(p, block_);
      free_ = *static_cast<void**>(p);
      ++in_use_;
      return p;
    }
    if (next_ == end_) {
      char* slab = static_cast<char*>(::operator new(kSlabBytes, std::align_val_t{kAlign}));
      slabs_.push_back(slab);
      next_ = slab;
      end_ = slab + kSlabBytes / block_ * block_;
      LOCKD_POOL_POISON(slab, kSlabBytes);  // ASan builds: a block is usable only while handed out
    }
    void* p = next_;
    LOCKD_POOL_UNPOISON(p, block_);
    next_ += block_;
    ++in_use_;
    return p;
  }
  // Returns a block allocate() gave out; false when it was not this pool's
  // size (the caller gave it to operator new).
  bool deallocate(void* p, std::size_t bytes) {
    if (block_ == 0 || p == nullptr || !serves(bytes)) return false;
    *static_cast<void**>(p) = free_;
    LOCKD_POOL_POISON(static_cast<char*>(p) + sizeof(void*), block_ - sizeof(void*));
    free_ = p;
    --in_use_;
    return true;
  }

  std::size_t block_bytes() const { return block_; }
  std::size_t blocks_in_use() const { return in_use_; }
  std::size_t slab_count() const { return slabs_.size(); }

 private:
  static constexpr std::size_t kAlign = 16;
  static std::size_t rounded(std::size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }
  // Whether a block of `bytes` is this pool's (or would fix its size).
  bool serves(std::size_t bytes) const {
    return bytes >= kMinBlock && bytes <= kMaxBlock && (block_ == 0 || rounded(bytes) == block_);
  }

  std::size_t block_ = 0;  // 0 until the first single-object allocation
  std::vector<void*> slabs_;
  char* next_ = nullptr;  // the current slab's next unused block
  char* end_ = nullptr;
  void* free_ = nullptr;  // freed blocks, linked through their first word
  std::size_t in_use_ = 0;
};

// A standard allocator over a NodePool: single objects of the pool's block
// size come from it, everything else from operator new. Copies (and
// rebinds) share the pool, which must outlive every container using it.
template <typename T>
class PoolAllocator {
 public:
  using value_type = T;

  explicit PoolAllocator(NodePool* pool) noexcept : pool_(pool) {}
  template <typename U>
  PoolAllocator(const PoolAllocator<U>& other) noexcept : pool_(other.pool()) {}  // NOLINT: rebind

  T* allocate(std::size_t n) {
    if (n == 1) {
      if (void* p = pool_->allocate(sizeof(T), alignof(T))) return static_cast<T*>(p);
    }
    return std::allocator<T>{}.allocate(n);
  }
  void deallocate(T* p, std::size_t n) noexcept {
    if (n == 1 && pool_->deallocate(p, sizeof(T))) return;
    std::allocator<T>{}.deallocate(p, n);
  }

  NodePool* pool() const noexcept { return pool_; }
  template <typename U>
  bool operator==(const PoolAllocator<U>& other) const noexcept {
    return pool_ == other.pool();
  }

 private:
  NodePool* pool_;
};

}  // namespace lockd::locks
