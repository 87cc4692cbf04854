// `lockctl watch KEY... [--once]` (interfaces.md, v1.3): `W` each key over
// the text protocol and print one line per state, the state now first,
// then every change (`V` pushes) until SIGINT or SIGTERM.

#include <csignal>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"

namespace lockd::lockctl {

namespace {

volatile std::sig_atomic_t g_interrupted = 0;
void on_signal(int) { g_interrupted = 1; }

std::vector<std::string_view> split(std::string_view line) {
  std::vector<std::string_view> f;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && line[i] == ' ') ++i;
    const std::size_t start = i;
    while (i < line.size() && line[i] != ' ') ++i;
    if (i > start) f.push_back(line.substr(start, i - start));
  }
  return f;
}

// `W key rev state...` or `V key rev state...`, printed as
// `KEY REV STATE...` or one JSON object.
void print_state(const std::vector<std::string_view>& f, bool json) {
  if (!json) {
    std::string out;
    for (std::size_t i = 1; i < f.size(); ++i) {
      if (i > 1) out.push_back(' ');
      out.append(f[i]);
    }
    std::printf("%s\n", out.c_str());
    std::fflush(stdout);
    return;
  }
  nlohmann::json j;
  j["key"] = std::string(f[1]);
  j["rev"] = std::stoull(std::string(f[2]));
  j["state"] = std::string(f[3]);
  if (f[3] == "held" && f.size() >= 6) {
    j["owner"] = std::string(f[4]);
    j["token"] = std::stoull(std::string(f[5]));
  } else if (f[3] == "shared" && f.size() >= 6) {
    j["limit"] = std::stoul(std::string(f[4]));
    j["count"] = std::stoul(std::string(f[5]));
  }
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

}  // namespace

int cmd_watch(const Globals& g, const std::vector<std::string>& keys, bool once) {
  if (keys.empty()) {
    std::fprintf(stderr, "lockctl watch: KEY is missing; usage: lockctl watch KEY... [--once]\n");
    return kExitUsage;
  }
  std::string lines;
  for (const std::string& k : keys) {
    if (k.empty() || k.size() > 250 || k.find_first_of(" \t\r\n") != std::string::npos) {
      std::fprintf(stderr, "lockctl watch: KEY must be 1..250 bytes of visible ASCII: '%s'\n", k.c_str());
      return kExitUsage;
    }
    lines += "W " + k + "\n";
  }
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  // Every member serves watches (§5c): the first --addr that answers.
  std::string tried;
  for (const net::Endpoint& ep : g.addrs) {
    std::size_t answered = 0;  // W replies so far
    int status = kExitOk;
    std::string error;
    Failure failure = Failure::kUnreachable;
    const auto on_line = [&](std::string_view line) {
      const auto f = split(line);
      if (f.empty()) return true;
      if (f[0] == "H") return true;  // authenticated
      if ((f[0] == "W" || f[0] == "V") && f.size() >= 4) {
        print_state(f, g.json);
        if (f[0] == "W") ++answered;
        return !(once && answered == keys.size());
      }
      if (f[0] == "U" || f[0] == "X") return true;
      // `B key` (a watch cap), `E ...` (unauthenticated, forbidden,
      // no_leader): refused.
      std::fprintf(stderr, "lockctl watch: %s: %.*s\n", ep.to_string().c_str(),
                   static_cast<int>(line.size()), line.data());
      status = f[0] == "E" && f.size() == 2 && f[1] != "unauthenticated" ? kExitUsage : kExitNegative;
      return false;
    };
    const bool ok = stream_lines(ep, lines, g.timeout_ms, on_line,
                                 [] { return g_interrupted != 0; }, error, failure);
    if (ok) return status;
    if (failure == Failure::kWrongPort) {
      std::fprintf(stderr, "lockctl watch: %s: %s\n", ep.to_string().c_str(), error.c_str());
      return kExitUsage;
    }
    if (answered > 0 || failure == Failure::kNoAnswer) {
      std::fprintf(stderr, "lockctl watch: %s: %s\n", ep.to_string().c_str(), error.c_str());
      return kExitUnreachable;
    }
    tried += (tried.empty() ? "" : ", ") + ep.to_string() + " (" + error + ")";
  }
  std::fprintf(stderr, "lockctl: cannot reach lockd at %s\n", tried.c_str());
  return kExitUnreachable;
}

}  // namespace lockd::lockctl
