#include "http_get.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>

namespace lockd::testing {

HttpReply http_raw(std::uint16_t port, const std::string& raw) {
  HttpReply r;
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  ::inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    ::close(fd);
    return r;
  }
  std::size_t off = 0;
  while (off < raw.size()) {
    const ssize_t n = ::send(fd, raw.data() + off, raw.size() - off, MSG_NOSIGNAL);
    if (n <= 0) break;
    off += static_cast<std::size_t>(n);
  }
  // No shutdown(SHUT_WR): evhttp takes a half-close for a vanished client
  // and drops a reply still being written. `Connection: close` ends it.
  std::string in;
  char buf[65536];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 10'000) <= 0) break;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    in.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  const std::size_t end = in.find("\r\n\r\n");
  if (!in.starts_with("HTTP/1.") || end == std::string::npos || in.size() < 12) return r;
  r.status = std::stoi(in.substr(9, 3));
  std::size_t line = in.find("\r\n") + 2;
  while (line < end) {
    const std::size_t eol = in.find("\r\n", line);
    const std::string h = in.substr(line, eol - line);
    const std::size_t colon = h.find(':');
    if (colon != std::string::npos) {
      std::string name = h.substr(0, colon);
      std::transform(name.begin(), name.end(), name.begin(),
                     [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      std::size_t v = colon + 1;
      while (v < h.size() && h[v] == ' ') ++v;
      r.headers[name] = h.substr(v);
    }
    line = eol + 2;
  }
  r.body = in.substr(end + 4);
  return r;
}

HttpReply http(std::uint16_t port, const std::string& target, const std::string& method) {
  return http_raw(port, method + " " + target +
                            " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
}

}  // namespace lockd::testing
