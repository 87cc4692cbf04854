// Snapshot + compaction + restart gives the same lock table: commands go
// through a FileStorage WAL and into a LockTable; SnapshotWriter snapshots
// the table (in a forked child) while appends continue; the log is
// compacted and covered segments deleted; a restart restores the table
// from the snapshot file, replays the entries after it and must end with
// exactly the table the first process had.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <map>
#include <random>
#include <sstream>

#include "lockd/common/byte_io.h"
#include "lockd/locks/lock_table_snapshot.h"
#include "lockd/storage/file_snapshot_bytes.h"
#include "lockd/storage/file_storage.h"
#include "lockd/storage/snapshot_writer.h"
#include "lockd/storage/wal_format.h"
#include "temp_dir.h"

namespace lockd::storage {
namespace {

using locks::LockTable;

const locks::Limits kLimits{64, 4, 64};

// The replicated state machine: the table plus what the commands need that
// the table does not hold (the clock and the waiter counter), which travels
// in the snapshot's application header.
struct Machine {
  LockTable table{kLimits, 1};
  TimeNs now = 0;
  locks::WaiterId next_waiter = 1;

  void apply(std::string_view cmd) {
    ASSERT_EQ(cmd.size(), 6u);
    auto b = [&](int i) { return static_cast<std::uint8_t>(cmd[static_cast<std::size_t>(i)]); };
    std::vector<locks::Delivery> out;
    const std::string key = "key-" + std::to_string(b(1) % 40);
    switch (b(0) % 7) {
      case 0:
        table.acquire(now, {"owner" + std::to_string(b(5) % 3), key, 1u + b(2) % 200,
                            b(3) % 3 == 0 ? 0u : b(4) % 300u, b(5), next_waiter++});
        break;
      case 1:
        if (const locks::KeyState* s = table.find(key)) table.release(now, s->oldest().token, key, out);
        break;
      case 2:
        now += static_cast<TimeNs>(b(2) % 20) * kNsPerMs;
        table.advance(now, out);
        break;
      case 3:
        table.cancel_waiter(now, 1 + b(2) % next_waiter, out);
        break;
      case 4:
        table.sweep(now);
        break;
      case 5:
        if (const locks::KeyState* s = table.find(key)) table.expire(now, key, s->token, out);
        break;
      case 6:
        if (const locks::KeyState* s = table.find(key)) table.keep(now, s->token, key, 1u + b(2) % 200);
        break;
    }
  }

  std::string header() const {
    std::string h;
    ByteWriter w(h);
    w.u64(static_cast<std::uint64_t>(now));
    w.u64(next_waiter);
    return h;
  }
  void restore(const std::string& bytes) {
    std::string h, error;
    ASSERT_TRUE(locks::restore(bytes, table, h, error)) << error;
    ByteReader<int> r(h, 0, 1);
    now = static_cast<TimeNs>(r.u64());
    next_waiter = r.u64();
    ASSERT_TRUE(r.ok());
  }

