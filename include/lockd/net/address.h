// HOST:PORT endpoints as the flags give them (`127.0.0.1:7070`, `[::1]:0`).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <sys/socket.h>

namespace lockd::net {

struct Endpoint {
  std::string host;  // numeric IPv4/IPv6 or a name; no brackets
  std::uint16_t port = 0;

  // `host:port`, with brackets around an IPv6 host.
  std::string to_string() const;
};

// Parses `HOST:PORT` / `[V6]:PORT`. Returns nullopt with `error` set when
// the text is not an endpoint.
std::optional<Endpoint> parse_endpoint(std::string_view text, std::string& error);

// Resolves an endpoint to a socket address (numeric or via getaddrinfo).
bool resolve(const Endpoint& ep, sockaddr_storage& out, socklen_t& len, std::string& error);

// The endpoint a socket address names, host as numbers ({} for a family
// other than IPv4 and IPv6).
Endpoint endpoint_of(const sockaddr_storage& ss);

// The endpoint a bound socket actually has (port 0 resolved).
Endpoint local_endpoint(int fd);
// The endpoint a connected socket's peer has ({} when unknown).
Endpoint peer_endpoint(int fd);

}  // namespace lockd::net
