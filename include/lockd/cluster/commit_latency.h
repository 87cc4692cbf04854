// CommitLatency: how long the leader's entries take from its WAL write to
// being applied (`lockd_raft_commit_duration_seconds`).
//
// Why measure from the WAL write and not from propose(): the service
// proposes and the daemon persists in the same loop turn, so the write is
// within microseconds of the proposal, and ClusterNode sees every entry
// there without the service having to carry a timestamp per request. The
// span covers the local fdatasync, replication to a majority and apply:
// what a client waits for beyond parsing.
//
// Pure (time comes in as arguments); runs on the loop thread. Only a
// leader's own entries are timed: on any other role the queue is cleared,
// because an index it timed may be overwritten by a new leader's entry.
#pragma once

#include <cstddef>
#include <deque>
#include <utility>

#include "lockd/common/latency_histogram.h"
#include "lockd/common/time.h"
#include "lockd/raft/types.h"

namespace lockd::cluster {

class CommitLatency {
 public:
  // Entries timed at once; past it new ones are not timed (Raft's own
  // max_uncommitted_entries keeps a healthy leader far below).
  static constexpr std::size_t kMaxTracked = 1u << 16;

  // The leader wrote `index` to its WAL at `now_ns`.
  void written(raft::Index index, TimeNs now_ns) {
    if (!inflight_.empty() && index <= inflight_.back().first) {
      // The log was cut back and rewritten: the old timings are moot.
      inflight_.clear();
    }
    if (inflight_.size() < kMaxTracked) inflight_.emplace_back(index, now_ns);
  }
  // Entries up to `index` are applied at `now_ns`.
  void applied(raft::Index index, TimeNs now_ns) {
    while (!inflight_.empty() && inflight_.front().first <= index) {
      histogram_.record(now_ns - inflight_.front().second);
      inflight_.pop_front();
    }
  }
  // Not the leader (any more): forget what was in flight.
  void clear() { inflight_.clear(); }

  const LatencyHistogram& histogram() const { return histogram_; }
  std::size_t inflight() const { return inflight_.size(); }

 private:
  std::deque<std::pair<raft::Index, TimeNs>> inflight_;  // ascending index
  LatencyHistogram histogram_;
};

}  // namespace lockd::cluster
