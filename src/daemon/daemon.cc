#include "lockd/daemon/daemon.h"

#include <event2/event.h>
#include <spdlog/spdlog.h>

#include <csignal>

#include "lockd/admin/admin_server.h"
#include "lockd/common/check.h"
#include "lockd/net/clock.h"
#include "lockd/server/lock_server.h"
#include "lockd/version/version.h"

namespace lockd::daemon {

namespace {

// How long a graceful stop waits for slow clients to take their replies.
constexpr timeval kDrainTimeout{5, 0};

// Single-mode tokens start at the wall clock in nanoseconds, so a restarted
// lockd hands out tokens above every token of its previous life without
// storing anything: a process cannot grant a billion locks per second, so
// its counter never catches up with the clock it started from. Holds as
// long as the wall clock does not step back across a restart (see
// docs/architecture.md).
locks::Token first_token_from_clock() {
  const TimeNs now = net::realtime_now_ns();
  return now > 0 ? static_cast<locks::Token>(now) : 1;
}

}  // namespace

Daemon::Daemon(Config config) : config_(std::move(config)) {
  base_ = event_base_new();
  LOCKD_CHECK(base_ != nullptr);
}

Daemon::~Daemon() {
  admin_.reset();
  server_.reset();
  for (event* ev : {sigterm_, sigint_, drain_deadline_}) {
    if (ev != nullptr) event_free(ev);
  }
  event_base_free(base_);
}

bool Daemon::start(std::string& error) {
  if (config_.mode == Mode::kCluster) {
    error = "--mode cluster is not available in this build yet (single mode only)";
    return false;
  }
  std::signal(SIGPIPE, SIG_IGN);
  // Signal handlers before the `listening` line: whoever reads that line
  // may send SIGTERM at once.
  sigterm_ = evsignal_new(base_, SIGTERM, &Daemon::on_signal, this);
  sigint_ = evsignal_new(base_, SIGINT, &Daemon::on_signal, this);
  event_add(sigterm_, nullptr);
  event_add(sigint_, nullptr);
  server_ = std::make_unique<server::LockServer>(base_, config_.server, first_token_from_clock());
  if (!server_->listen(config_.listen, error)) return false;
  if (config_.admin) {
    admin_ = std::make_unique<admin::AdminServer>(
        base_, *server_,
        admin::NodeInfo{std::string(version::full()), "single", server_->bound().to_string(),
                        net::monotonic_now_ns()});
    if (!admin_->listen(*config_.admin, error)) return false;
  }
  spdlog::info("lockd {} listening on {} (mode=single)", version::full(),
               server_->bound().to_string());
  // After the client line: a reader taking the first `listening` line gets
  // the client port.
  if (admin_) spdlog::info("admin listening on {}", admin_->bound().to_string());
  return true;
}

void Daemon::on_signal(int sig, short, void* arg) { static_cast<Daemon*>(arg)->begin_shutdown(sig); }

void Daemon::begin_shutdown(int sig) {
  if (stopping_) {
    spdlog::warn("second signal {}: exiting without draining", sig);
    stop_now_ = true;
    return;
  }
  stopping_ = true;
  spdlog::info("signal {}: stopping; finishing replies already decided", sig);
  server_->begin_shutdown();
  if (admin_) admin_->set_draining();
  drain_deadline_ = evtimer_new(
      base_,
      [](int, short, void* arg) {
        spdlog::warn("drain timed out; closing remaining connections");
        static_cast<Daemon*>(arg)->stop_now_ = true;
      },
      this);
  event_add(drain_deadline_, &kDrainTimeout);
}

int Daemon::run() {
  while (!stop_now_) {
    if (event_base_loop(base_, EVLOOP_ONCE) < 0) {
      spdlog::error("event loop failed");
      return 1;
    }
    server_->after_turn();
    if (server_->drained()) break;
  }
  spdlog::info("stopped");
  return 0;
}

}  // namespace lockd::daemon
