#include "client.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <memory>

#include "lockd/tls/tls_session.h"

namespace lockd::lockctl {

namespace {

// Owns a socket fd.
class Socket {
 public:
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_;
};

// Connects with a timeout; returns -1 with `error` set on failure.
int connect_to(const net::Endpoint& ep, int timeout_ms, std::string& error) {
  sockaddr_storage addr{};
  socklen_t len = 0;
  if (!net::resolve(ep, addr, len, error)) return -1;
  const int fd = ::socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    error = std::strerror(errno);
    return -1;
  }
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), len) != 0) {
    if (errno != EINPROGRESS) {
      error = std::strerror(errno);
      ::close(fd);
      return -1;
    }
    pollfd p{fd, POLLOUT, 0};
    const int r = ::poll(&p, 1, timeout_ms);
    int so_error = 0;
    socklen_t so_len = sizeof so_error;
    if (r <= 0) {
      error = r == 0 ? "connect timed out" : std::strerror(errno);
      ::close(fd);
      return -1;
    }
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &so_len);
    if (so_error != 0) {
      error = std::strerror(so_error);
      ::close(fd);
      return -1;
    }
  }
  return fd;
}

// Waits for `fd` to be ready for `events` until `deadline_ms` passes.
bool wait_ready(int fd, short events, int timeout_ms, std::string& error) {
  pollfd p{fd, events, 0};
  for (;;) {
    const int r = ::poll(&p, 1, timeout_ms);
    if (r > 0) return true;
    if (r == 0) {
      error = "timed out waiting for the server";
      return false;
    }
    if (errno != EINTR) {
      error = std::strerror(errno);
      return false;
    }
  }
}

bool send_all(int fd, std::string_view data, int timeout_ms, std::string& error) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(static_cast<std::size_t>(n));
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (!wait_ready(fd, POLLOUT, timeout_ms, error)) return false;
    } else {
      error = n == 0 ? "connection closed" : std::strerror(errno);
      return false;
    }
  }
  return true;
}

// Reads into `out` until EOF, or until `stop(out)` says enough.
template <typename Stop>
bool read_until(int fd, std::string& out, int timeout_ms, Stop stop, std::string& error,
                std::size_t max_bytes = kMaxResponseBytes) {
  char buf[16 * 1024];
  while (!stop(out)) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n > 0) {
      out.append(buf, static_cast<std::size_t>(n));
      if (out.size() > max_bytes) {
        error = "response too large";
        return false;
      }
    } else if (n == 0) {
      return true;  // EOF
    } else if (errno == EAGAIN || errno == EINTR) {
      if (!wait_ready(fd, POLLIN, timeout_ms, error)) return false;
    } else {
      error = std::strerror(errno);
      return false;
    }
  }
  return true;
}

ClientSecurity g_security;
std::unique_ptr<tls::TlsContext> g_tls;  // null: plaintext

// One connection: the socket, and a TLS session over it when TLS is on.
// Plaintext written before the handshake is sent once it completes.
class Conn {
 public:
  Conn(const net::Endpoint& ep, int timeout_ms, std::string& error)
      : sock_(connect_to(ep, timeout_ms, error)), timeout_ms_(timeout_ms) {
    if (sock_.fd() >= 0 && g_tls) tls_ = tls::TlsSession::connect(*g_tls, ep.host);
  }
  bool ok() const { return sock_.fd() >= 0; }
  // `Host` for an HTTP request on this connection: the address connected
  // to, as numbers. The admin API refuses a change whose Host does not
  // name it (protocol.md §11a, DNS rebinding); a name given to --admin
  // (a DNS name, or one the node was not started with) would be refused,
  // the address the node accepted us on never is.
  std::string http_host(const net::Endpoint& ep) const {
    net::Endpoint peer = net::peer_endpoint(sock_.fd());
    if (peer.host.empty()) return ep.to_string();
    peer.port = ep.port;
    return peer.to_string();  // brackets around an IPv6 host
  }

  bool send(std::string_view data, std::string& error) {
    if (!tls_) return send_all(sock_.fd(), data, timeout_ms_, error);
    if (tls_->write(data) == tls::TlsSession::Status::kError) {
      error = "TLS: " + tls_->error();
      return false;
    }
    return flush(error);
  }

  template <typename Stop>
  bool read_until(std::string& out, int timeout_ms, Stop stop, std::string& error,
                  std::size_t max_bytes = kMaxResponseBytes) {
    if (!tls_) return lockctl::read_until(sock_.fd(), out, timeout_ms, stop, error, max_bytes);
    std::string cipher;
    bool eof = false;
    while (!stop(out) && !eof) {
      cipher.clear();
      // One record or less at a time: stop once the caller has enough.
      if (!lockctl::read_until(sock_.fd(), cipher, timeout_ms,
                               [](const std::string& c) { return !c.empty(); }, error)) {
        return false;
      }
      eof = cipher.empty();
      const auto st = tls_->on_input(cipher, out);
      if (st == tls::TlsSession::Status::kError) {
        error = "TLS: " + tls_->error();
        return false;
      }
      if (out.size() > max_bytes) {
        error = "response too large";
        return false;
      }
      if (!flush(error)) return false;
      if (st == tls::TlsSession::Status::kClosed) break;
    }
    return true;
  }

