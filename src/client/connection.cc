#include "lockd/client/connection.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include "tls_stream.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace lockd::client {

namespace {

// Longest a blocked send may stall before the connection counts as broken
// (a server that stopped reading).
constexpr int kSendStallMs = 10'000;
// Most bytes read per recv().
constexpr std::size_t kReadChunkBytes = 16 * 1024;

int ms_until(Clock::time_point deadline) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, 60'000));
}

}  // namespace

std::string Address::to_string() const {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::optional<Address> parse_address(std::string_view text) {
  const std::size_t colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return std::nullopt;
  std::string_view host = text.substr(0, colon);
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') return std::nullopt;
    host = host.substr(1, host.size() - 2);
  }
  const auto port = parse_u64(text.substr(colon + 1));
  if (!port || *port == 0 || *port > 65535) return std::nullopt;
  return Address{std::string(host), static_cast<std::uint16_t>(*port)};
}

Result<std::unique_ptr<Connection>> Connection::open(const Address& address,
                                                     std::chrono::milliseconds timeout,
                                                     const std::string& credential,
                                                     const TlsFiles& tls) {
  const auto deadline = Clock::now() + timeout;
  const auto fail = [&](const std::string& why) -> Result<std::unique_ptr<Connection>> {
    return Status{Code::kUnreachable, "cannot connect to " + address.to_string() + ": " + why};
  };
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(address.port);
  if (const int rc = ::getaddrinfo(address.host.c_str(), port.c_str(), &hints, &res); rc != 0) {
    return fail(::gai_strerror(rc));
  }
  std::string why = "no address";
  int fd = -1;
  for (addrinfo* ai = res; ai != nullptr && fd < 0; ai = ai->ai_next) {
    fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0) {
      why = std::strerror(errno);
      continue;
    }
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      int err = errno;
      if (err == EINPROGRESS) {
        pollfd p{fd, POLLOUT, 0};
        const int r = ::poll(&p, 1, static_cast<int>(timeout.count()));
        socklen_t len = sizeof err;
        if (r == 0) {
          err = ETIMEDOUT;
        } else if (r < 0) {
          err = errno;
        } else {
          ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        }
      }
      if (err != 0) {
        why = std::strerror(err);
        ::close(fd);
        fd = -1;
      }
    }
  }
  ::freeaddrinfo(res);
  if (fd < 0) return fail(why);
  // Requests are small and latency matters more than packet count.
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  std::unique_ptr<Connection> conn(new Connection(fd, address));
  if (tls.enabled()) {
    auto stream = TlsStream::client(tls, address.host);
    if (!stream.ok()) return stream.status();
    conn->tls_ = std::move(stream.value());
    if (Status s = conn->handshake(deadline); !s.ok()) return s;
  }
  if (!credential.empty()) {
    if (Status s = conn->authenticate(credential, deadline); !s.ok()) return s;
  }
  Connection* raw = conn.get();
  conn->reader_ = std::thread([raw] { raw->read_loop(); });
  return conn;
}

Status Connection::authenticate(const std::string& credential, Clock::time_point deadline) {
  const std::string name = address_.to_string();
  if (!send_all("H " + credential + "\n")) {
    return {Code::kUnreachable, "cannot authenticate to " + name + ": " + std::strerror(errno)};
  }
  std::size_t nl;
  while ((nl = in_.find('\n')) == std::string::npos) {
    if (Clock::now() >= deadline) return {Code::kUnreachable, "no reply to H from " + name + " in time"};
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, ms_until(deadline)) <= 0) continue;
    std::string why;
    if (!receive(in_, why)) return {Code::kUnreachable, "no reply to H from " + name + ": " + why};
    if (in_.size() > kMaxReplyLineBytes) return {Code::kProtocol, "reply to H from " + name + " too long"};
  }
  const std::string line = in_.substr(0, nl);
  in_.erase(0, nl + 1);
  // `H <identity>` (an identity is visible ASCII, no spaces), or
  // `E unauthenticated` (the server then closes the connection).
  std::string_view rest(line);
  if (!rest.empty() && rest.back() == '\r') rest.remove_suffix(1);
  if (rest.size() > 2 && rest.substr(0, 2) == "H " && rest.find(' ', 2) == std::string_view::npos) {
    identity_ = std::string(rest.substr(2));
    return Status::Ok();
  }
  if (rest == "E unauthenticated") return {Code::kUnauthenticated, name + " refused the credential"};
  return {Code::kProtocol, "unexpected reply to H from " + name + ": " + line};
}

Connection::Connection(int fd, Address address) : fd_(fd), address_(std::move(address)) {}

