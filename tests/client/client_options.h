// What the client tests pass to a Client: the nodes' addresses, a short
// reply timeout (a lost reply shows in seconds, not the default 10 s) and a
// fixed jitter seed (the same backoff every run).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "lockd/client/client.h"

namespace lockd::testing {

inline std::string addr(std::uint16_t port) { return "127.0.0.1:" + std::to_string(port); }

inline client::Options options_for(std::vector<std::string> addresses) {
  client::Options o;
  o.addresses = std::move(addresses);
  o.reply_timeout = std::chrono::seconds(5);
  o.jitter_seed = 1;
  return o;
}

}  // namespace lockd::testing
