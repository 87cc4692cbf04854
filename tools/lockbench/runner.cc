#include "runner.h"

#include <event2/event.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <deque>
#include <fcntl.h>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "keygen.h"
#include "lockd_codec.h"
#include "tls.h"

namespace lockbench {
namespace {

constexpr std::int64_t kNsPerMs = 1'000'000;
constexpr std::int64_t kNsPerSec = 1'000'000'000;
// Input buffer per connection: far above the longest reply either decoder
// accepts, so a full buffer always holds at least one whole reply.
constexpr std::size_t kReadBufferBytes = 64 * 1024;
// After the run stops issuing, how long outstanding replies may take.
constexpr std::int64_t kDrainTimeoutMs = 10'000;
// How long the per-connection set-up (Redis SCRIPT LOAD) may take.
constexpr std::int64_t kHandshakeTimeoutMs = 10'000;
// File descriptors beyond the connections (stdio, epoll, libevent's own).
constexpr std::uint64_t kSpareFds = 64;
// Protocol errors printed as they happen; the rest are only counted.
constexpr std::uint64_t kMaxErrorsPrinted = 5;
// Longest piece of an unexpected reply quoted in a message.
constexpr std::size_t kMaxQuotedBytes = 80;
// Connections in `waiters` besides the waiters: the holder and the probe.
constexpr std::uint32_t kWaitersExtraConnections = 2;
// Cluster mode: how long to look for a leader before the run starts.
constexpr std::int64_t kFindLeaderTimeoutMs = 10'000;
// Cluster mode: one probe exchange (connect, `R 1 <fence>`, reply).
constexpr int kProbeTimeoutMs = 1'000;
// Cluster mode: `M` hops followed while looking for the leader.
constexpr int kMaxProbeHops = 3;
// Cluster mode: pause before a sequence that got `E no_leader` starts over,
// and between rounds of reconnects when no member accepts.
constexpr std::int64_t kNoLeaderPauseMs = 20;
constexpr std::int64_t kReconnectPauseMs = 50;
// Cluster mode: distinct addresses (members plus leaders named by `M`).
constexpr std::size_t kMaxEndpoints = 64;

std::int64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * kNsPerSec + ts.tv_nsec;
}

// Printable excerpt of bytes from the server, for one-line messages.
std::string quote(std::string_view bytes) {
  std::string q;
  for (char ch : bytes.substr(0, kMaxQuotedBytes)) {
    if (ch == '\n') {
      q += "\\n";
    } else if (ch == '\r') {
      q += "\\r";
    } else if (ch >= 0x20 && ch < 0x7f) {
      q += ch;
    } else {
      q += '?';
    }
  }
  if (bytes.size() > kMaxQuotedBytes) q += "...";
  return q;
}

struct Conn;
class Runner;

// Which part a slot plays in its workload.
enum class Role : std::uint8_t {
  kWorker,   // uncontended/contended/hold: one lock sequence
  kHolder,   // waiters: holds the key everybody queues on
  kProbe,    // waiters: acquire/release on another key, to measure latency
  kWaiter,   // waiters: queues once, releases at once when served
};

// One independent lock sequence: at most one request of it is outstanding
// (a waiter adds a fence). A connection with pipeline depth P has P slots.
struct Slot {
  Conn* conn = nullptr;
  std::uint32_t id = 0;  // global, dense
  Role role = Role::kWorker;
  std::string owner;     // unique per slot: lockd owner / Redis lock value
  KeyBuf key;            // the key of the current sequence
  std::uint64_t token = 0;
  std::uint64_t hot = 0;               // contended: index into the hot set
  std::int64_t first_attempt_ns = 0;   // when the current acquire began
  std::optional<PartitionKeys> hold_keys;
  event* retry_ev = nullptr;           // Redis: the sleep before a retry
  bool restart_on_timer = false;       // cluster: retry_ev starts the sequence over
  std::uint32_t waiter_index = 0;      // waiters: order of enqueue
  bool enqueued = false;               // waiters: the server has it queued
  std::uint32_t keeps_left = 0;        // hold-keep: extensions still to send
  Flavor flavor = Flavor::kPlain;      // readers-heavy/semaphore: the current hold's kind
};

// A request sent (or about to be) and not yet answered.
struct Pending {
  ReqKind kind;
  Slot* slot;
  std::uint64_t token;  // release/fence/keep: for matching lockd's echo; handshake: its index
  std::int64_t sent_ns;
  Flavor flavor = Flavor::kPlain;  // how a Redis reply to it reads
};

// One TCP connection to the server.
struct Conn {
  Runner* runner = nullptr;
  std::uint32_t id = 0;
  int fd = -1;
  SSL* ssl = nullptr;  // --tls-ca: the session on fd (nullptr: plaintext)
  event* read_ev = nullptr;
  event* write_ev = nullptr;
  std::string out;  // encoded, not yet written
  std::size_t out_off = 0;
  bool dirty = false;        // in the flush list
  bool write_armed = false;  // a partial write is waiting for EV_WRITE
  std::vector<char> in = std::vector<char>(kReadBufferBytes);
  std::size_t in_len = 0;
  std::deque<Pending> pending;  // oldest first
  std::size_t unstamped = 0;    // newest entries not yet given sent_ns
  bool handshaken = false;
  std::uint64_t grants = 0;
  // Cluster mode.
  std::size_t target = 0;  // index into Runner::endpoints_
  bool lost = false;       // closed or moved: waits in Runner::lost_ for a reconnect
  std::vector<Slot*> parked;  // slots whose requests were dropped, to start over
};

class Runner {
 public:
  explicit Runner(const Config& cfg) : cfg_(cfg), backend_(make_backend(cfg.backend)) {}
  ~Runner();
  Results run();

 private:
  static void on_read(evutil_socket_t, short, void* arg);
  static void on_write(evutil_socket_t, short, void* arg);
  static void on_retry(evutil_socket_t, short, void* arg);
  static void on_progress(evutil_socket_t, short, void* arg);
  static void on_end(evutil_socket_t, short, void* arg);
  static void on_drain_timeout(evutil_socket_t, short, void* arg);
  static void on_handshake_timeout(evutil_socket_t, short, void* arg);
  static void on_reconnect(evutil_socket_t, short, void* arg);

  bool raise_fd_limit(std::uint64_t conns);
  bool connect_all(std::uint32_t conns);
  // Opens `c` to endpoints_[index] (blocking connect) and arms its events.
  bool open_conn(Conn& c, std::size_t index, std::string& error);

  // Cluster mode.
  bool find_leader();
  std::optional<std::size_t> endpoint_index(std::string_view addr);
  void conn_lost(Conn& c);
  void reconnect(Conn& c);
  void restart_slot(Slot& s);
  bool cluster_reply(Conn& c, Slot& s, const Reply& r);
  void start();
  void stop_issuing();
  void fail(int code, std::string why);
  void finish();
  void after_callback();

  void readable(Conn& c);
  void readable_tls(Conn& c);
  // After a read of `n` bytes (errno set when n < 0): false when the
  // connection ended or failed (handled here).
  bool read_ok(Conn& c, ssize_t n, bool retry);
  void decode_input(Conn& c);
  void close_conn(Conn& c);
  void dispatch(Conn& c, const Reply& r, std::int64_t now);
  bool matches(const Pending& p, const Reply& r) const;
  void protocol_error(const Conn& c, std::string_view what);
  void flush(Conn& c);
  void mark_dirty(Conn& c);

