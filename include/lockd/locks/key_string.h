// KeyString and OwnerString: a lock's key and a holder's owner as the lock
// table stores them.
//
// Why not std::string: its inline buffer holds 15 bytes in 32, so every
// longer key (`orders/2026/11/30/42`, a UUID) costs a second heap block —
// 48 bytes for a 32-byte key, a third of what a held lock costs — and an
// owner costs 32 bytes where 16 hold the usual one. InlineString<N> is N
// bytes: a size byte and N - 1 bytes of the string in the object itself, or
// a pointer to one heap block when it is longer (up to 255 bytes; the
// protocol allows 250 for a key and 64 for an owner).
//
// KeyString (40 bytes, keys up to 39 inline) sits in the table's hash
// node: a node holding it is the same 128-byte malloc chunk as one holding
// a std::string. OwnerString (16 bytes, owners up to 15 inline, as
// std::string's) leaves a holder 16 bytes for the granting client (lost
// notices, protocol §5c) at no cost to the node.
#pragma once

#include <cstdint>
#include <cstring>
#include <ostream>
#include <string_view>

#include "lockd/common/check.h"

namespace lockd::locks {

template <std::size_t kBytes>
class InlineString {
  static_assert(kBytes > sizeof(char*) && kBytes <= 256);

 public:
  static constexpr std::size_t kInlineBytes = kBytes - 1;
  static constexpr std::size_t kMaxBytes = 255;  // size fits one byte

  InlineString() = default;
  explicit InlineString(std::string_view s) { set(s); }
  InlineString(const InlineString& other) { set(other.view()); }
  InlineString(InlineString&& other) noexcept : size_(other.size_) {
    std::memcpy(bytes_, other.bytes_, sizeof bytes_);
    other.size_ = 0;  // the heap block, if any, now belongs to this
  }
  InlineString& operator=(const InlineString& other) {
    if (this != &other) *this = InlineString(other);
    return *this;
  }
  // For containers that move elements around (a heap of them).
  InlineString& operator=(InlineString&& other) noexcept {
    if (this != &other) {
      if (on_heap()) delete[] heap_ptr();
      size_ = other.size_;
      std::memcpy(bytes_, other.bytes_, sizeof bytes_);
      other.size_ = 0;
    }
    return *this;
  }
  ~InlineString() {
    if (on_heap()) delete[] heap_ptr();
  }
  void assign(std::string_view s) {
    clear();
    set(s);
  }
  void clear() {
    if (on_heap()) delete[] heap_ptr();
    size_ = 0;
  }

  std::string_view view() const {
    return {on_heap() ? heap_ptr() : bytes_, size_};
  }
  operator std::string_view() const { return view(); }  // NOLINT: hashing, lookups, formatting
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  friend bool operator==(const InlineString& a, const InlineString& b) { return a.view() == b.view(); }
  // Also serves `string_view == InlineString` and std::string (C++20 rewrites).
  friend bool operator==(const InlineString& a, std::string_view b) { return a.view() == b; }
  friend std::ostream& operator<<(std::ostream& os, const InlineString& s) { return os << s.view(); }

 private:
  bool on_heap() const { return size_ > kInlineBytes; }
  char* heap_ptr() const {
    char* p;
    std::memcpy(&p, bytes_, sizeof p);
    return p;
  }
  void set(std::string_view s) {  // *this holds nothing
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
  char bytes_[kInlineBytes];  // the string, or a char* to it when longer
};

using KeyString = InlineString<40>;
using OwnerString = InlineString<16>;

static_assert(sizeof(KeyString) == 40);
static_assert(sizeof(OwnerString) == 16);

}  // namespace lockd::locks
