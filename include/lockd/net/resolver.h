// Name lookups off the event loop (protocol.md §11a: "name lookups never
// block the event loop"). A member's address may be a name; resolving it
// with getaddrinfo on the loop stalls heartbeats and lock replies for as
// long as a resolver takes to answer, or not. Resolver asks libevent's
// evdns instead: the query's UDP socket is one more event on the loop.
#pragma once

#include <event2/event.h>
#include <sys/socket.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "lockd/common/time.h"

struct evdns_base;
struct evdns_getaddrinfo_request;

namespace lockd::net {

struct ResolverOptions {
  // An answer is used this long; after it, the next lookup() starts a new
  // query and keeps answering with the old address until it ends.
  TimeNs ttl_ns = 60'000'000'000;
  // A name that did not resolve is asked again after this, doubling per
  // failure in a row up to retry_max_ns.
  TimeNs retry_min_ns = 1'000'000'000;
  TimeNs retry_max_ns = 60'000'000'000;
  // The resolv.conf to read (nameservers, options; /etc/hosts is read
  // too). Empty: $LOCKD_RESOLV_CONF if set (tests point it at a server
  // that never answers), else /etc/resolv.conf.
  std::string resolv_conf;
};

class Resolver {
 public:
  // `on_done(host)` is called once a query for `host` ends (resolved or
  // not), from its own loop callback, never from inside lookup().
  using DoneFn = std::function<void(const std::string& host)>;

  Resolver(event_base* base, DoneFn on_done, ResolverOptions options = {});
  ~Resolver();
  Resolver(const Resolver&) = delete;
  Resolver& operator=(const Resolver&) = delete;

  enum class State : std::uint8_t {
    kReady,    // `out` holds the address (port 0: the caller sets its own)
    kWaiting,  // a query is running; on_done(host) follows
    kFailed,   // the last query failed and its retry time has not come
  };
  // The address of `host` now. A numeric host is ready at once. A name is
  // ready while a cached answer exists (even a stale one, whose refresh it
  // starts); else a query starts (unless one runs or a failure's back-off
  // has not passed) and the answer is kWaiting or kFailed. Never blocks.
  State lookup(const std::string& host, sockaddr_storage& out, socklen_t& len);

  // Queries for `host` that failed (lockd_peer_resolve_failures_total).
  std::uint64_t failures(const std::string& host) const;
  // Queries started over all names.
  std::uint64_t queries() const { return queries_; }

 private:
  struct Query;
  struct Entry {
    bool have = false;  // addr/len hold an answer
    sockaddr_storage addr{};
    socklen_t len = 0;
    TimeNs resolved_ns = 0;   // when the answer came
    TimeNs retry_ns = 0;      // a failed name is not asked again before this
    int failures_in_row = 0;
    std::uint64_t failures = 0;
    bool warned = false;      // failure logged since the last success
    Query* query = nullptr;   // running, or null
  };

  void start(const std::string& host, Entry& e);
  static void on_answer(int result, struct evutil_addrinfo* res, void* arg);
  void finish(const std::string& host, int result, struct evutil_addrinfo* res);
  bool ensure_dns();

  event_base* base_;
  DoneFn on_done_;
  ResolverOptions options_;
  evdns_base* dns_ = nullptr;  // made at the first name (numeric clusters never read resolv.conf)
  std::map<std::string, Entry> entries_;
  std::vector<std::string> done_;  // hosts whose queries ended; on_done_ next turn
  event* notify_ev_ = nullptr;
  std::uint64_t queries_ = 0;
  bool closing_ = false;
};

}  // namespace lockd::net