  void push(Slot& s, ReqKind kind, std::uint64_t token);
  void issue_acquire(Slot& s, std::uint64_t lease_ms, std::uint64_t wait_ms);
  void issue_release(Slot& s);
  void issue_fence(Slot& s);
  void issue_keep(Slot& s);
  void schedule_retry(Slot& s);
  bool limit_reached();
  // The workloads that loop acquire-with-wait / release on hot keys.
  bool contended() const {
    return cfg_.workload == Workload::kContended || cfg_.workload == Workload::kReadersHeavy ||
           cfg_.workload == Workload::kSemaphore;
  }

  // Workloads: what a slot does next, given the reply to its last request.
  void uncontended_next(Slot& s);
  void uncontended_reply(Slot& s, const Pending& p, const Reply& r);
  void contended_begin(Slot& s);
  void contended_reply(Slot& s, const Pending& p, const Reply& r, std::int64_t now);
  void hold_next(Slot& s);
  void waiters_start();
  void waiters_enqueue_next();
  void waiters_reply(Slot& s, const Pending& p, const Reply& r, std::int64_t now);
  void probe_next(Slot& s);
  void waiter_resolved();
  void hold_keep_next(Slot& s);
  void hold_keep_reply(Slot& s, const Pending& p, const Reply& r);

  const Config& cfg_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<TlsClient> tls_;  // --tls-ca given
  event_base* base_ = nullptr;
  std::vector<std::unique_ptr<Conn>> conns_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::vector<Conn*> dirty_;
  std::vector<event*> timers_;
  UniformKeys keys_{1, 1};
  // Cluster mode: members and leaders named by `M`; connections aim at
  // endpoints_[leader_].
  bool cluster_ = false;
  std::vector<Endpoint> endpoints_;
  std::vector<std::int64_t> down_until_ns_;  // per endpoint: refused a connect, skip until
  std::size_t leader_ = 0;
  std::vector<Conn*> lost_;       // connections waiting for on_reconnect
  event* reconnect_ev_ = nullptr;
  std::vector<std::int64_t> hot_release_ns_;  // contended: last release sent, per hot key
  std::uint64_t mix_state_ = 0;  // readers-heavy: xorshift state for the read/write mix

  std::string prefix_;     // key prefix per workload
  std::string fence_key_;
  std::string probe_key_;

  bool started_ = false;
  bool stopping_ = false;
  bool finished_ = false;
  std::uint64_t outstanding_ = 0;  // pending requests + scheduled retries
  std::uint64_t issued_ = 0;
  std::uint64_t handshakes_left_ = 0;
  std::int64_t start_ns_ = 0;
  std::int64_t end_ns_ = 0;
  std::int64_t last_progress_ns_ = 0;
  std::uint64_t last_progress_ops_ = 0;
  std::uint64_t errors_printed_ = 0;

  // waiters
  std::uint32_t next_enqueue_ = 0;  // waiters the server has queued
  bool enqueue_sent_ = false;       // Redis: every waiter's first try sent
  std::uint32_t expected_grant_ = 0;
  std::uint32_t waiters_resolved_ = 0;
  std::int64_t enqueue_start_ns_ = 0;
  std::int64_t serve_start_ns_ = 0;
  std::int64_t last_served_ns_ = 0;

  Results res_;
};

Runner::~Runner() {
  for (auto& s : slots_) {
    if (s->retry_ev != nullptr) event_free(s->retry_ev);
  }
  for (auto& c : conns_) {
    if (c->read_ev != nullptr) event_free(c->read_ev);
    if (c->write_ev != nullptr) event_free(c->write_ev);
    close_conn(*c);
  }
  for (event* t : timers_) event_free(t);
  if (reconnect_ev_ != nullptr) event_free(reconnect_ev_);
  if (base_ != nullptr) event_base_free(base_);
}

void Runner::close_conn(Conn& c) {
  if (c.ssl != nullptr) SSL_free(c.ssl);
  c.ssl = nullptr;
  if (c.fd >= 0) close(c.fd);
  c.fd = -1;
}

bool Runner::raise_fd_limit(std::uint64_t conns) {
  const std::uint64_t need = conns + kSpareFds;
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0) return true;
  if (lim.rlim_cur >= need) return true;
  if (lim.rlim_max < need) {
    fail(kExitUsage, "need " + std::to_string(need) + " open files but the hard limit is " +
                         std::to_string(lim.rlim_max) + " (raise ulimit -Hn)");
    return false;
  }
  lim.rlim_cur = need;
  if (setrlimit(RLIMIT_NOFILE, &lim) != 0) {
    fail(kExitUsage, std::string("setrlimit(RLIMIT_NOFILE): ") + std::strerror(errno));
    return false;
  }
  return true;
}

