// hostile_flood: the stranger of issue 35's "done when", in one thread on
// epoll (tools/bench/hostile_idle drives it and measures lockd meanwhile).
//
// Against one HOST:PORT it
//   * holds --idle TCP connections that never send a byte, opened from
//     source addresses 127.66.0.1, 127.66.0.2, ... (--per-source each, under
//     lockd's --max-connections-per-ip); one the server closes is opened
//     again, all (re)opens limited to --reconnect-rate a second;
//   * completes --tls-rate full TLS handshakes a second (non-blocking
//     OpenSSL, no certificate, nothing sent after), each closed once done;
//     at most --tls-inflight in progress.
// Every --report-ms it prints one line to stdout:
//   t=<s> held=<n> opened=<n> closed_by_server=<n> connect_failed=<n>
//   tls_started=<n> tls_done=<n> tls_failed=<n> cpu=<s>
// (tls_started: ClientHellos sent; tls_failed: handshakes the server cut
// short, e.g. closed as the oldest past its --max-tls-handshakes)
// (counts since start; cpu: this process's user+system seconds). Runs
// until --duration-s, SIGTERM or SIGINT.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

volatile sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double cpu_s() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

struct Options {
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;
  std::uint64_t idle = 10000;
  std::uint64_t per_source = 1000;
  double reconnect_rate = 2000;
  double tls_rate = 0;
  std::uint64_t tls_inflight = 256;
  double duration_s = 0;  // 0: until a signal
  std::uint64_t report_ms = 1000;
};

struct Conn {
  bool tls = false;
  bool connecting = true;
  SSL* ssl = nullptr;
};

struct Counts {
  std::uint64_t held = 0, opened = 0, closed_by_server = 0, connect_failed = 0;
  std::uint64_t tls_started = 0, tls_done = 0, tls_failed = 0, tls_inflight = 0;
};

class Flood {
 public:
  explicit Flood(const Options& o) : o_(o) {
    ep_ = epoll_create1(EPOLL_CLOEXEC);
    ctx_ = SSL_CTX_new(TLS_client_method());
    SSL_CTX_set_verify(ctx_, SSL_VERIFY_NONE, nullptr);
    SSL_CTX_set_session_cache_mode(ctx_, SSL_SESS_CACHE_OFF);  // full handshakes only
    SSL_CTX_set_options(ctx_, SSL_OP_NO_TICKET);
    dst_.sin_family = AF_INET;
    dst_.sin_port = htons(o.port);
    inet_pton(AF_INET, o.host.c_str(), &dst_.sin_addr);
  }

  int run() {
    const double start = now_s();
    double last = start, next_report = start + static_cast<double>(o_.report_ms) / 1000;
    double reopen_tokens = 0, tls_tokens = 0;
    std::vector<epoll_event> events(1024);
    while (g_stop == 0) {
      const double t = now_s();
      if (o_.duration_s > 0 && t - start >= o_.duration_s) break;
      const double dt = t - last;
      last = t;
      reopen_tokens = std::min(reopen_tokens + dt * o_.reconnect_rate, o_.reconnect_rate / 10 + 1);
      tls_tokens = std::min(tls_tokens + dt * o_.tls_rate, o_.tls_rate / 10 + 1);
      while (reopen_tokens >= 1 && idle_count_ < o_.idle) {
        reopen_tokens -= 1;
        open(false);
      }
      while (tls_tokens >= 1 && c_.tls_inflight < o_.tls_inflight) {
        tls_tokens -= 1;
        open(true);
      }
      if (t >= next_report) {
        report(t - start);
        next_report += static_cast<double>(o_.report_ms) / 1000;
      }
      const int n = epoll_wait(ep_, events.data(), static_cast<int>(events.size()), 1);
      for (int i = 0; i < n; ++i) on_event(events[static_cast<std::size_t>(i)].data.fd,
                                           events[static_cast<std::size_t>(i)].events);
    }
    report(now_s() - start);
    return 0;
  }

 private:
  void report(double t) {
    std::printf("t=%.1f opening=%llu held=%llu opened=%llu closed_by_server=%llu connect_failed=%llu "
                "tls_started=%llu tls_done=%llu tls_failed=%llu cpu=%.2f\n",
                t, static_cast<unsigned long long>(idle_count_ - c_.held),
                static_cast<unsigned long long>(c_.held),
                static_cast<unsigned long long>(c_.opened),
                static_cast<unsigned long long>(c_.closed_by_server),
                static_cast<unsigned long long>(c_.connect_failed),
                static_cast<unsigned long long>(c_.tls_started),
                static_cast<unsigned long long>(c_.tls_done),
                static_cast<unsigned long long>(c_.tls_failed), cpu_s());
    std::fflush(stdout);
  }

  // 127.66.0.1 + (n / per_source): a fresh source address every per_source.
  sockaddr_in source(std::uint64_t n) const {
    sockaddr_in s{};
    s.sin_family = AF_INET;
    const std::uint32_t a = (127u << 24) | (66u << 16) |
                            static_cast<std::uint32_t>(1 + (n / o_.per_source) % 65000);
    s.sin_addr.s_addr = htonl(a);
    return s;
  }

