// AcceptPause; see accept_pause.h.
#include "lockd/net/accept_pause.h"

#include <event2/listener.h>
#include <event2/util.h>
#include <spdlog/spdlog.h>

#include <cstring>
#include <unordered_map>

#include "lockd/common/check.h"
#include "lockd/net/address.h"
#include "lockd/net/clock.h"

namespace lockd::net {

namespace {

// Listener -> its pause: evhttp's listener passes evhttp's own argument to
// the error callback, so the callback finds the pause by listener.
std::unordered_map<evconnlistener*, AcceptPause*>& registry() {
  static std::unordered_map<evconnlistener*, AcceptPause*> r;
  return r;
}

}  // namespace

AcceptPause::AcceptPause(event_base* base, std::string what)
    : what_(std::move(what)), resume_(base, [this] {
        if (lev_ != nullptr) evconnlistener_enable(lev_);
      }) {}

AcceptPause::~AcceptPause() { detach(); }

void AcceptPause::attach(evconnlistener* lev) {
  LOCKD_CHECK(lev_ == nullptr && lev != nullptr);
  lev_ = lev;
  registry()[lev] = this;
  evconnlistener_set_error_cb(lev, &AcceptPause::on_error);
}

void AcceptPause::detach() {
  resume_.cancel();
  if (lev_ == nullptr) return;
  registry().erase(lev_);
  lev_ = nullptr;
}

void AcceptPause::on_error(evconnlistener* lev, void*) {
  // libevent calls this only for errors it cannot retry at once (EINTR,
  // EAGAIN and ECONNABORTED it handles itself).
  const int err = EVUTIL_SOCKET_ERROR();
  auto it = registry().find(lev);
  if (it != registry().end()) it->second->pause(err);
}

void AcceptPause::pause(int err) {
  evconnlistener_disable(lev_);
  ++pauses_;
  // One line per pause would be ten a second while descriptors stay short.
  const TimeNs now = monotonic_now_ns();
  if (last_warning_ns_ == 0 || now - last_warning_ns_ >= kWarnEvery) {
    spdlog::warn("{} listener on {}: accept failed: {}; pausing accepts for {} ms each time ({} pauses so "
                 "far; raise the descriptor limit, ulimit -n / LimitNOFILE, or lower --max-connections)",
                 what_, local_endpoint(evconnlistener_get_fd(lev_)).to_string(), std::strerror(err),
                 kPause / kNsPerMs, pauses_);
    last_warning_ns_ = now;
  }
  resume_.arm_after(kPause);
}

}  // namespace lockd::net
