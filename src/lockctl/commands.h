// lockctl's commands (spec interfaces.md, "lockctl"). Each returns the
// process exit status.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "client.h"
#include "lockd/net/address.h"

namespace lockd::lockctl {

// Exit statuses (spec interfaces.md).
enum ExitCode : int {
  kExitOk = 0,           // A, R, K, or a query answered
  kExitNegative = 1,     // T, B, N, a 404, or another refusal (E unauthenticated, E forbidden, 401, 403)
  kExitUsage = 2,        // bad flags or arguments (also `E` for a request the server finds malformed)
  kExitUnreachable = 3,  // the server cannot be reached
};

// Flags every command takes.
struct Globals {
  net::Endpoint addr{"127.0.0.1", 7070};   // text protocol: the first of `addrs`
  net::Endpoint admin{"127.0.0.1", 7071};  // HTTP admin API: the first of `admins`
  bool json = false;                       // print the API's JSON unchanged
  // --addr / --admin (or LOCKD_ADDR / LOCKD_ADMIN): comma-separated lists,
  // tried in order until one answers (a cluster's nodes).
  std::vector<net::Endpoint> addrs{addr};
  std::vector<net::Endpoint> admins{admin};
  int timeout_ms = kDefaultTimeoutMs;  // --timeout: per node, beyond an acquire's --wait
};

// GETs `target` from the first admin address that answers. nullopt with
// one line in `error` naming every address tried; `failure` kWrongPort
// when one answered as something else (then the others are not tried).
std::optional<HttpResponse> admin_get(const Globals& g, const std::string& target,
                                      net::Endpoint& answered, std::string& error,
                                      Failure& failure);

int cmd_status(const Globals& g);
int cmd_locks(const Globals& g, const std::string& prefix, const std::string& after,
              std::optional<std::uint64_t> limit);
int cmd_lock(const Globals& g, const std::string& key);
int cmd_cluster(const Globals& g);
int cmd_acquire(const Globals& g, const std::string& owner, const std::string& key,
                std::optional<std::uint64_t> lease_ms, std::optional<std::uint64_t> wait_ms);
// `S OWNER KEY LIMIT [LEASE [WAIT]]` (protocol v1.2, §5b): 0 for `S`, 1 for
// `T`/`B`/`E limit_mismatch`.
int cmd_acquire_shared(const Globals& g, const std::string& owner, const std::string& key,
                       std::uint64_t limit, std::optional<std::uint64_t> lease_ms,
                       std::optional<std::uint64_t> wait_ms);
int cmd_release(const Globals& g, const std::string& token, const std::string& key);
// `K TOKEN KEY MS` (protocol v1.1): extends the lease; 0 for `K`, 1 for `N`.
int cmd_keep(const Globals& g, const std::string& token, const std::string& key,
             std::uint64_t lease_ms);

// `lockctl watch KEY... [--once]` (v1.3): one line per state; 0 when
// interrupted (or after the states now with `once`), 1 for `B` or a
// refusal, 3 when no --addr answers.
int cmd_watch(const Globals& g, const std::vector<std::string>& keys, bool once);

// `lockctl top`: the live view.
struct TopOptions {
  std::uint64_t interval_ms = 1000;  // refresh period
  std::uint64_t iterations = 0;      // frames to draw; 0 = until `q`
  std::size_t rows = 0;              // rows per table; 0 = fit the terminal
};
int cmd_top(const Globals& g, const TopOptions& opt);

}  // namespace lockd::lockctl