Connection::~Connection() {
  stopping_.store(true);
  ::shutdown(fd_, SHUT_RDWR);  // wakes the reader's poll
  if (reader_.joinable()) {
    // Never joined from itself (a push handler must not destroy the
    // connection; if one did, the thread ends on its own).
    if (reader_.get_id() == std::this_thread::get_id()) {
      reader_.detach();
    } else {
      reader_.join();
    }
  }
  ::close(fd_);
}

bool Connection::await_acquire_slot(std::string_view owner, std::string_view key,
                                    Clock::time_point deadline) {
  std::unique_lock lk(mu_);
  return cv_.wait_until(lk, deadline, [&] {
    return broken_.has_value() || !matcher_.acquire_in_flight(owner, key);
  }) && !broken_;
}

void Connection::shut_down() { ::shutdown(fd_, SHUT_RDWR); }

void Connection::set_push_handler(std::function<void(const Reply&)> handler) {
  const std::lock_guard lk(push_mu_);
  on_push_ = std::move(handler);
}

std::uint64_t Connection::unattributed_errors() const {
  const std::lock_guard lk(mu_);
  return unattributed_;
}

void Connection::read_loop() {
  for (;;) {
    {
      const std::lock_guard lk(mu_);
      if (broken_ || stopping_.load()) return;
    }
    read_once(Clock::now() + std::chrono::milliseconds(200));
  }
}

Status Connection::handshake(Clock::time_point deadline) {
  const std::string name = address_.to_string();
  std::string received;
  for (;;) {
    std::string out;
    auto done = tls_->handshake(received, out);
    received.clear();
    if (!out.empty() && !send_raw(out)) {
      return {Code::kUnreachable, "TLS handshake with " + name + " failed: " + std::strerror(errno)};
    }
    if (!done.ok()) return {Code::kUnreachable, done.status().message + " (" + name + ")"};
    if (done.value()) return Status::Ok();
    if (Clock::now() >= deadline) return {Code::kUnreachable, "TLS handshake with " + name + " timed out"};
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, ms_until(deadline)) <= 0) continue;
    char buf[kReadChunkBytes];
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n <= 0) return {Code::kUnreachable, "TLS handshake with " + name + " failed: connection closed"};
    received.assign(buf, static_cast<std::size_t>(n));
  }
}

bool Connection::receive(std::string& plain, std::string& why) {
  char buf[kReadChunkBytes];
  const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return true;
  if (n <= 0) {
    why = n == 0 ? "connection closed by " + address_.to_string()
                 : "reading from " + address_.to_string() + " failed: " + std::strerror(errno);
    return false;
  }
  if (tls_ == nullptr) {
    plain.append(buf, static_cast<std::size_t>(n));
    return true;
  }
  bool closed = false;
  std::string error;
  if (!tls_->decrypt(std::string_view(buf, static_cast<std::size_t>(n)), plain, closed, error)) {
    why = error + " (" + address_.to_string() + ")";
    return false;
  }
  if (tls_->has_pending()) {  // e.g. a key update's answer: after every record made before it
    const std::lock_guard wlk(write_mu_);
    std::string out;
    tls_->take_pending(out);
    send_raw(out);
  }
  if (closed && plain.empty()) {
    why = "connection closed by " + address_.to_string();
    return false;
  }
  return true;
}

bool Connection::broken() const {
  const std::lock_guard lk(mu_);
  return broken_.has_value();
}

bool Connection::send_all(std::string_view bytes) {
  if (tls_ == nullptr) return send_raw(bytes);
  std::string records;
  if (!tls_->encrypt(bytes, records)) {
    errno = EPROTO;
    return false;
  }
  return send_raw(records);
}

bool Connection::send_raw(std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n > 0) {
      bytes.remove_prefix(static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      pollfd p{fd_, POLLOUT, 0};
      if (::poll(&p, 1, kSendStallMs) > 0) continue;
    }
    return false;
  }
  return true;
}

Result<Connection::Ticket> Connection::submit(const Request& request) {
  if (Status s = validate(request); !s.ok()) return s;
  const std::string line = format_request(request);
  const std::lock_guard wlk(write_mu_);
  // A peer that closed while we were idle (a restarted server) shows as
  // EOF with nothing before it: find out now, while the request is not
  // sent and can safely go over a new connection instead.
  char peek = 0;
  const ssize_t peeked = ::recv(fd_, &peek, 1, MSG_PEEK | MSG_DONTWAIT);
  const bool closed = peeked == 0 || (peeked < 0 && errno != EAGAIN && errno != EWOULDBLOCK &&
                                      errno != EINTR);
  Ticket ticket = 0;
  {
    const std::lock_guard lk(mu_);
    if (closed) fail_all("connection closed by " + address_.to_string());
    if (broken_) return Status{Code::kUnreachable, *broken_};
    if (matcher_.in_flight() >= kMaxInFlight) {
      return Status{Code::kBusy, "too many requests in flight on one connection"};
    }
    ticket = next_ticket_++;
    if (Status s = matcher_.add(ticket, request); !s.ok()) return s;
  }
  if (!send_all(line)) {
    const std::lock_guard lk(mu_);
    fail_all("sending to " + address_.to_string() + " failed: " + std::strerror(errno));
    // The request may be partly written; wait() reports it indeterminate.
  }
  return ticket;
}