  void open(bool tls) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      ++c_.connect_failed;
      return;
    }
    const sockaddr_in src = source(tls ? next_tls_++ : next_idle_++);
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, reinterpret_cast<const sockaddr*>(&src), sizeof src) != 0 ||
        (::connect(fd, reinterpret_cast<const sockaddr*>(&dst_), sizeof dst_) != 0 &&
         errno != EINPROGRESS)) {
      ++c_.connect_failed;
      ::close(fd);
      return;
    }
    Conn& c = conns_[fd];
    c = Conn{};
    c.tls = tls;
    if (tls) {
      ++c_.tls_inflight;
    } else {
      ++idle_count_;
    }
    epoll_event ev{};
    ev.events = EPOLLOUT | EPOLLIN | EPOLLRDHUP;
    ev.data.fd = fd;
    epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &ev);
  }

  void drop(int fd, Conn& c) {
    if (c.tls) {
      --c_.tls_inflight;
      if (c.ssl != nullptr) SSL_free(c.ssl);
    } else {
      --idle_count_;
      if (!c.connecting) --c_.held;
    }
    epoll_ctl(ep_, EPOLL_CTL_DEL, fd, nullptr);
    ::close(fd);
    conns_.erase(fd);
  }

  void on_event(int fd, std::uint32_t events) {
    auto it = conns_.find(fd);
    if (it == conns_.end()) return;
    Conn& c = it->second;
    if (c.connecting) {
      int err = 0;
      socklen_t len = sizeof err;
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0 || (events & (EPOLLERR | EPOLLHUP)) != 0) {
        ++c_.connect_failed;
        if (c.tls) ++c_.tls_failed;
        drop(fd, c);
        return;
      }
      c.connecting = false;
      ++c_.opened;
      if (!c.tls) {
        ++c_.held;
        epoll_event ev{};
        ev.events = EPOLLIN | EPOLLRDHUP;  // only the server's close matters now
        ev.data.fd = fd;
        epoll_ctl(ep_, EPOLL_CTL_MOD, fd, &ev);
        return;
      }
      c.ssl = SSL_new(ctx_);
      SSL_set_fd(c.ssl, fd);
      SSL_set_connect_state(c.ssl);
      ++c_.tls_started;  // the ClientHello goes out below
    }
    if (!c.tls) {
      char buf[4096];
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
        ++c_.closed_by_server;
        drop(fd, c);
      }
      return;
    }
    const int r = SSL_do_handshake(c.ssl);
    if (r == 1) {
      ++c_.tls_done;
      drop(fd, c);
      return;
    }
    const int e = SSL_get_error(c.ssl, r);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
      epoll_event ev{};
      ev.events = (e == SSL_ERROR_WANT_READ ? EPOLLIN : EPOLLOUT) | EPOLLRDHUP;
      ev.data.fd = fd;
      epoll_ctl(ep_, EPOLL_CTL_MOD, fd, &ev);
      return;
    }
    ERR_clear_error();
    ++c_.tls_failed;
    drop(fd, c);
  }

  Options o_;
  int ep_ = -1;
  SSL_CTX* ctx_ = nullptr;
  sockaddr_in dst_{};
  std::unordered_map<int, Conn> conns_;
  std::uint64_t idle_count_ = 0;  // idle connections open or opening
  std::uint64_t next_idle_ = 0, next_tls_ = 0;
  Counts c_;
};

void usage() {
  std::fprintf(stderr,
               "usage: hostile_flood --target HOST:PORT [--idle N] [--per-source N] "
               "[--reconnect-rate N] [--tls-rate N] [--tls-inflight N] [--duration-s S] "
               "[--report-ms MS]\n");
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) {
      usage();
      return 2;
    }
    const std::string v = argv[++i];
    if (a == "--target") {
      const auto colon = v.rfind(':');
      if (colon == std::string::npos) {
        usage();
        return 2;
      }
      o.host = v.substr(0, colon);
      o.port = static_cast<std::uint16_t>(std::stoul(v.substr(colon + 1)));
    } else if (a == "--idle") {
      o.idle = std::stoull(v);
    } else if (a == "--per-source") {
      o.per_source = std::max<std::uint64_t>(1, std::stoull(v));
    } else if (a == "--reconnect-rate") {
      o.reconnect_rate = std::stod(v);
    } else if (a == "--tls-rate") {
      o.tls_rate = std::stod(v);
    } else if (a == "--tls-inflight") {
      o.tls_inflight = std::stoull(v);
    } else if (a == "--duration-s") {
      o.duration_s = std::stod(v);
    } else if (a == "--report-ms") {
      o.report_ms = std::max<std::uint64_t>(10, std::stoull(v));
    } else {
      usage();
      return 2;
    }
  }
  if (o.port == 0) {
    usage();
    return 2;
  }
  // The sockets this holds: raise the soft descriptor limit to the hard one.
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  signal(SIGPIPE, SIG_IGN);
  signal(SIGTERM, on_signal);
  signal(SIGINT, on_signal);
  Flood f(o);
  return f.run();
}
