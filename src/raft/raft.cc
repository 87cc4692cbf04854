// The Raft core; see raft.h for the contract with the driver.
#include "lockd/raft/raft.h"

#include <algorithm>
#include <functional>
#include <iterator>
#include <limits>
#include <set>
#include <utility>

#include "lockd/common/check.h"
#include "lockd/raft/codec.h"
#include "lockd/raft/membership.h"

namespace lockd::raft {

std::string_view to_string(Role r) {
  switch (r) {
    case Role::kFollower: return "follower";
    case Role::kPreCandidate: return "pre-candidate";
    case Role::kCandidate: return "candidate";
    case Role::kLeader: return "leader";
  }
  return "?";
}

std::string_view to_string(ConfigError e) {
  switch (e) {
    case ConfigError::kOk: return "ok";
    case ConfigError::kNoId: return "no_id";
    case ConfigError::kNotAVoter: return "not_a_voter";
    case ConfigError::kBadVoters: return "bad_voters";
    case ConfigError::kBadTicks: return "bad_ticks";
    case ConfigError::kZeroLimit: return "zero_limit";
  }
  return "?";
}

std::string_view to_string(ProposeError e) {
  switch (e) {
    case ProposeError::kOk: return "ok";
    case ProposeError::kNotLeader: return "not_leader";
    case ProposeError::kTransferring: return "transferring";
    case ProposeError::kTooManyUncommitted: return "too_many_uncommitted";
    case ProposeError::kTooLarge: return "too_large";
    case ProposeError::kChangeInProgress: return "change_in_progress";
    case ProposeError::kTermNotCommitted: return "term_not_committed";
    case ProposeError::kBadChange: return "bad_change";
    case ProposeError::kNotCaughtUp: return "not_caught_up";
  }
  return "?";
}

std::string_view to_string(StepError e) {
  switch (e) {
    case StepError::kOk: return "ok";
    case StepError::kWrongRecipient: return "wrong_recipient";
    case StepError::kUnknownPeer: return "unknown_peer";
    case StepError::kMalformed: return "malformed";
  }
  return "?";
}

ConfigError validate(const Config& cfg) {
  if (cfg.id == kNoNode) return ConfigError::kNoId;
  if (cfg.voters.size() > kMaxVoters) return ConfigError::kBadVoters;
  std::set<NodeId> seen;
  for (NodeId v : cfg.voters) {
    if (v == kNoNode || !seen.insert(v).second) return ConfigError::kBadVoters;
  }
  if (!seen.empty() && !seen.contains(cfg.id)) return ConfigError::kNotAVoter;
  if (cfg.heartbeat_ticks < 1 || cfg.election_ticks <= cfg.heartbeat_ticks) return ConfigError::kBadTicks;
  if (cfg.max_inflight == 0 || cfg.max_entries_per_append == 0 || cfg.max_bytes_per_append == 0 ||
      cfg.snapshot_chunk_bytes == 0 || cfg.max_snapshot_bytes == 0 || cfg.max_snapshot_chunks_inflight == 0 ||
      cfg.max_uncommitted_entries == 0 || cfg.max_apply_entries == 0) {
    return ConfigError::kZeroLimit;
  }
  return ConfigError::kOk;
}

Raft::Raft(Config cfg, const Storage& storage) : cfg_(std::move(cfg)), rng_state_(cfg_.rng_seed) {
  LOCKD_CHECK(validate(cfg_) == ConfigError::kOk);
  if (!cfg_.voters.empty()) {
    bootstrap_conf_ = voters_only(cfg_.voters);
    for (const Member& m : cfg_.bootstrap_members) {
      for (Member& b : bootstrap_conf_.members) {
        if (b.id != m.id) continue;
        b.client_addr = m.client_addr;
        b.raft_addr = m.raft_addr;
      }
    }
  }
  HardState hs = storage.hard_state();
  term_ = hs.term;
  vote_ = hs.vote;
  snapshot_meta_ = storage.snapshot().meta;
  snapshot_data_ = in_memory_snapshot_bytes(storage.snapshot().data);
  auto stored = storage.entries();
  entries_.assign(stored.begin(), stored.end());
  log_base_ = snapshot_meta_.index;
  log_base_term_ = snapshot_meta_.term;
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    LOCKD_CHECK(entries_[i].index == log_base_ + 1 + i);
  }
  index_confs(0);
  // The state machine was restored from the snapshot; committed entries
  // after it are applied again as commit is (re)learned.
  applied_ = snapshot_meta_.index;
  commit_ = std::max(snapshot_meta_.index, std::min(hs.commit, last_index()));
  stable_index_ = last_index();
  unstable_from_ = last_index() + 1;
  handed_hs_ = HardState{term_, vote_, commit_};
  become_follower(term_, kNoNode);
  refresh_conf();
}

// --- small helpers ---

