// One TCP connection to one lockd node, shared by any number of threads.
// Requests are pipelined: submit() writes a request and returns at once;
// wait() returns the reply the Matcher pairs with it, whatever order the
// replies arrive in. Blocking POSIX sockets with deadlines and one reader
// thread per connection: it reads every line as it arrives, routes pushes
// (`V`, `X`, §5c) to the push handler before matching replies, and
// releases a late grant nobody waits for at once, also on a connection no
// caller uses again.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <thread>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "lockd/client/matcher.h"
#include "lockd/client/protocol.h"
#include "lockd/client/status.h"

namespace lockd::client {

using Clock = std::chrono::steady_clock;

// A node's client address, `host:port` (IPv6 as `[::1]:7070`).
struct Address {
  std::string host;
  std::uint16_t port = 0;
  std::string to_string() const;
  bool operator==(const Address&) const = default;
};
// nullopt when `text` is not host:port with a port in 1..65535.
std::optional<Address> parse_address(std::string_view text);

// TLS to a server run with --client-tls (docs/security.md).
struct TlsFiles {
  std::string ca_file{};      // PEM CA(s) the server's certificate must chain to; "" = no TLS
  std::string cert_file{};    // client certificate (--auth cert or any): its CN is the identity
  std::string key_file{};     // the key of cert_file
  std::string server_name{};  // the name the server's certificate must carry; "" = the host dialled
  bool enabled() const { return !ca_file.empty(); }
};

class TlsStream;

// Most requests one connection keeps in flight; submit() refuses more
// (kBusy) instead of buffering without bound.
constexpr std::size_t kMaxInFlight = 100'000;

class Connection {
 public:
  using Ticket = Matcher::Id;

  // Connects within `timeout`; kUnreachable with the reason otherwise.
  // With `tls` enabled, runs the TLS handshake (kUnreachable if it fails,
  // kInvalidArgument if a file does not load). With a `credential`, sends
  // `H <credential>` and reads its reply (all within `timeout`) before
  // anything else: kUnauthenticated if refused, identity() otherwise.
  static Result<std::unique_ptr<Connection>> open(const Address& address,
                                                  std::chrono::milliseconds timeout,
                                                  const std::string& credential = "",
                                                  const TlsFiles& tls = {});
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Validates and sends one request. Not sent (kInvalidArgument, kInFlight,
  // kBusy, or kUnreachable once the connection is broken) means no effect.
  Result<Ticket> submit(const Request& request);
  // The reply to `ticket`, or kIndeterminate when the connection broke or
  // `deadline` passed first (the request may have taken effect). A ticket
  // is waited for once. A late `A` for an abandoned acquire is released at
  // once, so a timed-out acquire never leaves a lock held by nobody.
  Result<Reply> wait(Ticket ticket, Clock::time_point deadline);

  // Gets every push line (`V`, `X`) on the reader thread, with no lock of
  // the connection held; it must not destroy this Connection. Replaces the
  // previous handler.
  void set_push_handler(std::function<void(const Reply&)> handler);

  // Waits until no acquire of `owner` and `key` is in flight (true), or
  // `deadline` passes or the connection breaks (false).
  bool await_acquire_slot(std::string_view owner, std::string_view key,
                          Clock::time_point deadline);

  // Shuts the socket down: the reader sees the end, everything in flight
  // ends as kIndeterminate, the connection counts as broken. For another
  // thread that must stop a wait() now (Watch::stop()).
  void shut_down();

  // True once reading or writing failed; every later submit() fails.
  bool broken() const;
  // Errors without echo no request could be pinned on (a v1.2 server).
  std::uint64_t unattributed_errors() const;
  const Address& address() const { return address_; }
  // What the server named in its `H` reply ("" without a credential).
  const std::string& identity() const { return identity_; }

 private:
  Connection(int fd, Address address);
  // Reads what is available (waiting until `deadline` at most) and
  // dispatches complete lines. Called with mu_ unlocked by the reader thread.
  void read_once(Clock::time_point deadline);
  // The reader thread's loop, until the connection breaks or closes.
  void read_loop();
  // Dispatches one reply line; mu_ held. Pushes go to `pushes`.
  void dispatch(std::string_view line, std::vector<Reply>& pushes);
  // Marks the connection broken and fails every request in flight; mu_ held.
  void fail_all(const std::string& why);
  // Sends request bytes (as records with TLS); write_mu_ held, or nothing
  // else running yet.
  bool send_all(std::string_view bytes);
  bool send_raw(std::string_view bytes);
  // The TLS handshake of open().
  Status handshake(Clock::time_point deadline);
  // One recv of whatever is there (plaintext after TLS) into `plain`;
  // false with `why` when the connection ended or failed.
  bool receive(std::string& plain, std::string& why);
  // The `H` exchange of open(); nothing else is in flight.
  Status authenticate(const std::string& credential, Clock::time_point deadline);

  const int fd_;
  const Address address_;
  std::mutex write_mu_;  // one writer at a time; held across Matcher::add + send
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<bool> stopping_{false};  // the destructor runs
  std::uint64_t unattributed_ = 0;
  std::mutex push_mu_;
  std::function<void(const Reply&)> on_push_;
  std::optional<std::string> broken_;  // why, once broken
  Ticket next_ticket_ = 1;
  Matcher matcher_;
  std::unordered_map<Ticket, Reply> done_;       // replies not yet collected
  std::unordered_set<Ticket> abandoned_;         // waiters gave up; drop (or undo) the reply
  std::unordered_map<Ticket, Status> failed_;    // ended without a reply of their own
  std::vector<Request> undo_;  // releases of late grants nobody waits for, to send
  std::string in_;                               // bytes read, not yet a full line
  std::string identity_;                         // set by open(), then constant
  std::unique_ptr<TlsStream> tls_;               // null: plaintext
  std::thread reader_;                           // started by open(), last
};

}  // namespace lockd::client