bool Runner::open_conn(Conn& c, std::size_t index, std::string& error) {
  const Endpoint& ep = endpoints_[index];
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* ai = nullptr;
  const std::string port = std::to_string(ep.port);
  if (int rc = getaddrinfo(ep.host.c_str(), port.c_str(), &hints, &ai); rc != 0) {
    error = "cannot resolve " + ep.to_string() + ": " + gai_strerror(rc);
    return false;
  }
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> guard(ai, freeaddrinfo);
  const int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    error = std::string("socket(): ") + std::strerror(errno);
    return false;
  }
  // Blocking connect, one at a time: on loopback it completes at once,
  // and it keeps set-up out of the measured interval.
  if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
    error = "cannot connect to " + ep.to_string() + " (connection " + std::to_string(c.id) +
            "): " + std::strerror(errno);
    close(fd);
    // Cluster: a member that refuses is down for a while; an `M` naming it
    // (followers still believe in a dead leader until they time out) must
    // not send every connection back to it.
    if (index < down_until_ns_.size()) down_until_ns_[index] = now_ns() + kReconnectPauseMs * kNsPerMs;
    return false;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (tls_ != nullptr) {
    // The handshake, blocking like the connect, bounded like it should be.
    timeval tv{kHandshakeTimeoutMs / 1000, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    std::string why;
    c.ssl = tls_->handshake(fd, ep.host, why);
    if (c.ssl == nullptr) {
      error = ep.to_string() + " (connection " + std::to_string(c.id) + "): " + why;
      close(fd);
      return false;
    }
    if (res_.tls_suite.empty()) {
      res_.tls_suite = std::string(SSL_get_version(c.ssl)) + " " + SSL_get_cipher_name(c.ssl);
    }
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  c.fd = fd;
  c.target = index;
  c.lost = false;
  c.read_ev = event_new(base_, c.fd, EV_READ | EV_PERSIST, &Runner::on_read, &c);
  c.write_ev = event_new(base_, c.fd, EV_WRITE, &Runner::on_write, &c);
  event_add(c.read_ev, nullptr);
  return true;
}

bool Runner::connect_all(std::uint32_t n) {
  for (std::uint32_t i = 0; i < n; ++i) {
    auto c = std::make_unique<Conn>();
    c->runner = this;
    c->id = i;
    std::string error;
    if (!open_conn(*c, leader_, error)) {
      fail(kExitNoServer, error);
      return false;
    }
    conns_.push_back(std::move(c));
  }
  return true;
}

void Runner::fail(int code, std::string why) {
  if (res_.failure.empty()) {
    res_.failure = std::move(why);
    res_.exit_code = code;
  }
  if (base_ != nullptr) event_base_loopbreak(base_);
}

Results Runner::run() {
  const bool waiters = cfg_.workload == Workload::kWaiters;
  const std::uint32_t nconns =
      waiters ? cfg_.waiters + kWaitersExtraConnections : cfg_.connections;
  if (!raise_fd_limit(nconns)) return res_;
  if (cfg_.tls.enabled()) {
    std::string error;
    tls_ = TlsClient::make(cfg_.tls, error);
    if (tls_ == nullptr) {
      fail(kExitUsage, error);
      return res_;
    }
  }
  base_ = event_base_new();
  if (base_ == nullptr) {
    fail(kExitFailed, "event_base_new failed");
    return res_;
  }
  fence_key_ = cfg_.key_prefix + ":fence";
  cluster_ = !cfg_.cluster.empty();
  if (cluster_) {
    endpoints_ = cfg_.cluster;
    down_until_ns_.assign(endpoints_.size(), 0);
    if (!find_leader()) return res_;
    reconnect_ev_ = evtimer_new(base_, &Runner::on_reconnect, this);
  } else {
    endpoints_ = {Endpoint{cfg_.host, cfg_.port}};
  }
  if (!connect_all(nconns)) return res_;

  // Slots: owners are unique per process and slot, so two runs (or a
  // leftover lease) never mistake each other's locks.
  const std::string run_tag = std::to_string(getpid());
  const std::uint32_t per_conn = waiters ? 1 : cfg_.pipeline;
  for (auto& c : conns_) {
    for (std::uint32_t k = 0; k < per_conn; ++k) {
      auto s = std::make_unique<Slot>();
      s->conn = c.get();
      s->id = static_cast<std::uint32_t>(slots_.size());
      s->owner = run_tag + "." + std::to_string(c->id) + "." + std::to_string(k);
      slots_.push_back(std::move(s));
    }
  }
  keys_ = UniformKeys(cfg_.workload == Workload::kSemaphore ? 1
                      : contended() ? cfg_.hot_keys
                                    : cfg_.keyspace,
                      cfg_.seed);
  mix_state_ = cfg_.seed * 0x9E3779B97F4A7C15ull + 1;
  prefix_ = cfg_.key_prefix + ":" + workload_name(cfg_.workload);
  probe_key_ = cfg_.key_prefix + ":probe";
  hot_release_ns_.assign(cfg_.hot_keys, 0);

  if (backend_->handshakes() > 0) {
    for (auto& c : conns_) {
      for (std::uint32_t i = 0; i < backend_->handshakes(); ++i) {
        backend_->encode_handshake(c->out, i);
        c->pending.push_back(Pending{ReqKind::kHandshake, nullptr, i, 0});
        ++c->unstamped;
        ++handshakes_left_;
      }
      mark_dirty(*c);
    }
    event* limit = evtimer_new(base_, &Runner::on_handshake_timeout, this);
    timeval tv{kHandshakeTimeoutMs / 1000, 0};
    evtimer_add(limit, &tv);
    timers_.push_back(limit);
    after_callback();
    if (handshakes_left_ > 0) event_base_dispatch(base_);
    evtimer_del(limit);
    if (!res_.failure.empty()) return res_;
  }
  start();
  after_callback();
  if (!finished_) event_base_dispatch(base_);
  if (!res_.failure.empty()) return res_;
  if (!finished_) {
    fail(kExitFailed, "event loop ended early");
    return res_;
  }

  if (cluster_) res_.leader = endpoints_[leader_].to_string();
  const double elapsed_s = static_cast<double>(end_ns_ - start_ns_) / kNsPerSec;
  res_.elapsed_s = elapsed_s;
  res_.ops_per_s = elapsed_s > 0 ? static_cast<double>(res_.counters.ops) / elapsed_s : 0;
  if (contended()) {
    for (auto& c : conns_) res_.grants_per_connection.push_back(c->grants);
  }
  if (res_.counters.protocol_errors > 0) {
    fail(kExitFailed, std::to_string(res_.counters.protocol_errors) + " protocol errors");
  } else if (waiters && res_.waiters_served != cfg_.waiters) {
    fail(kExitFailed, "only " + std::to_string(res_.waiters_served) + " of " +
                          std::to_string(cfg_.waiters) + " waiters were served");
  } else if (res_.counters.not_kept > 0) {
    // Every keep is sent well inside the lease, on a lock this slot holds.
    fail(kExitFailed, std::to_string(res_.counters.not_kept) + " keeps of held locks refused");
  } else if (waiters && backend_->server_queues() && res_.fifo_violations > 0) {
    fail(kExitFailed, std::to_string(res_.fifo_violations) + " waiters served out of FIFO order");
  }
  return res_;
}

void Runner::start() {
  started_ = true;
  start_ns_ = now_ns();
  last_progress_ns_ = start_ns_;
  auto add_timer = [this](event_callback_fn fn, std::int64_t after_ns, bool persist) {
    event* ev = event_new(base_, -1, persist ? EV_PERSIST : 0, fn, this);
    timeval tv{static_cast<time_t>(after_ns / kNsPerSec),
               static_cast<suseconds_t>((after_ns % kNsPerSec) / 1000)};
    event_add(ev, &tv);
    timers_.push_back(ev);
  };
  if (cfg_.progress) add_timer(&Runner::on_progress, kNsPerSec, true);
  add_timer(&Runner::on_end, static_cast<std::int64_t>(cfg_.duration_s * kNsPerSec), false);

  switch (cfg_.workload) {
    case Workload::kUncontended:
      for (auto& s : slots_) uncontended_next(*s);
      break;
    case Workload::kContended:
    case Workload::kReadersHeavy:
    case Workload::kSemaphore:
      for (auto& s : slots_) contended_begin(*s);
      break;
    case Workload::kHold:
      for (auto& s : slots_) {
        s->hold_keys.emplace(s->id, slots_.size(), cfg_.hold_keys);
        hold_next(*s);
      }
      break;
    case Workload::kWaiters:
      waiters_start();
      break;
    case Workload::kHoldKeep:
      for (auto& s : slots_) hold_keep_next(*s);
      break;
  }
}

void Runner::stop_issuing() {
  if (stopping_) return;
  stopping_ = true;
  // Pending retries are abandoned: they were only sleeping.
  for (auto& s : slots_) {
    if (s->retry_ev != nullptr && evtimer_pending(s->retry_ev, nullptr)) {
      evtimer_del(s->retry_ev);
      --outstanding_;
    }
  }
  event* ev = evtimer_new(base_, &Runner::on_drain_timeout, this);
  timeval tv{kDrainTimeoutMs / 1000, 0};
  evtimer_add(ev, &tv);
  timers_.push_back(ev);
}

void Runner::finish() {
  if (finished_) return;
  finished_ = true;
  end_ns_ = now_ns();
  event_base_loopbreak(base_);
}

void Runner::after_callback() {
  // A flush can lose a connection, whose reconnect marks others dirty:
  // take the list by value.
  while (!dirty_.empty()) {
    std::vector<Conn*> batch;
    batch.swap(dirty_);
    for (Conn* c : batch) {
      c->dirty = false;
      if (!c->write_armed) flush(*c);
    }
  }
  if (started_ && outstanding_ == 0 && res_.failure.empty()) finish();
}

// ---- I/O ------------------------------------------------------------------

void Runner::on_read(evutil_socket_t, short, void* arg) {
  Conn& c = *static_cast<Conn*>(arg);
  c.runner->readable(c);
  c.runner->after_callback();
}

void Runner::on_write(evutil_socket_t, short, void* arg) {
  Conn& c = *static_cast<Conn*>(arg);
  c.write_armed = false;
  c.runner->flush(c);
  c.runner->after_callback();
}

void Runner::mark_dirty(Conn& c) {
  if (!c.dirty) {
    c.dirty = true;
    dirty_.push_back(&c);
  }
}

void Runner::flush(Conn& c) {
  if (c.lost || c.out_off >= c.out.size()) return;
  if (c.unstamped > 0) {
    // Requests are timed from the moment they first go to the socket.
    const std::int64_t t = now_ns();
    for (std::size_t i = c.pending.size() - c.unstamped; i < c.pending.size(); ++i) {
      Pending& p = c.pending[i];
      p.sent_ns = t;
      if (p.kind == ReqKind::kRelease && contended()) {
        hot_release_ns_[p.slot->hot] = t;
      }
    }
    c.unstamped = 0;
  }
  if (c.ssl != nullptr) {
    // Partial writes are on: each SSL_write sends at least one record.
    while (c.out_off < c.out.size()) {
      tls_clear_errors();
      const int n = SSL_write(c.ssl, c.out.data() + c.out_off,
                              static_cast<int>(std::min<std::size_t>(c.out.size() - c.out_off, INT_MAX)));
      if (n > 0) {
        c.out_off += static_cast<std::size_t>(n);
        continue;
      }
      const int e = SSL_get_error(c.ssl, n);
      if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ) break;  // retried on EV_WRITE
      if (cluster_) {
        conn_lost(c);
        return;
      }
      fail(kExitNoServer, tls_error("connection " + std::to_string(c.id) + " lost: TLS write failed"));
      return;
    }
  } else if (const ssize_t n =
                 send(c.fd, c.out.data() + c.out_off, c.out.size() - c.out_off, MSG_NOSIGNAL);
             n < 0) {
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      if (cluster_) {
        conn_lost(c);
        return;
      }
      fail(kExitNoServer, "connection " + std::to_string(c.id) + " lost: " + std::strerror(errno));
      return;
    }
  } else {
    c.out_off += static_cast<std::size_t>(n);
  }
  if (c.out_off == c.out.size()) {
    c.out.clear();
    c.out_off = 0;
  } else {
    c.write_armed = true;
    event_add(c.write_ev, nullptr);
  }
}