std::uint64_t Raft::random() {
  if (cfg_.random) return cfg_.random();
  // splitmix64: tiny, seedable, good enough for timeouts.
  std::uint64_t z = (rng_state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void Raft::reset_randomized_timeout() {
  auto base = static_cast<std::uint64_t>(cfg_.election_ticks);
  randomized_timeout_ticks_ = static_cast<int>(base + random() % base);
}

bool Raft::is_voter(NodeId id) const { return raft::is_voter(conf(), id); }

bool Raft::may_campaign() const {
  if (campaigns_held_) return false;
  if (is_voter(cfg_.id)) return true;
  // Our own removal is in the log but not known committed: the voters of
  // the new configuration may need us to finish it (our log holds it,
  // theirs may not, and they would refuse each other for it). We campaign
  // in that configuration — our own vote does not count — and, elected,
  // commit the removal and step down, as a removed leader does.
  return conf_index() > commit_ && was_removed(conf(), cfg_.id);
}

// --- configuration ---

const Membership& Raft::conf() const {
  if (cfg_.faults.conf_on_commit) {
    for (auto it = log_confs_.rbegin(); it != log_confs_.rend(); ++it) {
      if (it->first <= commit_) return it->second;
    }
  } else if (!log_confs_.empty()) {
    return log_confs_.back().second;
  }
  if (!snapshot_meta_.conf.empty()) return snapshot_meta_.conf;
  return bootstrap_conf_;
}

Index Raft::conf_index() const {
  if (!log_confs_.empty()) return log_confs_.back().first;
  return snapshot_meta_.conf.empty() ? 0 : snapshot_meta_.index;
}

Membership Raft::conf_at(Index i) const {
  LOCKD_CHECK(i >= snapshot_meta_.index);
  for (auto it = log_confs_.rbegin(); it != log_confs_.rend(); ++it) {
    if (it->first <= i) return it->second;
  }
  return snapshot_meta_.conf;
}

bool Raft::forget_progress(NodeId id) {
  if (role_ != Role::kLeader || id == cfg_.id) return false;
  Progress* pr = trk_.find(id);
  if (pr == nullptr || pr->match == 0) return false;
  // Commit never moves back (only a larger quorum index advances it), so a
  // voter's lower match is safe too; it only stops counting until it acks.
  pr->match = 0;
  pr->next = 1;
  pr->become_probe();
  return true;
}

void Raft::index_confs(std::size_t from) {
  for (std::size_t i = from; i < entries_.size(); ++i) {
    if (entries_[i].type != EntryType::kConfChange) continue;
    Membership c;
    std::string error;
    // Peer entries were checked in validate_message, ours were encoded
    // here, stored ones passed their CRC: a failure is our bug.
    LOCKD_CHECK(decode_membership(entries_[i].data, c, error));
    log_confs_.emplace_back(entries_[i].index, std::move(c));
  }
}

void Raft::refresh_conf() {
  const Membership& c = conf();
  std::vector<NodeId> voters = voter_ids(c);
  std::vector<NodeId> learners = learner_ids(c);
  if (cfg_.faults.learner_counts_as_voter) {
    voters.insert(voters.end(), learners.begin(), learners.end());
    learners.clear();
  }
  trk_.set_config(std::move(voters), std::move(learners), cfg_.id, role_ == Role::kLeader,
                  last_index() + 1, ticks_);
  if (lead_transferee_ != kNoNode && !is_voter(lead_transferee_)) lead_transferee_ = kNoNode;
}

bool Raft::removal_committed() const {
  return !is_voter(cfg_.id) && conf_index() <= commit_;
}

void Raft::maybe_step_down_removed() {
  if (role_ != Role::kLeader || cfg_.faults.removed_leader_keeps_leading) return;
  if (!removal_committed()) return;
  // Our removal is committed: the new configuration goes on without us.
  // Hand over to its most caught-up voter so it need not wait for an
  // election timeout: like a transfer (and as etcd-io/raft), refuse
  // proposals, bring it up to date, send TimeoutNow (it campaigns at once),
  // step down. We are not in any quorum (the tracker holds the new voters
  // only) and propose nothing new; what we replicate is what we already
  // had. One election period at most, then we step down anyway
  // (tick_heartbeat).
  if (!removed_handover_) {
    removed_handover_ = true;
    NodeId best = lead_transferee_;  // a transfer already running keeps its target
    if (best == kNoNode) {
      Index best_match = 0;
      for (const auto& [id, pr] : trk_.progress()) {
        if (!is_voter(id)) continue;
        if (best == kNoNode || pr.match > best_match) {
          best = id;
          best_match = pr.match;
        }
      }
      if (best == kNoNode) {
        become_follower(term_, kNoNode);
        return;
      }
      lead_transferee_ = best;
      election_elapsed_ticks_ = 0;  // the hand-over gets one election period
    }
    if (trk_.progress().at(best).match < last_index()) send_append(best, true);
  }
  if (lead_transferee_ == kNoNode) {
    become_follower(term_, kNoNode);
    return;
  }
  // TimeoutNow once the target holds our last entry *and* that entry is
  // committed (by the new voters, as the tracker counts): then every
  // proposal we accepted has its outcome decided in our own log, and the
  // requests behind them get real answers, not E indeterminate. Removed,
  // we never hear of those entries again. Both come within a round trip of
  // each other; the election period bounds the wait all the same.
  if (trk_.progress().at(lead_transferee_).match == last_index() && commit_ == last_index()) {
    Message m;
    m.type = MessageType::kTimeoutNow;
    m.to = lead_transferee_;
    send(std::move(m));
    note_handed_to(lead_transferee_);
    become_follower(term_, kNoNode);
  }
}

void Raft::note_handed_to(NodeId target) {
  handed_to_ = target;
  handed_to_term_ = term_;
}

NodeId Raft::leader_hint() const {
  if (leader_ != kNoNode) return leader_;
  // The TimeoutNow target campaigns in the next term and normally wins it.
  if (handed_to_ != kNoNode && (term_ == handed_to_term_ || term_ == handed_to_term_ + 1)) return handed_to_;
  return kNoNode;
}

Index Raft::last_index() const {
  return entries_.empty() ? log_base_ : entries_.back().index;
}

std::optional<Term> Raft::term_at(Index i) const {
  if (i == log_base_) return log_base_term_;
  if (i < log_base_ || i > last_index()) return std::nullopt;
  return entries_[i - log_base_ - 1].term;
}

Term Raft::last_term() const { return *term_at(last_index()); }

bool Raft::log_up_to_date(Term log_term, Index index) const {
  if (cfg_.faults.skip_log_up_to_date_check) return true;
  return log_term > last_term() || (log_term == last_term() && index >= last_index());
}

bool Raft::state_dirty() const {
  return term_ != handed_hs_.term || vote_ != handed_hs_.vote || unstable_from_ <= last_index() ||
         snapshot_to_install_;
}

void Raft::send(Message m) {
  m.from = cfg_.id;
  if (m.term == 0) m.term = term_;
  // Answers promise something about our state (a vote, "I have these
  // entries"); they wait until that state is durable. Requests do not.
  bool is_answer = m.type == MessageType::kVoteResp || m.type == MessageType::kAppendResp ||
                   m.type == MessageType::kHeartbeatResp || m.type == MessageType::kSnapshotResp;
  if (cfg_.faults.vote_before_persist && m.type == MessageType::kVoteResp) is_answer = false;
  if (cfg_.faults.ack_before_persist && m.type == MessageType::kAppendResp) is_answer = false;
  if (is_answer && state_dirty()) {
    msgs_after_persist_.push_back(std::move(m));
  } else if (is_answer && ready_outstanding_) {
    // Given while a Ready syncs, from state that Ready carries: it goes
    // once that sync ends (msgs_ may leave before, take_messages()).
    msgs_in_ready_.push_back(std::move(m));
  } else {
    msgs_.push_back(std::move(m));
  }
}

// --- role changes ---

void Raft::reset(Term term) {
  if (term_ != term) {
    term_ = term;
    if (!cfg_.faults.keep_vote_on_new_term) vote_ = kNoNode;
  }
  leader_ = kNoNode;
  election_elapsed_ticks_ = 0;
  heartbeat_elapsed_ticks_ = 0;
  reset_randomized_timeout();
  trk_.reset_votes();
  self_vote_pending_ = false;
  lead_transferee_ = kNoNode;
  removed_handover_ = false;
  trk_.stop_tracking();
  pending_broadcast_ = false;
  pending_commit_broadcast_ = false;
}

void Raft::become_follower(Term term, NodeId leader) {
  reset(term);
  role_ = Role::kFollower;
  leader_ = leader;
}

void Raft::become_pre_candidate() {
  LOCKD_CHECK(role_ != Role::kLeader);
  // PreVote changes neither term nor vote: a partitioned node polling in
  // vain never inflates its term and so never disrupts a healthy leader.
  trk_.reset_votes();
  self_vote_pending_ = false;
  leader_ = kNoNode;
  role_ = Role::kPreCandidate;
  reset_randomized_timeout();
  ++stats_.pre_votes_started;
}

void Raft::become_candidate() {
  LOCKD_CHECK(role_ != Role::kLeader);
  // Terms only come in up to kMaxTerm (validate_message), so only our own
  // campaigns move it on: 2^64 - 2^62 of them is not a thing that happens.
  LOCKD_CHECK(term_ < std::numeric_limits<Term>::max());
  reset(term_ + 1);
  vote_ = cfg_.id;
  role_ = Role::kCandidate;
  // Our own vote counts only once it is durable (see advance()): counting it
  // earlier lets a crash-and-restart vote again in the same term.
  self_vote_pending_ = true;
  ++stats_.elections_started;
}

void Raft::become_leader() {
  LOCKD_CHECK(role_ == Role::kCandidate);
  Term t = term_;
  reset(t);
  role_ = Role::kLeader;
  leader_ = cfg_.id;
  trk_.start_tracking(cfg_.id, last_index() + 1, cfg_.faults.assume_followers_committed ? commit_ : 0,
                      ticks_);
  ++stats_.leaderships;
  // The no-op lets this term commit everything before it (Figure 8: older
  // entries are only committed by committing one of our own term). A
  // configuration change waits for it too (thesis §4.1 and its errata: a
  // change proposed before the term's first commit could be decided by a
  // majority of a configuration an earlier leader's uncommitted change
  // already replaced).
  append_entry(EntryType::kNoop, {});
  term_start_index_ = last_index();
  elected_voters_ = trk_.voters();
}

void Raft::start_election(bool pre_vote, bool transfer) {
  if (!may_campaign() || role_ == Role::kLeader) return;
  if (pre_vote) {
    become_pre_candidate();
    if (poll(cfg_.id, true) > 0) {
      start_election(false, false);
      return;
    }
  } else {
    become_candidate();
  }
  MessageType type = pre_vote ? MessageType::kPreVote : MessageType::kVote;
  for (NodeId v : trk_.voters()) {
    if (v == cfg_.id) continue;
    Message m;
    m.type = type;
    m.to = v;
    m.term = pre_vote ? term_ + 1 : term_;
    m.log_term = last_term();
    m.index = last_index();
    m.transfer = transfer;
    send(std::move(m));
  }
}

int Raft::poll(NodeId from, bool granted) {
  trk_.record_vote(from, granted);
  switch (trk_.tally()) {
    case quorum::VoteResult::kWon: return 1;
    case quorum::VoteResult::kLost: return -1;
    case quorum::VoteResult::kPending: return 0;
  }
  return 0;
}

bool Raft::set_bootstrap(std::vector<NodeId> voters, const std::vector<Member>& members) {
  if (voters.empty() || !log_confs_.empty() || !snapshot_meta_.conf.empty() || role_ == Role::kLeader) {
    return false;
  }
  cfg_.voters = std::move(voters);
  cfg_.bootstrap_members = members;
  bootstrap_conf_ = voters_only(cfg_.voters);
  for (const Member& m : cfg_.bootstrap_members) {
    for (Member& b : bootstrap_conf_.members) {
      if (b.id != m.id) continue;
      b.client_addr = m.client_addr;
      b.raft_addr = m.raft_addr;
    }
  }
  refresh_conf();
  return true;
}

void Raft::campaign() {
  if (role_ == Role::kLeader) return;
  start_election(cfg_.pre_vote, false);
}

// --- ticks ---

void Raft::tick() {
  ++ticks_;
  if (role_ == Role::kLeader) {
    tick_heartbeat();
  } else {
    tick_election();
  }
}

void Raft::tick_election() {
  if (!may_campaign()) {
    // A learner (or a node waiting for its configuration) never campaigns,
    // but the leader it heard of must still time out for it: otherwise
    // its lease check would ignore, forever, the vote requests of a new
    // leader it must help elect once it is promoted by an entry it lacks.
    election_elapsed_ticks_ = std::min(election_elapsed_ticks_ + 1, randomized_timeout_ticks_);
    if (election_elapsed_ticks_ >= randomized_timeout_ticks_) leader_ = kNoNode;
    return;
  }
  ++election_elapsed_ticks_;
  if (election_elapsed_ticks_ >= randomized_timeout_ticks_) {
    election_elapsed_ticks_ = 0;
    start_election(cfg_.pre_vote, false);
  }
}

bool Raft::quorum_active() const {
  return trk_.quorum_active(cfg_.id, cfg_.faults.check_quorum_counts_sends);
}

void Raft::tick_heartbeat() {
  ++heartbeat_elapsed_ticks_;
  ++election_elapsed_ticks_;
  if (election_elapsed_ticks_ >= cfg_.election_ticks) {
    election_elapsed_ticks_ = 0;
    if (cfg_.check_quorum) {
      if (!quorum_active()) {
        ++stats_.step_downs_check_quorum;
        become_follower(term_, kNoNode);
        return;
      }
      trk_.reset_recent_active();
    }
    if (removed_handover_) {
      // A removed leader's hand-over did not finish in one election
      // period: step down; the new voters elect on their own timeout.
      become_follower(term_, kNoNode);
      return;
    }
    // A transfer that did not finish in one election period is abandoned
    // so the leader accepts proposals again.
    lead_transferee_ = kNoNode;
  }
  if (heartbeat_elapsed_ticks_ >= cfg_.heartbeat_ticks) {
    heartbeat_elapsed_ticks_ = 0;
    for (auto& [id, pr] : trk_.progress()) {
      send_heartbeat(id);
      if (pr.state == ProgressState::kSnapshot) {
        if (!pr.snapshot_progressed) {
          // No ack for a whole heartbeat period: assume the window was
          // lost and resend from what the follower acknowledged.
          pr.snapshot_sent = pr.snapshot_offset;
          pr.snapshot_all_sent = false;
          pr.snapshot_rewound_to = kNoRewind;
          send_snapshot_chunks(id, pr);
        }
        pr.snapshot_progressed = false;
      }
    }
  }
}

// --- proposals, transfer, compaction ---

void Raft::append_entry(EntryType type, std::string data) {
  Entry e;
  e.term = term_;
  e.index = last_index() + 1;
  e.type = type;
  e.data = std::move(data);
  entries_.push_back(std::move(e));
  pending_broadcast_ = true;
  if (type == EntryType::kConfChange) {
    index_confs(entries_.size() - 1);
    refresh_conf();  // in force from now on, committed or not
  }
}

ProposeResult Raft::propose(std::string data) {
  ProposeResult r;
  if (role_ != Role::kLeader) {
    r.error = ProposeError::kNotLeader;
    return r;
  }
  if (lead_transferee_ != kNoNode) {
    r.error = ProposeError::kTransferring;
    return r;
  }
  if (last_index() - commit_ >= cfg_.max_uncommitted_entries) {
    r.error = ProposeError::kTooManyUncommitted;
    return r;
  }
  if (data.size() > cfg_.max_bytes_per_append) {
    r.error = ProposeError::kTooLarge;
    return r;
  }
  append_entry(EntryType::kCommand, std::move(data));
  r.index = last_index();
  r.term = term_;
  return r;
}

ProposeResult Raft::propose_conf_change(const ConfChange& cc) {
  ProposeResult r;
  if (role_ != Role::kLeader) {
    r.error = ProposeError::kNotLeader;
    return r;
  }
  if (lead_transferee_ != kNoNode) {
    r.error = ProposeError::kTransferring;
    return r;
  }
  if (!cfg_.faults.concurrent_changes) {
    if (commit_ < term_start_index_) {
      r.error = ProposeError::kTermNotCommitted;
      return r;
    }
    if (conf_index() > commit_) {
      r.error = ProposeError::kChangeInProgress;
      return r;
    }
  }
  if (last_index() - commit_ >= cfg_.max_uncommitted_entries) {
    r.error = ProposeError::kTooManyUncommitted;
    return r;
  }
  LOCKD_CHECK(!conf().empty());  // a leader is a voter of a known configuration
  Membership next;
  if (ConfChangeError e = apply_change(conf(), cc, next); e != ConfChangeError::kOk) {
    r.error = ProposeError::kBadChange;
    r.change_error = e;
    return r;
  }
  if (cc.type == ConfChangeType::kPromote) {
    const Progress* pr = trk_.find(cc.member.id);
    if (pr == nullptr || pr->state != ProgressState::kReplicate || !pr->recent_active ||
        pr->match + cfg_.promote_max_lag < commit_) {
      r.error = ProposeError::kNotCaughtUp;
      return r;
    }
  }
  append_entry(EntryType::kConfChange, encode_membership(next));
  r.index = last_index();
  r.term = term_;
  return r;
}

bool Raft::transfer_leadership(NodeId target) {
  if (role_ != Role::kLeader || target == cfg_.id || !is_voter(target)) return false;
  // A removed leader is already handing over, within one election period
  // from its removal's commit: a transfer now would restart that clock.
  if (removed_handover_) return false;
  lead_transferee_ = target;
  election_elapsed_ticks_ = 0;  // the transfer gets one election period
  Progress& pr = trk_.progress().at(target);
  if (pr.match == last_index()) {
    Message m;
    m.type = MessageType::kTimeoutNow;
    m.to = target;
    send(std::move(m));
    note_handed_to(target);
  } else {
    send_append(target, true);
  }
  return true;
}

std::vector<Entry> Raft::compact(Index index, std::shared_ptr<const SnapshotBytes> data, Index keep_entries) {
  LOCKD_CHECK(!ready_outstanding_);
  LOCKD_CHECK(data != nullptr);
  LOCKD_CHECK(index <= applied_);
  LOCKD_CHECK(index <= stable_index_);
  if (index <= snapshot_meta_.index) return {};
  Term t = *term_at(index);
  Membership c = conf_at(index);
  // The log keeps `keep_entries` before the snapshot's index (never fewer
  // than it held): a follower a little behind catches up from them.
  const Index base = std::max(log_base_, index > keep_entries ? index - keep_entries : 0);
  std::vector<Entry> dropped;
  if (base > log_base_) {
    // The kept suffix moves to a new buffer as large as the old one (so
    // the log grows back without reallocating); the old one, cut to the
    // compacted prefix, goes back to the caller. Only the suffix is
    // touched here: moving the prefix out instead touched every dropped
    // entry, pages the snapshot's fork() had made copy-on-write (92-113 ms
    // at 1 M locks, against 2-29 ms this way).
    const Term base_term = *term_at(base);
    const auto cut = static_cast<std::ptrdiff_t>(base - log_base_);
    std::vector<Entry> kept = std::exchange(spare_log_, {});
    kept.reserve(entries_.capacity());
    kept.insert(kept.end(), std::make_move_iterator(entries_.begin() + cut),
                std::make_move_iterator(entries_.end()));
    dropped = std::move(entries_);
    dropped.resize(static_cast<std::size_t>(cut));  // the moved-from suffix
    entries_ = std::move(kept);
    log_base_ = base;
    log_base_term_ = base_term;
  }
  std::erase_if(log_confs_, [&](const auto& lc) { return lc.first <= index; });
  snapshot_meta_ = SnapshotMeta{index, t, std::move(c)};
  snapshot_data_ = std::move(data);
  return dropped;
}

void Raft::recycle_log_buffer(std::vector<Entry> buffer) {
  LOCKD_CHECK(buffer.empty());
  if (buffer.capacity() > spare_log_.capacity()) spare_log_ = std::move(buffer);
}

void Raft::rehome_snapshot_bytes(Index index, std::shared_ptr<const SnapshotBytes> bytes) {
  LOCKD_CHECK(bytes != nullptr);
  if (index != snapshot_meta_.index) return;
  LOCKD_CHECK(bytes->size() == snapshot_data_->size());
  snapshot_data_ = std::move(bytes);
}

// --- messages ---

StepError Raft::validate_message(const Message& m) const {
  if (m.to != cfg_.id) return StepError::kWrongRecipient;
  // Not only members: a new leader may be a voter we have not heard of yet
  // (its promotion is in the log we are about to receive). Who may connect
  // at all is the transport's business.
  if (m.from == cfg_.id || m.from == kNoNode) return StepError::kUnknownPeer;
  // Every other term in a message is checked against m.term below (or is
  // only compared with ours), so this one bound keeps all of them in range.
  if (m.term > kMaxTerm) return StepError::kMalformed;
  if ((m.type == MessageType::kVote || m.type == MessageType::kPreVote) && m.log_term > m.term) {
    return StepError::kMalformed;
  }
  if (m.type == MessageType::kAppend) {
    if (m.entries.size() > kMaxDecodedEntries) return StepError::kMalformed;
    Index want = m.index + 1;
    Term prev = m.log_term;
    for (const Entry& e : m.entries) {
      if (e.index != want || e.term < prev || e.term > m.term) return StepError::kMalformed;
      if (!known_entry_type(static_cast<std::uint8_t>(e.type))) return StepError::kMalformed;
      if (e.type == EntryType::kConfChange) {
        Membership c;
        std::string error;
        if (!decode_membership(e.data, c, error)) return StepError::kMalformed;
      }
      ++want;
      prev = e.term;
    }
    if (m.log_term > m.term) return StepError::kMalformed;
  }
  if (m.type == MessageType::kSnapshot) {
    if (m.snapshot.index == 0 || m.total_bytes > cfg_.max_snapshot_bytes ||
        m.offset > m.total_bytes || m.chunk.size() > m.total_bytes - m.offset ||
        m.done != (m.offset + m.chunk.size() == m.total_bytes) || m.snapshot.term > m.term) {
      return StepError::kMalformed;
    }
  }
  return StepError::kOk;
}

StepError Raft::step(Message&& m) {
  movable_msg_ = &m;
  const StepError e = step(static_cast<const Message&>(m));
  movable_msg_ = nullptr;
  return e;
}

StepError Raft::step(const Message& m) {
  if (StepError e = validate_message(m); e != StepError::kOk) {
    ++stats_.rejected_messages;
    return e;
  }
  bool is_vote_request = m.type == MessageType::kVote || m.type == MessageType::kPreVote;
  if (m.term > term_) {
    if (is_vote_request) {
      // Leader stickiness: while we hear from a leader, a vote request is
      // from a disruptive node (rejoining after a partition): ignore it.
      // A transfer's campaign is the leader's own wish and passes.
      bool in_lease = cfg_.check_quorum && leader_ != kNoNode &&
                      election_elapsed_ticks_ < cfg_.election_ticks && !cfg_.faults.ignore_leader_lease;
      if (in_lease && !m.transfer) return StepError::kOk;
    }
    if (m.type == MessageType::kPreVote) {
      // Never changes our term: it is only a poll.
    } else if (m.type == MessageType::kPreVoteResp && !m.reject) {
      // A grant carries the term we would campaign at, not a newer one.
    } else {
      bool from_leader = m.type == MessageType::kAppend || m.type == MessageType::kHeartbeat ||
                         m.type == MessageType::kSnapshot;
      become_follower(m.term, from_leader ? m.from : kNoNode);
    }
  } else if (m.term < term_ &&
             !(cfg_.faults.accept_stale_responses &&
               (m.type == MessageType::kAppendResp || m.type == MessageType::kVoteResp)) &&
             !(cfg_.faults.accept_stale_append_responses && m.type == MessageType::kAppendResp)) {
    if ((cfg_.check_quorum || cfg_.pre_vote) &&
        (m.type == MessageType::kAppend || m.type == MessageType::kHeartbeat)) {
      // A stale leader (say, back from a partition) is told our term so it
      // steps down; without this it would never learn with PreVote on.
      Message r;
      r.type = MessageType::kAppendResp;
      r.to = m.from;
      r.index = 0;
      r.reject = false;
      send(std::move(r));
    } else if (m.type == MessageType::kPreVote) {
      Message r;
      r.type = MessageType::kPreVoteResp;
      r.to = m.from;
      r.reject = true;
      send(std::move(r));
    }
    return StepError::kOk;
  }

  if (is_vote_request) {
    handle_vote_request(m);
    return StepError::kOk;
  }
  switch (role_) {
    case Role::kLeader: step_leader(m); break;
    case Role::kCandidate:
    case Role::kPreCandidate: step_candidate(m); break;
    case Role::kFollower: step_follower(m); break;
  }
  return StepError::kOk;
}

void Raft::handle_vote_request(const Message& m) {
  bool pre = m.type == MessageType::kPreVote;
  bool can_vote = vote_ == m.from || (vote_ == kNoNode && leader_ == kNoNode) ||
                  (pre && m.term > term_);
  Message r;
  r.type = pre ? MessageType::kPreVoteResp : MessageType::kVoteResp;
  r.to = m.from;
  if (can_vote && log_up_to_date(m.log_term, m.index)) {
    // A PreVote grant answers at the polled term, so the pre-candidate can
    // tell it apart from stale answers.
    r.term = m.term;
    r.reject = false;
    if (!pre) {
      vote_ = m.from;
      election_elapsed_ticks_ = 0;
    }
  } else {
    r.reject = true;
  }
  send(std::move(r));
}

void Raft::step_candidate(const Message& m) {
  switch (m.type) {
    case MessageType::kAppend:
      become_follower(m.term, m.from);
      handle_append(m);
      return;
    case MessageType::kHeartbeat:
      become_follower(m.term, m.from);
      handle_heartbeat(m);
      return;
    case MessageType::kSnapshot:
      become_follower(m.term, m.from);
      handle_snapshot_chunk(m);
      return;
    case MessageType::kPreVoteResp:
    case MessageType::kVoteResp: {
      bool mine = (role_ == Role::kPreCandidate && m.type == MessageType::kPreVoteResp) ||
                  (role_ == Role::kCandidate && m.type == MessageType::kVoteResp);
      if (!mine) return;
      int outcome = poll(m.from, !m.reject);
      if (outcome > 0) {
        if (role_ == Role::kPreCandidate) {
          start_election(false, false);
        } else if (!self_vote_pending_) {
          become_leader();
        }
      } else if (outcome < 0) {
        become_follower(term_, kNoNode);
      }
      return;
    }
    default:
      return;  // answers to a leadership we no longer hold
  }
}

void Raft::step_follower(const Message& m) {
  switch (m.type) {
    case MessageType::kAppend:
      election_elapsed_ticks_ = 0;
      leader_ = m.from;
      handle_append(m);
      return;
    case MessageType::kHeartbeat:
      election_elapsed_ticks_ = 0;
      leader_ = m.from;
      handle_heartbeat(m);
      return;
    case MessageType::kSnapshot:
      election_elapsed_ticks_ = 0;
      leader_ = m.from;
      handle_snapshot_chunk(m);
      return;
    case MessageType::kTimeoutNow:
      // The leader hands over: campaign at once, skipping PreVote (the
      // leader is alive, so a poll would be refused by its lease).
      start_election(false, true);
      return;
    default:
      return;
  }
}

void Raft::commit_to(Index index) {
  index = std::min(index, last_index());
  if (index > commit_) {
    commit_ = index;
    if (cfg_.faults.conf_on_commit) refresh_conf();
  }
}

void Raft::truncate_and_append(std::span<const Entry> entries, bool take) {
  if (entries.empty()) return;
  Index first = entries.front().index;
  LOCKD_CHECK(first > snapshot_meta_.index && first <= last_index() + 1);
  entries_.resize(first - log_base_ - 1);
  bool conf_changed = false;
  while (!log_confs_.empty() && log_confs_.back().first >= first) {
    log_confs_.pop_back();  // an uncommitted configuration is undone with its entry
    conf_changed = true;
  }
  const std::size_t pos = entries_.size();
  if (take) {
    // The caller's message is an rvalue (step(Message&&)): casting away
    // const on it is allowed, and its entries are not read again.
    Entry* first_mut = const_cast<Entry*>(entries.data());
    entries_.insert(entries_.end(), std::make_move_iterator(first_mut),
                    std::make_move_iterator(first_mut + entries.size()));
  } else {
    entries_.insert(entries_.end(), entries.begin(), entries.end());
  }
  const std::size_t confs_before = log_confs_.size();
  index_confs(pos);
  if (conf_changed || log_confs_.size() != confs_before) refresh_conf();
  unstable_from_ = std::min(unstable_from_, first);
  stable_index_ = std::min(stable_index_, first - 1);
}

void Raft::handle_append(const Message& m) {
  Message r;
  r.type = MessageType::kAppendResp;
  r.to = m.from;
  if (m.index < commit_) {
    // Everything up to commit matches any leader's log; say how far we are.
    r.index = commit_;
    send(std::move(r));
    return;
  }
  std::optional<Term> t = term_at(m.index);
  if (t && *t == m.log_term) {
    // Find the first entry we lack or that conflicts, keep the rest.
    std::size_t i = 0;
    for (; i < m.entries.size(); ++i) {
      const Entry& e = m.entries[i];
      std::optional<Term> mine = term_at(e.index);
      if (!mine || *mine != e.term) break;
    }
    if (i < m.entries.size()) {
      if (m.entries[i].index <= commit_) {
        // A leader asking us to rewrite a committed entry is a safety bug
        // on its side; refuse rather than corrupt the state machine.
        ++stats_.committed_conflicts;
        return;
      }
      truncate_and_append(std::span<const Entry>(m.entries).subspan(i), &m == movable_msg_);
    }
    Index last_new = m.index + m.entries.size();
    commit_to(std::min(m.commit, last_new));
    r.index = last_new;
    send(std::move(r));
    return;
  }
  // Reject with a hint: the largest index at or below prev whose term is
  // not newer than the leader's prev term. The leader can then skip a whole
  // term of mismatched entries per round trip instead of one entry.
  Index hint = std::min(m.index, last_index());
  while (hint > log_base_ && *term_at(hint) > m.log_term) --hint;
  r.reject = true;
  r.index = m.index;
  r.reject_hint = hint;
  r.log_term = *term_at(hint);
  send(std::move(r));
}

void Raft::handle_heartbeat(const Message& m) {
  commit_to(m.commit);
  Message r;
  r.type = MessageType::kHeartbeatResp;
  r.to = m.from;
  send(std::move(r));
}

void Raft::handle_snapshot_chunk(const Message& m) {
  Message r;
  r.type = MessageType::kSnapshotResp;
  r.to = m.from;
  r.snapshot = m.snapshot;
  if (m.snapshot.index <= commit_) {
    // We already have all of it; tell the leader where we really are.
    incoming_.reset();
    r.done = true;
    r.index = commit_;
    send(std::move(r));
    return;
  }
  r.index = m.snapshot.index;
  bool same = incoming_ && incoming_->meta == m.snapshot && incoming_->total_bytes == m.total_bytes &&
              incoming_->from == m.from && incoming_->term == m.term;
  if (m.offset == 0 && !same) {
    incoming_ = IncomingSnapshot{m.snapshot, m.total_bytes, m.from, m.term, {}};
    same = true;
  }
  if (same && m.offset + m.chunk.size() <= incoming_->data.size() && !m.done) {
    // A duplicate of a chunk we hold: just say how far we are.
    r.offset = incoming_->data.size();
    send(std::move(r));
    return;
  }
  if (!same || incoming_->data.size() != m.offset) {
    // A gap (lost chunk) or a different snapshot: ask for what we can use.
    r.reject = true;
    r.offset = same ? incoming_->data.size() : 0;
    if (!same) incoming_.reset();
    send(std::move(r));
    return;
  }
  incoming_->data.append(m.chunk);
  r.offset = incoming_->data.size();
  if (!m.done) {
    send(std::move(r));
    return;
  }
  std::string data = std::move(incoming_->data);
  incoming_.reset();
  // Grown by appends: up to twice its size reserved. It is kept as long as
  // it is the latest snapshot (sent to followers that need it).
  data.shrink_to_fit();
  if (cfg_.check_snapshot && !cfg_.check_snapshot(m.snapshot, data)) {
    // Refused before it is stored: the node keeps its state and can always
    // restart. The leader hears "nothing received" and starts over; a
    // leader whose snapshots never decode is a bug the counter shows.
    ++stats_.snapshots_refused;
    r.reject = true;
    r.offset = 0;
    send(std::move(r));
    return;
  }
  install_snapshot(m.snapshot, std::move(data));
  r.done = true;
  send(std::move(r));
}

void Raft::install_snapshot(const SnapshotMeta& meta, std::string data) {
  LOCKD_CHECK(meta.index > commit_);
  std::optional<Term> t = term_at(meta.index);
  if (t && *t == meta.term) {
    // Our log already extends it: keep the suffix (thesis §5.3).
    entries_.erase(entries_.begin(), entries_.begin() + static_cast<std::ptrdiff_t>(meta.index - log_base_));
    std::erase_if(log_confs_, [&](const auto& lc) { return lc.first <= meta.index; });
    stable_index_ = std::max(stable_index_, meta.index);
  } else {
    entries_.clear();
    log_confs_.clear();
    stable_index_ = meta.index;
    unstable_from_ = meta.index + 1;
  }
  unstable_from_ = std::max(unstable_from_, meta.index + 1);
  log_base_ = meta.index;
  log_base_term_ = meta.term;
  snapshot_meta_ = meta;
  snapshot_data_ = in_memory_snapshot_bytes(std::move(data));
  commit_ = meta.index;
  snapshot_to_install_ = true;
  ++stats_.snapshots_installed;
  refresh_conf();
}

// --- leader ---

void Raft::send_heartbeat(NodeId to) {
  const Progress& pr = trk_.progress().at(to);
  Message m;
  m.type = MessageType::kHeartbeat;
  m.to = to;
  // Never tell a follower a commit beyond what we know it holds: it could
  // hold a different entry there (from an older leader).
  m.commit = cfg_.faults.heartbeat_full_commit ? commit_ : std::min(pr.match, commit_);
  send(std::move(m));
}

bool Raft::send_append(NodeId to, bool send_if_empty) {
  Progress& pr = trk_.progress().at(to);
  switch (pr.state) {
    case ProgressState::kProbe:
      if (pr.probe_sent) return false;
      break;
    case ProgressState::kReplicate:
      if (pr.inflight.size() >= cfg_.max_inflight) return false;
      break;
    case ProgressState::kSnapshot:
      return false;
  }
  Index prev = pr.next - 1;
  std::optional<Term> prev_term = term_at(prev);
  if (!prev_term) {
    // The entries it needs are compacted away: send the snapshot instead.
    LOCKD_CHECK(prev < log_base_);
    start_snapshot(to, pr);
    return true;
  }
  Message m;
  m.type = MessageType::kAppend;
  m.to = to;
  m.index = prev;
  m.log_term = *prev_term;
  m.commit = commit_;
  std::size_t bytes = 0;
  for (Index i = pr.next; i <= last_index() && m.entries.size() < cfg_.max_entries_per_append; ++i) {
    const Entry& e = entries_[i - log_base_ - 1];
    if (!m.entries.empty() && bytes + e.data.size() > cfg_.max_bytes_per_append) break;
    bytes += e.data.size();
    m.entries.push_back(e);
  }
  if (m.entries.empty() && !send_if_empty) return false;
  if (pr.state == ProgressState::kReplicate && !m.entries.empty()) {
    // Optimistic: stream the next batch without waiting for this one.
    pr.next = m.entries.back().index + 1;
    pr.inflight.push_back(m.entries.back().index);
  } else if (pr.state == ProgressState::kProbe) {
    pr.probe_sent = true;
  }
  send(std::move(m));
  return true;
}

void Raft::start_snapshot(NodeId to, Progress& pr) {
  pr.state = ProgressState::kSnapshot;
  pr.inflight.clear();
  pr.snapshot_meta = snapshot_meta_;
  pr.snapshot_data = snapshot_data_;
  pr.snapshot_offset = 0;
  pr.snapshot_sent = 0;
  pr.snapshot_all_sent = false;
  pr.snapshot_progressed = true;
  pr.snapshot_rewound_to = kNoRewind;
  send_snapshot_chunks(to, pr);
}

void Raft::send_snapshot_chunks(NodeId to, Progress& pr) {
  const SnapshotBytes& data = *pr.snapshot_data;
  std::uint64_t total = data.size();
  std::uint64_t window = cfg_.max_snapshot_chunks_inflight * cfg_.snapshot_chunk_bytes;
  while (!pr.snapshot_all_sent && pr.snapshot_sent - pr.snapshot_offset < window) {
    std::uint64_t offset = pr.snapshot_sent;
    std::uint64_t len = std::min<std::uint64_t>(cfg_.snapshot_chunk_bytes, total - offset);
    Message m;
    m.type = MessageType::kSnapshot;
    m.to = to;
    m.snapshot = pr.snapshot_meta;
    m.offset = offset;
    m.total_bytes = total;
    m.chunk = data.read(offset, static_cast<std::size_t>(len));
    m.done = offset + len == total;
    send(std::move(m));
    pr.snapshot_sent = offset + len;
    pr.snapshot_all_sent = m.done;
  }
}

void Raft::broadcast_append(bool send_if_empty) {
  for (auto& [id, pr] : trk_.progress()) {
    // Keep streaming until the window is full or the follower is caught up.
    bool first = true;
    while (send_append(id, first && send_if_empty)) {
      first = false;
      if (pr.state != ProgressState::kReplicate) break;
    }
  }
}

bool Raft::maybe_commit() {
  if (role_ != Role::kLeader) return false;
  Index q = trk_.committed(cfg_.id, self_match(), cfg_.faults.commit_needs_all_voters);
  if (cfg_.faults.quorum_from_old_config) {
    // Planted bug: count the voters this leader was elected by.
    q = quorum::committed_index(elected_voters_, [&](NodeId v) -> Index {
      if (v == cfg_.id) return self_match();
      const Progress* pr = trk_.find(v);
      return pr == nullptr ? 0 : pr->match;
    });
  }
  if (q <= commit_) return false;
  // Figure 8: an entry from an older term may sit on a majority and still
  // be overwritten; only counting replicas of our own term is safe.
  if (!cfg_.faults.commit_old_term_entries && term_at(q) != term_) return false;
  commit_ = q;
  if (cfg_.faults.conf_on_commit) refresh_conf();
  return true;
}

void Raft::step_leader(const Message& m) {
  Progress* found = trk_.find(m.from);
  if (found == nullptr) return;
  Progress& pr = *found;
  pr.recent_active = true;
  pr.last_contact_tick = ticks_;
  switch (m.type) {
    case MessageType::kAppendResp:
      handle_append_resp(m);
      return;
    case MessageType::kHeartbeatResp:
      if (pr.state == ProgressState::kProbe) pr.probe_sent = false;
      // A lost append would otherwise block a full window forever.
      if (pr.state == ProgressState::kReplicate && pr.inflight.size() >= cfg_.max_inflight) {
        pr.inflight.pop_front();
      }
      // Behind: send even an empty append. If appends in flight were lost,
      // the follower rejects it and we fall back to probing from match.
      if (pr.match < last_index()) send_append(m.from, true);
      return;
    case MessageType::kSnapshotResp:
      handle_snapshot_resp(m);
      return;
    default:
      return;
  }
}

void Raft::handle_append_resp(const Message& m) {
  Progress& pr = trk_.progress().at(m.from);
  if (m.reject) {
    bool moved = false;
    if (pr.state == ProgressState::kReplicate) {
      if (m.index > pr.match) {
        pr.become_probe();
        pr.next = pr.match + 1;
        moved = true;
      }
    } else if (pr.state == ProgressState::kProbe && m.index == pr.next - 1) {
      if (m.index <= pr.match) {
        // It refuses an entry it acknowledged: it lost its log (a disk
        // replaced under the same id). Its old match is no longer true;
        // believing it, we would take every later rejection for a stale
        // answer and never send it anything again (issue 20).
        pr.match = std::min(pr.match, m.reject_hint);
      }
      // Skip back to the last index whose term is not newer than the
      // follower's term at its hint: all entries between surely conflict.
      Index idx = std::min(m.reject_hint, last_index());
      while (idx > log_base_ && *term_at(idx) > m.log_term) --idx;
      pr.next = std::max(std::min(m.index, idx + 1), pr.match + 1);
      pr.probe_sent = false;
      moved = true;
    }
    if (moved) send_append(m.from, true);
    return;
  }
  if (m.index > last_index()) return;  // cannot be from this term's log
  if (pr.maybe_update(m.index)) {
    if (pr.state == ProgressState::kProbe) {
      pr.become_replicate();
    } else if (pr.state == ProgressState::kSnapshot && pr.match >= pr.snapshot_meta.index) {
      pr.become_probe();
    }
    if (maybe_commit()) pending_commit_broadcast_ = true;
    pending_broadcast_ = true;
  } else if (pr.state == ProgressState::kProbe) {
    pr.probe_sent = false;
    pr.next = std::max(pr.next, pr.match + 1);
    if (pr.match < last_index()) send_append(m.from, false);
  }
  // (A removed leader's hand-over sends its TimeoutNow from
  // maybe_step_down_removed, once its last entry is also committed.)
  if (m.from == lead_transferee_ && pr.match == last_index() && !removed_handover_) {
    Message t;
    t.type = MessageType::kTimeoutNow;
    t.to = m.from;
    send(std::move(t));
    note_handed_to(m.from);
  }
}

void Raft::handle_snapshot_resp(const Message& m) {
  Progress& pr = trk_.progress().at(m.from);
  if (m.done) {
    if (m.index > pr.match) pr.match = m.index;
    pr.next = std::max(pr.next, pr.match + 1);
    if (pr.state == ProgressState::kSnapshot) {
      ++stats_.snapshots_sent;
      pr.become_probe();
      pr.next = pr.match + 1;
    }
    if (maybe_commit()) pending_commit_broadcast_ = true;
    send_append(m.from, true);
    return;
  }
  if (pr.state != ProgressState::kSnapshot || m.snapshot != pr.snapshot_meta) {
    return;  // about a snapshot we are no longer sending
  }
  pr.snapshot_progressed = true;
  if (m.reject) {
    // The follower has exactly m.offset bytes of it: go on from there. The
    // rest of the window behind a lost chunk draws the same answer; rewind
    // once per offset, not once per chunk.
    if (m.offset == pr.snapshot_rewound_to) return;
    pr.snapshot_rewound_to = m.offset;
    pr.snapshot_offset = m.offset;
    pr.snapshot_sent = m.offset;
    pr.snapshot_all_sent = false;
  } else {
    pr.snapshot_offset = std::max(pr.snapshot_offset, m.offset);
    pr.snapshot_sent = std::max(pr.snapshot_sent, pr.snapshot_offset);
  }
  send_snapshot_chunks(m.from, pr);
}

// --- Ready ---

bool Raft::has_ready() const {
  if (!msgs_.empty() || pending_broadcast_ || pending_commit_broadcast_) return true;
  if (HardState{term_, vote_, commit_} != handed_hs_) return true;
  if (unstable_from_ <= last_index() || snapshot_to_install_) return true;
  if (!msgs_after_persist_.empty()) return true;
  return applied_ < std::min(commit_, stable_index_);
}

Ready Raft::ready() {
  LOCKD_CHECK(!ready_outstanding_);
  if (role_ == Role::kLeader && (pending_broadcast_ || pending_commit_broadcast_)) {
    broadcast_append(pending_commit_broadcast_);
  }
  pending_broadcast_ = false;
  pending_commit_broadcast_ = false;
  maybe_step_down_removed();

  Ready rd;
  HardState hs{term_, vote_, commit_};
  if (hs != handed_hs_) {
    rd.hard_state = hs;
    handed_hs_ = hs;
  }
  if (snapshot_to_install_) {
    rd.snapshot = Snapshot{snapshot_meta_, snapshot_data_->read(0, static_cast<std::size_t>(snapshot_data_->size()))};
    snapshot_to_install_ = false;
  }
  // Views, not copies: valid until the next input or advance() (raft.h).
  const std::span<const Entry> log(entries_);
  if (unstable_from_ <= last_index()) {
    rd.entries = log.subspan(unstable_from_ - log_base_ - 1);
  }
  unstable_from_ = last_index() + 1;

  Index from = applied_;
  if (rd.snapshot) from = std::max(from, rd.snapshot->meta.index);
  Index to = std::min(commit_, stable_index_);
  if (to > from + cfg_.max_apply_entries) to = from + cfg_.max_apply_entries;
  if (to > from) rd.committed = log.subspan(from - log_base_, to - from);
  ready_applied_to_ = rd.committed.empty() ? from : rd.committed.back().index;

  rd.messages = std::move(msgs_);
  msgs_.clear();
  msgs_in_ready_ = std::move(msgs_after_persist_);
  msgs_after_persist_.clear();
  ready_hs_ = handed_hs_;
  ready_outstanding_ = true;
  return rd;
}

std::vector<Message> Raft::take_messages() {
  maybe_step_down_removed();  // as ready() does: a hand-over need not wait for the sync
  if (role_ == Role::kLeader && (pending_broadcast_ || pending_commit_broadcast_)) {
    broadcast_append(pending_commit_broadcast_);
    pending_broadcast_ = false;
    pending_commit_broadcast_ = false;
  }
  std::vector<Message> out = std::move(msgs_);
  msgs_.clear();
  return out;
}

void Raft::advance() {
  LOCKD_CHECK(ready_outstanding_);
  ready_outstanding_ = false;
  // What the Ready handed out is durable now; nothing appended since is.
  // Inputs taken while its sync ran (raft.h "Pipelined") appended past it
  // (unstable_from_ unmoved) or cut into it (truncate_and_append lowered
  // unstable_from_ to the cut): either way the durable prefix ends just
  // before unstable_from_.
  stable_index_ = unstable_from_ - 1;
  applied_ = std::max(applied_, ready_applied_to_);
  // Answers that waited for this Ready's persistence may go now.
  for (Message& m : msgs_in_ready_) msgs_.push_back(std::move(m));
  msgs_in_ready_.clear();
  // Our own vote counts once it is durable: it was cast in this Ready's
  // hard state, not in one still to come (an election started while the
  // sync ran waits for the next Ready).
  if (role_ == Role::kCandidate && self_vote_pending_ && vote_ == cfg_.id &&
      ready_hs_.term == term_ && ready_hs_.vote == cfg_.id) {
    self_vote_pending_ = false;
    int outcome = poll(cfg_.id, true);
    if (outcome > 0) become_leader();
  }
  if (role_ == Role::kLeader && maybe_commit()) pending_commit_broadcast_ = true;
}

// --- views ---

Status Raft::status() const {
  Status s;
  s.id = cfg_.id;
  s.role = role_;
  s.term = term_;
  s.vote = vote_;
  s.leader = leader_;
  s.commit = commit_;
  s.applied = applied_;
  s.first_index = log_base_ + 1;
  s.last_index = last_index();
  s.snapshot_index = snapshot_meta_.index;
  s.transferee = lead_transferee_;
  s.voter = is_voter(cfg_.id);
  s.learner = raft::is_learner(conf(), cfg_.id);
  s.conf_index = conf_index();
  return s;
}

std::vector<PeerProgress> Raft::progress() const {
  std::vector<PeerProgress> out;
  if (role_ != Role::kLeader) return out;
  PeerProgress self;
  self.id = cfg_.id;
  self.match = self_match();
  self.next = last_index() + 1;
  self.state = ProgressState::kReplicate;
  self.recent_active = true;
  self.voter = is_voter(cfg_.id);
  out.push_back(self);
  for (const auto& [id, pr] : trk_.progress()) {
    PeerProgress p;
    p.id = id;
    p.match = pr.match;
    p.next = pr.next;
    p.state = pr.state;
    p.recent_active = pr.recent_active;
    p.ticks_since_contact = ticks_ - pr.last_contact_tick;
    p.inflight = pr.inflight.size();
    p.snapshot_offset = pr.snapshot_offset;
    p.voter = is_voter(id);
    out.push_back(p);
  }
  return out;
}

}  // namespace lockd::raft
