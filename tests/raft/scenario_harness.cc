// ScenarioCluster: see scenario_harness.h.
#include "scenario_harness.h"

#include <algorithm>
#include <cstdint>

#include "lockd/common/check.h"
#include "lockd/raft/driver.h"

namespace lockd::raft::testing {
namespace {

std::vector<std::string> split(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

NodeId to_id(const std::string& s) { return static_cast<NodeId>(std::stoull(s)); }

}  // namespace

Config ScenarioCluster::config(NodeId id) const {
  Config c;
  c.id = id;
  for (int i = 1; i <= size_; ++i) c.voters.push_back(static_cast<NodeId>(i));
  c.election_ticks = 10;
  c.heartbeat_ticks = 1;
  c.pre_vote = pre_vote_;
  c.check_quorum = check_quorum_;
  c.max_entries_per_append = max_entries_;
  c.snapshot_chunk_bytes = chunk_bytes_;
  c.max_inflight = inflight_;
  c.rng_seed = id;  // fixed: transcripts must not change between runs
  c.faults.commit_old_term_entries = commit_old_term_bug_;
  return c;
}

void ScenarioCluster::start(NodeId id) {
  Node& n = nodes_.at(id);
  n.raft = std::make_unique<Raft>(config(id), n.disk);
}

void ScenarioCluster::ensure_started() {
  if (started_) return;
  started_ = true;
  for (auto& [id, n] : nodes_) start(id);
}

bool ScenarioCluster::blocked(NodeId from, NodeId to) const {
  auto a = group_.find(from);
  auto b = group_.find(to);
  if (a == group_.end() || b == group_.end()) return false;
  return a->second != b->second;
}

std::string ScenarioCluster::describe(const Message& m) {
  std::ostringstream o;
  o << m.from << "->" << m.to << " " << to_string(m.type) << " term=" << m.term;
  switch (m.type) {
    case MessageType::kPreVote:
    case MessageType::kVote:
      o << " last=(" << m.index << "," << m.log_term << ")";
      break;
    case MessageType::kPreVoteResp:
    case MessageType::kVoteResp:
      o << (m.reject ? " reject" : " grant");
      break;
    case MessageType::kAppend: {
      o << " prev=(" << m.index << "," << m.log_term << ") commit=" << m.commit << " entries=[";
      for (std::size_t i = 0; i < m.entries.size(); ++i) {
        o << (i ? " " : "") << m.entries[i].index << "@" << m.entries[i].term;
      }
      o << "]";
      break;
    }
    case MessageType::kAppendResp:
      if (m.reject) {
        o << " reject index=" << m.index << " hint=(" << m.reject_hint << "," << m.log_term << ")";
      } else {
        o << " index=" << m.index;
      }
      break;
    case MessageType::kHeartbeat:
      o << " commit=" << m.commit;
      break;
    case MessageType::kSnapshot:
      o << " snap=(" << m.snapshot.index << "," << m.snapshot.term << ") bytes=" << m.offset << "+"
        << m.chunk.size() << "/" << m.total_bytes << (m.done ? " done" : "");
      break;
    case MessageType::kSnapshotResp:
      o << " snap=" << m.snapshot.index << " have=" << m.offset << (m.reject ? " reject" : "")
        << (m.done ? " installed index=" + std::to_string(m.index) : "");
      break;
    case MessageType::kHeartbeatResp:
    case MessageType::kTimeoutNow:
      break;
  }
  return o.str();
}

namespace {

// The scenario's side of the Ready cycle: messages go to the shared queue,
// applied commands to the node's list and to the transcript.
class ScenarioReadyHandler final : public ReadyHandler {
 public:
  ScenarioReadyHandler(NodeId id, MemoryStorage& disk, std::vector<std::string>& applied,
                       std::vector<Message>& queue, std::ostringstream& out)
      : id_(id), disk_(disk), applied_(applied), queue_(queue), out_(out) {}

  void send(std::vector<Message>& messages) override {
    for (Message& m : messages) queue_.push_back(std::move(m));
  }
  StorageStatus persist(const Ready& rd) override { return persist_ready(disk_, rd); }
  void install(const Snapshot& snapshot) override {
    // The snapshot payload is the applied commands joined by ','.
    applied_.clear();
    std::istringstream in(snapshot.data);
    for (std::string c; std::getline(in, c, ',');) applied_.push_back(c);
  }
  void apply(const Entry& e) override {
    if (e.type != EntryType::kCommand) return;
    applied_.push_back(e.data);
    out_ << "n" << id_ << " applies " << e.index << "@" << e.term << " " << e.data << "\n";
  }

