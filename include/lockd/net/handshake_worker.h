// HandshakeWorker: the server half of client TLS handshakes on a thread of
// its own (protocol.md §11a: a flood of ClientHellos must not delay the
// replies of clients that are in). A handshake step costs 0.1–0.4 ms of
// public-key crypto; on the loop, a request that arrives behind a burst of
// them waits for all of them (measured: p99 10x its quiet value under 1,000
// handshakes a second; docs/safety.md).
//
// The loop still reads and writes every socket (one recv, one send per
// connection per turn); only TlsSession::on_input() of a session whose
// handshake is not done moves here. The session goes to the worker with the
// ciphertext and comes back with what it produced, so only one thread
// touches it at a time and nothing is shared but the two queues. Results
// come back through an eventfd on the loop, at normal priority. A
// connection closed meanwhile is forgotten: its result is dropped (the
// session freed) when it comes back.
//
// The one thread besides the loop on the client port, like the WAL's sync
// thread in cluster mode: no lock is taken on the request path (a
// connection that is in never comes here).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include "lockd/tls/tls_session.h"

struct event;
struct event_base;

namespace lockd::net {

class Connection;

class HandshakeWorker {
 public:
  explicit HandshakeWorker(event_base* base);
  ~HandshakeWorker();  // stops the thread; results not yet delivered are dropped
  HandshakeWorker(const HandshakeWorker&) = delete;
  HandshakeWorker& operator=(const HandshakeWorker&) = delete;

  // Loop thread. Runs `session->on_input(cipher)` on the worker; the result
  // goes to `conn.handshake_result()` on the loop, unless forget(ticket)
  // came first. Returns the ticket.
  std::uint64_t submit(Connection& conn, std::unique_ptr<tls::TlsSession> session, std::string cipher);
  // Loop thread: the connection of `ticket` is going away.
  void forget(std::uint64_t ticket) { waiting_.erase(ticket); }

  struct Step {
    std::uint64_t ticket = 0;
    std::unique_ptr<tls::TlsSession> session;
    std::string cipher;  // in
    std::string plain;   // out: plaintext now readable (sent with the Finished)
    std::string wire;    // out: ciphertext to send
    tls::TlsSession::Status status = tls::TlsSession::Status::kOk;
  };

 private:
  void run();                 // the worker thread
  void deliver();             // loop thread: results to their connections
  static void on_notify(int fd, short what, void* arg);

  int notify_fd_ = -1;        // eventfd: the worker has results
  event* notify_ev_ = nullptr;
  std::uint64_t next_ticket_ = 1;
  std::unordered_map<std::uint64_t, Connection*> waiting_;  // loop thread only

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Step> jobs_;     // guarded by mu_
  std::deque<Step> done_;     // guarded by mu_
  bool stop_ = false;         // guarded by mu_
  std::thread thread_;
};

}  // namespace lockd::net
