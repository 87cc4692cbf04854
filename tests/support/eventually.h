// Test support: waiting for the server to finish something it does not
// announce (a closed connection's cleanup, a sweep) by polling a probe
// against a generous deadline, never by a fixed sleep that a loaded
// sanitizer run will one day overshoot.
#pragma once

#include <chrono>
#include <thread>

namespace lockd::testing {

// How long a test waits for the server before it gives up: far beyond
// anything a healthy server needs, even under ASan on a busy machine.
inline constexpr std::chrono::milliseconds kEventuallyTimeout{20'000};

// Calls `done` every `poll` until it returns true (then true) or `timeout`
// has passed (then false, after one last call). A probe that starts a
// process (tmux, lockctl) deserves a longer `poll`.
template <typename Pred>
bool eventually(Pred done, std::chrono::milliseconds timeout = kEventuallyTimeout,
                std::chrono::milliseconds poll = std::chrono::milliseconds(5)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return done();
    std::this_thread::sleep_for(poll);
  }
  return true;
}

}  // namespace lockd::testing