  std::string describe() const {
    std::map<std::string, std::string> keys;
    table.for_each([&](std::string_view k, const locks::KeyState& s) {
      std::ostringstream o;
      o << s.shared() << "/" << s.limit();
      s.for_each_holder([&](const locks::Holder& h) {
        o << " " << h.owner << "/" << h.token << "/" << h.expires_at_ns << "/" << h.lease_ms;
      });
      if (const auto* waiters = s.waiters()) {
        for (const locks::Waiter& w : *waiters) o << " [" << w.id << " " << w.client << " " << w.wait_deadline_ns << " " << w.shared << "]";
      }
      keys[std::string(k)] = o.str();
    });
    std::ostringstream o;
    o << "now " << now << " next_waiter " << next_waiter << " next_token " << table.next_token();
    for (const auto& [k, v] : keys) o << " " << k << "=" << v;
    return o.str();
  }
};

// Both ways of making a snapshot: a forked child, and (small tables) the
// bytes built on the caller's thread and the file written by a thread.
class SnapshotWhere : public ::testing::TestWithParam<SnapshotWriter::Where> {};
INSTANTIATE_TEST_SUITE_P(SnapshotRestart, SnapshotWhere,
                         ::testing::Values(SnapshotWriter::Where::kChild, SnapshotWriter::Where::kThread),
                         [](const auto& param_info) {
                           return param_info.param == SnapshotWriter::Where::kChild ? "Child" : "Thread";
                         });

TEST_P(SnapshotWhere, SnapshotCompactionAndRestartGiveTheSameLockTable) {
  test::TempDir dir;
  std::mt19937_64 rng(42);
  std::string want;
  raft::Index snapshot_index = 0;
  std::uint64_t segments_removed = 0;
  std::map<raft::Index, std::string> table_at;  // the table when each snapshot started
  std::size_t checked = 0;
  {
    FileStorage st({dir.path(), 4096, false});
    ASSERT_TRUE(st.open().ok());
    SnapshotWriter writer(st, 1024);  // tiny slices: several polls per snapshot
    Machine m;
    // The bytes are the table as of the snapshot's index, not as of now.
    const auto finished = [&](const SnapshotWriter::Done& done) {
      ASSERT_TRUE(done.status.ok()) << done.status.message;
      // What Raft would send a follower: the file, read back a chunk at a
      // time (the last chunk only once the whole file matched its CRC).
      const auto bytes = FileSnapshotBytes::open(st.snapshot_path(done.meta.index), done.meta,
                                                 [](const std::string& what) { ADD_FAILURE() << what; std::abort(); });
      ASSERT_EQ(bytes->size(), done.bytes);
      std::string data;
      for (std::uint64_t at = 0; at < bytes->size(); at += 1000) {
        data += bytes->read(at, static_cast<std::size_t>(std::min<std::uint64_t>(1000, bytes->size() - at)));
      }
      Machine check;
      check.restore(data);
      EXPECT_EQ(check.describe(), table_at.at(done.meta.index));
      ++checked;
      snapshot_index = done.meta.index;
    };
    for (raft::Index i = 1; i <= 3000; ++i) {
      std::string cmd(6, '\0');
      for (char& c : cmd) c = static_cast<char>(rng());
      const raft::Entry e{1, i, raft::EntryType::kCommand, cmd};
      ASSERT_TRUE(st.save(raft::HardState{1, 1, i}, {&e, 1}, nullptr).ok());
      m.apply(cmd);
      if (i % 700 == 0) {
        // The previous one is long done in a daemon; here the loop is fast.
        while (writer.busy()) {
          if (auto done = writer.poll()) finished(*done);
          usleep(100);
        }
        table_at[i] = m.describe();
        ASSERT_TRUE(writer.start({i, 1}, [&] { return locks::serialize(m.table, m.header()); }, GetParam()).ok());
      }
      // Appends go on while the child writes and the parent reads back.
      if (writer.busy()) {
        if (auto done = writer.poll()) finished(*done);
      }
    }
    while (writer.busy()) {
      if (auto done = writer.poll()) finished(*done);
    }
    want = m.describe();
    segments_removed = st.stats().segments_removed;
    EXPECT_EQ(st.snapshot().meta.index, snapshot_index);
    EXPECT_EQ(st.entries().front().index, snapshot_index + 1);
  }
  EXPECT_EQ(snapshot_index, 2800u);
  EXPECT_EQ(checked, 4u);  // 700, 1400, 2100, 2800
  EXPECT_GT(segments_removed, 10u);

  FileStorage st({dir.path(), 4096, false});
  ASSERT_TRUE(st.open().ok());
  ASSERT_EQ(st.snapshot().meta.index, 2800u);
  Machine m;
  m.restore(st.snapshot().data);
  for (const raft::Entry& e : st.entries()) m.apply(e.data);
  EXPECT_EQ(st.last_index(), 3000u);
  EXPECT_EQ(m.describe(), want);
  m.table.check_invariants();
}

// A storage holding one entry, to snapshot at index 1.
void open_with_one_entry(FileStorage& st) {
  ASSERT_TRUE(st.open().ok());
  const raft::Entry e{1, 1, raft::EntryType::kCommand, "x"};
  ASSERT_TRUE(st.save(std::nullopt, {&e, 1}, nullptr).ok());
}

// Polls until the snapshot ends (10 s at most).
std::optional<SnapshotWriter::Done> wait_done(SnapshotWriter& writer) {
  std::optional<SnapshotWriter::Done> done;
  for (int i = 0; i < 100000 && !done; ++i) {
    done = writer.poll();
    if (!done) usleep(100);
  }
  return done;
}

TEST(SnapshotRestart, AFailedChildIsAnIoErrorAndLeavesNoTempFile) {
  test::TempDir dir;
  FileStorage st({dir.path(), 4096, false});
  open_with_one_entry(st);
  SnapshotWriter writer(st);
  ASSERT_TRUE(writer.start({1, 1}, []() -> std::string { std::abort(); }).ok());
  const std::optional<SnapshotWriter::Done> done = wait_done(writer);
  ASSERT_TRUE(done);
  EXPECT_EQ(done->status.error, raft::StorageError::kIo);
  EXPECT_NE(done->status.message.find("snapshot child failed (killed by signal 6)"), std::string::npos)
      << done->status.message;
  EXPECT_EQ(test::list_dir(dir.path()), (std::vector<std::string>{"LOCK", segment_name(1)}));
}

// A file that cannot be opened for a reason other than descriptors is a
// kIo naming the file and why, from start() (which opens it, in the
// parent); the node stops on it (ClusterNode::fail_storage), nothing is
// adopted.
TEST_P(SnapshotWhere, AFailedOpenIsAnIoErrorNamingTheFile) {
  test::TempDir dir;
  FileStorage st({dir.path(), 4096, false});
  open_with_one_entry(st);
  // The temporary file's name is taken by a directory: open() fails.
  ASSERT_EQ(::mkdir(st.temp_path("snap-child").c_str(), 0755), 0);
  SnapshotWriter writer(st);
  const raft::StorageStatus s = writer.start({1, 1}, [] { return std::string("table"); }, GetParam());
  EXPECT_EQ(s.error, raft::StorageError::kIo);
  EXPECT_NE(s.message.find("snap-child.tmp failed: Is a directory"), std::string::npos) << s.message;
  EXPECT_FALSE(writer.busy());
  EXPECT_EQ(st.snapshot().meta.index, 0u);
}

}  // namespace
}  // namespace lockd::storage