 private:
  NodeId id_;
  MemoryStorage& disk_;
  std::vector<std::string>& applied_;
  std::vector<Message>& queue_;
  std::ostringstream& out_;
};

}  // namespace

std::string ScenarioCluster::process_ready(NodeId id) {
  Node& n = nodes_.at(id);
  if (!n.raft) return "";
  std::ostringstream o;
  ScenarioReadyHandler handler(id, n.disk, n.applied, queue_, o);
  LOCKD_CHECK(drive_ready(*n.raft, handler, SIZE_MAX).ok());
  return o.str();
}

std::string ScenarioCluster::deliver(const std::set<NodeId>& to) {
  std::vector<Message> now;
  std::vector<Message> keep;
  for (Message& m : queue_) ((to.empty() || to.contains(m.to)) ? now : keep).push_back(std::move(m));
  queue_ = std::move(keep);
  std::ostringstream o;
  for (const Message& m : now) {
    Node& n = nodes_.at(m.to);
    if (!n.raft || blocked(m.from, m.to)) {
      o << "  " << describe(m) << " (dropped)\n";
      continue;
    }
    o << "  " << describe(m) << "\n";
    n.raft->step(m);
  }
  return o.str();
}

std::string ScenarioCluster::stabilize() {
  std::ostringstream o;
  for (int round = 0; round < 1000; ++round) {
    bool any = false;
    for (auto& [id, n] : nodes_) {
      if (n.raft && n.raft->has_ready()) any = true;
      o << process_ready(id);
    }
    if (!queue_.empty()) any = true;
    o << deliver({});
    if (!any) return o.str();
  }
  LOCKD_CHECK(false);  // a scenario that never settles is a bug in it
  return o.str();
}

std::string ScenarioCluster::status_line(NodeId id) const {
  const Node& n = nodes_.at(id);
  std::ostringstream o;
  o << "n" << id << ": ";
  if (!n.raft) {
    o << "down";
    return o.str();
  }
  Status s = n.raft->status();
  o << to_string(s.role) << " term=" << s.term << " vote=" << s.vote << " leader=" << s.leader
    << " commit=" << s.commit << " applied=" << s.applied;
  if (s.snapshot_index > 0) o << " snap=" << s.snapshot_index;
  if (n.raft->log_base() != s.snapshot_index) o << " base=" << n.raft->log_base();
  o << " log=[";
  bool first = true;
  for (const Entry& e : n.raft->log()) {
    o << (first ? "" : " ") << e.term;
    first = false;
  }
  o << "]";
  return o.str();
}

std::string ScenarioCluster::run(const std::string& line) {
  std::vector<std::string> w = split(line);
  if (w.empty()) return "";
  const std::string& cmd = w[0];
  std::ostringstream o;
  if (cmd == "cluster") {
    size_ = std::stoi(w[1]);
    for (std::size_t i = 2; i < w.size(); ++i) {
      auto eq = w[i].find('=');
      std::string k = w[i].substr(0, eq);
      std::uint64_t v = std::stoull(w[i].substr(eq + 1));
      if (k == "prevote") pre_vote_ = v != 0;
      if (k == "checkquorum") check_quorum_ = v != 0;
      if (k == "max_entries") max_entries_ = v;
      if (k == "chunk") chunk_bytes_ = v;
      if (k == "inflight") inflight_ = v;
      if (k == "commit_old_term_bug") commit_old_term_bug_ = v != 0;
    }
    for (int i = 1; i <= size_; ++i) nodes_[static_cast<NodeId>(i)];
  } else if (cmd == "log") {
    Node& n = nodes_.at(to_id(w[1]));
    std::vector<Entry> es;
    for (std::size_t i = 2; i < w.size(); ++i) {
      Entry e;
      e.index = i - 1;
      e.term = std::stoull(w[i]);
      e.data = "e" + std::to_string(e.index);
      es.push_back(e);
    }
    n.disk.append(es);
  } else if (cmd == "hardstate") {
    HardState hs;
    hs.term = std::stoull(w[2]);
    hs.vote = w.size() > 3 ? to_id(w[3]) : kNoNode;
    nodes_.at(to_id(w[1])).disk.set_hard_state(hs);
  } else if (cmd == "campaign") {
    ensure_started();
    nodes_.at(to_id(w[1])).raft->campaign();
  } else if (cmd == "tick") {
    ensure_started();
    int times = w.size() > 2 ? std::stoi(w[2]) : 1;
    for (int t = 0; t < times; ++t) {
      for (auto& [id, n] : nodes_) {
        if ((w[1] == "all" || to_id(w[1]) == id) && n.raft) n.raft->tick();
      }
    }
  } else if (cmd == "elapse") {
    ensure_started();
    int times = std::stoi(w[1]);
    for (int t = 0; t < times; ++t) {
      for (auto& [id, n] : nodes_) {
        if (n.raft) n.raft->tick();
      }
      std::istringstream in(stabilize());
      for (std::string l; std::getline(in, l);) {
        if (l.rfind("  ", 0) != 0) o << l << "\n";
      }
    }
  } else if (cmd == "process-ready") {
    ensure_started();
    for (std::size_t i = 1; i < w.size(); ++i) {
      for (auto& [id, n] : nodes_) {
        if (w[i] == "all" || to_id(w[i]) == id) o << process_ready(id);
      }
    }
  } else if (cmd == "deliver-msgs") {
    ensure_started();
    std::set<NodeId> to;
    for (std::size_t i = 1; i < w.size(); ++i) to.insert(to_id(w[i]));
    o << deliver(to);
  } else if (cmd == "stabilize") {
    ensure_started();
    std::string out = stabilize();
    if (w.size() > 1 && w[1] == "quiet") {
      // Keep what the state machines did, not every message.
      std::istringstream in(out);
      for (std::string l; std::getline(in, l);) {
        if (l.rfind("  ", 0) != 0) o << l << "\n";
      }
    } else {
      o << out;
    }
  } else if (cmd == "partition") {
    group_.clear();
    int g = 0;
    for (std::size_t i = 1; i < w.size(); ++i) {
      if (w[i] == "|") {
        ++g;
      } else {
        group_[to_id(w[i])] = g;
      }
    }
  } else if (cmd == "heal") {
    group_.clear();
  } else if (cmd == "crash") {
    ensure_started();
    Node& n = nodes_.at(to_id(w[1]));
    n.raft.reset();
    n.applied.clear();
    std::erase_if(queue_, [&](const Message& m) { return m.to == to_id(w[1]) || m.from == to_id(w[1]); });
  } else if (cmd == "restart") {
    NodeId id = to_id(w[1]);
    Node& n = nodes_.at(id);
    n.applied.clear();
    std::istringstream in(n.disk.snapshot().data);
    for (std::string c; std::getline(in, c, ',');) n.applied.push_back(c);
    start(id);
  } else if (cmd == "propose") {
    ensure_started();
    ProposeResult r = nodes_.at(to_id(w[1])).raft->propose(w[2]);
    if (r.error == ProposeError::kOk) {
      o << "ok index=" << r.index << " term=" << r.term << "\n";
    } else {
      o << "refused: " << to_string(r.error) << "\n";
    }
  } else if (cmd == "compact") {
    ensure_started();
    Node& n = nodes_.at(to_id(w[1]));
    Index at = n.raft->status().applied;
    std::string data;
    for (std::size_t i = 0; i < n.applied.size(); ++i) data += (i ? "," : "") + n.applied[i];
    Snapshot s{SnapshotMeta{at, *n.raft->term_at(at)}, data};
    n.disk.save_snapshot(s);
    // `compact N keep=K`: the log keeps K entries behind the snapshot.
    Index keep = 0;
    if (w.size() > 2 && w[2].rfind("keep=", 0) == 0) keep = std::stoull(w[2].substr(5));
    n.raft->compact(at, data, keep);
    o << "n" << w[1] << " compacted through " << at;
    if (keep > 0) o << ", log kept from " << n.raft->log_base() + 1;
    o << "\n";
  } else if (cmd == "transfer") {
    ensure_started();
    bool ok = nodes_.at(to_id(w[1])).raft->transfer_leadership(to_id(w[2]));
    o << (ok ? "transfer started" : "transfer refused") << "\n";
  } else if (cmd == "status") {
    ensure_started();
    for (auto& [id, n] : nodes_) {
      bool want = w.size() == 1;
      for (std::size_t i = 1; i < w.size(); ++i) want = want || to_id(w[i]) == id;
      if (want) o << status_line(id) << "\n";
    }
  } else if (cmd == "progress") {
    ensure_started();
    for (const PeerProgress& p : nodes_.at(to_id(w[1])).raft->progress()) {
      o << "n" << p.id << ": match=" << p.match << " next=" << p.next << " " << to_string(p.state)
        << (p.recent_active ? " active" : " inactive") << "\n";
    }
  } else {
    o << "unknown command: " << cmd << "\n";
  }
  return o.str();
}

}  // namespace lockd::raft::testing
