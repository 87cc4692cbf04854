// The start gate (protocol.md §10 "A node's lifecycle", issue 37): one pure
// function decides whether a starting node votes with its data, waits to
// be let in, joins as a learner or as a founding voter, or is refused —
// from what its data dir holds, its flags and the handshake answers
// gathered so far. No I/O: ClusterNode gathers the inputs and acts on the
// verdict; the unit test and the simulator (tools/sim) drive it with
// tables. docs/cluster.md "The start gate" gives the rules and why.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "lockd/cluster/peer_handshake.h"
#include "lockd/raft/types.h"

namespace lockd::cluster {

// What the data dir holds (each file present or not).
struct DataDirState {
  bool identity = false;                     // IDENTITY
  std::uint64_t identity_cluster_id = 0;     // its cluster id (0: none recorded)
  std::vector<raft::NodeId> identity_members;  // its member list (sorted)
  bool log = false;                          // the WAL holds a hard state or entries
  bool snapshot = false;                     // a snapshot file
  bool recorded_conf = false;                // the log or snapshot records a configuration
  bool restored = false;                     // RESTORED (seeded from a backup once)
  bool heard = false;                        // HEARD names at least one id
  // RESTORED and the state seeded from the backup untouched since (no
  // vote, no entry after its snapshot): staged, waiting for cluster init.
  bool staged_restore = false;
};

// Test-only: each switch breaks one rule of the gate on purpose, so that
// the simulator's lifecycle runs (tools/sim --lifecycle, docs/raft.md) can
// prove they catch it. The daemon never sets them (all false).
struct GateMutations {
  bool admit_called_voter = false;  // an empty node a member calls a voter joins at once (no heard checks)
  bool identity_is_data = false;    // IDENTITY with a cluster id and no log counts as data: votes
  bool learners_confirm = false;    // any answering node (learners, waiting nodes) confirms rule 3
  bool skip_confirmations = false;  // rule 3 joins without waiting for every voter's "never heard"
  bool peer_count_only = false;     // --peer vs IDENTITY compares the number of members only
  bool restore_votes = false;       // a staged restore (re-seeded from a backup) votes
  bool empty_confirms = false;      // an empty voter's "never heard" counts though a member heard from it
  bool init_at_once = false;        // cluster init forms before every --peer member answered
};

struct GateFlags {
  raft::NodeId self = raft::kNoNode;
  std::vector<raft::NodeId> peers;  // the --peer ids, self included, sorted
  GateMutations mutations = {};     // test-only (above)
  // decide_init, --peer naming only this node: true once members that list
  // it have had time to say so (their hellos reach a waiting node with peer
  // authentication on; they redial at least every second).
  bool alone_grace_over = true;
};

// What one peer said of us in its latest handshake.
struct PeerAnswer {
  std::uint64_t cluster_id = 0;
  MemberStatus status = MemberStatus::kUnknown;      // what its configuration says of us
  HeardReceiver heard = HeardReceiver::kUnknown;     // whether it ever heard from us
  std::vector<raft::NodeId> voters;                  // its configuration's voters
  DataState data_state = DataState::kEmpty;          // kHasData: a member with its data (gate open)
  // Tag 15: the voters it ever heard from (a member with its data); unset:
  // a waiting node or an older binary (taken as having heard from all).
  std::optional<std::vector<raft::NodeId>> heard_voters = std::nullopt;
};

enum class StartVerdict : std::uint8_t {
  kVote = 0,     // the data dir holds this node's data: start as it left off
  kWait,         // empty: wait, voting for nothing, until let in (or cluster init)
  kJoinLearner,  // let in as a learner: catch up from the leader, vote for nothing
  kJoinVoter,    // a founding voter that never took part: join under its id (rule 3)
  kRefuse,       // one line, exit 2
};
std::string_view to_string(StartVerdict v);

struct StartDecision {
  StartVerdict verdict = StartVerdict::kWait;
  std::string reason;  // kRefuse: the line to print; kJoinVoter/kJoinLearner/kWait: why
  std::vector<raft::NodeId> voters;  // kJoinVoter: the configuration it joins
  // kWait: while the "never" of an empty voter that a member heard from
  // holds the node up, every member that answered: ask them again now and
  // then (the empty one may have been let in since, or removed).
  std::vector<raft::NodeId> ask_again;
};

// Every rule, in one place. `answers` maps a peer id to its latest answer
// (only consulted when the data dir is empty).
StartDecision decide_start(const DataDirState& disk, const GateFlags& flags,
                           const std::map<raft::NodeId, PeerAnswer>& answers);

// POST /v1/cluster/init on a node whose gate still waits (rule 1).
enum class InitVerdict : std::uint8_t {
  kForm = 0,        // form the group: this node its first leader, --peer its voters
  kWait,            // not every --peer member has answered yet: ask again later
  kAlreadyFormed,   // 409: a member says it belongs to a formed group
};

struct InitDecision {
  InitVerdict verdict = InitVerdict::kWait;
  std::string reason;  // kWait: who has not answered; kAlreadyFormed: who is formed
};

// Whether cluster init may form the group now, from the --peer ids
// (flags.peers, self included) and every answer gathered so far (members
// and authenticated strangers alike). It forms only once *every* --peer
// member has answered and none belongs to a formed group: a member whose
// disk was lost, asked to init by a script that runs it on every start,
// must not form a second group under the same ids — and a group's data may
// live on a bare majority, so the word of a majority is not enough. This
// costs formation nothing: founders join only once every voter answered.
// A node whose --peer names only itself (the one-node start, or a grown
// group's first member whose unit was never updated) also waits until
// flags.alone_grace_over, for the members that list it to speak up.
InitDecision decide_init(const GateFlags& flags, const std::map<raft::NodeId, PeerAnswer>& answers);

}  // namespace lockd::cluster