namespace lockd::storage {
namespace {

// A leader's snapshot saved while the child wrote an older one: the older
// one is dropped, the newer one stays the snapshot, across a restart too.
TEST_P(SnapshotWhere, ALeadersSnapshotOvertakingTheChildWins) {
  test::TempDir dir;
  {
    FileStorage st({dir.path(), 4096, false});
    ASSERT_TRUE(st.open().ok());
    std::vector<raft::Entry> es;
    for (raft::Index i = 1; i <= 10; ++i) es.push_back({1, i, raft::EntryType::kCommand, "e"});
    ASSERT_TRUE(st.save(std::nullopt, es, nullptr).ok());
    SnapshotWriter writer(st);
    ASSERT_TRUE(writer.start({5, 1}, [] { return std::string("mine at 5"); }, GetParam()).ok());
    const raft::Snapshot leader{{20, 2}, "leader's at 20"};
    ASSERT_TRUE(st.save(raft::HardState{2, 0, 20}, {}, &leader).ok());
    std::optional<SnapshotWriter::Done> done;
    while (!(done = writer.poll())) usleep(100);
    ASSERT_TRUE(done->status.ok()) << done->status.message;
    EXPECT_EQ(st.snapshot().meta.index, 20u);
  }
  FileStorage st({dir.path(), 4096, false});
  ASSERT_TRUE(st.open().ok());
  EXPECT_EQ(st.snapshot(), (raft::Snapshot{{20, 2}, "leader's at 20"}));
  EXPECT_TRUE(st.entries().empty());
  EXPECT_EQ(test::list_dir(dir.path()), (std::vector<std::string>{"LOCK", snapshot_name(20), segment_name(1)}));
}

}  // namespace
}  // namespace lockd::storage

