// A tiny blocking HTTP/1.1 client for the admin tests: sends raw request
// bytes, reads to EOF, splits status, headers and body. Test-only.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace lockd::testing {

struct HttpReply {
  int status = 0;  // 0: no HTTP reply (connection failed or closed)
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
};

// Sends `raw` as is and parses whatever comes back before EOF.
HttpReply http_raw(std::uint16_t port, const std::string& raw);
// `METHOD target HTTP/1.1` with Connection: close.
HttpReply http(std::uint16_t port, const std::string& target, const std::string& method = "GET");

}  // namespace lockd::testing
