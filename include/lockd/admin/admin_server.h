// AdminServer: the HTTP admin API (spec interfaces.md) on libevent's evhttp,
// bound to --admin, on the same event_base as the lock server.
//
// Why on the reactor thread and not a thread of its own: every view reads
// the lock table, which is not thread-safe, and a second thread would need
// locks on the hot path. The price is that each request's work runs between
// lock requests, so every handler's work is bounded (list and top take a
// `limit`; see views.h for costs). Handlers only read; nothing here changes
// lock state.
//
// Errors are JSON `{"error": CODE, "message": TEXT}` with 400 (bad query
// value or key encoding), 404 (unknown path or key), 405 (not GET/HEAD).
#pragma once

#include <string>

#include "lockd/admin/views.h"
#include "lockd/net/address.h"

struct evhttp;
struct evhttp_bound_socket;
struct evhttp_request;
struct event_base;

namespace lockd::admin {

// Bounds on what one HTTP client may make the admin API hold.
constexpr std::size_t kMaxHeadersBytes = 16 * 1024;
constexpr std::size_t kMaxBodyBytes = 4 * 1024;  // no endpoint takes a body
constexpr int kIdleTimeoutS = 30;

class AdminServer {
 public:
  AdminServer(event_base* base, const server::LockServer& server, NodeInfo node);
  ~AdminServer();
  AdminServer(const AdminServer&) = delete;
  AdminServer& operator=(const AdminServer&) = delete;

  // Binds and listens on `ep`. Returns false with `error` set.
  bool listen(const net::Endpoint& ep, std::string& error);
  net::Endpoint bound() const { return bound_; }
  // `/readyz` answers 503 from now on (graceful stop).
  void set_draining() { draining_ = true; }

 private:
  static void on_request(evhttp_request* req, void* arg);
  void handle(evhttp_request* req);

  const server::LockServer& server_;
  NodeInfo node_;
  evhttp* http_ = nullptr;
  net::Endpoint bound_;
  bool draining_ = false;
};

}  // namespace lockd::admin
