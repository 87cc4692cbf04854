// lockctl member list|add|promote|remove and leader transfer (interfaces.md
// v1.2): the admin API's membership endpoints, on the leader. A node that
// is not the leader answers 503 with the leader's admin address; lockctl
// follows it (at most 3 hops).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "commands.h"

namespace lockd::lockctl {

// Longest a change may take: the server answers within 30 s (504 after).
constexpr int kMemberChangeTimeoutMs = 35'000;

int cmd_member_list(const Globals& g);
// cluster init (v1.3): POST /v1/cluster/init to the first admin address
// that answers (never redirected: the node asked forms the group). Exit 0
// and the member table; 1 on 409 (already_formed) with the reason on
// stderr; 3 unreachable.
int cmd_cluster_init(const Globals& g);
// `addrs` is CLIENT_HOST:PORT/RAFT_HOST:PORT.
int cmd_member_add(const Globals& g, std::uint64_t id, const std::string& addrs);
int cmd_member_promote(const Globals& g, std::uint64_t id);
int cmd_member_remove(const Globals& g, std::uint64_t id);
// No id: the most caught-up voter.
int cmd_leader_transfer(const Globals& g, std::optional<std::uint64_t> id);

}  // namespace lockd::lockctl