void Runner::readable(Conn& c) {
  if (c.lost) return;
  if (c.ssl != nullptr) {
    readable_tls(c);
    return;
  }
  const ssize_t n = read(c.fd, c.in.data() + c.in_len, c.in.size() - c.in_len);
  if (!read_ok(c, n, n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))) return;
  c.in_len += static_cast<std::size_t>(n);
  decode_input(c);
}

// Read-ahead is on, so one SSL_read takes what the socket holds (one
// read()); it is called again only while OpenSSL still holds bytes of it,
// which the socket's readiness would not announce.
void Runner::readable_tls(Conn& c) {
  do {
    tls_clear_errors();
    const int n = SSL_read(c.ssl, c.in.data() + c.in_len, static_cast<int>(c.in.size() - c.in_len));
    if (n <= 0) {
      const int e = SSL_get_error(c.ssl, n);
      if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) return;
      if (e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL && errno == 0)) {
        read_ok(c, 0, false);  // close_notify or EOF
        return;
      }
      const std::string why = tls_error("TLS read failed");
      if (cluster_) {
        conn_lost(c);
        return;
      }
      fail(kExitNoServer, "connection " + std::to_string(c.id) + " lost: " + why);
      return;
    }
    c.in_len += static_cast<std::size_t>(n);
    decode_input(c);
  } while (!c.lost && res_.failure.empty() && SSL_has_pending(c.ssl) == 1);
}

bool Runner::read_ok(Conn& c, ssize_t n, bool retry) {
  if (cluster_ && n <= 0 && !retry) {
    conn_lost(c);  // a member went away: find the leader again
    return false;
  }
  if (n == 0) {
    fail(kExitNoServer, "the server closed connection " + std::to_string(c.id) +
                            (c.pending.empty() ? "" : " with requests outstanding"));
    return false;
  }
  if (n < 0) {
    if (retry) return false;
    fail(kExitNoServer, "connection " + std::to_string(c.id) + " lost: " + std::strerror(errno));
    return false;
  }
  return true;
}

void Runner::decode_input(Conn& c) {
  const std::int64_t now = now_ns();
  std::size_t off = 0;
  while (off < c.in_len && res_.failure.empty()) {
    const ReqKind oldest = c.pending.empty() ? ReqKind::kAcquire : c.pending.front().kind;
    const Flavor flavor = c.pending.empty() ? Flavor::kPlain : c.pending.front().flavor;
    const std::string_view in(c.in.data() + off, c.in_len - off);
    std::size_t consumed = 0;
    Reply r;
    const DecodeStatus st = backend_->decode(in, consumed, oldest, flavor, r);
    if (st == DecodeStatus::kNeedMore) break;
    if (st == DecodeStatus::kMalformed) {
      fail(kExitBadServer, std::string("the server does not speak the ") +
                               std::string(backend_->name()) + " protocol: got '" + quote(in) +
                               "'");
      return;
    }
    dispatch(c, r, now);
    off += consumed;
  }
  std::memmove(c.in.data(), c.in.data() + off, c.in_len - off);
  c.in_len -= off;
}

bool Runner::matches(const Pending& p, const Reply& r) const {
  switch (r.outcome) {
    case Outcome::kGranted:
    case Outcome::kNotGranted:
    case Outcome::kBusy:
      return p.kind == ReqKind::kAcquire && p.slot->owner == r.owner &&
             p.slot->key.view() == r.key;
    case Outcome::kReleased:
    case Outcome::kNotReleased:
    case Outcome::kKept:
      if (p.kind == ReqKind::kFence) return p.token == r.token && r.key == fence_key_;
      if (r.outcome == Outcome::kKept && p.kind != ReqKind::kKeep) return false;
      if (r.outcome == Outcome::kReleased && p.kind != ReqKind::kRelease) return false;
      return (p.kind == ReqKind::kRelease || p.kind == ReqKind::kKeep) && p.token == r.token &&
             p.slot->key.view() == r.key;
    case Outcome::kMoved:
    case Outcome::kNoLeader:
    case Outcome::kIndeterminate:
    case Outcome::kError:
      if (!r.owner.empty()) {
        return p.kind == ReqKind::kAcquire && p.slot->owner == r.owner &&
               p.slot->key.view() == r.key;
      }
      return (p.kind == ReqKind::kRelease || p.kind == ReqKind::kFence ||
              p.kind == ReqKind::kKeep) &&
             p.token == r.token;
    case Outcome::kHandshakeOk:
    case Outcome::kPong:
      return true;
  }
  return false;
}

