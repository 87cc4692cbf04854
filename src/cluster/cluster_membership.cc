// ClusterNode, the node side of membership (issue 20): the members the
// transport dials come from the replicated configuration, the start checks
// of --initial-cluster-state, and the admin API's changes. See
// cluster_node.h and docs/cluster.md "Membership".
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lockd/cluster/cluster_node.h"
#include "lockd/net/clock.h"
#include "lockd/raft/membership.h"

namespace lockd::cluster {
namespace {

// HEARD is synced like the WAL (cluster_node.cc).
#ifdef LOCKD_UNSAFE_NO_FSYNC
constexpr bool kSyncWalDefault = false;
#else
constexpr bool kSyncWalDefault = true;
#endif

}  // namespace

std::vector<Member> ClusterNode::current_members() const {
  const raft::Membership& conf = raft_ ? raft_->conf() : raft::Membership{};
  const Member* self = nullptr;
  for (const Member& m : config_.members) {
    if (m.id == config_.self) self = &m;
  }
  if (conf.empty()) return config_.members;
  std::vector<Member> out;
  for (const raft::Member& c : conf.members) {
    if (c.id == config_.self) {
      if (self != nullptr) out.push_back(*self);
      continue;
    }
    std::string error;
    const std::optional<net::Endpoint> client = net::parse_endpoint(c.client_addr, error);
    const std::optional<net::Endpoint> raft = net::parse_endpoint(c.raft_addr, error);
    if (!client || !raft) {
      // Checked when the change was asked for; a configuration written by
      // a bootstrap without addresses lands here: the --peer entry, if any.
      for (const Member& m : config_.members) {
        if (m.id == c.id) out.push_back(m);
      }
      continue;
    }
    out.push_back(Member{c.id, *client, *raft});
  }
  if (raft::find_member(conf, config_.self) == nullptr && self != nullptr) out.push_back(*self);
  return out;
}

std::vector<Member> ClusterNode::transport_members() const {
  std::vector<Member> out = current_members();
  const raft::Membership& conf = raft_ ? raft_->conf() : raft::Membership{};
  for (const Member& m : config_.members) {
    const bool listed = std::any_of(out.begin(), out.end(), [&](const Member& o) { return o.id == m.id; });
    if (!listed && !raft::was_removed(conf, m.id)) out.push_back(m);
  }
  // A removed leader hands over after its removal commits (catch-up, then
  // TimeoutNow; docs/raft.md): keep its links while this node follows it,
  // or its hand-over never arrives. Dropped as soon as we follow another.
  const raft::NodeId lead = raft_ ? raft_->leader() : raft::kNoNode;
  if (lead != raft::kNoNode && lead != config_.self && raft::was_removed(conf, lead)) {
    const bool listed = std::any_of(out.begin(), out.end(), [&](const Member& o) { return o.id == lead; });
    auto it = known_members_.find(lead);
    if (!listed && it != known_members_.end()) out.push_back(it->second);
  }
  return out;
}

MemberStatus ClusterNode::status_of(raft::NodeId id) const {
  const raft::Membership& conf = raft_->conf();
  // The committed configuration is looked up only for a removed id (rare).
  if (!raft::was_removed(conf, id)) return member_status(conf, conf, id);
  const raft::Index committed = std::max(raft_->commit(), raft_->snapshot_meta().index);
  return member_status(conf, raft_->conf_at(committed), id);
}

void ClusterNode::note_membership() {
  const raft::Membership& conf = raft_->conf();
  if (conf_noted_once_ && conf == conf_noted_) {
    if (raft_->leader() != leader_noted_) {
      leader_noted_ = raft_->leader();
      transport_->set_members(transport_members());
    }
    return;
  }
  if (!conf_noted_once_) {
    for (const Member& m : config_.members) known_members_[m.id] = m;
  }
  conf_noted_ = conf;
  conf_noted_once_ = true;
  leader_noted_ = raft_->leader();
  const std::vector<Member> members = current_members();
  for (const Member& m : members) known_members_[m.id] = m;
  transport_->set_members(transport_members());
  std::map<raft::NodeId, std::string> addrs;
  for (const Member& m : members) addrs[m.id] = m.client.to_string();
  service_->set_client_addrs(std::move(addrs));
  spdlog::info("configuration (index {}): {}", raft_->conf_index(), raft::describe(conf));
  if (raft::was_removed(conf, config_.self) && !removed_noted_) {
    removed_noted_ = true;
    spdlog::warn("node {} is removed from the group (configuration at index {}): it takes no part "
                 "any more, and stops once a member says the removal committed (its id can never "
                 "rejoin)",
                 config_.self, raft_->conf_index());
  }
}

void ClusterNode::check_own_removal(TimeNs now) {
  // This node's own log says its removal committed: a removed leader that
  // answered its DELETE and handed over, or a follower that learned the
  // commit. It stops without waiting for a member to tell it (clients on
  // it then reconnect to a member and are redirected, instead of getting
  // `E no_leader` from it). Two heartbeats after it saw the commit, so the
  // DELETE's answer and the hand-over's TimeoutNow have left.
  if (removed_reason_ || raft_->role() == raft::Role::kLeader) return;
  const raft::Index committed = std::max(raft_->commit(), raft_->snapshot_meta().index);
  if (!raft::was_removed(raft_->conf_at(committed), config_.self)) return;
  if (own_removal_seen_ns_ == 0) {
    own_removal_seen_ns_ = now;
    return;
  }
  if (now - own_removal_seen_ns_ < 2 * config_.heartbeat_ns) return;
  const std::string why = "node " + std::to_string(config_.self) +
                          " was removed from the group (the removal committed in its own log): a "
                          "removed id never rejoins; add a new member with a new id and an empty "
                          "data dir (docs/cluster.md \"Replacing a member\")";
  spdlog::warn("{}: stopping", why);
  removed_reason_ = why;
}

void ClusterNode::refuse_start(const std::string& line) {
  spdlog::critical("{}", line);
  spdlog::default_logger()->flush();
  // The last stderr line says why (interfaces.md), whatever the log format.
  std::fprintf(stderr, "lockd: %s\n", line.c_str());
  std::fflush(stderr);
  std::_Exit(2);
}

void ClusterNode::on_peer_handshake(const Handshake& h) {
  const std::string me = "node " + std::to_string(config_.self);
  if (h.receiver_status == MemberStatus::kRemoved) {
    // At start (before a leader was ever heard of) a removed id exits; a
    // running node whose removal committed stops (as etcd's removed member
    // does): the daemon drains and exits 2, a restart would be refused.
    const std::string why = me + " was removed from the group (node " + std::to_string(h.sender) +
                            " says so): a removed id never rejoins; add a new member with a new "
                            "id and an empty data dir (docs/cluster.md \"Replacing a member\")";
    if (gate_ != Gate::kOpen || !heard_leader_) refuse_start(why);
    // Rule 4: a running member acts only on the word of an authenticated
    // member. Without peer authentication (--insecure-peers) anyone who
    // reaches the raft port can say this: log it, and hold campaigns
    // (a truly removed node must not disrupt the group) until a leader
    // that still sends to this node, or this node's own log, settles it.
    const bool authenticated =
        !config_.peer_security.secret.empty() || config_.peer_security.tls_server != nullptr;
    if (!authenticated) {
      ++removal_claims_;
      if (!removal_claim_held_) {
        removal_claim_held_ = true;
        raft_->hold_campaigns(true);
      }
      const TimeNs now = net::monotonic_now_ns();
      if (removal_claim_logged_ns_ == 0 || now - removal_claim_logged_ns_ >= 60'000'000'000) {
        removal_claim_logged_ns_ = now;
        spdlog::warn("{} was told it was removed by an unauthenticated peer claiming to be node {} "
                     "({} such claims so far): not stopping (peers are not authenticated: "
                     "--insecure-peers); holding campaigns until a leader or this node's own log "
                     "settles it",
                     me, h.sender, removal_claims_);
      }
      return;
    }
    if (!removed_reason_) {
      spdlog::warn("{}: stopping", why);
      removed_reason_ = why;
    }
    return;
  }
  if (gate_ == Gate::kOpen) return;
  PeerAnswer a;
  a.cluster_id = h.cluster_id;
  a.status = h.receiver_status;
  a.heard = h.heard_receiver;
  a.voters = h.voters;
  a.data_state = h.data_state;
  a.heard_voters = h.heard_voters;
  answers_[h.sender] = std::move(a);
  refreshed_at_[h.sender] = net::monotonic_now_ns();
  // A pending cluster init first: it answers 409 before the gate may
  // refuse this node on the same word.
  if (pending_change_ && pending_change_->change.kind == MemberChangeKind::kInit) {
    progress_change(net::monotonic_now_ns());
  }
  run_gate();
}

void ClusterNode::run_gate() {
  if (gate_ != Gate::kWaiting) return;
  DataDirState disk;  // waiting: empty, or a staged restore (the same rules)
  disk.staged_restore = true;
  const StartDecision d = decide_start(disk, GateFlags{config_.self, identity().members}, answers_);
  switch (d.verdict) {
    case StartVerdict::kRefuse: refuse_start(d.reason);
    case StartVerdict::kJoinVoter:
    case StartVerdict::kJoinLearner: open_gate(d); return;
    case StartVerdict::kVote:
    case StartVerdict::kWait:
      // An empty voter's word does not count (a member heard from it):
      // it may be let in or removed meanwhile, and the members say so only
      // when asked (on_tick asks again every kGateAskAgainNs).
      ask_again_ = d.ask_again;
      if (d.reason != wait_reason_) {
        wait_reason_ = d.reason;
        spdlog::info("{}", wait_reason_);
      }
      return;
  }
}

void ClusterNode::open_gate(const StartDecision& d) {
  if (d.verdict == StartVerdict::kJoinVoter) {
    // The group's configuration as its voters gave it, with the addresses
    // --peer and the handshakes gave (a recorded one from the leader wins).
    std::vector<raft::Member> members;
    for (raft::NodeId id : d.voters) {
      raft::Member m{id, true, "", ""};
      for (const Member& p : config_.members) {
        if (p.id == id) {
          m.client_addr = p.client.to_string();
          m.raft_addr = p.raft.to_string();
        }
      }
      members.push_back(std::move(m));
    }
    if (!raft_->set_bootstrap(d.voters, members)) {
      refuse_start("node " + std::to_string(config_.self) +
                   ": cannot take the group's configuration (this data dir records another)");
    }
  }
  // An empty record: from now on every id heard from is added before its
  // message counts (rule 3).
  const std::string err = write_heard(config_.data_dir, heard_, kSyncWalDefault);
  if (!err.empty()) fail_storage(err);
  gate_ = Gate::kOpen;
  refresh_wanted_.clear();
  PeerLocal local = transport_->local();
  local.data_state = DataState::kHasData;
  transport_->set_local(std::move(local));
  if (d.verdict == StartVerdict::kJoinVoter) {
    // The node that was asked to form the group campaigns again each
    // election timeout: a founder let in meanwhile leaves it the first
    // election (interfaces.md: it becomes the first leader), voting but
    // not campaigning for a few timeouts, unless a leader shows up first.
    founder_hold_until_ns_ =
        net::monotonic_now_ns() + 4 * static_cast<TimeNs>(config_.election_ticks) * config_.heartbeat_ns;
  }
  spdlog::info("{}", d.reason);
}

void ClusterNode::record_heard(raft::NodeId id) {
  heard_.insert(id);
  // Durable before the message reaches Raft (rule 3): a member this node
  // counted is never told "never heard from", even after a crash.
  const std::string err = write_heard(config_.data_dir, heard_, kSyncWalDefault);
  if (!err.empty()) fail_storage(err);
}

HeardReceiver ClusterNode::heard_of(raft::NodeId id) const {
  return heard_.contains(id) ? HeardReceiver::kHeard : HeardReceiver::kNever;
}

std::optional<std::vector<raft::NodeId>> ClusterNode::heard_voters() const {
  if (gate_ != Gate::kOpen || !raft_) return std::nullopt;
  std::vector<raft::NodeId> out;
  for (raft::NodeId id : conf_voters()) {
    if (heard_.contains(id)) out.push_back(id);
  }
  return out;
}

std::vector<raft::NodeId> ClusterNode::conf_voters() const {
  std::vector<raft::NodeId> out;
  if (!raft_) return out;
  for (const raft::Member& m : raft_->conf().members) {
    if (m.voter) out.push_back(m.id);
  }
  return out;
}

void ClusterNode::refresh_answers(TimeNs now) {
  // A member whose messages name us may have changed its answer (cluster
  // init, a learner added): a new handshake asks it again.
  std::vector<raft::NodeId> ids;
  for (auto it = refresh_wanted_.begin(); it != refresh_wanted_.end();) {
    const auto at = refreshed_at_.find(it->first);
    if (at != refreshed_at_.end() && now - at->second < kGateRefreshNs) {
      ++it;
      continue;
    }
    ids.push_back(it->first);
    refreshed_at_[it->first] = now;
    it = refresh_wanted_.erase(it);
  }
  if (ids.empty()) return;
  const std::vector<Member> all = transport_members();
  std::vector<Member> without;
  for (const Member& m : all) {
    if (std::find(ids.begin(), ids.end(), m.id) == ids.end()) without.push_back(m);
  }
  transport_->set_members(without);
  transport_->set_members(all);
}

void ClusterNode::init_group(MemberChangeDone done) {
  if (pending_change_ && pending_change_->change.kind == MemberChangeKind::kInit) {
    // Asked again while the first still waits (for the members' word, or
    // for the first leader's entries to commit), by a client that gave up
    // on it: both get the one answer.
    MemberChangeDone first = std::move(pending_change_->done);
    pending_change_->done = [first = std::move(first), done = std::move(done)](const MemberChangeResult& r) {
      first(r);
      done(r);
    };
    return;
  }
  if (pending_change_) {
    done(MemberChangeResult{409, "change_in_progress", "", std::nullopt});
    return;
  }
  if (gate_ != Gate::kWaiting || !raft_->conf().empty()) {
    done(MemberChangeResult{409, "already_formed",
                            "node " + std::to_string(config_.self) + " belongs to a formed group",
                            std::nullopt});
    return;
  }
  PendingChange p;
  p.change.kind = MemberChangeKind::kInit;
  p.done = std::move(done);
  p.deadline_ns = net::monotonic_now_ns() + config_.member_change_timeout_ns;
  pending_change_ = std::move(p);
  init_formed_here_ = false;
  init_formed_ns_ = 0;
  init_formed_index_ = 0;
  init_wait_reason_.clear();
  try_init();
}

void ClusterNode::try_init() {
  const auto formed = [&](std::string why) {
    finish_change(MemberChangeResult{409, "already_formed", std::move(why), std::nullopt});
  };
  std::vector<raft::NodeId> peers;
  for (const Member& m : config_.members) peers.push_back(m.id);
  std::sort(peers.begin(), peers.end());
  GateFlags flags{config_.self, peers};
  flags.alone_grace_over = net::monotonic_now_ns() - opened_ns_ >= kInitAloneGraceNs;
  const InitDecision d = decide_init(flags, answers_);
  if (d.verdict == InitVerdict::kAlreadyFormed) return formed(d.reason);
  if (d.verdict == InitVerdict::kWait) {
    // Until every --peer member said it has no group, this node (wiped,
    // restarted, asked again by a script that runs init on every deploy)
    // may be a member of one (start_gate.h decide_init). The request's
    // deadline answers 504.
    if (d.reason != init_wait_reason_) {
      init_wait_reason_ = d.reason;
      spdlog::info("{}", d.reason);
    }
    return;
  }
  std::vector<raft::NodeId> voters;
  std::vector<raft::Member> members;
  for (const Member& m : config_.members) {
    voters.push_back(m.id);
    members.push_back(raft::Member{m.id, true, m.client.to_string(), m.raft.to_string()});
  }
  std::sort(voters.begin(), voters.end());
  if (!raft_->set_bootstrap(voters, members)) {
    return formed("node " + std::to_string(config_.self) + " belongs to a formed group");
  }
  const std::string err = write_heard(config_.data_dir, heard_, kSyncWalDefault);
  if (!err.empty()) fail_storage(err);
  gate_ = Gate::kOpen;
  init_formed_here_ = true;
  refresh_wanted_.clear();
  {
    PeerLocal local = transport_->local();
    local.data_state = DataState::kHasData;
    transport_->set_local(std::move(local));
  }
  init_base_index_ = service_->state_machine().applied();
  spdlog::info("cluster init: forming the group with voters {}; this node campaigns first",
               raft::describe(raft_->conf()));
  raft_->campaign();
}

// --- admin changes -------------------------------------------------------------

MemberChangeResult ClusterNode::not_leader_result() const {
  MemberChangeResult r;
  r.status = 503;
  r.error = "not_leader";
  if (const PeerHello* h = peer_hello(raft_->leader()); h != nullptr && !h->admin_addr.empty()) {
    r.leader_admin = h->admin_addr;
  }
  return r;
}

void ClusterNode::change_members(const MemberChange& change, MemberChangeDone done) {
  if (pending_change_) {
    done(MemberChangeResult{409, "change_in_progress", "", std::nullopt});
    return;
  }
  if (raft_->role() != raft::Role::kLeader) {
    done(not_leader_result());
    return;
  }
  if (change.kind == MemberChangeKind::kAdd) {
    std::string error;
    if (change.id == raft::kNoNode) {
      done(MemberChangeResult{400, "bad_request", "id must be a positive number", std::nullopt});
      return;
    }
    std::vector<net::Endpoint> wanted;  // client, raft
    for (const std::string* a : {&change.client_addr, &change.raft_addr}) {
      std::optional<net::Endpoint> ep = net::parse_endpoint(*a, error);
      if (!ep || a->size() > raft::kMaxAddressBytes) {
        done(MemberChangeResult{400, "bad_request", "bad address '" + *a + "': " + error,
                                std::nullopt});
        return;
      }
      // Port 0 is "any free port" to a listener: no member can be dialled there.
      if (ep->port == 0) {
        done(MemberChangeResult{400, "bad_request", "bad address '" + *a + "': port 0",
                                std::nullopt});
        return;
      }
      wanted.push_back(*ep);
    }
    if (wanted[0].to_string() == wanted[1].to_string()) {
      done(MemberChangeResult{400, "bad_request",
                              "client_addr and raft_addr are the same address " +
                                  wanted[0].to_string(),
                              std::nullopt});
      return;
    }
    // An address a member already has (as config.cc refuses for --peer): the
    // new learner would never be reached, and the member it shadows would
    // refuse its connections. The same id is left to already_member.
    for (const Member& m : current_members()) {
      if (m.id == change.id) continue;
      for (const auto& [theirs, what] : {std::pair{&m.client, "client"}, std::pair{&m.raft, "raft"}}) {
        for (const net::Endpoint& ep : wanted) {
          if (ep.to_string() != theirs->to_string()) continue;
          done(MemberChangeResult{409, "address_in_use",
                                  ep.to_string() + " is node " + std::to_string(m.id) + "'s " +
                                      what + " address",
                                  std::nullopt});
          return;
        }
      }
    }
  }
  PendingChange p;
  p.change = change;
  p.done = std::move(done);
  p.deadline_ns = net::monotonic_now_ns() + config_.member_change_timeout_ns;
  pending_change_ = std::move(p);
  progress_change(net::monotonic_now_ns());
}

std::vector<raft::NodeId> ClusterNode::founders_not_joined(raft::Index index) const {
  std::vector<raft::NodeId> out;
  // Only a leader knows; once leadership moved, a majority joined.
  for (const raft::PeerProgress& pr : raft_->progress()) {
    if (pr.voter && pr.id != config_.self && pr.match < index) out.push_back(pr.id);
  }
  return out;
}

void ClusterNode::finish_change(MemberChangeResult r) {
  MemberChangeDone done = std::move(pending_change_->done);
  pending_change_.reset();
  done(r);
}

void ClusterNode::progress_change(TimeNs now) {
  if (!pending_change_) return;
  PendingChange& p = *pending_change_;
  const raft::Membership& conf = raft_->conf();
  if (p.change.kind == MemberChangeKind::kInit) {
    if (gate_ == Gate::kWaiting) {
      try_init();  // may answer (409) or form
      if (!pending_change_ || gate_ == Gate::kOpen) return;
      if (now >= p.deadline_ns) {
        return finish_change({504, "timeout", "cluster init: not every --peer member answered in "
                                              "time, so nothing was formed (a formed group must never "
                                              "be formed again); ask again once they are all up",
                              std::nullopt});
      }
      return;
    }
    if (!init_formed_here_) {
      // Let in by the gate meanwhile: another node's init formed the group.
      return finish_change({409, "already_formed",
                            "node " + std::to_string(config_.self) + " was let into a formed group",
                            std::nullopt});
    }
    // Formed once the first leader's entries committed and applied here
    // (the cluster id is in the table from its first LeaderStart on).
    const LockStateMachine& sm = service_->state_machine();
    if (init_formed_ns_ == 0 && raft_->leader() != raft::kNoNode && sm.applied() > init_base_index_ &&
        sm.cluster_id() != 0 && raft_->commit() > init_base_index_) {
      spdlog::info("cluster init: the group formed (cluster {}, leader {})",
                   cluster_id_text(sm.cluster_id()), raft_->leader());
      init_formed_ns_ = now;
      init_formed_index_ = raft_->commit();
    }
    if (init_formed_ns_ != 0) {
      // Answered once every founder is in (kInitJoinGraceNs says why).
      const std::vector<raft::NodeId> out = founders_not_joined(init_formed_index_);
      if (out.empty()) return finish_change({});
      if (now >= init_formed_ns_ + kInitJoinGraceNs || now >= p.deadline_ns) {
        std::string ids;
        for (raft::NodeId id : out) ids += (ids.empty() ? "" : ",") + std::to_string(id);
        spdlog::warn("cluster init: the group formed, but founder(s) {} did not join within {} ms (down, or "
                     "still waiting at the start gate): they join when they can; until then the group "
                     "needs every other voter",
                     ids, (now - init_formed_ns_) / kNsPerMs);
        return finish_change({});
      }
      return;
    }
    if (now >= p.deadline_ns) {
      return finish_change({504, "timeout", "the group's first entries did not commit in time (a "
                                            "majority of the --peer voters unreachable?); it may "
                                            "still form", std::nullopt});
    }
    return;
  }
  if (p.change.kind == MemberChangeKind::kTransfer) {
    if (!p.proposed) {
      if (raft_->role() != raft::Role::kLeader) return finish_change(not_leader_result());
      raft::NodeId target = p.change.id;
      if (target == raft::kNoNode) {
        raft::Index best = 0;
        for (const raft::PeerProgress& pr : raft_->progress()) {
          if (pr.id == config_.self || !pr.voter) continue;
          if (target == raft::kNoNode || pr.match > best) {
            target = pr.id;
            best = pr.match;
          }
        }
        if (target == raft::kNoNode) {
          return finish_change({409, "no_voter", "there is no other voter to hand leadership to",
                                std::nullopt});
        }
      }
      if (target == config_.self) return finish_change({});  // already leads
      if (raft::find_member(conf, target) == nullptr && !raft::is_voter(conf, target)) {
        return finish_change(
            {404, "not_found", "node " + std::to_string(target) + " is not a member", std::nullopt});
      }
      if (!raft::is_voter(conf, target)) {
        return finish_change({409, "not_a_voter",
                              "node " + std::to_string(target) + " is a learner; learners never lead",
                              std::nullopt});
      }
      if (!raft_->transfer_leadership(target)) return finish_change(not_leader_result());
      spdlog::info("handing leadership to node {} (admin request)", target);
      p.proposed = true;
      p.target = target;
      return;
    }
    if (raft_->leader() == p.target) return finish_change({});
    if (raft_->role() == raft::Role::kLeader && raft_->status().transferee == raft::kNoNode) {
      return finish_change({409, "transfer_failed",
                            "node " + std::to_string(p.target) +
                                " did not take over within an election timeout (not caught up, or "
                                "unreachable); still leading",
                            std::nullopt});
    }
    if (now >= p.deadline_ns) {
      return finish_change({504, "timeout", "leadership did not move in time", std::nullopt});
    }
    return;
  }
  if (!p.proposed) {
    if (raft_->role() != raft::Role::kLeader) return finish_change(not_leader_result());
    raft::ConfChange cc;
    cc.member.id = p.change.id;
    switch (p.change.kind) {
      case MemberChangeKind::kAdd:
        cc.type = raft::ConfChangeType::kAddLearner;
        cc.member.voter = false;
        cc.member.client_addr = p.change.client_addr;
        cc.member.raft_addr = p.change.raft_addr;
        break;
      case MemberChangeKind::kPromote: cc.type = raft::ConfChangeType::kPromote; break;
      case MemberChangeKind::kRemove: cc.type = raft::ConfChangeType::kRemove; break;
      case MemberChangeKind::kTransfer:
      case MemberChangeKind::kInit: break;
    }
    const raft::ProposeResult r = raft_->propose_conf_change(cc);
    const std::string id = "node " + std::to_string(p.change.id);
    switch (r.error) {
      case raft::ProposeError::kOk:
        p.proposed = true;
        p.index = r.index;
        p.term = r.term;
        spdlog::info("membership change proposed at index {}: {} {}", r.index,
                     raft::to_string(cc.type), p.change.id);
        return;
      case raft::ProposeError::kTermNotCommitted:
        // A leader of a few milliseconds: its first entry commits shortly.
        if (now >= p.deadline_ns) {
          return finish_change({504, "timeout", "this leader's first entry did not commit in time",
                                std::nullopt});
        }
        return;
      case raft::ProposeError::kChangeInProgress:
      case raft::ProposeError::kTransferring:
        return finish_change({409, "change_in_progress", "", std::nullopt});
      case raft::ProposeError::kNotCaughtUp:
        return finish_change({409, "not_caught_up", "", std::nullopt});
      case raft::ProposeError::kNotLeader:
        return finish_change(not_leader_result());
      case raft::ProposeError::kTooManyUncommitted:
      case raft::ProposeError::kTooLarge:
        return finish_change({503, "busy", "too many uncommitted entries; retry", std::nullopt});
      case raft::ProposeError::kBadChange:
        break;
    }
    switch (r.change_error) {
      case raft::ConfChangeError::kAlreadyMember:
        return finish_change({409, "already_member", id + " is already a member", std::nullopt});
      case raft::ConfChangeError::kRemovedId:
        return finish_change({409, "removed_id",
                              id + " was removed; ids are never reused: pick a new id",
                              std::nullopt});
      case raft::ConfChangeError::kUnknownMember:
        return finish_change({404, "not_found", id + " is not a member", std::nullopt});
      case raft::ConfChangeError::kNotLearner:
        return finish_change({409, "not_learner", id + " is already a voter", std::nullopt});
      case raft::ConfChangeError::kLastVoter:
        return finish_change({409, "last_voter", id + " is the only voter", std::nullopt});
      case raft::ConfChangeError::kTooManyMembers:
        return finish_change({409, "too_many_members", "the group is at its size limit",
                              std::nullopt});
      case raft::ConfChangeError::kTooManyRemoved:
        return finish_change({409, "too_many_removed", "the removed-id list is full", std::nullopt});
      case raft::ConfChangeError::kBadId:
      case raft::ConfChangeError::kBadAddress:
      case raft::ConfChangeError::kOk:
        return finish_change({400, "bad_request", std::string(raft::to_string(r.change_error)),
                              std::nullopt});
    }
    return;
  }
  if (raft_->commit() >= p.index) {
    const std::optional<raft::Term> t = raft_->term_at(p.index);
    // Compacted away: a snapshot covers only committed entries, and the
    // term check above passed while it was in the log.
    if (!t || *t == p.term) {
      // A leader that removed itself hands over first (interfaces.md): it
      // answers once it stepped down, which the core bounds by one
      // election period; the deadline guards the answer all the same.
      if (p.change.kind == MemberChangeKind::kRemove && p.change.id == config_.self &&
          raft_->role() == raft::Role::kLeader && now < p.deadline_ns) {
        if (!p.commit_logged) {
          p.commit_logged = true;
          spdlog::info("membership change at index {} committed: {}; handing over before "
                       "answering",
                       p.index, raft::describe(conf));
        }
        return;
      }
      if (!p.commit_logged) {
        spdlog::info("membership change at index {} committed: {}", p.index, raft::describe(conf));
      }
      return finish_change({});
    }
    return finish_change({503, "not_leader",
                          "", not_leader_result().leader_admin});
  }
  if (raft_->term() != p.term) {
    // Leadership moved before the change committed: it may still commit
    // under the next leader, or vanish. lockctl member list tells.
    return finish_change(not_leader_result());
  }
  if (now >= p.deadline_ns) {
    return finish_change({504, "timeout", "the change did not commit in time (a majority "
                                          "unreachable?); it may still take effect",
                          std::nullopt});
  }
}

}  // namespace lockd::cluster
