// Leader election with lockd's C++ client: campaign on a key, lead for a
// while (fencing with the leadership's token, watching the loss signal),
// resign; meanwhile print every change of leader this candidate observes.
// Run two or three in separate terminals (docs/clients.md, "Leader
// election"):
//
//   build/bin/leader_election --address 127.0.0.1:7070 --key election/demo --name node-a --lead-for 5
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "lockd/client/client.h"

namespace lc = lockd::client;

int main(int argc, char** argv) {
  std::string address = "127.0.0.1:7070";
  std::string key = "election/demo";
  std::string name = "node-a";
  double lead_for_s = 5;
  std::uint64_t lease_ms = 3'000;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::string value = argv[i + 1];
    if (flag == "--address") {
      address = value;
    } else if (flag == "--key") {
      key = value;
    } else if (flag == "--name") {
      name = value;
    } else if (flag == "--lead-for") {
      lead_for_s = std::atof(value.c_str());
    } else if (flag == "--lease") {
      lease_ms = std::strtoull(value.c_str(), nullptr, 10);
    } else {
      std::fprintf(stderr, "usage: %s [--address H:P] [--key K] [--name VALUE] [--lead-for S] [--lease MS]\n",
                   argv[0]);
      return 2;
    }
  }
  lc::Client client({.addresses = {address}});
  lc::Election election(client, key, {.lease_ms = lease_ms, .on_lost = [](const lc::Status& why) {
                                        std::printf("lost the leadership: %s\n", why.to_string().c_str());
                                        std::fflush(stdout);
                                      }});
  // Every change of leader, as this candidate sees it, on a thread of its own.
  std::atomic<bool> done{false};
  auto observer = election.observe();
  std::thread watcher([&] {
    while (!done) {
      auto change = observer->next(lc::Clock::now() + std::chrono::milliseconds(200));
      if (!change) continue;
      if (*change) {
        std::printf("leader is now %s (token %llu)\n", (*change)->value.c_str(),
                    static_cast<unsigned long long>((*change)->token));
      } else {
        std::printf("leader is now nobody\n");
      }
      std::fflush(stdout);
    }
  });
  std::printf("%s campaigning for %s\n", name.c_str(), key.c_str());
  std::fflush(stdout);
  int status = 0;
  if (lc::Status s = election.campaign(name); !s.ok()) {
    std::printf("campaign failed: %s\n", s.to_string().c_str());
    status = 1;
  } else {
    std::printf("elected (token %llu)\n", static_cast<unsigned long long>(election.token()));
    std::fflush(stdout);
    const auto until = lc::Clock::now() + std::chrono::milliseconds(static_cast<long>(lead_for_s * 1000));
    while (lc::Clock::now() < until && !election.lost()) {
      // Lead: every write to the protected resource carries election.token().
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (election.lost()) status = 1;
    const lc::Status r = election.resign();
    std::printf("resigned (%s)\n", r.to_string().c_str());
  }
  std::fflush(stdout);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // let the observer print the hand-over
  done = true;
  watcher.join();
  observer->stop();
  return status;
}