void Runner::protocol_error(const Conn& c, std::string_view what) {
  ++res_.counters.protocol_errors;
  if (errors_printed_ < kMaxErrorsPrinted) {
    ++errors_printed_;
    std::fprintf(stderr, "lockbench: protocol error on connection %u: %s\n", c.id,
                 quote(what).c_str());
  }
}

void Runner::dispatch(Conn& c, const Reply& r, std::int64_t now) {
  std::size_t idx = 0;
  const std::size_t answerable = c.pending.size() - c.unstamped;
  if (answerable == 0) {
    protocol_error(c, "a reply with no request outstanding");
    return;
  }
  if (!backend_->in_order() && r.has_echo) {
    while (idx < answerable && !matches(c.pending[idx], r)) ++idx;
    if (idx == answerable) {
      protocol_error(c, std::string("a reply that matches no outstanding request: ") +
                            std::string(r.key));
      return;
    }
  }
  const Pending p = c.pending[idx];
  if (idx == 0) {
    c.pending.pop_front();
  } else {
    c.pending.erase(c.pending.begin() + static_cast<std::ptrdiff_t>(idx));
  }
  if (p.kind == ReqKind::kHandshake) {  // set-up, not measured
    if (r.outcome != Outcome::kHandshakeOk) {
      fail(kExitBadServer, "SCRIPT LOAD failed: " + quote(r.detail));
      return;
    }
    backend_->on_handshake(static_cast<std::uint32_t>(p.token), r.detail);
    c.handshaken = true;
    if (--handshakes_left_ == 0 && !started_) event_base_loopbreak(base_);
    return;
  }
  --outstanding_;
  ++res_.counters.ops;
  Slot& s = *p.slot;
  if (cluster_reply(c, s, r)) return;
  const auto latency_ns = static_cast<std::uint64_t>(std::max<std::int64_t>(0, now - p.sent_ns));
  res_.latency_ns.record(latency_ns);
  if (r.outcome == Outcome::kError) protocol_error(c, r.detail);
  switch (r.outcome) {
    case Outcome::kGranted: ++res_.counters.granted; break;
    case Outcome::kNotGranted: ++res_.counters.not_granted; break;
    case Outcome::kBusy: ++res_.counters.busy; break;
    case Outcome::kReleased: ++res_.counters.released; break;
    case Outcome::kNotReleased:
      if (p.kind == ReqKind::kRelease) ++res_.counters.not_released;
      if (p.kind == ReqKind::kKeep) ++res_.counters.not_kept;
      break;
    case Outcome::kKept: ++res_.counters.kept; break;
    default: break;
  }
  if (r.outcome == Outcome::kGranted) s.token = r.token;
  if (p.kind == ReqKind::kKeep) res_.keep_ns.record(latency_ns);
  switch (cfg_.workload) {
    case Workload::kUncontended: uncontended_reply(s, p, r); break;
    case Workload::kContended:
    case Workload::kReadersHeavy:
    case Workload::kSemaphore: contended_reply(s, p, r, now); break;
    case Workload::kHold: hold_next(s); break;
    case Workload::kWaiters: waiters_reply(s, p, r, now); break;
    case Workload::kHoldKeep: hold_keep_reply(s, p, r); break;
  }
}

// ---- requests ---------------------------------------------------------------

void Runner::push(Slot& s, ReqKind kind, std::uint64_t token) {
  Conn& c = *s.conn;
  c.pending.push_back(Pending{kind, &s, token, 0, s.flavor});
  ++c.unstamped;
  ++outstanding_;
  ++issued_;
  mark_dirty(c);
}

void Runner::issue_acquire(Slot& s, std::uint64_t lease_ms, std::uint64_t wait_ms) {
  backend_->encode_acquire_as(s.conn->out, s.flavor, cfg_.limit, s.owner, s.key.view(), lease_ms,
                              backend_->server_queues() ? wait_ms : 0);
  push(s, ReqKind::kAcquire, 0);
}

void Runner::issue_release(Slot& s) {
  backend_->encode_release_as(s.conn->out, s.flavor, s.token, s.owner, s.key.view());
  push(s, ReqKind::kRelease, s.token);
}

void Runner::issue_fence(Slot& s) {
  backend_->encode_fence(s.conn->out, fence_key_);
  push(s, ReqKind::kFence, 1);
}

void Runner::issue_keep(Slot& s) {
  backend_->encode_keep(s.conn->out, s.token, s.owner, s.key.view(), cfg_.lease_ms);
  push(s, ReqKind::kKeep, s.token);
}

void Runner::schedule_retry(Slot& s) {
  if (stopping_) return;
  if (s.retry_ev == nullptr) s.retry_ev = evtimer_new(base_, &Runner::on_retry, &s);
  const std::int64_t us = static_cast<std::int64_t>(cfg_.retry_ms) * 1000;
  timeval tv{static_cast<time_t>(us / 1'000'000), static_cast<suseconds_t>(us % 1'000'000)};
  evtimer_add(s.retry_ev, &tv);
  ++outstanding_;
}

void Runner::on_retry(evutil_socket_t, short, void* arg) {
  Slot& s = *static_cast<Slot*>(arg);
  Runner& r = *s.conn->runner;
  --r.outstanding_;
  if (s.restart_on_timer) {
    s.restart_on_timer = false;
    r.restart_slot(s);
  } else if (!r.stopping_) {
    r.issue_acquire(s, r.cfg_.lease_ms, r.cfg_.wait_ms);
  }
  r.after_callback();
}

// ---- cluster mode ---------------------------------------------------------------

