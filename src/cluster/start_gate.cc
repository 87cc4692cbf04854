// The start gate; see start_gate.h and docs/cluster.md "The start gate".
#include "lockd/cluster/start_gate.h"

#include <algorithm>
#include <set>

namespace lockd::cluster {
namespace {

std::string ids_text(const std::vector<raft::NodeId>& ids) {
  std::string out;
  for (raft::NodeId id : ids) out += (out.empty() ? "" : ",") + std::to_string(id);
  return out;
}

std::string way_back(raft::NodeId self) {
  return "; it must not vote as if it had kept what it had. Remove the old id (lockctl member "
         "remove " +
         std::to_string(self) +
         ") and add a new member with a new id and an empty data dir (docs/cluster.md "
         "\"Replacing a member\")";
}

StartDecision refuse(std::string line) { return {StartVerdict::kRefuse, std::move(line), {}, {}}; }

}  // namespace

std::string_view to_string(StartVerdict v) {
  switch (v) {
    case StartVerdict::kVote: return "vote";
    case StartVerdict::kWait: return "wait";
    case StartVerdict::kJoinLearner: return "join_learner";
    case StartVerdict::kJoinVoter: return "join_voter";
    case StartVerdict::kRefuse: return "refuse";
  }
  return "?";
}

StartDecision decide_start(const DataDirState& disk, const GateFlags& flags,
                           const std::map<raft::NodeId, PeerAnswer>& answers) {
  const std::string me = "node " + std::to_string(flags.self);
  const GateMutations& mut = flags.mutations;
  // Rule 2, from the disk alone: the hard state (term, vote) lives in the
  // WAL. Anything that says the node took part — a cluster id in IDENTITY,
  // a snapshot, a restore marker — without it is a partly deleted data dir.
  if (disk.staged_restore) {
    // Like an empty node (below): let in, or formed by cluster init.
    if (mut.restore_votes && disk.restored) return {StartVerdict::kVote, "mutation: a staged restore votes", {}, {}};
  } else if (!disk.log) {
    if (mut.identity_is_data && disk.identity_cluster_id != 0 && !disk.snapshot && !disk.restored) {
      return {StartVerdict::kVote, "mutation: IDENTITY counts as data", {}, {}};
    }
    if (disk.identity_cluster_id != 0 || disk.snapshot || disk.restored) {
      std::string what = disk.identity_cluster_id != 0 ? "IDENTITY names cluster " +
                                                             cluster_id_text(disk.identity_cluster_id)
                         : disk.snapshot               ? "a snapshot is there"
                                                       : "RESTORED is there";
      return refuse(me + ": the data dir is partly deleted (" + what +
                    " but the log, with the node's term and vote, is gone)" + way_back(flags.self));
    }
  } else {
    // The --peer list of a group that never recorded a configuration is
    // its configuration: compared id by id with the one it was written by.
    const bool peers_differ = mut.peer_count_only ? disk.identity_members.size() != flags.peers.size()
                                                  : disk.identity_members != flags.peers;
    if (disk.identity && !disk.recorded_conf && peers_differ) {
      return refuse("the data dir was written by a member of {" + ids_text(disk.identity_members) +
                    "}, but --peer names {" + ids_text(flags.peers) +
                    "}: this group never changed membership through the log, so its --peer lists "
                    "are its configuration; keep them and change members with lockctl member "
                    "add/remove (docs/cluster.md \"Membership\")");
    }
    return {StartVerdict::kVote, "the data dir holds this node's data", {}, {}};
  }

  // Empty: what the members say decides (rules 1-3).
  std::set<raft::NodeId> voters;
  bool called_voter = false;
  bool called_learner = false;
  for (const auto& [from, a] : answers) {
    if (a.status == MemberStatus::kRemoved) {
      return refuse(me + " was removed from the group (node " + std::to_string(from) +
                    " says so): a removed id never rejoins; add a new member with a new id and an "
                    "empty data dir (docs/cluster.md \"Replacing a member\")");
    }
    voters.insert(a.voters.begin(), a.voters.end());
    called_voter = called_voter || a.status == MemberStatus::kVoter;
    called_learner = called_learner || a.status == MemberStatus::kLearner;
  }
  called_voter = called_voter || voters.contains(flags.self);
  if (called_voter && mut.admit_called_voter) {
    std::vector<raft::NodeId> conf(voters.begin(), voters.end());
    if (!voters.contains(flags.self)) conf.insert(std::lower_bound(conf.begin(), conf.end(), flags.self), flags.self);
    return {StartVerdict::kJoinVoter, "mutation: called a voter, joins at once", conf, {}};
  }
  if (called_voter) {
    // Rule 2: a voter some member heard from took part, and its data is gone.
    for (const auto& [from, a] : answers) {
      if (a.heard == HeardReceiver::kHeard) {
        return refuse(me + " is a voter of the group and node " + std::to_string(from) +
                      " heard from it before, but its data dir is empty: it has lost the votes "
                      "and log entries it had" + way_back(flags.self));
      }
    }
    // Rule 3: every voter of the configuration confirms it never heard from
    // us. An empty voter (one waiting to be let in) says "never" whether it
    // never took part or lost its record: it may have been the one member
    // that counted our vote or acknowledgement, and wiped since. Its word
    // stands only if no member with its data ever heard from it (each says
    // whom, tag 15): then it never took part either, like two founders
    // started late together, who can take each other's word. One that was
    // heard from took part and lost its data: it is refused, and we wait
    // until it is removed (or, an answer from before it was let in, until
    // it answers again with its data: ask_again).
    const auto heard_by_a_member = [&](raft::NodeId v) {
      for (const auto& [from, a] : answers) {
        if (a.data_state != DataState::kHasData) continue;
        if (!a.heard_voters) return true;  // an older member: it may have
        if (std::find(a.heard_voters->begin(), a.heard_voters->end(), v) != a.heard_voters->end()) return true;
      }
      return false;
    };
    std::vector<raft::NodeId> missing;
    std::vector<raft::NodeId> empty_voters;
    for (raft::NodeId v : voters) {
      if (v == flags.self) continue;
      const auto it = answers.find(v);
      if (it == answers.end() || it->second.heard != HeardReceiver::kNever) {
        missing.push_back(v);
      } else if (it->second.data_state != DataState::kHasData && !mut.empty_confirms && heard_by_a_member(v)) {
        missing.push_back(v);
        empty_voters.push_back(v);
      }
    }
    if (mut.learners_confirm) {
      // Any answering node's "never heard" stands in for a voter's.
      std::size_t never = 0;
      for (const auto& [from, a] : answers) never += from != flags.self && a.heard == HeardReceiver::kNever ? 1 : 0;
      const std::size_t others = voters.size() - (voters.contains(flags.self) ? 1 : 0);
      if (never >= others) missing.clear();
    }
    if (mut.skip_confirmations) missing.clear();
    if (!missing.empty()) {
      std::string why = me + " is a voter that has not taken part yet: waiting until every voter "
                             "confirms it never heard from it (still to answer: " + ids_text(missing);
      if (!empty_voters.empty()) {
        why += (empty_voters.size() == 1 ? "; node " : "; nodes ") + ids_text(empty_voters) +
               (empty_voters.size() == 1 ? " has an empty data dir" : " have empty data dirs") +
               " but a member heard from it before: it lost the record that may have named this "
               "node, so its word counts once it has data again, or once it is removed with "
               "lockctl member remove";
      }
      why += ")";
      // Answers go stale while we wait (a member let in since, a removal
      // committed since): while an empty voter holds us up, ask everyone
      // who answered again, now and then.
      std::vector<raft::NodeId> again;
      if (!empty_voters.empty()) {
        for (const auto& [from, a] : answers) {
          if (from != flags.self) again.push_back(from);
        }
      }
      return {StartVerdict::kWait, std::move(why), {}, std::move(again)};
    }
    std::vector<raft::NodeId> conf(voters.begin(), voters.end());
    if (!voters.contains(flags.self)) conf.insert(std::lower_bound(conf.begin(), conf.end(), flags.self), flags.self);
    return {StartVerdict::kJoinVoter,
            me + " is a founding voter of {" + ids_text(conf) +
                "} that never took part (every voter confirms it): joining under its id",
            conf, {}};
  }
  if (called_learner) {
    // A lagging member may still call a promoted voter a learner: a
    // majority of the voters must have answered, none calling it a voter
    // (a promotion committed on a majority, which meets this one).
    std::size_t answered = 0;
    for (raft::NodeId v : voters) answered += v != flags.self && answers.contains(v) ? 1 : 0;
    if (answered * 2 > voters.size()) {
      return {StartVerdict::kJoinLearner, me + " was added as a learner: joining the group", {}, {}};
    }
    return {StartVerdict::kWait,
            me + " is called a learner: waiting for a majority of the voters {" +
                ids_text(std::vector<raft::NodeId>(voters.begin(), voters.end())) + "} to answer",
            {}, {}};
  }
  return {StartVerdict::kWait,
          me + ": empty data dir, waiting to be let in (a member adds it, or lockctl cluster init "
               "forms the group)",
          {}, {}};
}

InitDecision decide_init(const GateFlags& flags, const std::map<raft::NodeId, PeerAnswer>& answers) {
  for (const auto& [from, a] : answers) {
    if (from == flags.self) continue;
    if (!a.voters.empty() || a.status == MemberStatus::kRemoved) {
      return {InitVerdict::kAlreadyFormed, "node " + std::to_string(from) + " belongs to a formed group"};
    }
  }
  std::vector<raft::NodeId> missing;
  for (raft::NodeId id : flags.peers) {
    if (id != flags.self && !answers.contains(id)) missing.push_back(id);
  }
  const bool alone = flags.peers.size() == 1 && flags.peers.front() == flags.self;
  if (alone && !flags.alone_grace_over && !flags.mutations.init_at_once) {
    return {InitVerdict::kWait, "cluster init: --peer names only this node: waiting a few seconds for "
                                "members that list it to say whether it belongs to their group"};
  }
  if (!missing.empty() && !flags.mutations.init_at_once) {
    return {InitVerdict::kWait, "cluster init: waiting to hear from every --peer member before forming "
                                "(no answer yet from " + ids_text(missing) + "): a formed group must "
                                "never be formed again"};
  }
  return {InitVerdict::kForm, "cluster init: every --peer member answered, none belongs to a group"};
}

}  // namespace lockd::cluster
