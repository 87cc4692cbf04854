// The configuration's questions and its encoding in the log.
//
// A configuration (types.h `Membership`) travels in kConfChange entries and
// in snapshots. Each entry holds the *whole* new configuration, not a
// delta, so the configuration at any index is simply the latest one at or
// before it (thesis §4.1: a server uses the latest configuration in its
// log, committed or not). The encoding starts with its own version byte
// (kMembershipEncodingVersion); a decoder refuses versions it does not know
// and every field it cannot trust, so a peer can never hand a node a
// configuration the core would crash on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "lockd/raft/types.h"

namespace lockd::raft {

// Encoding version of a kConfChange entry's data.
constexpr std::uint8_t kMembershipEncodingVersion = 1;
// Members (voters + learners) of one configuration, and remembered
// removed ids; an address is host:port text.
constexpr std::size_t kMaxMembers = 16;
constexpr std::size_t kMaxRemovedIds = 4096;
constexpr std::size_t kMaxAddressBytes = 255;

const Member* find_member(const Membership& c, NodeId id);
bool is_voter(const Membership& c, NodeId id);
bool is_learner(const Membership& c, NodeId id);
bool was_removed(const Membership& c, NodeId id);
std::vector<NodeId> voter_ids(const Membership& c);
std::vector<NodeId> learner_ids(const Membership& c);
// A configuration of these voters with no addresses (tests, bootstrap).
Membership voters_only(const std::vector<NodeId>& voters);
// "voters {1,2,3} learners {4}" for logs and transcripts.
std::string describe(const Membership& c);

std::string encode_membership(const Membership& c);
// False, with `error` naming the problem, for bytes that are not a valid
// configuration: unknown version, truncated, trailing bytes, ids zero or
// unsorted or repeated, no voter, too many members, over-long addresses.
bool decode_membership(std::string_view bytes, Membership& out, std::string& error);

}  // namespace lockd::raft