std::optional<std::size_t> Runner::endpoint_index(std::string_view addr) {
  const std::size_t colon = addr.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return std::nullopt;
  unsigned long port = 0;
  try {
    port = std::stoul(std::string(addr.substr(colon + 1)));
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (port == 0 || port > 65535) return std::nullopt;
  const Endpoint ep{std::string(addr.substr(0, colon)), static_cast<std::uint16_t>(port)};
  for (std::size_t i = 0; i < endpoints_.size(); ++i) {
    if (endpoints_[i].host == ep.host && endpoints_[i].port == ep.port) return i;
  }
  if (endpoints_.size() >= kMaxEndpoints) return std::nullopt;
  endpoints_.push_back(ep);
  down_until_ns_.push_back(0);
  return endpoints_.size() - 1;
}

// Asks each member in turn `R 1 <fence key>` (a no-op: nobody holds the
// fence key) until one answers itself (`N`), following `M` to the leader.
bool Runner::find_leader() {
  const std::int64_t deadline = now_ns() + kFindLeaderTimeoutMs * kNsPerMs;
  std::string last_error = "no member answered";
  std::string probe;
  encode_lockd_release(probe, 1, fence_key_);
  for (std::size_t round = 0; now_ns() < deadline; ++round) {
    std::size_t at = round % cfg_.cluster.size();
    for (int hop = 0; hop <= kMaxProbeHops; ++hop) {
      const Endpoint ep = endpoints_[at];
      std::string line;
      const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in sa{};
      sa.sin_family = AF_INET;
      sa.sin_port = htons(ep.port);
      addrinfo hints{};
      hints.ai_family = AF_INET;
      hints.ai_socktype = SOCK_STREAM;
      addrinfo* ai = nullptr;
      bool ok = fd >= 0 && getaddrinfo(ep.host.c_str(), nullptr, &hints, &ai) == 0;
      if (ok) {
        sa.sin_addr = reinterpret_cast<sockaddr_in*>(ai->ai_addr)->sin_addr;
        freeaddrinfo(ai);
        timeval tv{0, kProbeTimeoutMs * 1000};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        ok = connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0;
      }
      SSL* ssl = nullptr;
      std::string tls_why;
      if (ok && tls_ != nullptr) {
        ssl = tls_->handshake(fd, ep.host, tls_why);
        ok = ssl != nullptr;
      }
      if (ok) {
        ok = ssl != nullptr ? SSL_write(ssl, probe.data(), static_cast<int>(probe.size())) ==
                                  static_cast<int>(probe.size())
                            : send(fd, probe.data(), probe.size(), MSG_NOSIGNAL) ==
                                  static_cast<ssize_t>(probe.size());
      }
      char buf[kMaxLockdReplyBytes];
      while (ok && line.find('\n') == std::string::npos && line.size() < sizeof buf) {
        const ssize_t n = ssl != nullptr ? SSL_read(ssl, buf, sizeof buf) : recv(fd, buf, sizeof buf, 0);
        if (n <= 0) ok = false;
        if (n > 0) line.append(buf, static_cast<std::size_t>(n));
      }
      if (ssl != nullptr) SSL_free(ssl);
      if (fd >= 0) close(fd);
      if (!tls_why.empty()) {
        last_error = ep.to_string() + ": " + tls_why;
        break;
      }
      LockdReply r;
      if (!ok || line.find('\n') == std::string::npos ||
          !parse_lockd_reply_line(std::string_view(line).substr(0, line.find('\n')), r)) {
        last_error = ep.to_string() + (ok ? " answered '" + quote(line) + "'" : " did not answer");
        break;
      }
      if (r.kind == LockdReplyKind::kNotReleased || r.kind == LockdReplyKind::kReleased) {
        leader_ = at;
        return true;
      }
      if (r.kind == LockdReplyKind::kMoved) {
        const auto next = endpoint_index(r.code);
        if (!next) break;
        at = *next;
        continue;
      }
      last_error = ep.to_string() + " answered '" + quote(line) + "'";
      break;  // E no_leader: an election; try the next member
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(kNoLeaderPauseMs));
  }
  fail(kExitNoServer, "no leader found within " + std::to_string(kFindLeaderTimeoutMs) +
                          " ms (" + last_error + ")");
  return false;
}

// A leader change seen in a reply (cluster mode): count it and start the
// sequence over, at once or after a pause. Returns false for every other
// reply (which also tells which node leads: the one that answered).
bool Runner::cluster_reply(Conn& c, Slot& s, const Reply& r) {
  const bool leader_change = r.outcome == Outcome::kMoved || r.outcome == Outcome::kNoLeader ||
                             r.outcome == Outcome::kIndeterminate;
  if (!cluster_) {
    // One address: a cluster reply means lockbench was pointed at a
    // cluster without --cluster. Say so (a protocol error, as before).
    if (leader_change) {
      protocol_error(c, std::string(r.outcome == Outcome::kMoved ? "M " : "") +
                            std::string(r.detail) + " (a cluster? use --cluster)");
    }
    return false;
  }
  if (!leader_change) {
    leader_ = c.target;  // it answered: it leads
    return false;
  }
  bool pause = r.outcome == Outcome::kNoLeader;
  if (r.outcome == Outcome::kNoLeader) ++res_.counters.no_leader;
  if (r.outcome == Outcome::kIndeterminate) ++res_.counters.indeterminate;
  if (r.outcome == Outcome::kMoved) {
    ++res_.counters.moved;
    const auto at = endpoint_index(r.detail);
    if (!at) {
      protocol_error(c, r.detail);  // an address we cannot use
      pause = true;
    } else if (down_until_ns_[*at] > now_ns()) {
      // It names a member that just refused us: this follower has not yet
      // noticed its leader died. Ask again after a pause.
      pause = true;
    } else {
      leader_ = *at;
      if (c.target != leader_) conn_lost(c);  // reconnect to the leader
    }
  }
  if (!pause) {
    restart_slot(s);  // after a move: lands on the new connection once open
    return true;
  }
  if (stopping_) return true;
  if (s.retry_ev == nullptr) s.retry_ev = evtimer_new(base_, &Runner::on_retry, &s);
  s.restart_on_timer = true;
  timeval tv{0, kNoLeaderPauseMs * 1000};
  evtimer_add(s.retry_ev, &tv);
  ++outstanding_;
  return true;
}

void Runner::restart_slot(Slot& s) {
  switch (cfg_.workload) {
    case Workload::kUncontended: uncontended_next(s); break;
    case Workload::kContended:
    case Workload::kReadersHeavy:
    case Workload::kSemaphore: contended_begin(s); break;
    case Workload::kHold: hold_next(s); break;
    case Workload::kHoldKeep: hold_keep_next(s); break;
    case Workload::kWaiters: break;  // not run against a cluster (main refuses)
  }
}

// Never frees the connection's events here: this may run inside their own
// callbacks. on_reconnect does the closing, on the next loop turn.
void Runner::conn_lost(Conn& c) {
  if (c.lost) return;
  c.lost = true;
  event_del(c.read_ev);
  event_del(c.write_ev);
  c.write_armed = false;
  lost_.push_back(&c);
  ++outstanding_;  // the reconnect keeps the run alive
  if (!evtimer_pending(reconnect_ev_, nullptr)) {
    timeval tv{0, 0};
    evtimer_add(reconnect_ev_, &tv);
  }
}

void Runner::on_reconnect(evutil_socket_t, short, void* arg) {
  Runner& r = *static_cast<Runner*>(arg);
  std::vector<Conn*> todo;
  todo.swap(r.lost_);
  for (Conn* c : todo) {
    --r.outstanding_;
    r.reconnect(*c);
  }
  r.after_callback();
}

// Closes `c`, drops what it had outstanding, opens it to the leader (or,
// failing that, any member) and starts its sequences over.
void Runner::reconnect(Conn& c) {
  if (c.read_ev != nullptr) event_free(c.read_ev);
  if (c.write_ev != nullptr) event_free(c.write_ev);
  c.read_ev = c.write_ev = nullptr;
  close_conn(c);
  const std::size_t sent = c.pending.size() - c.unstamped;
  for (std::size_t i = 0; i < c.pending.size(); ++i) {
    const Pending& p = c.pending[i];
    --outstanding_;
    if (i < sent) ++res_.counters.lost;  // the rest never left lockbench
    if (p.slot != nullptr &&
        std::find(c.parked.begin(), c.parked.end(), p.slot) == c.parked.end()) {
      c.parked.push_back(p.slot);
      ++outstanding_;  // until the slot starts over
    }
  }
  c.pending.clear();
  c.unstamped = 0;
  c.out.clear();
  c.out_off = 0;
  c.in_len = 0;
  bool open = false;
  if (!stopping_) {
    std::string error;
    const std::int64_t now = now_ns();
    for (std::size_t k = 0; k < endpoints_.size() && !open; ++k) {
      const std::size_t at = (leader_ + k) % endpoints_.size();
      if (down_until_ns_[at] <= now) open = open_conn(c, at, error);
    }
    if (!open) {
      // Nobody accepts yet: try again shortly; the slots wait parked.
      lost_.push_back(&c);
      ++outstanding_;
      timeval tv{0, kReconnectPauseMs * 1000};
      evtimer_add(reconnect_ev_, &tv);
      return;
    }
    ++res_.counters.reconnects;
  }
  std::vector<Slot*> parked;
  parked.swap(c.parked);
  for (Slot* sl : parked) {
    --outstanding_;
    restart_slot(*sl);  // nothing when stopping
  }
}

bool Runner::limit_reached() {
  if (stopping_) return true;
  if (cfg_.ops != 0 && issued_ >= cfg_.ops) {
    stop_issuing();
    return true;
  }
  return false;
}

// ---- uncontended --------------------------------------------------------------

void Runner::uncontended_next(Slot& s) {
  if (limit_reached()) return;
  format_key(s.key, prefix_, keys_.next());
  issue_acquire(s, cfg_.lease_ms, 0);
}

void Runner::uncontended_reply(Slot& s, const Pending& p, const Reply& r) {
  if (p.kind == ReqKind::kAcquire && r.outcome == Outcome::kGranted) {
    issue_release(s);  // even when stopping: leave no lock behind
    return;
  }
  uncontended_next(s);
}

// ---- contended ------------------------------------------------------------------

void Runner::contended_begin(Slot& s) {
  if (limit_reached()) return;
  if (cfg_.workload == Workload::kReadersHeavy) {
    // xorshift64: the mix is the seed's, the same for both backends.
    mix_state_ ^= mix_state_ << 13;
    mix_state_ ^= mix_state_ >> 7;
    mix_state_ ^= mix_state_ << 17;
    s.flavor = mix_state_ % 100 < cfg_.write_percent ? Flavor::kWrite : Flavor::kRead;
  } else if (cfg_.workload == Workload::kSemaphore) {
    s.flavor = Flavor::kSemaphore;
  }
  s.hot = keys_.next();
  format_key(s.key, prefix_, s.hot);
  s.first_attempt_ns = now_ns();
  issue_acquire(s, cfg_.lease_ms, cfg_.wait_ms);
}

void Runner::contended_reply(Slot& s, const Pending& p, const Reply& r, std::int64_t now) {
  if (p.kind == ReqKind::kRelease) {
    contended_begin(s);
    return;
  }
  switch (r.outcome) {
    case Outcome::kGranted: {
      ++s.conn->grants;
      res_.acquire_wait_ns.record(static_cast<std::uint64_t>(now - s.first_attempt_ns));
      // A hand-off: this acquire was already waiting when the key's last
      // release went out.
      std::int64_t& rel = hot_release_ns_[s.hot];
      if (rel != 0 && s.first_attempt_ns <= rel) {
        res_.handoff_ns.record(static_cast<std::uint64_t>(std::max<std::int64_t>(0, now - rel)));
        rel = 0;
      }
      issue_release(s);
      return;
    }
    case Outcome::kNotGranted:
      if (backend_->server_queues() ||
          now - s.first_attempt_ns >= static_cast<std::int64_t>(cfg_.wait_ms) * kNsPerMs) {
        ++res_.counters.wait_timeouts;
        contended_begin(s);
      } else {
        schedule_retry(s);
      }
      return;
    case Outcome::kBusy:
      schedule_retry(s);
      return;
    default:
      contended_begin(s);
      return;
  }
}

// ---- hold ------------------------------------------------------------------------

void Runner::hold_next(Slot& s) {
  if (stopping_) return;
  std::uint64_t index = 0;
  if (!s.hold_keys->next(index)) return;
  format_key(s.key, prefix_, index);
  issue_acquire(s, cfg_.hold_lease_ms, 0);
}

// ---- hold-keep -------------------------------------------------------------------
// A worker holding a lock for long work: acquire, extend the lease --keeps
// times back to back (the watchdog's renewals, without the sleeps between
// them, so the run measures the cost of a keep), release.

void Runner::hold_keep_next(Slot& s) {
  if (limit_reached()) return;
  format_key(s.key, prefix_, keys_.next());
  s.keeps_left = cfg_.keeps;
  issue_acquire(s, cfg_.lease_ms, 0);
}

void Runner::hold_keep_reply(Slot& s, const Pending& p, const Reply& r) {
  const bool holding = (p.kind == ReqKind::kAcquire && r.outcome == Outcome::kGranted) ||
                       (p.kind == ReqKind::kKeep && r.outcome == Outcome::kKept);
  if (!holding) {  // released, not granted (a collision), or the lease was lost
    hold_keep_next(s);
    return;
  }
  if (p.kind == ReqKind::kKeep) --s.keeps_left;
  if (s.keeps_left > 0 && !limit_reached()) {
    issue_keep(s);
  } else {
    issue_release(s);  // even when stopping: leave no lock behind
  }
}

// ---- waiters ---------------------------------------------------------------------

void Runner::waiters_start() {
  // Slot 0 holds the key, slot 1 probes another key, the rest wait.
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    Slot& s = *slots_[i];
    s.role = i == 0 ? Role::kHolder : (i == 1 ? Role::kProbe : Role::kWaiter);
    if (s.role == Role::kWaiter) s.waiter_index = static_cast<std::uint32_t>(i - 2);
    format_key(s.key, prefix_, 0);
  }
  issue_acquire(*slots_[0], cfg_.hold_lease_ms, 0);
}

