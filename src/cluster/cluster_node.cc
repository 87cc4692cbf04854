// ClusterNode; see cluster_node.h.
#include "lockd/cluster/cluster_node.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#ifdef __GLIBC__
#include <event2/event.h>
#include <malloc.h>
#endif
#include <random>
#include <sys/stat.h>

#include "lockd/cluster/node_identity.h"
#include "lockd/cluster/peer_transport.h"
#include "lockd/cluster/restore.h"
#include "lockd/common/check.h"
#include "lockd/common/crc32c.h"
#include "lockd/net/clock.h"
#include "lockd/raft/driver.h"
#include "lockd/raft/membership.h"
#include "lockd/storage/file_snapshot_bytes.h"

namespace lockd::cluster {
namespace {

// After an O(table) turnover of memory — a snapshot installed (the old
// table, the checked copy and the chunks freed) — glibc keeps the freed
// pages in the middle of its heap: RSS stays at the high-water mark. Hand
// them back. Rare (a follower far behind) and bounded by the heap's free
// lists. Not after the node's own compaction: the log grows back into
// what it frees.
void return_freed_memory() {
#ifdef __GLIBC__
  ::malloc_trim(0);
#endif
}

// A measurement build (CMake option LOCKD_UNSAFE_NO_FSYNC) never syncs the
// WAL; docs/benchmarks/cluster.md ("The no-fsync ceiling") uses it to bound what the disk costs.
#ifdef LOCKD_UNSAFE_NO_FSYNC
constexpr bool kSyncWal = false;
#else
constexpr bool kSyncWal = true;
#endif

std::string undecodable_conf_line(raft::Index index, const std::string& why) {
  return "log entry " + std::to_string(index) +
         " is a membership change this binary cannot decode (" + why +
         "): stopping (an entry is never skipped; run a lockd that applies it, docs/cluster.md "
         "\"Upgrading\"; else a bug or a corrupt log)";
}

std::string unknown_entry_type_line(raft::Index index, std::uint8_t type) {
  return "log entry " + std::to_string(index) + " has entry type " + std::to_string(type) +
         ", which this binary does not know (it knows 0..2): stopping (an entry is never skipped; "
         "run a lockd that applies it, docs/cluster.md \"Upgrading\")";
}

}  // namespace

ClusterNode::ClusterNode(event_base* base, ClusterNodeConfig config)
    : base_(base),
      config_(std::move(config)),
      tick_timer_(base, [this] { on_tick(); }),
      service_timer_(base, [this] { on_service_timer(); }),
      kick_timer_(base, [] {}) {}

ClusterNode::~ClusterNode() {
  if (sync_event_ != nullptr) event_free(sync_event_);
}

bool ClusterNode::open(std::string& error) {
  opened_ns_ = net::monotonic_now_ns();
  storage::FileStorageOptions wal{config_.data_dir};
  wal.sync = kSyncWal;
  if (!kSyncWal) {
    spdlog::warn("built with LOCKD_UNSAFE_NO_FSYNC: the WAL is never synced, a crash loses "
                 "acknowledged writes; for measurements only");
  }
  storage_ = std::make_unique<storage::FileStorage>(wal);
  const raft::StorageStatus st = storage_->open();
  if (!st.ok()) {
    error = st.message;
    return false;
  }
  // A new cluster from a backup: stages the file in an empty data dir
  // before anything reads it (restore.h); cluster init forms the group from
  // it. A data dir with data ignores a stale flag (rule 2, case 2).
  if (!config_.restore_from.empty()) {
    error = restore_from_backup(*storage_, config_.data_dir, config_.restore_from, config_.limits, kSyncWal);
    if (!error.empty()) return false;
  }
  // Whose data dir this is: checked with the directory locked, before the
  // core reads the stored term and vote (node_identity.h). Written only in
  // listen(), once every address is bound.
  error = claim_data_dir(config_.data_dir, identity(), kSyncWal, /*write_if_absent=*/false,
                         &identity_);
  if (!error.empty()) return false;
  // An entry this binary cannot apply stops the node with one line naming
  // it (protocol.md §10 "Entry versions"), never an abort in the core: a
  // membership change whose encoding it does not know, say.
  for (const raft::Entry& e : storage_->entries()) {
    if (e.type != raft::EntryType::kConfChange) continue;
    raft::Membership conf;
    std::string why;
    if (!raft::decode_membership(e.data, conf, why)) {
      error = undecodable_conf_line(e.index, why);
      return false;
    }
  }
  snapshots_ = std::make_unique<storage::SnapshotWriter>(*storage_);
  if (config_.wal_sync_thread) {
    // The WAL's fdatasync runs there, off the loop (sync_thread.h). The
    // event only wakes the loop: after_turn() takes the result.
    sync_thread_ = std::make_unique<storage::SyncThread>();
    sync_event_ = event_new(base_, sync_thread_->notify_fd(), EV_READ | EV_PERSIST,
                            [](evutil_socket_t, short, void*) {}, nullptr);
    if (sync_event_ == nullptr || event_add(sync_event_, nullptr) != 0) {
      error = "cannot watch the sync thread's eventfd";
      return false;
    }
  }
  versions_ = read_versions(config_.data_dir);
  // The start gate, from the data dir alone (start_gate.h): vote with the
  // data, wait to be let in, or refuse.
  {
    std::string herr;
    std::optional<std::set<raft::NodeId>> heard = read_heard(config_.data_dir, herr);
    if (!herr.empty()) {
      error = herr;
      return false;
    }
    DataDirState disk;
    struct stat fst {};
    disk.identity = ::stat((config_.data_dir + "/" + kIdentityFile).c_str(), &fst) == 0;
    disk.identity_cluster_id = identity_.cluster_id;
    disk.identity_members = identity_.members;
    const raft::HardState hs = storage_->hard_state();
    const raft::SnapshotMeta& sm = storage_->snapshot().meta;
    disk.log = hs.term != 0 || !storage_->entries().empty();
    disk.snapshot = sm.index != 0;
    disk.restored = ::stat((config_.data_dir + "/" + kRestoredFile).c_str(), &fst) == 0;
    disk.heard = heard && !heard->empty();
    disk.recorded_conf = !sm.conf.empty() ||
                         std::any_of(storage_->entries().begin(), storage_->entries().end(),
                                     [](const raft::Entry& e) { return e.type == raft::EntryType::kConfChange; });
    // Seeded from a backup and never used since: no vote, no entry after
    // the file's snapshot. It waits for cluster init like an empty node.
    disk.staged_restore = disk.restored && disk.snapshot && hs.vote == raft::kNoNode &&
                          hs.term == sm.term && storage_->entries().empty();
    GateFlags flags{config_.self, identity().members};
    const StartDecision d = decide_start(disk, flags, {});
    if (d.verdict == StartVerdict::kRefuse) {
      error = d.reason;
      return false;
    }
    if (d.verdict == StartVerdict::kWait) {
      gate_ = Gate::kWaiting;
      wait_reason_ = d.reason;
    }
    if (heard) {
      heard_ = std::move(*heard);
    } else if (gate_ == Gate::kOpen) {
      // Data from before v1.3 kept no record: every member may have been
      // heard from (the safe answer for rule 3). Written in listen().
      for (const Member& m : config_.members) {
        if (m.id != config_.self) heard_.insert(m.id);
      }
      heard_missing_ = true;
    }
  }
  raft::Config rc;
  rc.id = config_.self;
  // A waiting node knows no voters: it votes for nothing until the start
  // gate lets it in or cluster init forms the group (raft.h Config::voters).
  if (gate_ == Gate::kOpen) {
    for (const Member& m : config_.members) {
      rc.voters.push_back(m.id);
      rc.bootstrap_members.push_back(
          raft::Member{m.id, true, m.client.to_string(), m.raft.to_string()});
    }
  }
  rc.election_ticks = config_.election_ticks;
  rc.heartbeat_ticks = 1;
  rc.max_uncommitted_entries = kMaxUncommittedProposals;
  // Elections must not run in lockstep across restarts of the same node.
  rc.rng_seed = std::random_device{}() ^ (static_cast<std::uint64_t>(net::monotonic_now_ns()) << 16) ^
                config_.self;
  if (raft::validate(rc) != raft::ConfigError::kOk) {
    error = std::string("raft config: ") + std::string(raft::to_string(raft::validate(rc)));
    return false;
  }
  // A snapshot from a peer is decoded and checked in full before Raft
  // stores it: one that would not install must never reach the disk, or
  // the node could not restart (issue 21). service_ is built below, before
  // any message can arrive.
  // The decoded machine is kept for install(), which would otherwise decode
  // the same bytes again.
  rc.check_snapshot = [this](const raft::SnapshotMeta& meta, std::string_view data) {
    std::string why;
    if (auto decoded = service_->state_machine().decode_snapshot(data, meta.index, why)) {
      checked_snapshot_ = CheckedSnapshot{meta.index, meta.term, data.size(), crc32c(data), std::move(decoded)};
      return true;
    }
    const TimeNs now = net::monotonic_now_ns();
    if (last_snapshot_refusal_warn_ns_ == 0 || now - last_snapshot_refusal_warn_ns_ >= kRefusalWarnIntervalNs) {
      last_snapshot_refusal_warn_ns_ = now;
      spdlog::warn("refusing a snapshot at index {} from the leader, nothing stored: {}",
                   meta.index, why);
    }
    return false;
  };
  raft_ = std::make_unique<raft::Raft>(rc, *storage_);
  if (heard_missing_) {
    // No record (data from before v1.3, or HEARD lost): every member of the
    // configuration the log records may have been heard from too — one
    // added since the --peer list was written (membership changes do not
    // touch unit files) as much as the --peer ones.
    for (const raft::Member& m : raft_->conf().members) {
      if (m.id != config_.self) heard_.insert(m.id);
    }
  }
  ReplicatedServiceOptions so;
  so.limits = config_.limits;
  for (const Member& m : config_.members) so.client_addrs[m.id] = m.client.to_string();
  so.wall_clock_ns = [] { return net::realtime_now_ns(); };
  so.cluster_supports = [this](std::uint16_t v) { return cluster_supports(v); };
  so.token_floor = config_.token_floor;

  service_ = std::make_unique<ReplicatedLockService>(*raft_, std::move(so));
  // Restart: the state machine starts from the stored snapshot; Raft
  // replays the committed entries after it.
  if (const raft::Snapshot& snap = storage_->snapshot(); snap.meta.index != 0) {
    if (!service_->install(snap, error)) {
      error = "data dir " + config_.data_dir + ": " + error;
      return false;
    }
    last_snapshot_index_ = snap.meta.index;
    last_snapshot_bytes_ = snap.data.size();
    rehome_snapshot_bytes(snap.meta);
    const std::uint64_t id = service_->state_machine().cluster_id();
    if (identity_.cluster_id != 0 && id != 0 && id != identity_.cluster_id) {
      error = "data dir " + config_.data_dir + ": its snapshot belongs to cluster " +
              cluster_id_text(id) + " but IDENTITY says cluster " +
              cluster_id_text(identity_.cluster_id) + "; refusing to start";
      return false;
    }
  }
  // The core and the state machine hold what they need now: the storage
  // stops keeping a second copy of the log (issue 23).
  storage_->release_read_side();
  // A member whose removal this node's log holds, committed, never comes back.
  if (raft::was_removed(raft_->conf(), config_.self) && raft_->conf_index() <= raft_->commit()) {
    error = "node " + std::to_string(config_.self) +
            " was removed from the group (configuration at index " +
            std::to_string(raft_->conf_index()) +
            "); a removed id never rejoins: add a new member with a new id and an empty data "
            "dir (docs/cluster.md \"Replacing a member\")";
    return false;
  }
  if (!raft_->conf().empty()) {
    // --peer is a bootstrap hint: say where it disagrees with the log.
    for (const Member& m : config_.members) {
      const raft::Member* c = raft::find_member(raft_->conf(), m.id);
      if (c == nullptr) {
        spdlog::warn("--peer names node {}, which is not a member of the replicated configuration "
                     "(index {}): ignored (the configuration decides; --peer is a bootstrap hint)",
                     m.id, raft_->conf_index());
      } else if (c->raft_addr != m.raft.to_string() || c->client_addr != m.client.to_string()) {
        spdlog::warn("--peer says node {} is at {}/{}, the replicated configuration (index {}) "
                     "says {}/{}: using the configuration's{}",
                     m.id, m.client.to_string(), m.raft.to_string(), raft_->conf_index(),
                     c->client_addr, c->raft_addr,
                     m.id == config_.self ? " for the others (this node listens where --peer says)"
                                          : "");
      }
    }
  }
  transport_ = std::make_unique<PeerTransport>(
      base_, config_.self, transport_members(), [this](raft::Message& m) {
        if (gate_ != Gate::kOpen) {
          ++gated_messages_;  // before the start gate lets it in: nothing reaches Raft
          // Its configuration names us now (it sends us messages): ask it
          // again with a new handshake, soon (not from inside its read) —
          // unless its last answer already named us (its messages say
          // nothing new then; on_tick's ask_again covers what may change).
          const auto a = answers_.find(m.from);
          if (a == answers_.end() || (a->second.status != MemberStatus::kVoter &&
                                      a->second.status != MemberStatus::kLearner)) {
            refresh_wanted_.emplace(m.from, net::monotonic_now_ns());
          }
          return;
        }
        const raft::NodeId from = m.from;
        const raft::MessageType type = m.type;
        if (m.type == raft::MessageType::kAppend &&
            (!config_.peer_security.secret.empty() || config_.peer_security.tls_server != nullptr)) {
          // A member's entry we cannot decode: stop with one line rather
          // than refuse its appends for ever (the core would call the
          // message malformed and the leader resend it). Only on the word
          // of an authenticated member (rule 4).
          for (const raft::Entry& e : m.entries) {
            std::string line;
            const auto entry_type = static_cast<std::uint8_t>(e.type);
            if (!raft::known_entry_type(entry_type)) {
              // A newer version's kind of entry (the codec keeps it for
              // this line; the core would refuse the whole message).
              line = unknown_entry_type_line(e.index, entry_type);
            } else if (e.type == raft::EntryType::kConfChange) {
              raft::Membership conf;
              std::string why;
              if (!raft::decode_membership(e.data, conf, why)) line = undecodable_conf_line(e.index, why);
            }
            if (line.empty()) continue;
            line += " (sent by node " + std::to_string(from) + ")";
            spdlog::critical("{}", line);
            spdlog::default_logger()->flush();
            std::fprintf(stderr, "lockd: %s\n", line.c_str());
            std::fflush(stderr);
            std::_Exit(1);
          }
        }
        // A PreVote and its answer are sent with nothing durable behind
        // them: a founder that answered one and crashed before its first
        // write never voted or acknowledged, and must still join under its
        // id (rule 3; found by lockd-sim --lifecycle, bug heard-counts-prevotes).
        if (!heard_.contains(from) && type != raft::MessageType::kPreVote &&
            type != raft::MessageType::kPreVoteResp) {
          record_heard(from);
        }
        const raft::StepError e = raft_->step(std::move(m));
        if (e != raft::StepError::kOk) {
          spdlog::debug("peer message from {} refused: {}", from, raft::to_string(e));
        } else if (removal_claim_held_ && from == raft_->leader() &&
                   (type == raft::MessageType::kAppend || type == raft::MessageType::kHeartbeat)) {
          // A leader still replicates to this node: the removal claim was
          // false (a removed node is sent nothing once it committed).
          removal_claim_held_ = false;
          raft_->hold_campaigns(false);
          spdlog::info("node {} leads and replicates to this node: campaigns resume (the claim "
                       "that this node was removed is not borne out)",
                       from);
        }
      });
  PeerLocal local;
  // The snapshot's id before IDENTITY records it (note_config): a restored
  // node refuses the old group's members from its first handshake.
  local.cluster_id = identity_.cluster_id != 0 ? identity_.cluster_id : service_->state_machine().cluster_id();
  local.entry_versions = {kEntryVersionMin, kEntryVersionMax};
  local.admin_addr = config_.admin_addr;
  const raft::Status rs = raft_->status();
  local.data_state = gate_ == Gate::kOpen && (rs.term != 0 || raft_->last_index() != 0 ||
                                               identity_.cluster_id != 0)
                         ? DataState::kHasData
                         : DataState::kEmpty;
  // Which start of this process (handshake tag 14): a leader believes an
  // "empty" only from a new one (PeerIncarnations).
  {
    std::random_device rd;
    while (local.incarnation == 0) local.incarnation = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  }
  transport_->set_local(std::move(local));
  transport_->set_security(config_.peer_security);
  if (!config_.peer_security.secret.empty()) {
    spdlog::info("peer transport: members prove they know the peer secret (--peer-secret-file)");
  }
  if (config_.peer_security.tls_server != nullptr) {
    spdlog::info("peer transport: mutual TLS, members' certificates must name lockd-node-<ID>");
  }
  transport_->set_on_handshake([this](const Handshake& h) {
    PeerHello& p = peer_hellos_[h.sender];
    if (p.entry_versions != h.entry_versions && p.entry_versions.known()) {
      spdlog::info("node {} now applies log entry versions {}..{} (was {}..{})", h.sender,
                   h.entry_versions.min, h.entry_versions.max, p.entry_versions.min,
                   p.entry_versions.max);
    }
    p = PeerHello{h.entry_versions, h.admin_addr, h.client_addr, h.data_state, h.cluster_id};
    // Remembered durably: a member down later still counts with what it
    // said (protocol.md §10 "Entry versions").
    const std::pair<std::uint16_t, std::uint16_t> range{h.entry_versions.min, h.entry_versions.max};
    if (h.entry_versions.known() && versions_[h.sender] != range) {
      versions_[h.sender] = range;
      if (const std::string err = write_versions(config_.data_dir, versions_, kSyncWal); !err.empty()) {
        fail_storage(err);
      }
    }
    if (incarnations_.lost_data(h) && gate_ == Gate::kOpen && raft_->forget_progress(h.sender)) {
      // Issue 37 case 6: a member (a learner wiped and rejoined) says its
      // data dir is empty: what it acknowledged before is gone, so it is
      // not caught up (promotion) until it acknowledges again. Only a new
      // start of it says so: a handshake of the start already seen was
      // written before what it acknowledged since (peer_handshake.h).
      spdlog::info("node {} says its data dir is empty: replicating to it from the start", h.sender);
    }
    on_peer_handshake(h);
  });
  // Issue 37 case 1: a node whose --peer names only itself, wiped, hears
  // from the members it no longer lists (authenticated: the transport asks
  // for it only with peer authentication on) what they say of it.
  transport_->set_on_stranger([this](const Handshake& h) {
    if (gate_ == Gate::kWaiting) on_peer_handshake(h);
  });
  {
    PeerLocal l = transport_->local();
    l.status_of = [this](raft::NodeId id) { return status_of(id); };
    l.heard_of = [this](raft::NodeId id) { return heard_of(id); };
    l.voters = [this] { return conf_voters(); };
    l.heard_voters = [this] { return heard_voters(); };
    transport_->set_local(std::move(l));
  }
  conf_noted_ = raft_->conf();
  conf_noted_once_ = true;
  if (gate_ == Gate::kWaiting) {
    if (config_.initial_state == InitialClusterState::kNew) {
      spdlog::warn("--initial-cluster-state new no longer forms a group (v1.3): this node waits "
                   "to be let in; form a new group once with lockctl cluster init (POST "
                   "/v1/cluster/init) on one node");
    }
    spdlog::info("{}", wait_reason_);
  } else if (!config_.restore_from.empty()) {
    spdlog::info("the data dir holds this node's data: --restore-from {} is ignored",
                 config_.restore_from);
  }
  spdlog::info("raft node {} of {} members: term {}, log {}..{}, commit {}, cluster {}, log entry "
               "versions {}..{}",
               config_.self, current_members().size(), raft_->term(), raft_->status().first_index,
               raft_->last_index(), raft_->commit(),
               identity_.cluster_id == 0 ? std::string("not formed yet")
                                         : cluster_id_text(identity_.cluster_id),
               kEntryVersionMin, kEntryVersionMax);
  return true;
}

void ClusterNode::set_admin_addr(const std::string& addr) {
  config_.admin_addr = addr;
  PeerLocal local = transport_->local();
  local.admin_addr = addr;
  transport_->set_local(std::move(local));
}

NodeIdentity ClusterNode::identity() const {
  NodeIdentity me{config_.self, {}};
  for (const Member& m : config_.members) me.members.push_back(m.id);
  std::sort(me.members.begin(), me.members.end());
  return me;
}

bool ClusterNode::listen(std::string& error) {
  if (!transport_->listen(error)) return false;
  // The last address is bound (the daemon binds the client and admin ports
  // first): now the data dir may be claimed.
  error = claim_data_dir(config_.data_dir, identity(), kSyncWal);
  if (!error.empty()) return false;
  if (heard_missing_) {
    error = write_heard(config_.data_dir, heard_, kSyncWal);
    if (!error.empty()) return false;
    heard_missing_ = false;
  }
  tick_timer_.arm_every(config_.heartbeat_ns);
  return true;
}

void ClusterNode::on_tick() {
  // Before the start gate lets it in the node neither campaigns nor times out.
  if (gate_ == Gate::kWaiting) {
    const TimeNs now = net::monotonic_now_ns();
    for (raft::NodeId id : ask_again_) {
      const auto at = refreshed_at_.find(id);
      if (at == refreshed_at_.end() || now - at->second >= kGateAskAgainNs) refresh_wanted_.try_emplace(id, now);
    }
    refresh_answers(now);
    progress_change(now);  // a cluster init waiting for a majority's word
  }
  if (gate_ == Gate::kOpen && (founder_hold_until_ns_ == 0 || heard_leader_ ||
                               net::monotonic_now_ns() >= founder_hold_until_ns_)) {
    founder_hold_until_ns_ = 0;
    raft_->tick();
  }
  watch_peers(net::monotonic_now_ns());
  if (gate_ == Gate::kOpen) check_own_removal(net::monotonic_now_ns());
}

void ClusterNode::watch_peers(TimeNs now) {
  // The members of the configuration in force (a member added later is
  // watched from then on).
  for (const Member& m : current_members()) {
    if (m.id == config_.self) continue;
    const PeerStats* ps = transport_->peer_stats(m.id);
    const bool up = ps != nullptr && (ps->link == LinkState::kConnected || ps->inbound_connected);
    auto it = link_watch_.find(m.id);
    if (it == link_watch_.end()) {
      it = link_watch_
               .emplace(m.id, LinkWatch(fmt::format("node {} (raft {})", m.id, m.raft.to_string()),
                                        fmt::format("node {}", m.id), now))
               .first;
    }
    if (auto line = it->second.observe(up, now)) spdlog::warn("{}", *line);
  }
}

void ClusterNode::on_service_timer() {
  armed_service_ns_.reset();
  service_->on_time(net::monotonic_now_ns());
}

void ClusterNode::after_turn() {
  if (!raft_) return;
  if (armed_service_ns_ && net::monotonic_now_ns() >= *armed_service_ns_) {
    // Due by the clock though the timerfd has not fired: the clock jumped
    // forward after its delay was set (libfaketime in the chaos runs). As
    // a libevent timer would at its next look.
    on_service_timer();
  }
  // The batch on the sync thread is durable: what waited for it may go
  // (the core releases the answers in its next Ready).
  if (syncing()) {
    if (const std::optional<int> err = sync_thread_->take()) {
      const raft::StorageStatus st = storage_->synced(*err);
      // Never advance() past a failed sync: stop now (storage.h).
      if (!st.ok()) fail_storage(st.message);
      raft::complete_ready(*raft_);
    }
  }
  // Between two batches, the only moment the WAL and the core's log may be
  // compacted.
  if (!syncing()) maybe_snapshot();
  dropped_entries_.free_some(kDroppedEntriesFreedPerTurn);
  // The next compaction moves the log into the emptied buffer, when the
  // snapshots are made without a fork: after a fork its pages fault again
  // anyway, and a large table's log buffer (megabytes) is better freed.
  if (std::vector<raft::Entry> spare = dropped_entries_.take_spare();
      spare.capacity() > 0 && snapshots_->timing().on_thread) {
    raft_->recycle_log_buffer(std::move(spare));
  }
  // Each round: notice role changes and propose what was deferred, then
  // one Ready cycle. Apply never proposes (Raft is mid-cycle), so what it
  // defers goes out in the next round. A round that leaves a batch on the
  // sync thread ends the rounds: the next batch forms while it syncs.
  for (std::size_t round = 0; round < kMaxReadyRoundsPerTurn; ++round) {
    service_->sync(net::monotonic_now_ns());
    if (syncing() || !raft_->has_ready()) break;
    bool pending = false;  // = syncing(): write() left the batch's sync to the sync thread
    const raft::StorageStatus st = raft::start_ready(*raft_, *this, pending);
    // Never advance() past a failed write: stop now (storage.h).
    if (!st.ok()) fail_storage(st.message);
  }
  // The leader streams what was proposed meanwhile to the followers now,
  // while its own copy waits for the sync in flight.
  if (syncing()) raft::send_while_syncing(*raft_, *this);
  const TimeNs now = net::monotonic_now_ns();
  service_->sync(now);
  note_table_floor(now);
  note_config();
  note_membership();
  if (raft_->leader() != last_leader_) {
    last_leader_ = raft_->leader();
    ++leader_changes_;
    if (last_leader_ == raft::kNoNode) {
      spdlog::warn("no leader in term {}: requests get E no_leader until an election ends",
                   raft_->term());
    } else if (last_leader_ == config_.self) {
      spdlog::warn("following leader {} (this node) in term {}", last_leader_, raft_->term());
    } else {
      spdlog::warn("following leader {} in term {}", last_leader_, raft_->term());
    }
  }
  if (last_leader_ != raft::kNoNode) heard_leader_ = true;
  progress_change(now);
  if (syncing()) {
    // notify_fd wakes the loop when the sync ends.
  } else if (raft_->has_ready()) {
    kick_timer_.arm_after(0);
  } else if (snapshots_->busy()) {
    kick_timer_.arm_after(kNsPerMs);  // read the child's file back soon
  } else if (!dropped_entries_.empty()) {
    kick_timer_.arm_after(kNsPerMs);  // the next slice of compacted entries
  }
  transport_->flush();
  rearm_service_timer(net::monotonic_now_ns());
}

void ClusterNode::note_config() {
  const LockStateMachine& sm = service_->state_machine();
  const std::uint64_t id = sm.cluster_id();
  if (id != 0 && id != identity_.cluster_id) {
    if (identity_.cluster_id != 0) {
      // The log and IDENTITY name two clusters: a data dir from elsewhere.
      spdlog::critical("the log says this is cluster {}, but IDENTITY says cluster {}: stopping",
                       cluster_id_text(id), cluster_id_text(identity_.cluster_id));
      spdlog::default_logger()->flush();
      std::_Exit(1);
    }
    NodeIdentity next = identity_;
    next.cluster_id = id;
    const std::string err = write_identity(config_.data_dir, next, kSyncWal);
    if (!err.empty()) fail_storage(err);
    identity_ = next;
    PeerLocal local = transport_->local();
    local.cluster_id = id;
    local.data_state = DataState::kHasData;
    transport_->set_local(std::move(local));
    spdlog::info("cluster id {} (recorded in {}/{})", cluster_id_text(id), config_.data_dir,
                 kIdentityFile);
  }
  if (id == 0) return;
  const locks::Limits& caps = sm.caps();
  if (caps_noted_once_ && caps.max_keys == caps_noted_.max_keys &&
      caps.max_waiters_per_key == caps_noted_.max_waiters_per_key &&
      caps.max_waiters == caps_noted_.max_waiters) {
    return;
  }
  caps_noted_once_ = true;
  caps_noted_ = caps;
  const locks::Limits& mine = config_.limits;
  if (caps.max_keys != mine.max_keys || caps.max_waiters_per_key != mine.max_waiters_per_key ||
      caps.max_waiters != mine.max_waiters) {
    spdlog::warn("the cluster's caps are --max-keys {} --max-waiters-per-key {} --max-waiters {} "
                 "(in force on every member); this node's flags say {} {} {}, which take effect "
                 "cluster-wide only while it leads (docs/cluster.md \"What is cluster-wide\")",
                 caps.max_keys, caps.max_waiters_per_key, caps.max_waiters, mine.max_keys,
                 mine.max_waiters_per_key, mine.max_waiters);
  }
}

void ClusterNode::fail_undecodable(raft::Index index, std::uint16_t version) {
  if (version < kEntryVersionMin || version > kEntryVersionMax) {
    spdlog::critical("log entry {} has encoding version {}, this binary applies {}..{}: stopping "
                     "(an entry is never skipped; run a lockd that applies it, docs/cluster.md "
                     "\"Upgrading\")",
                     index, version, kEntryVersionMin, kEntryVersionMax);
  } else {
    spdlog::critical("log entry {} (encoding version {}) does not decode: stopping (an entry is "
                     "never skipped; a bug or a corrupt log)",
                     index, version);
  }
  spdlog::default_logger()->flush();
  std::_Exit(1);
}

void ClusterNode::note_table_floor(TimeNs now_ns) {
  const LockStateMachine& sm = service_->state_machine();
  // A LeaderStart leaves the floor where it was, yet restarts the table's
  // clock from it: the time without a leader did not pass on the table,
  // so the estimate restarts there too (or it would run ahead, and show
  // leases shorter than they are).
  if (sm.floor_ns() == floor_seen_ns_ && sm.clock_term() == clock_term_seen_) return;
  floor_seen_ns_ = sm.floor_ns();
  clock_term_seen_ = sm.clock_term();
  floor_seen_at_ns_ = now_ns;
}

TimeNs ClusterNode::table_now_ns(TimeNs now_ns) const {
  const LockStateMachine& sm = service_->state_machine();
  if (service_->serving()) return std::max(sm.to_table_ns(now_ns), sm.floor_ns());
  // Applied entries not yet noted (mid-turn) only move the floor forward.
  if (sm.floor_ns() != floor_seen_ns_) return sm.floor_ns();
  // A leader with locks stamps the table at least every clock interval;
  // without an entry for longer, the table's clock may have stopped (no
  // leader until the next LeaderStart restarts it from the floor). So the
  // estimate stands still rather than run ahead: a lease can read longer
  // than it is while this node hears no leader, never shorter.
  return floor_seen_ns_ + std::clamp<TimeNs>(now_ns - floor_seen_at_ns_, 0, kEstimateRunMaxNs);
}

std::shared_ptr<const raft::SnapshotBytes> ClusterNode::snapshot_file_bytes(const raft::SnapshotMeta& meta) {
  return storage::FileSnapshotBytes::open(storage_->snapshot_path(meta.index), meta,
                                          [this](const std::string& what) { fail_storage("snapshot file " + what); });
}

void ClusterNode::rehome_snapshot_bytes(const raft::SnapshotMeta& meta) {
  raft_->rehome_snapshot_bytes(meta.index, snapshot_file_bytes(meta));
}

void ClusterNode::fail_storage(const std::string& message) {
  spdlog::critical("storage failed, stopping: {}", message);
  spdlog::default_logger()->flush();
  std::_Exit(1);
}

void ClusterNode::maybe_snapshot() {
  if (snapshots_->busy()) {
    std::optional<storage::SnapshotWriter::Done> done = snapshots_->poll();
    if (!done) return;
    if (!done->status.ok()) fail_storage(done->status.message);
    last_snapshot_index_ = done->meta.index;
    last_snapshot_bytes_ = done->bytes;
    const TimeNs t0 = net::monotonic_now_ns();
    // A leader's snapshot installed meanwhile may already cover more. The
    // dropped entries are freed over the next turns, and the memory stays
    // with the allocator: the log grows back into it before the next
    // snapshot (malloc_trim here cost up to 140 ms in one turn).
    if (done->meta.index > raft_->snapshot_meta().index) {
      const raft::Index keep = std::min<std::uint64_t>(kCompactionKeepEntries, config_.snapshot_entries / 2);
      dropped_entries_.add(raft_->compact(done->meta.index, snapshot_file_bytes(done->meta), keep));
    }
    const auto& t = snapshots_->timing();
    spdlog::info("snapshot at index {}: {} bytes ({}; on the loop: read back {:.1f} ms "
                 "in slices, WAL mark {:.1f} ms, log compacted {:.1f} ms, {} entries to free)",
                 done->meta.index, t.bytes,
                 t.on_thread ? fmt::format("no fork, file written by a thread in {:.1f} ms", t.child_ms)
                                  : fmt::format("fork {:.1f} ms, child {:.1f} ms", t.fork_ms, t.child_ms),
                 t.read_ms, t.adopt_ms,
                 static_cast<double>(net::monotonic_now_ns() - t0) / 1e6, dropped_entries_.pending());
    return;
  }
  const raft::Index applied = service_->state_machine().applied();
  const storage::SnapshotPolicy policy{config_.snapshot_entries, 0, kSnapshotLogPercent};
  if (!policy.due(applied, last_snapshot_index_, storage_->bytes_since_snapshot(), last_snapshot_bytes_)) return;
  const std::optional<raft::Term> term = raft_->term_at(applied);
  if (!term) return;  // just installed a snapshot there
  if (raft_->role() == raft::Role::kLeader) {
    storage::CatchUpHold hold;
    hold.max_silent_ticks = static_cast<std::uint64_t>(kCatchUpHoldSilenceNs / config_.heartbeat_ns);
    const raft::NodeId waits_for = hold.waits_for(
        raft_->progress(), applied, storage_->bytes_since_snapshot(), last_snapshot_bytes_);
    if (waits_for != raft::kNoNode) {
      if (snapshot_held_for_ != waits_for) {
        spdlog::info("next snapshot held while node {} catches up (up to a log of half "
                     "the last snapshot's size)", waits_for);
      }
      snapshot_held_for_ = waits_for;
      return;
    }
  }
  snapshot_held_for_ = raft::kNoNode;
  // The configuration in force there goes into the file's header, so a
  // restart after the log is compacted still knows the members.
  const locks::LockTable& table = service_->state_machine().table();
  const bool small = table.key_count() + table.holder_count() + table.waiter_count() <= kNoForkSnapshotMaxItems;
  const raft::StorageStatus st = snapshots_->start(
      raft::SnapshotMeta{applied, *term, raft_->conf_at(applied)}, [this] { return service_->snapshot(); },
      small ? storage::SnapshotWriter::Where::kThread : storage::SnapshotWriter::Where::kChild);
  if (!st.ok()) fail_storage(st.message);
}

void ClusterNode::rearm_service_timer(TimeNs now) {
  const std::optional<TimeNs> next = service_->next_deadline(now);
  if (next == armed_service_ns_) return;
  armed_service_ns_ = next;
  if (next) {
    service_timer_.arm_at(*next, now);
  } else {
    service_timer_.cancel();
  }
}

void ClusterNode::send(std::vector<raft::Message>& messages) {
  for (const raft::Message& m : messages) transport_->send(m);
  // Out now, before this Ready's fdatasync: the core only hands out
  // messages that depend on nothing unpersisted (raft.h), so followers can
  // write the leader's appends while the leader writes them itself —
  // one sync of latency per commit instead of two in series.
  if (!messages.empty()) transport_->flush();
}

raft::StorageStatus ClusterNode::write(const raft::Ready& rd, bool& sync_pending) {
  if (!sync_thread_) {  // --wal-sync=loop: the whole cycle on the loop
    sync_pending = false;
    return persist(rd);
  }
  // No reply flush here (unlike persist()): the loop does not block on
  // this sync, so the turn's end flushes them as soon.
  raft::StorageStatus st = storage_->write(rd.hard_state, rd.entries, sync_pending);
  note_written(rd);
  if (st.ok() && sync_pending) sync_thread_->submit(storage_->sync_fd());
  return st;
}

void ClusterNode::note_written(const raft::Ready& rd) {
  if (raft_->role() == raft::Role::kLeader) {
    const TimeNs now = net::monotonic_now_ns();
    for (const raft::Entry& e : rd.entries) commit_latency_.written(e.index, now);
  } else {
    commit_latency_.clear();
  }
}

raft::StorageStatus ClusterNode::persist(const raft::Ready& rd) {
  // Replies to entries applied just before (driver.h) go out now, not after
  // the sync of the next batch.
  if (before_sync_ && (!rd.entries.empty() || rd.snapshot || rd.hard_state)) before_sync_();
  raft::StorageStatus st = raft::persist_ready(*storage_, rd);
  note_written(rd);
  return st;
}

void ClusterNode::install(const raft::Snapshot& snapshot) {
  // The core installs the snapshot it last checked (raft.h: check_snapshot
  // runs as the last chunk arrives, install in the next Ready); the
  // checksum makes sure of it before the decoded machine stands in for
  // the bytes.
  std::unique_ptr<LockStateMachine> decoded;
  if (checked_snapshot_ && checked_snapshot_->index == snapshot.meta.index &&
      checked_snapshot_->term == snapshot.meta.term && checked_snapshot_->bytes == snapshot.data.size() &&
      checked_snapshot_->crc == crc32c(snapshot.data)) {
    decoded = std::move(checked_snapshot_->decoded);
  }
  checked_snapshot_.reset();
  const bool as_checked = decoded != nullptr;
  std::string error;
  if (!service_->install(snapshot, error, std::move(decoded))) {
    // Raft accepted and stored it, so the state machine cannot go on
    // without it: stop, loudly (a leader bug or a corrupt transfer).
    spdlog::critical("snapshot at index {} cannot be installed: {}", snapshot.meta.index, error);
    spdlog::default_logger()->flush();
    std::_Exit(1);
  }
  last_snapshot_index_ = snapshot.meta.index;
  last_snapshot_bytes_ = snapshot.data.size();
  rehome_snapshot_bytes(snapshot.meta);  // persisted before install (driver.h)
  return_freed_memory();
  spdlog::info("installed the leader's snapshot at index {}{}", snapshot.meta.index,
               as_checked ? " (the table decoded when it was checked)" : "");
}

void ClusterNode::apply(const raft::Entry& entry) {
  service_->apply(entry);
  if (service_->state_machine().undecodable() != 0) {
    fail_undecodable(entry.index, lock_command_version(entry.data));
  }
  if (commit_latency_.inflight() > 0) commit_latency_.applied(entry.index, net::monotonic_now_ns());
}

std::optional<BackupMeta> ClusterNode::backup_meta(std::uint64_t taken_unix_ms) const {
  if (!service_->serving()) return std::nullopt;
  const LockStateMachine& sm = service_->state_machine();
  BackupMeta m;
  m.source = BackupSource::kCluster;
  m.index = sm.applied();
  const std::optional<raft::Term> term = raft_->term_at(m.index);
  m.term = term ? *term : raft_->snapshot_meta().term;
  // Not base + index: one entry may grant several tokens (a hand-off to a
  // run of readers, §5b), so the floor is the largest token granted.
  m.token_floor = sm.largest_token_granted();
  m.taken_unix_ms = taken_unix_ms;
  return m;
}

std::vector<PeerStats> ClusterNode::peer_stats() const { return transport_->peer_stats(); }

const PeerTransportStats& ClusterNode::transport_stats() const { return transport_->stats(); }

bool ClusterNode::cluster_supports(std::uint16_t v) const {
  if (v < kEntryVersionMin || v > kEntryVersionMax) return false;
  // Every member of the configuration in force, learners included: each
  // applies every entry. What each said in a handshake, at any time (kept
  // in VERSIONS): a voter that never said blocks the version; a learner
  // never heard from (added, not started yet) does not, and one that
  // said an older range does. Asked for every proposal, so by id only.
  const auto applies = [&](raft::NodeId id, bool voter) {
    if (id == config_.self) return true;
    const auto it = versions_.find(id);
    if (it == versions_.end()) return !voter;
    return it->second.first <= v && v <= it->second.second;
  };
  if (raft_ == nullptr || raft_->conf().empty()) {
    return std::all_of(config_.members.begin(), config_.members.end(),
                       [&](const Member& m) { return applies(m.id, true); });
  }
  const std::vector<raft::Member>& members = raft_->conf().members;
  return std::all_of(members.begin(), members.end(),
                     [&](const raft::Member& m) { return applies(m.id, m.voter); });
}

const PeerHello* ClusterNode::peer_hello(raft::NodeId id) const {
  const auto it = peer_hellos_.find(id);
  return it == peer_hellos_.end() ? nullptr : &it->second;
}

bool ClusterNode::transfer_leadership() {
  if (raft_->role() != raft::Role::kLeader) return false;
  raft::NodeId best = raft::kNoNode;
  raft::Index best_match = 0;
  for (const raft::PeerProgress& p : raft_->progress()) {
    if (p.id == config_.self || !p.voter) continue;  // learners never lead
    if (best == raft::kNoNode || p.match > best_match) {
      best = p.id;
      best_match = p.match;
    }
  }
  if (best == raft::kNoNode) return false;
  spdlog::info("handing leadership to node {} (match {})", best, best_match);
  return raft_->transfer_leadership(best);
}

NodeStatusView ClusterNode::status(TimeNs now_ns) const {
  NodeStatusView v;
  const raft::Status s = raft_->status();
  v.id = s.id;
  v.role = s.role;
  v.term = s.term;
  v.leader_id = s.leader;
  v.commit = s.commit;
  v.applied = service_->state_machine().applied();
  v.serving = service_->serving();
  v.learner = s.learner;
  v.conf_index = s.conf_index;
  const std::vector<raft::PeerProgress> progress = raft_->progress();
  const raft::Membership& conf = raft_->conf();
  for (const Member& m : current_members()) {
    MemberView mv;
    mv.id = m.id;
    mv.client_addr = m.client.to_string();
    mv.raft_addr = m.raft.to_string();
    mv.leader = m.id == s.leader;
    if (const raft::Member* c = raft::find_member(conf, m.id)) {
      mv.voter = c->voter;
      mv.client_addr = c->client_addr;
      mv.raft_addr = c->raft_addr;
    } else if (!conf.empty()) {
      continue;  // self, removed or not yet added: not a member
    }
    if (m.id == s.leader) v.leader_addr = mv.client_addr;
    if (s.role == raft::Role::kLeader) {
      if (m.id == s.id) {
        mv.match = raft_->last_index();
        mv.last_contact_ms = 0;
      }
      for (const raft::PeerProgress& p : progress) {
        if (p.id != m.id) continue;
        mv.match = p.match;
        if (const PeerStats* ps = transport_->peer_stats(m.id); ps && ps->last_contact_ns != 0) {
          mv.last_contact_ms = (now_ns - ps->last_contact_ns) / kNsPerMs;
        }
      }
    }
    if (m.id != s.id) {
      if (const PeerStats* ps = transport_->peer_stats(m.id)) {
        mv.link_up = ps->link == LinkState::kConnected || ps->inbound_connected;
        if (ps->last_contact_ns != 0) mv.last_heard_ms = (now_ns - ps->last_contact_ns) / kNsPerMs;
      } else {
        mv.link_up = false;
      }
    }
    v.members.push_back(std::move(mv));
  }
  return v;
}

}  // namespace lockd::cluster
