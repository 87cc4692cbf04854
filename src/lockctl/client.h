// Blocking clients lockctl uses to talk to lockd: a one-shot HTTP GET for
// the admin API and a one-request text-protocol exchange for acquire and
// release.
//
// Why blocking sockets and not evhttp's client: lockctl does one thing at
// a time and waits for it; a plain socket with timeouts is the simplest
// correct tool and adds no dependency. Every call has a deadline, so a
// stuck server cannot hang lockctl (`acquire --wait`'s deadline is the
// wait plus --timeout).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "lockd/net/address.h"

namespace lockd::lockctl {

// --timeout's default: how long one node gets to accept the connection and
// answer (beyond an acquire's own --wait). Short, so that a dead or wrong
// address costs seconds, not the ten it used to, before the next is tried.
constexpr int kDefaultTimeoutMs = 2'000;
// Largest HTTP response or reply line lockctl accepts.
constexpr std::size_t kMaxResponseBytes = 64 * 1024 * 1024;

struct HttpResponse {
  int status = 0;
  std::string body;
};

// Why a call failed.
enum class Failure {
  kUnreachable,  // no connection (refused, connect timed out): the next address may do
  kNoAnswer,     // the request went out but no reply came: it may have taken effect
  kWrongPort,    // something answered, but not this kind of server: a config mistake
};

// GET `target` (path and query, already percent-encoded). nullopt with
// `error` set when the server cannot be reached or the answer is not HTTP
// (`failure` says which; a lockd client port is named as such).
// `max_bytes` and `timeout_ms` (per read) bound what one GET may take;
// `snapshot save` raises both.
std::optional<HttpResponse> http_get(const net::Endpoint& ep, std::string_view target,
                                     int timeout_ms, std::string& error, Failure& failure,
                                     std::size_t max_bytes = kMaxResponseBytes);

// Sends one request line (without `\n`) and returns the first reply line
// (without `\n`). nullopt with `error` set on connect/read failure, or
// when the reply is not the lock protocol (an HTTP server: "this looks
// like the admin port").
std::optional<std::string> exchange_line(const net::Endpoint& ep, std::string_view line,
                                         int connect_timeout_ms, int timeout_ms,
                                         std::string& error, Failure& failure);

// The first letter of every reply line of the lock protocol.
bool is_protocol_reply(std::string_view line);

}  // namespace lockd::lockctl
