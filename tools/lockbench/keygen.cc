#include "keygen.h"

#include <charconv>
#include <cstring>

namespace lockbench {

void format_key(KeyBuf& out, std::string_view prefix, std::uint64_t index) {
  char* p = out.bytes.data();
  std::memcpy(p, prefix.data(), prefix.size());
  p += prefix.size();
  *p++ = ':';
  const auto res = std::to_chars(p, out.bytes.data() + out.bytes.size(), index);
  out.size = static_cast<std::uint8_t>(res.ptr - out.bytes.data());
}

std::uint64_t SplitMix64::next() {
  std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

std::uint64_t SplitMix64::below(std::uint64_t bound) {
  return next() % bound;
}

bool PartitionKeys::next(std::uint64_t& index) {
  if (next_ >= total_) return false;
  index = next_;
  next_ += stride_;
  return true;
}

}  // namespace lockbench
