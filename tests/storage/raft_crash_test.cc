// A 3-node Raft cluster on FileStorage with crashes that tear the write in
// progress: the persist of a Ready writes its records, then the segment is
// cut at a random byte inside what that write added (the crash hit it) and
// the node dies before advance(). Restarts recover from the cut files (torn
// tails, torn segment headers) and the cluster must keep Raft's safety:
//
// - State Machine Safety: no two nodes apply different entries at an index
//   (every apply and every installed snapshot is checked against a global
//   record of what was applied where);
// - committed entries are never lost or changed: after the weather stops
//   every node converges to the same applied sequence, which contains
//   every entry any node ever applied;
// - Log Matching: at the end, equal (index, term) means equal entries and
//   equal prefixes across the nodes' recovered logs.
//
// It runs raft::drive_ready, the daemon's Ready cycle, unchanged.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <random>

#include "lockd/raft/driver.h"
#include "lockd/raft/raft.h"
#include "lockd/storage/file_storage.h"
#include "lockd/storage/wal_format.h"
#include "temp_dir.h"

namespace lockd::storage {
namespace {

using raft::Entry;
using raft::Index;
using raft::Message;
using raft::NodeId;

constexpr std::size_t kNodes = 3;

struct Cluster;

// One node: its files, its core, its state machine (the applied entries,
// as "term:data" strings; index i is applied[i-1]).
struct Node final : raft::ReadyHandler {
  Node(Cluster& c, NodeId node_id, std::string data_dir) : cluster(c), id(node_id), dir(std::move(data_dir)) {}
  Cluster& cluster;
  NodeId id;
  std::string dir;
  std::unique_ptr<FileStorage> storage;
  std::unique_ptr<raft::Raft> raft;
  std::vector<std::string> applied;
  bool tear_next = false;  // the next persist is cut by a crash

  void send(std::vector<Message>& messages) override;
  raft::StorageStatus persist(const raft::Ready& rd) override;
  void install(const raft::Snapshot& snapshot) override;
  void apply(const Entry& e) override;
  bool alive() const { return raft != nullptr; }
};

struct Cluster {
  Cluster(std::uint64_t seed, std::size_t runway_bytes) : rng(seed), runway(runway_bytes) {
    for (NodeId id = 1; id <= kNodes; ++id) {
      nodes.push_back(std::make_unique<Node>(*this, id, dir.sub("node" + std::to_string(id))));
    }
    for (auto& n : nodes) start(*n);
  }

  test::TempDir dir;
  std::mt19937_64 rng;
  std::size_t runway;  // FileStorageOptions::runway_bytes (0: plain appends)
  std::vector<std::unique_ptr<Node>> nodes;
  std::vector<Message> network;
  std::map<Index, std::string> chosen;  // what was applied at each index, anywhere
  std::uint64_t torn = 0, restarts = 0, snapshots = 0, proposals = 0;

  Node& node(NodeId id) { return *nodes[id - 1]; }

  void record_apply(Index i, const std::string& v) {
    auto [it, fresh] = chosen.emplace(i, v);
    ASSERT_EQ(it->second, v) << "two different entries applied at index " << i;
  }

  void start(Node& n) {
    FileStorageOptions o{n.dir, 2048, false};
    o.runway_bytes = runway;
    n.storage = std::make_unique<FileStorage>(o);
    const raft::StorageStatus s = n.storage->open();
    ASSERT_TRUE(s.ok()) << s.message;
    n.applied.clear();
    if (n.storage->snapshot().meta.index > 0) n.install(n.storage->snapshot());
    raft::Config cfg;
    cfg.id = n.id;
    cfg.voters = {1, 2, 3};
    cfg.election_ticks = 10;
    cfg.max_entries_per_append = 8;
    cfg.rng_seed = rng();
    n.raft = std::make_unique<raft::Raft>(cfg, *n.storage);
  }

  void crash(Node& n) {
    n.raft.reset();
    n.storage.reset();
    n.tear_next = false;
  }

