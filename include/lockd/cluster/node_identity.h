// The data dir's owner: written on a node's first start, checked on every
// start after it.
//
// A node started on another node's data dir (a wrong --node-id or
// --data-dir) would carry that node's term and vote, so it could vote a
// second time in one term and let two leaders be elected in it: refused
// before the node says anything to a peer, with one line naming both
// sides. etcd refuses the same ("member ID mismatch"). The member list in
// the file is the --peer list of the first start, kept for the record: the
// members are the replicated configuration's (issue 20), so a different
// --peer list later is not refused.
//
// The file is `IDENTITY`, one line: "lockd node 2 of members 1,2,3\n",
// and once the group has formed (its first configuration entry applied)
// "lockd node 2 of members 1,2,3 cluster 0x6c1f0e5a9d3b2c47\n": the
// cluster id peers of another cluster are refused by (peer_handshake.h).
// It is written to a temporary name, synced, renamed and the directory
// synced, so it is whole or absent. Addresses are not in it: moving a
// member to a new address is a restart of every node with the new list.
// A data dir from before this file (a WAL and no IDENTITY) is claimed as
// it is.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <utility>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "lockd/raft/types.h"

namespace lockd::cluster {

struct NodeIdentity {
  raft::NodeId self = raft::kNoNode;
  std::vector<raft::NodeId> members;  // sorted, no repeats
  std::uint64_t cluster_id = 0;       // 0: the group has not formed yet (as far as we know)

  bool operator==(const NodeIdentity&) const = default;
};

inline constexpr const char* kIdentityFile = "IDENTITY";

// "lockd node 2 of members 1,2,3\n"
std::string format_identity(const NodeIdentity& id);
// The inverse; nullopt for anything else (members sorted and unique, self
// among them, the trailing newline required).
std::optional<NodeIdentity> parse_identity(std::string_view text);

// Checks `dir`'s IDENTITY against `me`, writing it when absent and
// `write_if_absent` (`sync`: fsync the file and the directory; false only
// in tests). Returns an empty string when the node may start, else the one
// line to print. A node checks first without writing, and writes only once
// every listener is bound: a start that fails (an address in use, a typo in
// --peer) leaves no IDENTITY that would refuse the corrected config.
// `found`, when given, gets the stored identity (its cluster id) or `me`.
std::string claim_data_dir(const std::string& dir, const NodeIdentity& me, bool sync = true,
                           bool write_if_absent = true, NodeIdentity* found = nullptr);
// HEARD (protocol.md §10 rule 3): every member id this node counted a
// message of, one line "lockd heard 1,3\n" ("lockd heard\n": none yet),
// written like IDENTITY (whole or absent) before the first message of a new
// id reaches Raft. Absent in a data dir from before v1.3.
inline constexpr const char* kHeardFile = "HEARD";
std::string write_heard(const std::string& dir, const std::set<raft::NodeId>& ids, bool sync = true);
// nullopt when absent (`error` empty) or unreadable / not a HEARD line
// (`error` set).
std::optional<std::set<raft::NodeId>> read_heard(const std::string& dir, std::string& error);

// VERSIONS (v1.3, protocol.md §10 "Entry versions"): the log entry
// encodings each member said, in its latest handshake, that it applies,
// "lockd entry versions 1=2-4 3=2-4\n", rewritten durably when one
// changes; an entry version is used once every voter said so, at any time.
inline constexpr const char* kVersionsFile = "VERSIONS";
std::string write_versions(const std::string& dir,
                           const std::map<raft::NodeId, std::pair<std::uint16_t, std::uint16_t>>& v,
                           bool sync = true);
// Empty when absent or not a VERSIONS line (then nothing is known).
std::map<raft::NodeId, std::pair<std::uint16_t, std::uint16_t>> read_versions(const std::string& dir);

// Rewrites `dir`'s IDENTITY as `me` (the cluster id learned); "" or what failed.
std::string write_identity(const std::string& dir, const NodeIdentity& me, bool sync = true);

}  // namespace lockd::cluster
