// lockd's C++ client: the correct use of a lock service in one call.
//
//   lockd::client::Client client({.addresses = {"127.0.0.1:7070"}});
//   auto guard = client.lock("billing", "orders/42", {.lease_ms = 10'000, .wait_ms = 5'000});
//   if (!guard.ok()) return report(guard.status());      // T, B, E ... as values
//   write_with_fence(guard->token());                     // kept alive meanwhile
//   // released when `guard` goes out of scope
//
//   auto reader = client.lock_shared("report-1", "config", {.lease_ms = 10'000});  // read lock
//   Semaphore pool(client, "workers", 8);                           // 8 permits
//   auto permit = pool.acquire("worker-3", {.lease_ms = 10'000, .wait_ms = 60'000});
//
//   auto watch = client.watch("service/primary");        // every state, in rev order (v1.3)
//   Election election(client, "service/primary");        // campaign/leader/observe/resign
//
// A Client is safe to share between threads; every thread's requests are
// pipelined on one connection. It follows `M` redirects to the leader,
// retries `E no_leader` with jittered backoff within a budget, and turns
// `E indeterminate` (or a connection lost after sending) into
// Code::kIndeterminate: the request may or may not have taken effect.
// See docs/clients.md for the rules this implements.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "lockd/client/connection.h"
#include "lockd/client/protocol.h"
#include "lockd/client/status.h"
#include "lockd/client/watch.h"