 private:
  bool flush(std::string& error) {
    std::string wire;
    tls_->take_output(wire);
    return wire.empty() || send_all(sock_.fd(), wire, timeout_ms_, error);
  }

  Socket sock_;
  int timeout_ms_;  // connect and each send
  std::unique_ptr<tls::TlsSession> tls_;
};

}  // namespace

std::optional<HttpResponse> http_exchange(const net::Endpoint& ep, std::string_view method,
                                          std::string_view target, std::string_view body,
                                          int timeout_ms, std::string& error, Failure& failure,
                                          std::size_t max_bytes);

const ClientSecurity& client_security() { return g_security; }

bool set_client_security(const ClientSecurity& security, std::string& error) {
  g_security = security;
  if (security.tls_ca.empty() && security.tls_cert.empty()) return true;
  tls::TlsOptions o;
  o.role = tls::TlsRole::kClient;
  o.ca_file = security.tls_ca;
  o.cert_file = security.tls_cert;
  o.key_file = security.tls_key;
  g_tls = tls::TlsContext::create(o, error);
  return g_tls != nullptr;
}

bool is_protocol_reply(std::string_view line) {
  // A, T, R, N, K, B, E, M, S (v1.2 shared), H (v1.2 auth), W U V X (v1.3
  // watch), then a space
  // or the end of the line.
  return line.size() >= 1 && std::string_view("ATRNKBEMSHWUVX").find(line[0]) != std::string_view::npos &&
         (line.size() == 1 || line[1] == ' ' || line[1] == '\r');
}

std::optional<HttpResponse> http_get(const net::Endpoint& ep, std::string_view target,
                                     int timeout_ms, std::string& error, Failure& failure,
                                     std::size_t max_bytes) {
  return http_exchange(ep, "GET", target, {}, timeout_ms, error, failure, max_bytes);
}

std::optional<HttpResponse> http_request(const net::Endpoint& ep, std::string_view method,
                                         std::string_view target, std::string_view body,
                                         int timeout_ms, std::string& error, Failure& failure) {
  return http_exchange(ep, method, target, body, timeout_ms, error, failure, kMaxResponseBytes);
}

std::optional<HttpResponse> http_exchange(const net::Endpoint& ep, std::string_view method,
                                          std::string_view target, std::string_view body,
                                          int timeout_ms, std::string& error, Failure& failure,
                                          std::size_t max_bytes) {
  failure = Failure::kUnreachable;
  Conn conn(ep, timeout_ms, error);
  if (!conn.ok()) return std::nullopt;
  std::string req(method);
  req.append(" ");
  req.append(target);
  req.append(" HTTP/1.1\r\nHost: ");
  req.append(conn.http_host(ep));
  req.append("\r\nUser-Agent: lockctl\r\nAccept: */*\r\nConnection: close\r\n");
  if (!g_security.credential.empty()) {
    req.append("Authorization: Bearer ").append(g_security.credential).append("\r\n");
  }
  if (method != "GET") {
    req.append("Content-Type: application/json\r\nContent-Length: ")
        .append(std::to_string(body.size()))
        .append("\r\n");
  }
  req.append("\r\n");
  req.append(body);
  if (!conn.send(req, error)) return std::nullopt;
  std::string raw;
  // Read to EOF (we asked for Connection: close), or to Content-Length;
  // stop at once when the first bytes are not HTTP (a lockd client port
  // answers our request line with an `E` line and keeps the connection).
  const auto complete = [](const std::string& s) {
    constexpr std::string_view kHttp = "HTTP/";
    if (std::string_view(s).substr(0, kHttp.size()) != kHttp.substr(0, std::min(s.size(), kHttp.size()))) {
      return true;
    }
    const std::size_t end = s.find("\r\n\r\n");
    if (end == std::string::npos) return false;
    const std::string_view head(s.data(), end);
    for (const std::string_view name : {"Content-Length:", "content-length:"}) {
      const std::size_t at = head.find(name);
      if (at == std::string_view::npos) continue;
      std::size_t i = at + name.size();
      while (i < head.size() && head[i] == ' ') ++i;
      std::size_t len = 0;
      std::from_chars(head.data() + i, head.data() + head.size(), len);
      return s.size() >= end + 4 + len;
    }
    return false;
  };
  if (!conn.read_until(raw, timeout_ms, complete, error, max_bytes)) return std::nullopt;
  // Status line: HTTP/1.x NNN reason
  HttpResponse resp;
  const std::size_t end = raw.find("\r\n\r\n");
  if (raw.empty()) {
    error = "connection closed without a reply";
    return std::nullopt;
  }
  if (!raw.starts_with("HTTP/")) {
    failure = Failure::kWrongPort;
    const std::string first = raw.substr(0, std::min(raw.find_first_of("\r\n"), std::size_t{60}));
    error = is_protocol_reply(first)
                ? "it answered '" + first +
                      "': this looks like lockd's client (lock) port, not the admin port; give "
                      "the admin address with --admin (single mode's default is 127.0.0.1:7071)"
                : "it answered '" + first + "', which is not HTTP: not lockd's admin port";
    return std::nullopt;
  }
  if (raw.size() < 12 || end == std::string::npos) {
    error = "not a whole HTTP reply";
    return std::nullopt;
  }
  const auto [p, ec] = std::from_chars(raw.data() + 9, raw.data() + 12, resp.status);
  if (ec != std::errc()) {
    error = "bad HTTP status line";
    return std::nullopt;
  }
  resp.body = raw.substr(end + 4);
  return resp;
}