  void step(bool weather) {
    // Deliver what is in flight, in random order, dropping a few.
    std::vector<Message> batch;
    batch.swap(network);
    std::shuffle(batch.begin(), batch.end(), rng);
    for (const Message& m : batch) {
      Node& to = node(m.to);
      if (!to.alive() || (weather && rng() % 20 == 0)) continue;
      to.raft->step(m);
    }
    for (auto& n : nodes) {
      if (!n->alive()) {
        if (rng() % 30 == 0) {
          ++restarts;
          start(*n);
        }
        continue;
      }
      n->raft->tick();
      if (weather && n->raft->status().role == raft::Role::kLeader && rng() % 2 == 0) {
        for (int k = 0, m = static_cast<int>(rng() % 4); k < m; ++k) {
          n->raft->propose("p" + std::to_string(++proposals));
        }
      }
      if (weather && rng() % 60 == 0) n->tear_next = true;
      const raft::StorageStatus s = raft::drive_ready(*n->raft, *n, 16);
      if (!s.ok()) {
        crash(*n);
        continue;
      }
      if (weather && rng() % 200 == 0) {
        crash(*n);  // a clean crash between writes
        continue;
      }
      // The state machine snapshots now and then.
      const raft::Status st = n->raft->status();
      if (st.applied >= st.snapshot_index + 40) {
        std::string data;
        for (const std::string& a : n->applied) data += a + "\n";
        const std::string& last = n->applied[st.applied - 1];
        const raft::Term term = std::stoull(last.substr(0, last.find(':')));
        const raft::Snapshot snap{{st.applied, term}, data};
        ASSERT_TRUE(n->storage->save(std::nullopt, {}, &snap).ok());
        n->raft->compact(st.applied, data);
        ++snapshots;
      }
    }
  }
};

void Node::send(std::vector<Message>& messages) {
  for (Message& m : messages) cluster.network.push_back(std::move(m));
}

raft::StorageStatus Node::persist(const raft::Ready& rd) {
  if (!tear_next) return raft::persist_ready(*storage, rd);
  // The newest segment's bytes before, then the real write, then the cut:
  // the write reached the disk up to a random byte of the range it changed
  // (appended records, or records over the zero runway, or a new runway),
  // and everything after that byte is as it was before.
  std::map<std::string, std::string> before;
  for (const std::string& f : test::list_dir(dir)) {
    if (parse_segment_name(f)) before[f] = test::read_all(dir + "/" + f);
  }
  const raft::StorageStatus s = raft::persist_ready(*storage, rd);
  if (!s.ok()) return s;
  std::string newest;
  for (const std::string& f : test::list_dir(dir)) {
    if (parse_segment_name(f)) newest = f;
  }
  if (!newest.empty()) {
    const std::string old = before.count(newest) ? before[newest] : std::string();
    const std::string now = test::read_all(dir + "/" + newest);
    std::size_t from = 0;
    while (from < old.size() && from < now.size() && old[from] == now[from]) ++from;
    std::size_t to = std::max(old.size(), now.size());
    while (to > from && to <= old.size() && to <= now.size() && old[to - 1] == now[to - 1]) --to;
    if (to > from) {
      const std::size_t cut = from + cluster.rng() % (to - from);
      std::string torn = now.substr(0, cut);
      if (cut < old.size()) torn += old.substr(cut);
      test::write_all(dir + "/" + newest, torn);
      ++cluster.torn;
    }
  }
  return raft::StorageStatus{raft::StorageError::kIo, "crashed mid-write"};
}

void Node::install(const raft::Snapshot& snapshot) {
  applied.clear();
  std::size_t pos = 0;
  while (pos < snapshot.data.size()) {
    const std::size_t nl = snapshot.data.find('\n', pos);
    applied.push_back(snapshot.data.substr(pos, nl - pos));
    pos = nl + 1;
  }
  ASSERT_EQ(applied.size(), snapshot.meta.index);
  for (Index i = 1; i <= applied.size(); ++i) cluster.record_apply(i, applied[i - 1]);
}

void Node::apply(const Entry& e) {
  ASSERT_EQ(e.index, applied.size() + 1) << "node " << id << " applied out of order";
  applied.push_back(std::to_string(e.term) + ":" + e.data);
  cluster.record_apply(e.index, applied.back());
}

// Both ways the WAL grows: plain appends, and records over a zero runway.
class RaftOnFileStorage : public ::testing::TestWithParam<std::size_t> {};

TEST_P(RaftOnFileStorage, TornWritesAndRestartsKeepRaftSafe) {
  std::uint64_t torn = 0, restarts = 0, snapshots = 0;
  for (std::uint64_t seed = 1; seed <= 12; ++seed) {
    Cluster c(seed, GetParam());
    for (int i = 0; i < 1500 && !::testing::Test::HasFatalFailure(); ++i) c.step(true);
    ASSERT_FALSE(::testing::Test::HasFatalFailure()) << "seed " << seed;
    // Calm: everyone up, no loss, no new proposals; let it converge.
    for (auto& n : c.nodes) {
      if (!n->alive()) c.start(*n);
    }
    for (int i = 0; i < 400; ++i) c.step(false);
    // One more proposal commits everything of the last term everywhere.
    for (auto& n : c.nodes) {
      if (n->raft->status().role == raft::Role::kLeader) n->raft->propose("final");
    }
    for (int i = 0; i < 200; ++i) c.step(false);
    ASSERT_FALSE(::testing::Test::HasFatalFailure()) << "seed " << seed;

    // Nothing any node applied was lost: all converge to the same sequence
    // holding every index ever applied.
    const std::vector<std::string>& first = c.nodes[0]->applied;
    ASSERT_GE(first.size(), c.chosen.size()) << "seed " << seed;
    for (auto& n : c.nodes) {
      ASSERT_EQ(n->applied, first) << "seed " << seed << " node " << n->id;
    }
    for (const auto& [i, v] : c.chosen) ASSERT_EQ(first[i - 1], v) << "seed " << seed;
    // Log Matching over the recovered logs, pair by pair: where two logs
    // hold an entry of the same term at an index, they hold the same entry
    // there and at every index before it that both still have.
    for (std::size_t a = 0; a < c.nodes.size(); ++a) {
      for (std::size_t b = a + 1; b < c.nodes.size(); ++b) {
        std::map<Index, Entry> la;
        for (const Entry& e : c.nodes[a]->storage->entries()) la.emplace(e.index, e);
        Index match = 0;  // the highest index where both have the same term
        for (const Entry& e : c.nodes[b]->storage->entries()) {
          auto it = la.find(e.index);
          if (it != la.end() && it->second.term == e.term) match = std::max(match, e.index);
        }
        for (const Entry& e : c.nodes[b]->storage->entries()) {
          if (e.index > match) break;
          auto it = la.find(e.index);
          if (it != la.end()) {
            ASSERT_EQ(it->second, e) << "seed " << seed << " nodes " << c.nodes[a]->id << ", "
                                     << c.nodes[b]->id << " below the matching index " << match;
          }
        }
      }
    }
    EXPECT_GT(c.chosen.size(), 100u) << "seed " << seed;
    torn += c.torn;
    restarts += c.restarts;
    snapshots += c.snapshots;
  }
  // The weather must actually have happened.
  EXPECT_GT(torn, 50u);
  EXPECT_GT(restarts, 50u);
  EXPECT_GT(snapshots, 20u);
  std::printf("torn writes %llu, restarts %llu, snapshots %llu\n", static_cast<unsigned long long>(torn),
              static_cast<unsigned long long>(restarts), static_cast<unsigned long long>(snapshots));
}

INSTANTIATE_TEST_SUITE_P(Runway, RaftOnFileStorage, ::testing::Values(0, 4096),
                         [](const ::testing::TestParamInfo<std::size_t>& i) {
                           return i.param == 0 ? std::string("Appends") : std::string("ZeroRunway");
                         });

}  // namespace
}  // namespace lockd::storage
