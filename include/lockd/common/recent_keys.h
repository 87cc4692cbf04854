// RecentKeys: the keys of the last kCapacity requests, for "how busy is
// this key" (`/v1/top`, `lockctl top`).
//
// Why a ring of fixed slots: recording sits on the request hot path, so it
// copies at most kMaxKeyBytes into a preallocated slot and never allocates.
// Reading (counting the ring) is done by the admin API on demand and costs
// O(kCapacity), independent of the number of keys or the request rate.
//
// Header-only so the server layer can own one without linking the admin
// layer. Reactor thread only.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string_view>

namespace lockd {

class RecentKeys {
 public:
  static constexpr std::size_t kCapacity = 4096;     // requests remembered
  static constexpr std::size_t kMaxKeyBytes = 250;   // protocol §2 key limit

  RecentKeys() : slots_(std::make_unique<Slot[]>(kCapacity)) {}

  void record(std::string_view key) {
    Slot& s = slots_[next_ % kCapacity];
    s.len = static_cast<std::uint8_t>(key.size() < kMaxKeyBytes ? key.size() : kMaxKeyBytes);
    std::memcpy(s.bytes.data(), key.data(), s.len);
    ++next_;
  }

  // How many requests are remembered (at most kCapacity).
  std::size_t size() const { return next_ < kCapacity ? static_cast<std::size_t>(next_) : kCapacity; }
  // Requests recorded over the process's life.
  std::uint64_t total() const { return next_; }
  // The key of remembered slot `i` (0 <= i < size()), in no particular order.
  std::string_view at(std::size_t i) const {
    const Slot& s = slots_[i];
    return {s.bytes.data(), s.len};
  }

 private:
  struct Slot {
    std::uint8_t len = 0;
    std::array<char, kMaxKeyBytes> bytes{};
  };
  std::unique_ptr<Slot[]> slots_;  // kCapacity slots, allocated once
  std::uint64_t next_ = 0;
};

}  // namespace lockd