namespace lockd::storage {
namespace {

TEST(SnapshotPolicy, DueAfterEntriesOrBytesWhicheverFirst) {
  const SnapshotPolicy p{100, 1000};
  EXPECT_FALSE(p.due(50, 0, 0));
  EXPECT_TRUE(p.due(100, 0, 0));
  EXPECT_FALSE(p.due(150, 100, 999));
  EXPECT_TRUE(p.due(150, 100, 1000));
  EXPECT_FALSE(p.due(100, 100, 5000));  // nothing applied since the snapshot
  const SnapshotPolicy entries_only{10, 0};
  EXPECT_FALSE(entries_only.due(5, 0, 1u << 30));
  EXPECT_TRUE(entries_only.due(10, 0, 0));
}

// The leader holds a due snapshot for a member receiving one or a learner
// catching up from its log, within a memory bound, and never for one it
// has not heard from for longer than the silence bound.
TEST(CatchUpHold, WaitsForAMemberReceivingTheSnapshotOrFarBehindWithinTheBound) {
  const CatchUpHold hold{10'000, 50, 200};
  // `active`: heard from in the last tick; otherwise silent past the bound.
  auto member = [](raft::NodeId id, raft::Index match, raft::ProgressState st, bool active,
                   bool voter = false) {
    return raft::PeerProgress{.id = id, .match = match, .state = st, .recent_active = active,
                              .ticks_since_contact = active ? 1u : 201u, .voter = voter};
  };
  using raft::ProgressState;
  const std::uint64_t snap = 60'000'000;  // the last snapshot's bytes
  // Followers keeping up: nothing to wait for.
  std::vector<raft::PeerProgress> up{member(1, 500'000, ProgressState::kReplicate, true, true),
                                     member(2, 495'000, ProgressState::kReplicate, true, true)};
  EXPECT_EQ(hold.waits_for(up, 500'000, 1'000'000, snap), raft::kNoNode);
  // A voter lagging far behind (a loaded follower) holds nothing; one
  // receiving the snapshot does.
  up[1].match = 100'000;
  EXPECT_EQ(hold.waits_for(up, 500'000, 1'000'000, snap), raft::kNoNode);
  up[1].state = ProgressState::kSnapshot;
  EXPECT_EQ(hold.waits_for(up, 500'000, 1'000'000, snap), 2u);
  up[1] = member(2, 495'000, ProgressState::kReplicate, true, true);
  // A learner receiving the snapshot, then replaying 100,000 entries after it.
  up.push_back(member(4, 0, ProgressState::kSnapshot, true));
  EXPECT_EQ(hold.waits_for(up, 500'000, 1'000'000, snap), 4u);
  up.back() = member(4, 400'000, ProgressState::kReplicate, true);
  EXPECT_EQ(hold.waits_for(up, 500'000, 1'000'000, snap), 4u);
  // ... until the log reaches half the snapshot: then it is sent one again.
  EXPECT_EQ(hold.waits_for(up, 500'000, 29'999'999, snap), 4u);
  EXPECT_EQ(hold.waits_for(up, 500'000, 30'000'000, snap), raft::kNoNode);
  // Within the lag, or not heard from (dead, partitioned): no hold.
  up.back() = member(4, 490'001, ProgressState::kReplicate, true);
  EXPECT_EQ(hold.waits_for(up, 500'000, 1'000'000, snap), raft::kNoNode);
  up.back() = member(4, 0, ProgressState::kSnapshot, false);
  EXPECT_EQ(hold.waits_for(up, 500'000, 1'000'000, snap), raft::kNoNode);
  // Silent within the bound — a learner whose loop decodes the snapshot it
  // just received answers nothing for a while, and this election period
  // has not heard from it — it still holds.
  up.back().recent_active = false;
  up.back().ticks_since_contact = 200;
  EXPECT_EQ(hold.waits_for(up, 500'000, 1'000'000, snap), 4u);
  // Off.
  up.back() = member(4, 0, ProgressState::kSnapshot, true);
  EXPECT_EQ((CatchUpHold{10'000, 0}).waits_for(up, 500'000, 0, snap), raft::kNoNode);
}

// A big table is snapshotted only once the log outgrew its last snapshot:
// the O(table) cost of a snapshot (fork, serialize, write, the parent's
// copy-on-write faults) is then O(1) per byte of log, however large the
// table. Without the ratio a 1 M-lock table (a ~60 MB snapshot) was
// snapshotted every 10,000 entries (~600 KB of log) and the group kept
// changing leaders (docs/cluster.md "Snapshots").
TEST(SnapshotPolicy, WaitsUntilTheLogOutgrowsTheLastSnapshot) {
  const SnapshotPolicy p{100, 0, 100};
  EXPECT_TRUE(p.due(100, 0, 0, 0));  // nothing stored yet: entries decide
  EXPECT_TRUE(p.due(200, 100, 500, 500));
  EXPECT_FALSE(p.due(200, 100, 499, 500));          // enough entries, not enough log
  EXPECT_FALSE(p.due(100'000, 100, 59'999'999, 60'000'000));
  EXPECT_TRUE(p.due(100'000, 100, 60'000'000, 60'000'000));
  EXPECT_FALSE(p.due(150, 100, 1u << 30, 10));      // enough log, not enough entries
  const SnapshotPolicy quarter{100, 0, 25};
  EXPECT_FALSE(quarter.due(1000, 0, 14'999'999, 60'000'000));
  EXPECT_TRUE(quarter.due(1000, 0, 15'000'000, 60'000'000));
  // Over a growing table the spacing grows with it: snapshots of a table
  // that reaches N entries' worth of state number O(log N), not N / 100.
  for (const std::uint64_t percent : {100u, 25u}) {
    const SnapshotPolicy grow{100, 0, percent};
    std::uint64_t snapshots = 0, last_bytes = 0, since = 0;
    raft::Index last_index = 0;
    for (raft::Index i = 1; i <= 1'000'000; ++i) {
      since += 60;  // every entry adds one lock: ~60 bytes of log and of snapshot
      if (grow.due(i, last_index, since, last_bytes)) {
        ++snapshots;
        last_index = i;
        last_bytes = i * 60;
        since = 0;
      }
    }
    EXPECT_LE(snapshots, percent == 100 ? 20u : 50u) << percent;
    EXPECT_GE(snapshots, 10u) << percent;
  }
}

}  // namespace
}  // namespace lockd::storage
