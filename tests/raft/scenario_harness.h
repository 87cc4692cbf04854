// A scripted cluster for scenario tests, in the spirit of etcd's
// interaction tests: a small script drives N Raft cores by hand (who ticks,
// which Ready is processed, which messages are delivered), and each
// command prints what happened. The transcript is compared with the one
// stored beside the script in testdata/.
//
// Commands (one per line, '#' comments):
//   cluster <n> [prevote=0|1] [checkquorum=0|1] [max_entries=k] [chunk=b] [inflight=k]
//           [commit_old_term_bug=1]  (plants the Figure 8 bug, for the story only)
//   log <id> <term>...        preload node <id>'s disk with entries of these terms
//   hardstate <id> <term> [vote]
//   campaign <id>             start an election now
//   tick <id|all> [n]         n ticks (default 1)
//   elapse <n>                n times: tick every node once, then stabilize quiet
//   process-ready <id|all>... persist, apply and advance every Ready of these nodes
//   deliver-msgs [<id>...]    deliver queued messages addressed to these nodes (all)
//                             once, printing each; messages across a partition drop
//   stabilize [quiet]         process-ready all + deliver-msgs until quiet;
//                             `quiet` prints only what was applied
//   partition <ids> | <ids>   cut links between the groups
//   heal                      remove partitions
//   crash <id> / restart <id> lose everything not persisted / rebuild from disk
//   propose <id> <text>       propose a command
//   compact <id> [keep=K]     snapshot at the node's applied index (the log keeps K entries behind it)
//   transfer <id> <target>    leadership transfer
//   status [<id>...]          role, term, commit and log terms of each node
//   progress <id>             the leader's view of each follower
#pragma once

#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "lockd/raft/raft.h"
#include "lockd/raft/storage.h"

namespace lockd::raft::testing {

class ScenarioCluster {
 public:
  // Runs one script line; returns its transcript (may be empty).
  std::string run(const std::string& line);

 private:
  // One node of the scripted cluster.
  struct Node {
    MemoryStorage disk;
    std::unique_ptr<Raft> raft;
    std::vector<std::string> applied;  // command payloads applied, in order
  };

  Config config(NodeId id) const;
  void ensure_started();
  void start(NodeId id);
  std::string process_ready(NodeId id);
  std::string deliver(const std::set<NodeId>& to);
  std::string stabilize();
  std::string status_line(NodeId id) const;
  static std::string describe(const Message& m);
  bool blocked(NodeId from, NodeId to) const;

  int size_ = 0;
  bool started_ = false;
  bool pre_vote_ = true;
  bool check_quorum_ = true;
  std::size_t max_entries_ = kDefaultMaxEntriesPerAppend;
  std::size_t chunk_bytes_ = kDefaultSnapshotChunkBytes;
  std::size_t inflight_ = kDefaultMaxInflight;
  bool commit_old_term_bug_ = false;  // plant FaultInjection::commit_old_term_entries
  std::map<NodeId, Node> nodes_;
  std::vector<Message> queue_;
  std::map<NodeId, int> group_;  // partition group per node; absent = no partition
};

}  // namespace lockd::raft::testing
