// Daemon: the one object main() builds (STYLE §4). Owns the event loop,
// the lock server and (later) the admin API and the Raft node; runs the
// loop until SIGTERM/SIGINT and drains before returning.
//
// The loop: each turn runs the ready callbacks (EVLOOP_ONCE), then the
// end-of-turn work (flush replies, reap connections, re-arm timers), then
// sleeps in epoll. One thread.
#pragma once

#include <memory>
#include <string>

#include "lockd/daemon/config.h"

struct event;
struct event_base;

namespace lockd::server {
class LockServer;
}

namespace lockd::daemon {

class Daemon {
 public:
  explicit Daemon(Config config);
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Binds every socket. Returns false with `error` set (nothing listens).
  bool start(std::string& error);
  // Runs until a stop signal and a drained shutdown. Returns the exit code.
  int run();

 private:
  static void on_signal(int sig, short, void* arg);
  void begin_shutdown(int sig);

  Config config_;
  event_base* base_ = nullptr;
  std::unique_ptr<server::LockServer> server_;
  event* sigterm_ = nullptr;
  event* sigint_ = nullptr;
  event* drain_deadline_ = nullptr;  // gives up on slow readers at shutdown
  bool stopping_ = false;
  bool stop_now_ = false;
};

}  // namespace lockd::daemon
