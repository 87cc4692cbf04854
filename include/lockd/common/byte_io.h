// Little-endian byte writer and bounds-checked reader for the binary
// codecs (Raft frames in src/raft, replicated lock commands in
// src/cluster). One implementation, so both formats read and write
// integers and length-prefixed strings the same way.
//
// Readers never trust their input: every read checks the bytes left, and
// the first failure sticks (later reads return zeros), so a decoder reads
// every field and checks error() once at the end. Peer and disk bytes are
// input, not invariants: nothing here asserts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace lockd {

class ByteWriter {
 public:
  explicit ByteWriter(std::string& out) : out_(out) {}
  void u8(std::uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void u32(std::uint32_t v) { little_endian<4>(v); }
  void u64(std::uint64_t v) { little_endian<8>(v); }
  // A u32 length, then the bytes. Callers bound `s` below 4 GiB.
  void bytes(std::string_view s) {
    u32(static_cast<std::uint32_t>(s.size()));
    out_.append(s);
  }

 private:
  // One append per field, not one push_back (and capacity check) per byte.
  template <int N>
  void little_endian(std::uint64_t v) {
    char b[N];
    for (int i = 0; i < N; ++i) b[i] = static_cast<char>(v >> (8 * i));
    out_.append(b, N);
  }

  std::string& out_;
};

// `Error` is the codec's own error enum; the reader is told which of its
// values mean "fine" and "ran out of bytes".
template <typename Error>
class ByteReader {
 public:
  ByteReader(std::string_view in, Error ok, Error truncated)
      : in_(in), ok_(ok), truncated_(truncated), error_(ok) {}

  std::uint8_t u8() {
    if (!need(1)) return 0;
    return static_cast<std::uint8_t>(in_[pos_++]);
  }
  std::uint32_t u32() { return static_cast<std::uint32_t>(little_endian(4)); }
  std::uint64_t u64() { return little_endian(8); }
  // A string written by ByteWriter::bytes(). Longer than `max_bytes` fails
  // with `too_long` (before any allocation).
  std::string bytes(std::size_t max_bytes, Error too_long) {
    const std::uint32_t n = u32();
    if (n > max_bytes) {
      fail(too_long);
      return {};
    }
    if (!need(n)) return {};
    std::string s(in_.substr(pos_, n));
    pos_ += n;
    return s;
  }

  // The same, as a view into the input (no allocation; valid as long as
  // the input is).
  std::string_view bytes_view(std::size_t max_bytes, Error too_long) {
    const std::uint32_t n = u32();
    if (n > max_bytes) {
      fail(too_long);
      return {};
    }
    if (!need(n)) return {};
    std::string_view s = in_.substr(pos_, n);
    pos_ += n;
    return s;
  }

  std::size_t remaining() const { return in_.size() - pos_; }
  bool ok() const { return error_ == ok_; }
  Error error() const { return error_; }
  // Records the first error only.
  void fail(Error e) {
    if (error_ == ok_) error_ = e;
  }

 private:
  std::uint64_t little_endian(int n_bytes) {
    if (!need(static_cast<std::size_t>(n_bytes))) return 0;
    std::uint64_t v = 0;
    for (int i = 0; i < n_bytes; ++i) {
      v |= static_cast<std::uint64_t>(static_cast<std::uint8_t>(in_[pos_++])) << (8 * i);
    }
    return v;
  }
  bool need(std::size_t n) {
    if (error_ != ok_) return false;
    if (remaining() < n) {
      fail(truncated_);
      return false;
    }
    return true;
  }

  std::string_view in_;
  std::size_t pos_ = 0;
  Error ok_;
  Error truncated_;
  Error error_;
};

}  // namespace lockd
