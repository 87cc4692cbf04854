// The vocabulary of the Raft core: terms, indexes, log entries, hard state,
// snapshot metadata. Plain values, no behaviour; shared by the core, the
// codec, storage and the simulator.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lockd::raft {

// Identifies a member of the cluster. 0 is never a member: it means "none"
// (no vote cast, no leader known).
using NodeId = std::uint64_t;
// A Raft term; 0 only before the first election.
using Term = std::uint64_t;
// A position in the replicated log; the first entry is 1, 0 means "before
// the log" (an empty log's last index).
using Index = std::uint64_t;

constexpr NodeId kNoNode = 0;

// What a log entry carries; the core only looks at this to skip no-ops.
enum class EntryType : std::uint8_t {
  kNoop = 0,     // appended by each new leader so it can commit (paper §8)
  kCommand = 1,  // opaque payload proposed by the application
  kConfChange = 2,  // a new configuration (membership.h encoding); in force from the moment it is appended
};
// Whether this build knows entry type `t` (a newer version may add types).
constexpr bool known_entry_type(std::uint8_t t) { return t <= static_cast<std::uint8_t>(EntryType::kConfChange); }

// One replicated log entry. `data` is opaque to the core.
struct Entry {
  Term term = 0;
  Index index = 0;
  EntryType type = EntryType::kCommand;
  std::string data;

  bool operator==(const Entry&) const = default;
};

// What must be on disk before the node speaks again after a change:
// the current term and the vote cast in it (paper Figure 2 "persistent
// state"). `commit` is carried for a faster restart, never required.
struct HardState {
  Term term = 0;
  NodeId vote = kNoNode;
  Index commit = 0;

  bool operator==(const HardState&) const = default;
};

// One member of the group as the replicated configuration names it. The
// core only reads `id` and `voter`; the addresses ride along so every node
// learns them from the log (the --peer flags are only a bootstrap hint).
struct Member {
  NodeId id = kNoNode;
  bool voter = true;         // false: a learner (receives the log, never votes or counts)
  std::string client_addr;   // host:port of the client text protocol
  std::string raft_addr;     // host:port of the peer transport

  bool operator==(const Member&) const = default;
};

// A configuration: who is a member, who votes, and which ids were removed
// (never to come back: a removed id is refused). `members` is sorted by id.
// Empty members means "not recorded": the node's bootstrap configuration
// (its --peer flags) applies.
struct Membership {
  std::vector<Member> members;
  std::vector<NodeId> removed;  // sorted

  bool operator==(const Membership&) const = default;
  bool empty() const { return members.empty(); }
};

// Where a snapshot ends: it replaces every entry up to and including
// `index`, whose term was `term` (kept for the Log Matching check of the
// entry right after it).
struct SnapshotMeta {
  Index index = 0;
  Term term = 0;
  Membership conf{};  // the configuration in force at `index` (empty: never recorded)

  bool operator==(const SnapshotMeta&) const = default;
};

// A state-machine snapshot: metadata plus the opaque application bytes.
struct Snapshot {
  SnapshotMeta meta;
  std::string data;

  bool operator==(const Snapshot&) const = default;
};

}  // namespace lockd::raft
