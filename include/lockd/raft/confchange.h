// Configuration transitions: from one configuration to the next, one
// server at a time (Raft thesis §4.1).
//
// A change names one member. Adding makes it a learner (it receives the log
// and counts for nothing); promoting turns a learner into a voter; removing
// drops a voter or learner and remembers its id so it can never come back;
// an address update moves a member without changing who votes. So any two
// consecutive configurations differ by at most one voter, and every
// majority of the old voters overlaps every majority of the new ones: the
// property that lets a configuration take effect as soon as it is appended.
// Pure; tested alone in tests/raft/confchange_test.cc. (etcd-io/raft keeps
// the same room in confchange/.)
#pragma once

#include <cstdint>
#include <string_view>

#include "lockd/raft/types.h"

namespace lockd::raft {

// What one change does.
enum class ConfChangeType : std::uint8_t {
  kAddLearner = 1,     // a new id joins as a learner, with its addresses
  kPromote = 2,        // a learner becomes a voter
  kRemove = 3,         // a voter or learner leaves; its id is never reused
  kUpdateAddress = 4,  // a member's addresses change (voter/learner unchanged)
};
std::string_view to_string(ConfChangeType t);

struct ConfChange {
  ConfChangeType type = ConfChangeType::kAddLearner;
  Member member;  // id always; client_addr and raft_addr for add and update
};

// Why a change was refused (an operator error: a value).
enum class ConfChangeError : std::uint8_t {
  kOk = 0,           // the change applies
  kBadId,            // id 0
  kAlreadyMember,    // add of an id that is a member
  kRemovedId,        // add of an id that was removed (ids are never reused)
  kUnknownMember,    // promote, remove or update of an id that is not a member
  kNotLearner,       // promote of a voter
  kLastVoter,        // remove of the only voter
  kTooManyMembers,   // more than kMaxMembers members, or kMaxVoters voters
  kBadAddress,       // add/update without both addresses, or longer than kMaxAddressBytes
  kTooManyRemoved,   // the removed-id list is full
};
std::string_view to_string(ConfChangeError e);

// The configuration after `cc`, or why not. `cur` must be a recorded
// configuration (not empty).
ConfChangeError apply_change(const Membership& cur, const ConfChange& cc, Membership& out);

// Whether `next` follows from `prev` by at most one voter added or removed
// (the single-server rule). A checker for tests and the simulator.
bool single_voter_step(const Membership& prev, const Membership& next);

}  // namespace lockd::raft
