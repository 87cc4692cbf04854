// Takes a lock, uses its fencing token, releases it: lockd's C++ client
// from a program of its own (see CMakeLists.txt beside this file).
#include <lockd/client/client.h>

#include <cstdio>

int main(int argc, char** argv) {
  // The client outlives every guard it hands out.
  lockd::client::Client client({.addresses = {argc > 1 ? argv[1] : "127.0.0.1:7070"}});
  auto guard = client.lock("hello", "examples/hello", {.lease_ms = 10'000, .wait_ms = 5'000});
  if (!guard.ok()) {
    std::fprintf(stderr, "no lock: %s\n", guard.status().to_string().c_str());
    return 1;
  }
  std::printf("holding examples/hello with token %llu\n",
              static_cast<unsigned long long>(guard->token()));
  return guard->release().ok() ? 0 : 1;  // also released when `guard` goes out of scope
}
