// The messages Raft peers exchange. One flat struct for every type keeps
// the codec and the simulator simple; which fields matter depends on the
// type and is documented per field.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "lockd/raft/types.h"

namespace lockd::raft {

enum class MessageType : std::uint8_t {
  kPreVote = 1,        // "would you vote for me at term+1?" changes no state (thesis §9.6)
  kPreVoteResp = 2,    // answer to kPreVote; term = the asked term when granted
  kVote = 3,           // RequestVote: candidate asks for a vote at `term`
  kVoteResp = 4,       // answer to kVote, sent only once the vote is persisted
  kAppend = 5,         // AppendEntries with entries after (index, log_term)
  kAppendResp = 6,     // ack (index = last matching index) or reject with a hint
  kHeartbeat = 7,      // empty AppendEntries-lite: keeps the lease, carries commit
  kHeartbeatResp = 8,  // answer to kHeartbeat; feeds CheckQuorum
  kSnapshot = 9,       // one chunk of InstallSnapshot
  kSnapshotResp = 10,  // ack of a chunk: how many bytes the follower holds
  kTimeoutNow = 11,    // leadership transfer: "start an election right now"
};

constexpr std::uint8_t kMaxMessageType = 11;

std::string_view to_string(MessageType t);

// One message between two peers.
struct Message {
  MessageType type = MessageType::kHeartbeat;
  NodeId from = kNoNode;
  NodeId to = kNoNode;
  Term term = 0;  // sender's term (for kPreVote: the term it would campaign at)

  // kAppend: term/index of the entry before `entries` (prev_log_*).
  // kVote/kPreVote: term/index of the candidate's last entry.
  // kAppendResp reject: term of the follower's entry at `reject_hint`.
  Term log_term = 0;
  // kAppend: prev_log_index. kAppendResp: accepted -> the follower's last
  // index matching the leader; rejected -> the rejected prev_log_index.
  // kSnapshotResp: the snapshot's index (or the follower's commit when it
  // had no use for the snapshot).
  Index index = 0;
  Index commit = 0;  // kAppend/kHeartbeat: the leader's commit index for this follower
  bool reject = false;
  Index reject_hint = 0;  // kAppendResp reject: where the leader should look next
  bool transfer = false;  // kVote: campaign forced by kTimeoutNow, ignores leases

  std::vector<Entry> entries;  // kAppend only

  // kSnapshot / kSnapshotResp.
  SnapshotMeta snapshot;
  std::uint64_t offset = 0;  // kSnapshot: where `chunk` starts; resp: bytes held
  std::uint64_t total_bytes = 0;  // kSnapshot: size of the whole snapshot
  bool done = false;  // kSnapshot: last chunk; resp: snapshot installed (or not needed)
  std::string chunk;

  bool operator==(const Message&) const = default;
};

}  // namespace lockd::raft
