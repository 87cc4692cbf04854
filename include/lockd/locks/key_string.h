// KeyString: a lock key as the lock table stores it.
//
// Why not std::string: its inline buffer holds 15 bytes, so every longer
// key (`orders/2026/11/30/42`, a UUID) costs a second heap block — 48 bytes
// for a 32-byte key, a third of what a held lock costs. KeyString keeps up
// to kInlineBytes in the object itself, which sits inside the hash node, and
// is no bigger than the node's rounding leaves room for: a node holding a
// KeyString is the same 128-byte malloc chunk as one holding a std::string.
// Longer keys (up to the protocol's 250 bytes) take one heap block.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

#include "lockd/common/check.h"

namespace lockd::locks {

class KeyString {
 public:
  static constexpr std::size_t kInlineBytes = 39;
  static constexpr std::size_t kMaxBytes = 255;  // size fits one byte

  explicit KeyString(std::string_view s) { assign(s); }
  KeyString(const KeyString& other) { assign(other.view()); }
  KeyString(KeyString&& other) noexcept : size_(other.size_) {
    std::memcpy(bytes_, other.bytes_, sizeof bytes_);
    other.size_ = 0;  // the heap block, if any, now belongs to this
  }
  KeyString& operator=(const KeyString&) = delete;
  // For containers that move elements around (the leader's lease heap).
  KeyString& operator=(KeyString&& other) noexcept {
    if (this != &other) {
      if (on_heap()) delete[] heap_ptr();
      size_ = other.size_;
      std::memcpy(bytes_, other.bytes_, sizeof bytes_);
      other.size_ = 0;
    }
    return *this;
  }
  ~KeyString() {
    if (on_heap()) delete[] heap_ptr();
  }

  std::string_view view() const {
    return {on_heap() ? heap_ptr() : bytes_, size_};
  }
  operator std::string_view() const { return view(); }  // NOLINT: hashing and lookups
  std::size_t size() const { return size_; }

  friend bool operator==(const KeyString& a, const KeyString& b) { return a.view() == b.view(); }
  // Also serves `string_view == KeyString` and std::string (C++20 rewrites).
  friend bool operator==(const KeyString& a, std::string_view b) { return a.view() == b; }

 private:
  bool on_heap() const { return size_ > kInlineBytes; }
  char* heap_ptr() const {
    char* p;
    std::memcpy(&p, bytes_, sizeof p);
    return p;
  }
  void assign(std::string_view s) {
    LOCKD_CHECK(s.size() <= kMaxBytes);
    size_ = static_cast<std::uint8_t>(s.size());
    if (on_heap()) {
      char* p = new char[s.size()];
      std::memcpy(p, s.data(), s.size());
      std::memcpy(bytes_, &p, sizeof p);
    } else if (!s.empty()) {
      std::memcpy(bytes_, s.data(), s.size());
    }
  }

  std::uint8_t size_ = 0;
  char bytes_[kInlineBytes];  // the key, or a char* to it when longer
};

static_assert(sizeof(KeyString) == 40);

}  // namespace lockd::locks