void Runner::waiters_enqueue_next() {
  if (next_enqueue_ == cfg_.waiters) {
    const std::int64_t now = now_ns();
    res_.enqueue_ms = static_cast<double>(now - enqueue_start_ns_) / kNsPerMs;
    serve_start_ns_ = now;
    issue_release(*slots_[0]);
    return;
  }
  if (backend_->server_queues()) {
    // One waiter at a time: the next is sent only once the server has
    // queued this one (its fence came back), so the enqueue order is known
    // and FIFO is checkable.
    Slot& w = *slots_[kWaitersExtraConnections + next_enqueue_];
    w.first_attempt_ns = now_ns();
    issue_acquire(w, cfg_.lease_ms, cfg_.wait_ms);
    issue_fence(w);
    return;
  }
  // Redis has no queue, so no order to check: every waiter starts polling
  // at once (one at a time would take minutes once thousands poll).
  if (enqueue_sent_) return;
  enqueue_sent_ = true;
  const std::int64_t now = now_ns();
  for (std::uint32_t i = 0; i < cfg_.waiters; ++i) {
    Slot& w = *slots_[kWaitersExtraConnections + i];
    w.first_attempt_ns = now;
    issue_acquire(w, cfg_.lease_ms, 0);
  }
}

void Runner::probe_next(Slot& s) {
  if (stopping_) return;
  issue_acquire(s, cfg_.lease_ms, 0);
}

