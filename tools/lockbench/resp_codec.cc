#include "resp_codec.h"

#include <charconv>

namespace lockbench {
namespace {

void append_u64(std::string& out, std::uint64_t v) {
  char buf[24];
  const auto res = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, res.ptr);
}

bool to_i64(std::string_view s, std::int64_t& v) {
  if (s.empty()) return false;
  const auto res = std::from_chars(s.data(), s.data() + s.size(), v);
  return res.ec == std::errc{} && res.ptr == s.data() + s.size();
}

}  // namespace

void append_resp_array_header(std::string& out, std::size_t count) {
  out.push_back('*');
  append_u64(out, count);
  out.append("\r\n", 2);
}

void append_resp_bulk(std::string& out, std::string_view arg) {
  out.push_back('$');
  append_u64(out, arg.size());
  out.append("\r\n", 2);
  out.append(arg);
  out.append("\r\n", 2);
}

void append_resp_bulk(std::string& out, std::uint64_t arg) {
  char buf[24];
  const auto res = std::to_chars(buf, buf + sizeof buf, arg);
  append_resp_bulk(out, std::string_view(buf, static_cast<std::size_t>(res.ptr - buf)));
}

void encode_resp_command(std::string& out, std::initializer_list<std::string_view> args) {
  append_resp_array_header(out, args.size());
  for (std::string_view a : args) append_resp_bulk(out, a);
}

DecodeStatus decode_resp(std::string_view in, std::size_t& consumed, RespValue& out) {
  if (in.empty()) return DecodeStatus::kNeedMore;
  // Judge the type byte before waiting for a line end: a server speaking
  // another protocol may never send a `\r\n`.
  if (std::string_view("+-:$*").find(in[0]) == std::string_view::npos) {
    return DecodeStatus::kMalformed;
  }
  const std::size_t eol = in.find("\r\n");
  if (eol == std::string_view::npos) {
    return in.size() >= kMaxRespLineBytes ? DecodeStatus::kMalformed : DecodeStatus::kNeedMore;
  }
  if (eol + 2 > kMaxRespLineBytes) return DecodeStatus::kMalformed;
  const std::string_view body = in.substr(1, eol - 1);
  const std::size_t header_bytes = eol + 2;
  out = RespValue{};
  switch (in[0]) {
    case '+':
    case '-':
      out.type = in[0] == '+' ? RespType::kSimple : RespType::kError;
      out.text = body;
      consumed = header_bytes;
      return DecodeStatus::kReply;
    case ':':
      out.type = RespType::kInteger;
      if (!to_i64(body, out.integer)) return DecodeStatus::kMalformed;
      consumed = header_bytes;
      return DecodeStatus::kReply;
    case '*':
      if (!to_i64(body, out.integer) || out.integer < -1) return DecodeStatus::kMalformed;
      out.type = out.integer == -1 ? RespType::kNull : RespType::kArray;
      consumed = header_bytes;
      return DecodeStatus::kReply;
    case '$': {
      std::int64_t len = 0;
      if (!to_i64(body, len) || len < -1 || len > kMaxRespBulkBytes) {
        return DecodeStatus::kMalformed;
      }
      if (len == -1) {
        out.type = RespType::kNull;
        consumed = header_bytes;
        return DecodeStatus::kReply;
      }
      const auto n = static_cast<std::size_t>(len);
      if (in.size() < header_bytes + n + 2) return DecodeStatus::kNeedMore;
      if (in.substr(header_bytes + n, 2) != "\r\n") return DecodeStatus::kMalformed;
      out.type = RespType::kBulk;
      out.text = in.substr(header_bytes, n);
      consumed = header_bytes + n + 2;
      return DecodeStatus::kReply;
    }
    default:
      return DecodeStatus::kMalformed;
  }
}

}  // namespace lockbench
