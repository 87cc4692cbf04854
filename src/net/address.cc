#include "lockd/net/address.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>

#include <cstring>

#include "lockd/proto/parser.h"

namespace lockd::net {

std::string Endpoint::to_string() const {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::optional<Endpoint> parse_endpoint(std::string_view text, std::string& error) {
  Endpoint ep;
  std::string_view port;
  if (!text.empty() && text.front() == '[') {
    const auto close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      error = "expected [IPV6]:PORT, got '" + std::string(text) + "'";
      return std::nullopt;
    }
    ep.host = std::string(text.substr(1, close - 1));
    port = text.substr(close + 2);
  } else {
    const auto colon = text.rfind(':');
    if (colon == std::string_view::npos || colon == 0) {
      error = "expected HOST:PORT, got '" + std::string(text) + "'";
      return std::nullopt;
    }
    ep.host = std::string(text.substr(0, colon));
    port = text.substr(colon + 1);
  }
  std::uint64_t p = 0;
  if (!proto::parse_u64(port, p) || p > 65535 || ep.host.empty()) {
    error = "bad port or host in '" + std::string(text) + "'";
    return std::nullopt;
  }
  ep.port = static_cast<std::uint16_t>(p);
  return ep;
}

bool resolve(const Endpoint& ep, sockaddr_storage& out, socklen_t& len, std::string& error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(ep.port);
  const int rc = getaddrinfo(ep.host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0 || res == nullptr) {
    error = "cannot resolve '" + ep.host + "': " + gai_strerror(rc);
    return false;
  }
  std::memcpy(&out, res->ai_addr, res->ai_addrlen);
  len = res->ai_addrlen;
  freeaddrinfo(res);
  return true;
}

Endpoint endpoint_of(const sockaddr_storage& ss) {
  char host[INET6_ADDRSTRLEN] = {};
  Endpoint ep;
  if (ss.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&ss);
    if (inet_ntop(AF_INET, &in->sin_addr, host, sizeof host) == nullptr) return {};
    ep.port = ntohs(in->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&ss);
    if (inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host) == nullptr) return {};
    ep.port = ntohs(in6->sin6_port);
  }
  ep.host = host;
  return ep;
}

Endpoint local_endpoint(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return {};
  return endpoint_of(ss);
}

Endpoint peer_endpoint(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return {};
  return endpoint_of(ss);
}

}  // namespace lockd::net
