// Progress tracking: who the members are and, on the leader, how far each
// one is.
//
// `Progress` is the leader's view of one follower (or learner) and the
// rules by which that view moves between probe, replicate and snapshot.
// `ProgressTracker` holds the current configuration's voter and learner
// ids, one Progress per member other than the leader itself, and the votes
// of an election; it answers the quorum questions (commit index, CheckQuorum,
// election outcome) over the voters only, through quorum.h, so a learner
// never counts. Pure, no I/O; on the node's loop thread. Tested alone in
// tests/raft/tracker_test.cc. (etcd-io/raft keeps the same room in tracker/.)
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lockd/raft/quorum.h"
#include "lockd/raft/snapshot_bytes.h"
#include "lockd/raft/types.h"

namespace lockd::raft {

// How the leader is replicating to one follower.
enum class ProgressState : std::uint8_t {
  kProbe = 0,      // next is a guess: one append at a time until it matches
  kReplicate = 1,  // next is known: stream appends, up to max_inflight
  kSnapshot = 2,   // the follower needs entries we compacted: sending a snapshot
};
std::string_view to_string(ProgressState s);

// Marks "no rewind yet" in Progress::snapshot_rewound_to.
constexpr std::uint64_t kNoRewind = ~std::uint64_t{0};

// The leader's replication state of one member, leader only.
struct Progress {
  Index match = 0;               // highest index known durable there
  Index next = 1;                // next index to send
  ProgressState state = ProgressState::kProbe;
  bool probe_sent = false;       // kProbe: an append is out, wait for its answer
  std::deque<Index> inflight;    // kReplicate: last index of each unacked append
  bool recent_active = false;    // CheckQuorum: heard from it this period
  std::uint64_t last_contact_tick = 0;
  // kSnapshot: the snapshot being sent, pinned so a newer compaction on
  // the leader does not restart a long transfer from byte 0; let go when
  // the progress leaves kSnapshot (become_probe / become_replicate).
  SnapshotMeta snapshot_meta;
  std::shared_ptr<const SnapshotBytes> snapshot_data;
  std::uint64_t snapshot_offset = 0;   // kSnapshot: bytes the follower acked
  std::uint64_t snapshot_sent = 0;     // kSnapshot: bytes sent (>= acked)
  bool snapshot_all_sent = false;      // kSnapshot: the last chunk went out
  bool snapshot_progressed = false;    // kSnapshot: an ack since last heartbeat
  std::uint64_t snapshot_rewound_to = kNoRewind;  // kSnapshot: last offset a reject rewound to

  // Back to one append at a time, from at least match + 1.
  void become_probe();
  // Streaming from match + 1.
  void become_replicate();
  // An acknowledgement that the member holds [1, index]. Returns whether
  // match moved (a stale or duplicate ack changes nothing).
  bool maybe_update(Index index);
};

class ProgressTracker {
 public:
  // The configuration: voters (who decide) and learners (who only receive).
  // An id in both is our bug (LOCKD_CHECK). Leader progress of members that
  // remain is kept; members that left lose theirs; new members get a fresh
  // Progress starting at `next` (only when `track` is set: on a leader).
  void set_config(std::vector<NodeId> voters, std::vector<NodeId> learners, NodeId self, bool track,
                  Index next, std::uint64_t now_tick);

  const std::vector<NodeId>& voters() const { return voters_; }
  const std::vector<NodeId>& learners() const { return learners_; }
  bool is_voter(NodeId id) const;
  bool is_learner(NodeId id) const;
  bool is_member(NodeId id) const { return is_voter(id) || is_learner(id); }

  // --- leader progress (every member but self) ---
  // Starts tracking every member but `self` at `next`, as a new leader.
  void start_tracking(NodeId self, Index next, Index match, std::uint64_t now_tick);
  void stop_tracking() { progress_.clear(); }
  std::map<NodeId, Progress>& progress() { return progress_; }
  const std::map<NodeId, Progress>& progress() const { return progress_; }
  Progress* find(NodeId id);

  // The index a majority of voters holds; `self` holds `self_match`.
  // `all_voters` asks for the smallest instead (a planted bug for the
  // simulator's liveness checks: commit only what every voter holds).
  Index committed(NodeId self, Index self_match, bool all_voters = false) const;
  // CheckQuorum: whether a majority of voters (self always active) was
  // heard from this period; `count_all` treats every member as heard (bug).
  bool quorum_active(NodeId self, bool count_all = false) const;
  void reset_recent_active();

  // --- elections ---
  void reset_votes() { votes_.clear(); }
  // The first answer from a node counts; answers from non-voters are kept
  // but never counted.
  void record_vote(NodeId from, bool granted) { votes_.emplace(from, granted); }
  quorum::VoteResult tally() const;

 private:
  std::vector<NodeId> voters_;    // sorted
  std::vector<NodeId> learners_;  // sorted
  std::map<NodeId, Progress> progress_;
  std::map<NodeId, bool> votes_;
};

}  // namespace lockd::raft
