// The client side of RESP2 (the Redis protocol): command encoding and an
// incremental reply decoder, for lockbench's Redis backend.
//
// Why hand-written: the comparison must run Redis through the same event
// loop, buffers and code paths as lockd, so only the bytes differ; hiredis
// would bring its own buffering. Only what lockbench needs: simple strings,
// errors, integers, bulk strings (and nulls); an array reply is reported as
// its header, which lockbench treats as unexpected.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include "decode_status.h"

namespace lockbench {

// Longest header line (`+OK`, `:1`, `$40`, `-ERR ...`) we accept.
constexpr std::size_t kMaxRespLineBytes = 4096;
// Largest bulk string we accept: we only ever get a 40-byte script SHA.
constexpr std::int64_t kMaxRespBulkBytes = 1 << 20;

enum class RespType : std::uint8_t {
  kSimple,   // `+text`
  kError,    // `-text`
  kInteger,  // `:n`
  kBulk,     // `$n` then n bytes
  kNull,     // `$-1` or `*-1` (RESP2 null)
  kArray,    // `*n` header only: the elements are not decoded
};

// One decoded value. `text` points into the decoder's input.
struct RespValue {
  RespType type = RespType::kNull;
  std::int64_t integer = 0;  // kInteger: the value; kArray: the count
  std::string_view text;     // kSimple, kError, kBulk
};

// Appends one command as a RESP array of bulk strings.
void encode_resp_command(std::string& out, std::initializer_list<std::string_view> args);
// Same, for args that are not all strings: the caller writes `count`
// arguments with append_resp_bulk after this header.
void append_resp_array_header(std::string& out, std::size_t count);
void append_resp_bulk(std::string& out, std::string_view arg);
void append_resp_bulk(std::string& out, std::uint64_t arg);

DecodeStatus decode_resp(std::string_view in, std::size_t& consumed, RespValue& out);

}  // namespace lockbench
