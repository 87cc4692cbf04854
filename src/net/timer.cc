#include "lockd/net/timer.h"

#include <event2/event.h>

#include "lockd/common/check.h"

namespace lockd::net {

namespace {

timeval to_timeval(TimeNs ns) {
  if (ns < 0) ns = 0;
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ns / 1'000'000'000);
  // Round up to the next microsecond so a timer never fires before its
  // deadline and finds nothing due.
  tv.tv_usec = static_cast<suseconds_t>((ns % 1'000'000'000 + 999) / 1000);
  if (tv.tv_usec >= 1'000'000) {
    tv.tv_sec += 1;
    tv.tv_usec -= 1'000'000;
  }
  return tv;
}

}  // namespace

Timer::Timer(event_base* base, std::function<void()> fn) : base_(base), fn_(std::move(fn)) {}

Timer::~Timer() {
  if (ev_ != nullptr) event_free(ev_);
}

void Timer::arm_after(TimeNs delay_ns) {
  if (ev_ == nullptr || periodic_) {
    if (ev_ != nullptr) event_free(ev_);
    ev_ = event_new(base_, -1, 0, &Timer::on_event, this);
    LOCKD_CHECK(ev_ != nullptr);
    periodic_ = false;
  }
  const timeval tv = to_timeval(delay_ns);
  event_add(ev_, &tv);
  armed_ = true;
}

void Timer::arm_every(TimeNs period_ns) {
  if (ev_ != nullptr) event_free(ev_);
  ev_ = event_new(base_, -1, EV_PERSIST, &Timer::on_event, this);
  LOCKD_CHECK(ev_ != nullptr);
  periodic_ = true;
  const timeval tv = to_timeval(period_ns);
  event_add(ev_, &tv);
  armed_ = true;
}

void Timer::cancel() {
  if (ev_ != nullptr) event_del(ev_);
  armed_ = false;
}

void Timer::on_event(int, short, void* arg) {
  auto* self = static_cast<Timer*>(arg);
  if (!self->periodic_) self->armed_ = false;
  self->fn_();
}

}  // namespace lockd::net