void Runner::waiter_resolved() {
  if (++waiters_resolved_ == cfg_.waiters) {
    res_.serve_ms = static_cast<double>(last_served_ns_ - serve_start_ns_) / kNsPerMs;
    stop_issuing();
  }
}

void Runner::waiters_reply(Slot& s, const Pending& p, const Reply& r, std::int64_t now) {
  switch (s.role) {
    case Role::kHolder:
      if (p.kind == ReqKind::kAcquire) {
        if (r.outcome != Outcome::kGranted) {
          fail(kExitFailed, "waiters: could not take " + std::string(s.key.view()) +
                                " (held by another client?)");
          return;
        }
        enqueue_start_ns_ = now;
        Slot& probe = *slots_[1];
        KeyBuf& k = probe.key;
        k.size = static_cast<std::uint8_t>(probe_key_.size());
        std::memcpy(k.bytes.data(), probe_key_.data(), probe_key_.size());
        probe_next(probe);
        waiters_enqueue_next();
      } else if (r.outcome != Outcome::kReleased) {
        fail(kExitFailed, "waiters: the holder's release was refused");
      }
      return;
    case Role::kProbe:
      res_.probe_ns.record(static_cast<std::uint64_t>(now - p.sent_ns));
      if (p.kind == ReqKind::kAcquire && r.outcome == Outcome::kGranted) {
        issue_release(s);
      } else {
        probe_next(s);
      }
      return;
    case Role::kWaiter:
      break;
    case Role::kWorker:
      return;
  }
  if (p.kind == ReqKind::kFence) {
    if (!s.enqueued) {
      s.enqueued = true;
      ++next_enqueue_;
      waiters_enqueue_next();
    }
    return;
  }
  if (p.kind == ReqKind::kRelease) {
    waiter_resolved();
    return;
  }
  // The acquire's answer.
  if (r.outcome == Outcome::kGranted) {
    ++res_.waiters_served;
    last_served_ns_ = now;
    res_.acquire_wait_ns.record(static_cast<std::uint64_t>(now - s.first_attempt_ns));
    if (s.waiter_index != expected_grant_) ++res_.fifo_violations;
    expected_grant_ = s.waiter_index + 1;
    if (!s.enqueued) {  // Redis: granted on the very first try
      s.enqueued = true;
      ++next_enqueue_;
      waiters_enqueue_next();
    }
    issue_release(s);
    return;
  }
  if (backend_->server_queues()) {
    // lockd: the wait ran out (T) or the queue was full (B).
    ++res_.counters.wait_timeouts;
    waiter_resolved();
    return;
  }
  // Redis: no queue; a waiting client polls. Its first refusal is the
  // moment it starts waiting, so the next waiter may go.
  if (!s.enqueued) {
    s.enqueued = true;
    ++next_enqueue_;
    waiters_enqueue_next();
  }
  if (now - s.first_attempt_ns >= static_cast<std::int64_t>(cfg_.wait_ms) * kNsPerMs) {
    ++res_.counters.wait_timeouts;
    waiter_resolved();
    return;
  }
  schedule_retry(s);
}

// ---- timers -------------------------------------------------------------------------

void Runner::on_progress(evutil_socket_t, short, void* arg) {
  Runner& r = *static_cast<Runner*>(arg);
  const std::int64_t now = now_ns();
  const double dt = static_cast<double>(now - r.last_progress_ns_) / kNsPerSec;
  const std::uint64_t ops = r.res_.counters.ops;
  const double rate = dt > 0 ? static_cast<double>(ops - r.last_progress_ops_) / dt : 0;
  r.last_progress_ns_ = now;
  r.last_progress_ops_ = ops;
  std::fprintf(stderr,
               "lockbench: %s %s %5.1fs  %10.0f ops/s  total %llu  p99 %.3f ms  errors %llu",
               std::string(r.backend_->name()).c_str(), workload_name(r.cfg_.workload),
               static_cast<double>(now - r.start_ns_) / kNsPerSec, rate,
               static_cast<unsigned long long>(ops),
               static_cast<double>(r.res_.latency_ns.percentile(99)) / kNsPerMs,
               static_cast<unsigned long long>(r.res_.counters.protocol_errors));
  if (r.cluster_) {
    const Counters& k = r.res_.counters;
    std::fprintf(stderr, "  leader %s  M %llu  no_leader %llu  indeterminate %llu  lost %llu",
                 r.endpoints_[r.leader_].to_string().c_str(),
                 static_cast<unsigned long long>(k.moved),
                 static_cast<unsigned long long>(k.no_leader),
                 static_cast<unsigned long long>(k.indeterminate),
                 static_cast<unsigned long long>(k.lost));
  }
  if (r.cfg_.workload == Workload::kWaiters) {
    std::fprintf(stderr, "  queued %u served %llu", r.next_enqueue_,
                 static_cast<unsigned long long>(r.res_.waiters_served));
  } else if (r.cfg_.workload == Workload::kHold) {
    std::fprintf(stderr, "  held %llu", static_cast<unsigned long long>(r.res_.counters.granted));
  }
  std::fputc('\n', stderr);
}

void Runner::on_end(evutil_socket_t, short, void* arg) {
  Runner& r = *static_cast<Runner*>(arg);
  if (r.cfg_.workload == Workload::kHold) {
    // For hold the duration is a time limit: not finishing is a failure.
    r.fail(kExitFailed, "hold: did not finish within --duration");
    return;
  }
  if (r.cfg_.workload == Workload::kWaiters && r.waiters_resolved_ < r.cfg_.waiters) {
    // Report how far it got (run() then fails it: not all served).
    r.res_.serve_ms = static_cast<double>(now_ns() - r.serve_start_ns_) / kNsPerMs;
  }
  r.stop_issuing();
  r.after_callback();
}

void Runner::on_drain_timeout(evutil_socket_t, short, void* arg) {
  Runner& r = *static_cast<Runner*>(arg);
  r.fail(kExitFailed, std::to_string(r.outstanding_) + " requests still unanswered " +
                          std::to_string(kDrainTimeoutMs) + " ms after the run stopped");
}

void Runner::on_handshake_timeout(evutil_socket_t, short, void* arg) {
  Runner& r = *static_cast<Runner*>(arg);
  r.fail(kExitBadServer, std::to_string(r.handshakes_left_) + " connections got no answer to " +
                             "SCRIPT LOAD within " + std::to_string(kHandshakeTimeoutMs) +
                             " ms (is it Redis?)");
}

}  // namespace

const char* workload_name(Workload w) {
  switch (w) {
    case Workload::kUncontended: return "uncontended";
    case Workload::kContended: return "contended";
    case Workload::kHold: return "hold";
    case Workload::kWaiters: return "waiters";
    case Workload::kHoldKeep: return "hold-keep";
    case Workload::kReadersHeavy: return "readers-heavy";
    case Workload::kSemaphore: return "semaphore";
  }
  return "?";
}

Results run_benchmark(const Config& cfg) {
  Runner runner(cfg);
  return runner.run();
}

}  // namespace lockbench