namespace lockd::client {

struct Options {
  // Every node's client address; the client starts with the first and
  // moves on when one cannot be reached, knows no leader, names a leader
  // that cannot be reached, or does not answer in time (that request ends
  // as kIndeterminate; the next one goes to the next node).
  std::vector<std::string> addresses{"127.0.0.1:7070"};
  std::chrono::milliseconds connect_timeout{3'000};
  // How long a reply may take beyond the request's own wait_ms.
  std::chrono::milliseconds reply_timeout{10'000};
  // `M` hops one request follows before giving up (kNoLeader).
  int max_redirects = 3;
  // How long `E no_leader` (or no reachable node) is retried in total.
  std::chrono::milliseconds no_leader_budget{10'000};
  // Backoff between retries: doubles from `backoff_initial` up to
  // `backoff_max`, each sleep drawn uniformly from [d/2, d] ("equal jitter")
  // so clients that failed together do not retry together.
  std::chrono::milliseconds backoff_initial{50};
  std::chrono::milliseconds backoff_max{1'000};
  // Seed of the jitter; 0 draws one from std::random_device.
  std::uint64_t jitter_seed = 0;
  // Authenticates every connection (protocol.md §11; a server run with
  // --auth token or any): sent as `H <credential>` right after connecting,
  // before the first request — on the first connection and on each one a
  // redirect or a reconnect opens. Made by `lockctl credential new`; read
  // it from a file or the environment. "" sends no H. A refused credential
  // is kUnauthenticated at once (the nodes share one credentials file, so
  // others are not tried); the credential never appears in a message.
  std::string credential{};
  // TLS on every connection (a server run with --client-tls), the
  // credential inside it: `tls.ca_file` switches it on. The server's
  // certificate must name `tls.server_name`, or else the host dialled (a
  // redirect's node is checked under its own name). A failed handshake is
  // kUnreachable; a file that does not load kInvalidArgument.
  TlsFiles tls{};
};

// A held lock: what the server granted. `token` is the fencing token to
// hand to every resource the lock protects.
struct Lock {
  std::uint64_t token = 0;
  std::string owner;
  std::string key;
  std::uint64_t lease_ms = 0;  // as requested; 0 = the server's default
  // When the acquire was sent: the lease started no earlier, so
  // `sent_at + lease` is a safe lower bound of when it ends (given the
  // bounded clock drift every lease service assumes) for a grant without
  // a wait.
  Clock::time_point sent_at{};
  // When the grant arrived. A grant after a wait started its lease at the
  // hand-off, long after `sent_at` maybe: the Keeper dates such a lease
  // from here (LeaseSchedule::lease_from).
  Clock::time_point granted_at{};
  std::uint64_t wait_ms = 0;  // as requested
  // Held shared (`S`, v1.2): one of the key's shared holders, a reader of a
  // reader-writer lock (`limit` 0) or one of `limit` permits of a
  // semaphore. `R` and `K` act on this holder alone, by its token.
  bool shared = false;
  std::uint32_t limit = 0;  // shared only
};

class LockGuard;
class SharedGuard;

// What Client::lock() does besides acquiring.
struct LockOptions {
  std::uint64_t lease_ms = 30'000;  // must be > 0: a kept lease needs a known length
  std::uint64_t wait_ms = 0;
  bool keep = true;  // extend the lease every lease/3 while the guard lives
  // Called once, on the keeper's thread, if the lock is lost (see Keeper).
  // It may call the guard's release() or destroy the guard.
  std::function<void(const Status&)> on_lost = nullptr;
};

class Keeper;
class WatchSession;

class Client {
 public:
  explicit Client(Options options = {});
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // `A owner key lease_ms wait_ms`. kOk with the Lock, or kTimedOut (`T`),
  // kBusy (`B`), kIndeterminate, kNoLeader, kUnreachable, kRejected ...
  // lease_ms 0 asks for the server's default lease (wait_ms must then be 0).
  Result<Lock> acquire(std::string_view owner, std::string_view key, std::uint64_t lease_ms,
                       std::uint64_t wait_ms = 0);
  // `R token key`: kOk, or kNotHeld if the token no longer holds the key.
  Status release(const Lock& lock);
  Status release(std::uint64_t token, std::string_view key);
  // `K token key lease_ms`: the lease now ends lease_ms from the server's
  // now. kOk, or kNotHeld once the lease has ended or the key moved on.
  Status keep(const Lock& lock, std::uint64_t lease_ms);
  Status keep(std::uint64_t token, std::string_view key, std::uint64_t lease_ms);

  // `S owner key limit lease_ms wait_ms` (v1.2, protocol.md §5b): a shared
  // hold. `limit` 0 is the read side of a reader-writer lock (acquire() is
  // its write side); N >= 1 takes one of N permits of a semaphore. kOk with
  // the Lock (`shared` set), kTimedOut (`T`: held exclusively, full, or
  // someone queued first), kBusy, kLimitMismatch (the key's holders and
  // waiters use another limit), and the transport codes of call().
  Result<Lock> acquire_shared(std::string_view owner, std::string_view key, std::uint32_t limit,
                              std::uint64_t lease_ms, std::uint64_t wait_ms = 0);

  // Acquires and returns a guard that releases on destruction and, with
  // `keep`, extends the lease in the background.
  Result<LockGuard> lock(std::string_view owner, std::string_view key, LockOptions options);
  // The read side of a reader-writer lock on `key`, as a guard: many
  // readers hold it at once; a writer (lock()) waits for all of them, and
  // readers that come after a queued writer wait behind it (one FIFO queue).
  Result<SharedGuard> lock_shared(std::string_view owner, std::string_view key,
                                  LockOptions options);
  // A shared hold with any limit, as a guard (Semaphore uses it).
  Result<SharedGuard> lock_shared(std::string_view owner, std::string_view key,
                                  std::uint32_t limit, LockOptions options);

  // Any request, with redirects and retries; the raw reply on success
  // (kinds A, T, B, R, N, K). Errors: kIndeterminate, kNoLeader,
  // kUnreachable, kRejected, kInvalidArgument, kInFlight, kProtocol.
  // `deadline` cuts the retry budget and the reply timeout short (the
  // Keeper passes its lease's safe end: retrying past it is pointless).
  Result<Reply> call(const Request& request, Clock::time_point deadline = Clock::time_point::max());

  // Watches `key` (protocol.md §5c): every state from now on, in `rev`
  // order, across reconnects (watch.h). All of a Client's watches share
  // one connection of their own and one thread (watch_session.h).
  std::unique_ptr<Watch> watch(std::string_view key);
  // The same, each state (then the end, if not stopped) handed to
  // `on_state` on the session's delivering thread instead of next():
  // for a program with many watches and no thread to spare for each
  // (OnState in watch.h says what it may do).
  std::unique_ptr<Watch> watch(std::string_view key, OnState on_state);

  // Closes the client: keepers stop at once (no `K` is sent after this,
  // no connection is opened again), the connections close (the server
  // cancels their queued acquires), its watches end, and every later call
  // reports kUnreachable. Held locks are not released: release them first, or they
  // end by expiry. Idempotent; the destructor does it too.
  void close();
  bool closed() const;

  const Options& options() const { return options_; }
  // The identity the server named in its `H` reply to Options::credential
  // ("" before the first connection, or without a credential).
  std::string identity() const;

 private:
  // The connection to `addresses_[target]`, connecting if needed.
  Result<std::shared_ptr<Connection>> connection_to(std::size_t target);
  // Index of `address` in addresses_, appending it if new (a leader named
  // by `M` that was not in the list).
  std::size_t index_of(const Address& address);
  std::chrono::milliseconds jitter(std::chrono::milliseconds ceiling);
  // A guard for what `acquired` holds, with a keeper if `options.keep`.
  Result<LockGuard> guard(Result<Lock> acquired, LockOptions options);
  // Keepers that hear of an `X` for their token (push routing); false
  // once closed.
  friend class Keeper;
  bool add_keeper(std::uint64_t token, Keeper* keeper);
  void remove_keeper(std::uint64_t token, Keeper* keeper);
  void on_push(const Reply& push);
  Result<Lock> finish_acquire(const Request& req, Clock::time_point sent_at);

  const Options options_;
  mutable std::mutex mu_;  // guards everything below
  std::string identity_;   // the latest H reply's
  std::vector<Address> addresses_;
  std::size_t current_ = 0;  // the node requests go to (the leader, once known)
  std::shared_ptr<Connection> conn_;
  std::shared_ptr<WatchSession> watch_session_;  // made by the first watch()
  std::mt19937_64 rng_;
  Status config_error_;  // a bad address in Options: every call reports it
  bool closed_ = false;
  std::mutex keepers_mu_;  // after mu_ if both; never held while calling out
  std::unordered_multimap<std::uint64_t, Keeper*> keepers_;
};

}  // namespace lockd::client

#include "lockd/client/guard.h"
#include "lockd/client/election.h"
#include "lockd/client/semaphore.h"
#include "lockd/client/shared_guard.h"