std::optional<std::string> exchange_line(const net::Endpoint& ep, std::string_view line,
                                         int connect_timeout_ms, int timeout_ms,
                                         std::string& error, Failure& failure) {
  failure = Failure::kUnreachable;
  Conn conn(ep, connect_timeout_ms, error);
  if (!conn.ok()) return std::nullopt;
  std::string req;
  const bool hello = !g_security.credential.empty();
  if (hello) req.append("H ").append(g_security.credential).append("\n");
  req.append(line);
  req.push_back('\n');
  if (!conn.send(req, error)) return std::nullopt;
  std::string reply;
  const auto has_line = [](const std::string& s) { return s.find('\n') != std::string::npos; };
  failure = Failure::kNoAnswer;
  // A refused `H` (`E unauthenticated`, then the server closes) is the
  // reply: the server was reached and answered, and read nothing after it.
  bool hello_refused = false;
  if (hello) {
    if (!conn.read_until(reply, timeout_ms, has_line, error)) return std::nullopt;
    const std::size_t nl = reply.find('\n');
    if (nl == std::string::npos) {
      failure = Failure::kUnreachable;
      error = "connection closed without a reply";
      return std::nullopt;
    }
    if (reply.starts_with("H ")) {
      reply.erase(0, nl + 1);
    } else {
      hello_refused = true;
    }
  }
  if (!hello_refused && !conn.read_until(reply, timeout_ms, has_line, error)) return std::nullopt;
  const std::size_t nl = reply.find('\n');
  if (nl == std::string::npos) {
    error = "connection closed without a reply";
    return std::nullopt;
  }
  reply.resize(nl);
  if (!reply.empty() && reply.back() == '\r') reply.pop_back();
  failure = Failure::kUnreachable;
  if (!is_protocol_reply(reply)) {
    failure = Failure::kWrongPort;
    const std::string first = reply.substr(0, 60);
    error = first.starts_with("HTTP/")
                ? "it answered '" + first +
                      "': this looks like lockd's admin (HTTP) port, not the client port; give "
                      "the client address with --addr (single mode's default is 127.0.0.1:7070)"
                : "it answered '" + first + "', which is not the lockd protocol";
    return std::nullopt;
  }
  return reply;
}

bool stream_lines(const net::Endpoint& ep, std::string_view lines, int connect_timeout_ms,
                  const std::function<bool(std::string_view)>& on_line,
                  const std::function<bool()>& stop, std::string& error, Failure& failure) {
  failure = Failure::kUnreachable;
  Conn conn(ep, connect_timeout_ms, error);
  if (!conn.ok()) return false;
  std::string req;
  if (!g_security.credential.empty()) req.append("H ").append(g_security.credential).append("\n");
  req.append(lines);
  if (!conn.send(req, error)) return false;
  failure = Failure::kNoAnswer;
  std::string buf;
  bool first = true;
  const auto has_line = [](const std::string& s) { return s.find('\n') != std::string::npos; };
  for (;;) {
    if (stop()) return true;
    std::string read_error;
    if (!conn.read_until(buf, 200, has_line, read_error)) {
      if (read_error.starts_with("timed out")) continue;  // nothing yet: look at stop()
      error = read_error;
      return false;
    }
    // read_until() returns without a whole line only at EOF.
    const bool eof = !has_line(buf);
    std::size_t nl;
    while ((nl = buf.find('\n')) != std::string::npos) {
      std::string line = buf.substr(0, nl);
      buf.erase(0, nl + 1);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (first && !is_protocol_reply(line)) {
        failure = Failure::kWrongPort;
        error = "it answered '" + line.substr(0, 60) + "', which is not the lockd protocol";
        return false;
      }
      first = false;
      if (!on_line(line)) return true;
    }
    if (eof) {
      error = "the server closed the connection";
      failure = first ? Failure::kUnreachable : Failure::kNoAnswer;
      return false;
    }
  }
}

}  // namespace lockd::lockctl
