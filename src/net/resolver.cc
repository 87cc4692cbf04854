#include "lockd/net/resolver.h"

#include <arpa/inet.h>
#include <event2/dns.h>
#include <event2/util.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "lockd/common/check.h"
#include "lockd/net/clock.h"

namespace lockd::net {

struct Resolver::Query {
  Resolver* owner = nullptr;
  std::string host;
  evdns_getaddrinfo_request* request = nullptr;
};

namespace {

bool numeric(const std::string& host, sockaddr_storage& out, socklen_t& len) {
  sockaddr_storage ss{};
  auto* in = reinterpret_cast<sockaddr_in*>(&ss);
  if (inet_pton(AF_INET, host.c_str(), &in->sin_addr) == 1) {
    in->sin_family = AF_INET;
    out = ss;
    len = sizeof(sockaddr_in);
    return true;
  }
  auto* in6 = reinterpret_cast<sockaddr_in6*>(&ss);
  if (inet_pton(AF_INET6, host.c_str(), &in6->sin6_addr) == 1) {
    in6->sin6_family = AF_INET6;
    out = ss;
    len = sizeof(sockaddr_in6);
    return true;
  }
  return false;
}

}  // namespace

Resolver::Resolver(event_base* base, DoneFn on_done, ResolverOptions options)
    : base_(base), on_done_(std::move(on_done)), options_(std::move(options)) {
  notify_ev_ = event_new(
      base_, -1, 0,
      [](int, short, void* arg) {
        auto* self = static_cast<Resolver*>(arg);
        std::vector<std::string> done;
        done.swap(self->done_);
        for (const std::string& host : done) {
          if (self->on_done_) self->on_done_(host);
        }
      },
      this);
  LOCKD_CHECK(notify_ev_ != nullptr);
}

Resolver::~Resolver() {
  closing_ = true;
  for (auto& [host, e] : entries_) {
    // The cancel calls on_answer at once, which frees the query.
    if (e.query != nullptr) evdns_getaddrinfo_cancel(e.query->request);
  }
  if (dns_ != nullptr) evdns_base_free(dns_, 0);
  event_free(notify_ev_);
}

bool Resolver::ensure_dns() {
  if (dns_ != nullptr) return true;
  dns_ = evdns_base_new(base_, 0);
  if (dns_ == nullptr) return false;
  std::string path = options_.resolv_conf;
  if (path.empty()) {
    const char* env = std::getenv("LOCKD_RESOLV_CONF");
    path = env != nullptr && *env != '\0' ? env : "/etc/resolv.conf";
  }
  // A missing or odd file still leaves a usable base (evdns falls back to
  // a nameserver on 127.0.0.1); names then fail and are retried.
  const int rc = evdns_base_resolv_conf_parse(dns_, DNS_OPTIONS_ALL, path.c_str());
  if (rc != 0) spdlog::warn("resolver: cannot use {} (evdns error {}); using defaults", path, rc);
  return true;
}

Resolver::State Resolver::lookup(const std::string& host, sockaddr_storage& out, socklen_t& len) {
  if (numeric(host, out, len)) return State::kReady;
  Entry& e = entries_[host];
  const TimeNs now = monotonic_now_ns();
  if (e.have) {
    if (e.query == nullptr && now - e.resolved_ns >= options_.ttl_ns && now >= e.retry_ns) {
      start(host, e);
    }
    out = e.addr;
    len = e.len;
    return State::kReady;
  }
  if (e.query == nullptr && now >= e.retry_ns) start(host, e);
  // start() may have been answered at once (/etc/hosts).
  if (e.have) {
    out = e.addr;
    len = e.len;
    return State::kReady;
  }
  return e.query != nullptr ? State::kWaiting : State::kFailed;
}

std::uint64_t Resolver::failures(const std::string& host) const {
  const auto it = entries_.find(host);
  return it == entries_.end() ? 0 : it->second.failures;
}

void Resolver::start(const std::string& host, Entry& e) {
  if (!ensure_dns()) {
    finish(host, EVUTIL_EAI_FAIL, nullptr);
    return;
  }
  queries_ += 1;
  auto* q = new Query{this, host, nullptr};
  e.query = q;
  evutil_addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = EVUTIL_AI_ADDRCONFIG;
  evdns_getaddrinfo_request* r = evdns_getaddrinfo(dns_, host.c_str(), nullptr, &hints, &on_answer, q);
  // Null: answered (and `q` freed) already, e.g. from /etc/hosts.
  if (r != nullptr) q->request = r;
}

void Resolver::on_answer(int result, evutil_addrinfo* res, void* arg) {
  auto* q = static_cast<Query*>(arg);
  Resolver* self = q->owner;
  const std::string host = std::move(q->host);
  delete q;
  if (self->closing_ || result == EVUTIL_EAI_CANCEL) {
    if (res != nullptr) evutil_freeaddrinfo(res);
    return;
  }
  self->finish(host, result, res);
}

void Resolver::finish(const std::string& host, int result, evutil_addrinfo* res) {
  Entry& e = entries_[host];
  e.query = nullptr;
  const TimeNs now = monotonic_now_ns();
  if (result == 0 && res != nullptr && res->ai_addrlen <= sizeof e.addr) {
    std::memset(&e.addr, 0, sizeof e.addr);
    std::memcpy(&e.addr, res->ai_addr, res->ai_addrlen);
    e.len = static_cast<socklen_t>(res->ai_addrlen);
    e.have = true;
    e.resolved_ns = now;
    e.retry_ns = 0;
    if (e.warned) spdlog::info("resolver: '{}' resolves again", host);
    e.failures_in_row = 0;
    e.warned = false;
  } else {
    e.failures += 1;
    TimeNs d = options_.retry_min_ns;
    for (int i = 0; i < e.failures_in_row && d < options_.retry_max_ns; ++i) d *= 2;
    d = std::min(d, options_.retry_max_ns);
    if (e.failures_in_row < 62) e.failures_in_row += 1;
    e.retry_ns = now + d;
    // Once per run of failures; the count goes on in the metric.
    if (!e.warned) {
      spdlog::warn("resolver: cannot resolve '{}' ({}){}; retrying with back-off up to {} s", host,
                   evutil_gai_strerror(result),
                   e.have ? ", keeping its last address" : "", options_.retry_max_ns / 1'000'000'000);
      e.warned = true;
    }
  }
  if (res != nullptr) evutil_freeaddrinfo(res);
  done_.push_back(host);
  event_active(notify_ev_, 0, 0);
}

}  // namespace lockd::net
