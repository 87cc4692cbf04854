#include "lockd/net/precise_timer.h"

#include <event2/event.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

#include "lockd/common/check.h"

namespace lockd::net {

PreciseTimer::PreciseTimer(event_base* base, std::function<void()> fn) : fn_(std::move(fn)) {
  fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  LOCKD_CHECK(fd_ >= 0);
  ev_ = event_new(base, fd_, EV_READ | EV_PERSIST, &PreciseTimer::on_event, this);
  LOCKD_CHECK(ev_ != nullptr);
  LOCKD_CHECK(event_add(ev_, nullptr) == 0);
}

PreciseTimer::~PreciseTimer() {
  event_free(ev_);
  ::close(fd_);
}

void PreciseTimer::arm_at(TimeNs at_ns, TimeNs now_ns) {
  // An it_value of zero disarms: a moment already here is 1 ns away.
  const TimeNs delay = at_ns > now_ns ? at_ns - now_ns : 1;
  itimerspec spec{};
  spec.it_value.tv_sec = static_cast<time_t>(delay / 1'000'000'000);
  spec.it_value.tv_nsec = static_cast<long>(delay % 1'000'000'000);
  LOCKD_CHECK(timerfd_settime(fd_, 0, &spec, nullptr) == 0);
  armed_ = true;
}

void PreciseTimer::cancel() {
  if (!armed_) return;
  itimerspec off{};
  LOCKD_CHECK(timerfd_settime(fd_, 0, &off, nullptr) == 0);
  // Expired meanwhile and not yet read: drain, so no stale fire follows.
  std::uint64_t expirations = 0;
  while (::read(fd_, &expirations, sizeof expirations) < 0 && errno == EINTR) {
  }
  armed_ = false;
}

void PreciseTimer::on_event(int fd, short, void* arg) {
  auto* self = static_cast<PreciseTimer*>(arg);
  std::uint64_t expirations = 0;
  ssize_t n;
  while ((n = ::read(fd, &expirations, sizeof expirations)) < 0 && errno == EINTR) {
  }
  // Nothing to read: re-armed or cancelled after it became readable in
  // this turn; the new arming fires on its own.
  if (n != static_cast<ssize_t>(sizeof expirations) || !self->armed_) return;
  self->armed_ = false;
  self->fn_();
}

}  // namespace lockd::net
