// Test support: a lockd cluster of real processes on loopback.
//
// Picks free ports for every node first (client, raft, admin: bind port 0,
// read the port, close), gives each node its own temporary data dir, and
// can kill, pause and restart nodes with the same ports and data. Short
// Raft timeouts (--election-timeout-ms 150 --heartbeat-ms 30, unless the
// extra flags set them) keep tests fast; callers poll against generous
// deadlines, never sleep fixed times.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "http_get.h"
#include "lockd_process.h"
#include "temp_dir.h"

namespace lockd::testing {

class LockdCluster {
 public:
  // Starts `n` nodes (ids 1..n) with `extra_flags` added to each ("{ID}"
  // in a flag is replaced by the node's id). With
  // `env_prefix` (e.g. {"/usr/bin/env", "LD_PRELOAD=..."}) each node runs
  // under it; "{DIR}" in it is replaced by the node's data dir and "{ID}"
  // by its id.
  // `formed` > 0 (membership tests): only nodes 1..formed start, each
  // naming 1..formed in --peer; nodes above it are spares with ports and a
  // data dir, to be added (set_peers, then start them: they wait until
  // the leader adds them).
  // `init` (v1.3): once the nodes started, the group is formed by POST
  // /v1/cluster/init to node 1 (init_group()); false: the test does it.
  explicit LockdCluster(int n, std::vector<std::string> extra_flags = {},
                        std::vector<std::string> env_prefix = {}, int formed = 0, bool init = true);
  ~LockdCluster();  // kills every node, removes the data dirs
  LockdCluster(const LockdCluster&) = delete;
  LockdCluster& operator=(const LockdCluster&) = delete;

  int size() const { return static_cast<int>(nodes_.size()); }
  // 1-based node ids.
  std::uint16_t client_port(int id) const { return node(id).client_port; }
  std::uint16_t admin_port(int id) const { return node(id).admin_port; }
  std::uint16_t raft_port(int id) const { return node(id).raft_port; }
  std::string client_addr(int id) const;
  std::string raft_addr(int id) const;
  // The ids node `id` names with --peer from its next start (itself included).
  void set_peers(int id, std::vector<int> ids) { node(id).peers = std::move(ids); }
  const std::string& data_dir(int id) const { return node(id).data_dir; }
  // The peer secret every node gets unless the test chose its own peer
  // authentication (or --insecure-peers) in its flags.
  const std::string& peer_secret_file() const { return peer_secret_; }
  bool running(int id) const { return node(id).proc != nullptr; }
  ChildProcess& process(int id) { return *node(id).proc; }

  // (Re)starts node `id` with its ports and data dir; waits for `listening`.
  void start(int id);
  // For the next start(id): another lockd binary ("" = lockd_binary()),
  // flags after the shared ones (a node with its own --max-keys, say).
  void set_binary(int id, std::string path) { node(id).binary = std::move(path); }
  void set_node_flags(int id, std::vector<std::string> flags) { node(id).flags = std::move(flags); }
  // SIGKILL and reap.
  void kill9(int id);
  void signal(int id, int sig);
  // Removes everything in the node's data dir (the node must be down).
  void wipe(int id);

  // Polls every running node (`R 1 lockd-probe`, a no-op through the log)
  // until one answers as a serving leader; returns its id, or 0 at the
  // deadline. `except` is never returned (a paused node, say).
  int wait_leader(std::chrono::milliseconds timeout = std::chrono::milliseconds(10000),
                  int except = 0);
  // POST /v1/cluster/init `{}` to node `id`, again while it answers 504 or
  // not at all, until `timeout`: the last reply (200 formed, 409
  // already_formed). A restarted node with data must not be asked again.
  HttpReply init_group(int id, std::chrono::milliseconds timeout = std::chrono::milliseconds(30000));
  // GET /v1/status of node `id`: the body, or empty when it does not answer.
  std::string status_json(int id);
  // A number of /v1/status (`commit_index`, `applied_index`, `term`…);
  // 0 if the node does not answer.
  std::uint64_t status_number(int id, const std::string& field);

 private:
  struct Node {
    std::uint16_t client_port = 0;
    std::uint16_t raft_port = 0;
    std::uint16_t admin_port = 0;
    std::string data_dir;
    std::string binary;              // "" = lockd_binary()
    std::vector<std::string> flags;  // this node's own, after the shared ones
    std::vector<int> peers;          // --peer ids; empty: every node
    std::unique_ptr<ChildProcess> proc;
  };
  Node& node(int id) { return nodes_.at(static_cast<std::size_t>(id - 1)); }
  const Node& node(int id) const { return nodes_.at(static_cast<std::size_t>(id - 1)); }

  TempDir root_dir_{"lockd-cluster"};  // every node's data dir; first made, last removed
  std::vector<Node> nodes_;
  std::string peer_secret_;
  std::vector<std::string> extra_flags_;
  std::vector<std::string> env_prefix_;
};

// A port below the kernel's ephemeral range that was free a moment ago
// (outgoing connections cannot take it before a node binds it), reserved
// for the rest of this process against every other test process: byte
// `port` of test_port_lock_path() is locked (fcntl OFD lock).
std::uint16_t free_port();
std::string test_port_lock_path();
// Locks byte `port` of the open lock file `fd` (an OFD lock: held by this
// open of the file); false when another open holds it.
bool lock_port_byte(int fd, std::uint16_t port);

// Sends `line` to the current leader (never `except`) until the reply is
// not a redirect, `E no_leader`, `E indeterminate` or a failed call
// (leadership may move while a test runs): that reply, the last one at the
// deadline, or "<no leader>" when no node serves as leader in time.
std::string call_leader(LockdCluster& c, const std::string& line, int except = 0,
                        std::chrono::milliseconds timeout = std::chrono::milliseconds(20000));

// One sample of node `id`'s /metrics (metric.h); -1 when absent or the
// node does not answer.
double node_metric(LockdCluster& c, int id, const std::string& series);

// Sends `line` on a fresh connection to `port` and returns the first reply.
std::string call_once(std::uint16_t port, const std::string& line,
                      std::chrono::milliseconds timeout = std::chrono::milliseconds(3000));

}  // namespace lockd::testing
