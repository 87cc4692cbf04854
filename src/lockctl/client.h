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
#include <functional>
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

// How lockctl proves who it is and reaches TLS ports (interfaces.md:
// --credential-file / LOCKD_CREDENTIAL, --tls-ca, --tls-cert, --tls-key),
// for the text protocol and the admin API alike. lockctl runs one command
// per process, so this is set once, from main(), before any call below.
struct ClientSecurity {
  std::string credential;  // sent as `H` first / `Authorization: Bearer`; "" = none
  std::string tls_ca;      // TLS on when this or tls_cert is set
  std::string tls_cert;    // client certificate (optional)
  std::string tls_key;
};
// Returns false with `error` when the TLS files do not load.
bool set_client_security(const ClientSecurity& security, std::string& error);
// What set_client_security() was given (`run` hands it to the C++ client).
const ClientSecurity& client_security();

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

// METHOD `target` with `body` (JSON; none when empty): the membership
// endpoints' POST and DELETE. As http_get otherwise.
std::optional<HttpResponse> http_request(const net::Endpoint& ep, std::string_view method,
                                         std::string_view target, std::string_view body,
                                         int timeout_ms, std::string& error, Failure& failure);

// Sends one request line (without `\n`) and returns the first reply line
// (without `\n`). nullopt with `error` set on connect/read failure, or
// when the reply is not the lock protocol (an HTTP server: "this looks
// like the admin port").
std::optional<std::string> exchange_line(const net::Endpoint& ep, std::string_view line,
                                         int connect_timeout_ms, int timeout_ms,
                                         std::string& error, Failure& failure);

// A long-lived exchange (`lockctl watch`): connects, authenticates when a
// credential is set (a refused `H` is passed to on_line like any line),
// sends `lines` (each ending in `\n`), then hands every line read (without
// `\n`) to on_line until it returns false, `stop()` turns true (checked at
// least every 200 ms), or the server closes. Returns false with `error`
// set when it could not connect or the connection failed (`failure` says
// which); true otherwise.
bool stream_lines(const net::Endpoint& ep, std::string_view lines, int connect_timeout_ms,
                  const std::function<bool(std::string_view)>& on_line,
                  const std::function<bool()>& stop, std::string& error, Failure& failure);

// The first letter of every reply line of the lock protocol.
bool is_protocol_reply(std::string_view line);

}  // namespace lockd::lockctl