void Connection::fail_all(const std::string& why) {
  if (!broken_) broken_ = why;
  for (const Ticket t : matcher_.drain()) abandoned_.erase(t);
  failed_.clear();
  undo_.clear();
  cv_.notify_all();
}

void Connection::dispatch(std::string_view line, std::vector<Reply>& pushes) {
  auto reply = parse_reply(line);
  if (reply && reply->is_push()) {  // §5c: routed before matching, never a reply
    pushes.push_back(std::move(*reply));
    return;
  }
  std::optional<Matcher::Entry> entry;
  if (reply) entry = matcher_.match(*reply);
  if (!entry && reply && Matcher::unattributable(*reply)) {
    // A v1.2 server's error without echo that more than one request could
    // have drawn: blaming one would be a guess (a keeper would declare an
    // unrelated lock lost). Every candidate ends now as an unknown outcome;
    // each stays in flight, abandoned, so its real reply is still matched
    // and a late grant released. The connection stays trusted.
    ++unattributed_;
    for (const Ticket t : matcher_.candidates(*reply)) {
      if (abandoned_.insert(t).second) {
        failed_.emplace(t, Status{Code::kIndeterminate,
                                  "the server answered E " + reply->error_code +
                                      " without saying to which request (a server older than "
                                      "protocol v1.3); this one may or may not have taken effect"});
      }
    }
    cv_.notify_all();
    return;
  }
  if (!entry) {
    // Nothing we sent can have drawn this line: we no longer know which
    // reply is whose, so nothing on this connection can be trusted.
    fail_all("unexpected reply from " + address_.to_string() + ": " + std::string(line));
    return;
  }
  if (abandoned_.erase(entry->id) != 0) {
    if (reply->is_grant()) {
      Request undo;
      undo.verb = Verb::kRelease;
      undo.token = reply->token;
      undo.key = reply->key;
      undo_.push_back(std::move(undo));
    }
    return;
  }
  done_.emplace(entry->id, std::move(*reply));
}

void Connection::read_once(Clock::time_point deadline) {
  pollfd p{fd_, POLLIN, 0};
  const int r = ::poll(&p, 1, ms_until(deadline));
  if (r == 0 || (r < 0 && errno == EINTR)) return;
  if (r < 0) return;
  std::string plain;
  std::string why;
  const bool alive = receive(plain, why);
  std::vector<Request> undo;
  std::vector<Reply> pushes;
  {
    const std::lock_guard lk(mu_);
    if (!alive) {
      fail_all(why);
      return;
    }
    if (plain.empty()) return;
    in_.append(plain);
    std::size_t start = 0;
    for (std::size_t nl; !broken_ && (nl = in_.find('\n', start)) != std::string::npos;
         start = nl + 1) {
      dispatch(std::string_view(in_).substr(start, nl - start), pushes);
    }
    in_.erase(0, start);
    if (!broken_ && in_.size() > kMaxReplyLineBytes) {
      fail_all("reply line from " + address_.to_string() + " too long");
    }
    undo.swap(undo_);
    cv_.notify_all();
  }
  if (!pushes.empty()) {
    const std::lock_guard plk(push_mu_);
    if (on_push_) {
      for (const Reply& p_reply : pushes) on_push_(p_reply);
    }
  }
  // Releases of grants nobody waits for any more. Their replies are
  // matched and dropped like any abandoned request's.
  for (const Request& r_undo : undo) {
    if (auto t = submit(r_undo); t.ok()) {
      const std::lock_guard lk(mu_);
      abandoned_.insert(t.value());
    }
  }
}

Result<Reply> Connection::wait(Ticket ticket, Clock::time_point deadline) {
  std::unique_lock lk(mu_);
  for (;;) {
    if (auto it = failed_.find(ticket); it != failed_.end()) {
      Status s = std::move(it->second);
      failed_.erase(it);
      return s;
    }
    if (auto it = done_.find(ticket); it != done_.end()) {
      Reply reply = std::move(it->second);
      done_.erase(it);
      return reply;
    }
    if (broken_) {
      return Status{Code::kIndeterminate,
                    "connection lost before the reply (the request may have taken effect): " +
                        *broken_};
    }
    if (Clock::now() >= deadline) {
      abandoned_.insert(ticket);
      return Status{Code::kIndeterminate,
                    "no reply from " + address_.to_string() +
                        " in time (the request may have taken effect)"};
    }
    cv_.wait_until(lk, deadline);  // the reader thread notifies
  }
}

}  // namespace lockd::client
