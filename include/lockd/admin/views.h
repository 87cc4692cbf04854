// JSON views of a lockd's state for the admin API (spec interfaces.md):
// pure functions from the lock table / server counters and `now` to
// nlohmann::ordered_json. No I/O, no clock reads: the HTTP layer passes `now`.
//
// Why free functions over read-only views: the admin API must not change
// lock state, and keeping the views pure lets unit tests and the 1M-key
// benchmark call them without a socket.
//
// Cost: a listing or top walks every key once (the table is a hash map
// with no order) through a KeyScan that can be split across loop turns;
// per-request memory and output are bounded by `limit`. See
// docs/operations.md for measured times at 1M keys.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "lockd/common/latency_histogram.h"
#include "lockd/common/time.h"
#include "lockd/locks/lock_table.h"

namespace lockd::server {
class LockServer;
}

namespace lockd::admin {

// `/v1/locks` paging bounds.
constexpr std::size_t kDefaultListLimit = 1000;
constexpr std::size_t kMaxListLimit = 10'000;  // larger limits are clamped
// `/v1/top` rows per table.
constexpr std::size_t kDefaultTopLimit = 10;
constexpr std::size_t kMaxTopLimit = 100;
// Waiters listed by `/v1/locks/KEY` (the queue itself is bounded by
// --max-waiters-per-key, which an operator may set very high).
constexpr std::size_t kMaxWaitersListed = 10'000;
// Shared holders listed per key by `/v1/locks/KEY` (a read lock with limit 0
// has no cap of its own); `holder_count` always gives them all.
constexpr std::size_t kMaxHoldersListed = 10'000;
// ... and per key of a `/v1/locks` page, which lists up to 1000 keys.
constexpr std::size_t kMaxHoldersListedPerKey = 100;

// One cluster member as a node sees it (for /v1/cluster).
struct ClusterMember {
  std::uint64_t id = 0;
  std::string client_addr;
  std::string raft_addr;
  std::string role;                            // "leader" for the leader, "learner" for a learner, else "follower"
  bool voter = true;                           // false: a learner (v1.2)
  std::optional<std::uint64_t> match_index;    // known on the leader only
  std::optional<std::int64_t> last_contact_ms; // known on the leader only
  // Beyond the spec's fields, known on every node for every other member:
  // whether this node has a live peer connection to it, and how long ago
  // it last heard from it (nullopt: itself, or never).
  std::optional<bool> link_up;
  std::optional<std::int64_t> last_heard_ms;
};

// A cluster node's Raft state, read fresh for every request (the seam
// between the admin API and the cluster node).
struct ClusterStatus {
  std::uint64_t node_id = 0;
  std::string role;           // leader | follower | candidate (a pre-candidate too)
  std::uint64_t term = 0;
  std::uint64_t leader_id = 0;  // 0: unknown
  std::string leader_addr;    // the leader's client host:port; empty: unknown
  std::uint64_t commit_index = 0;
  std::uint64_t applied_index = 0;
  bool serving = false;       // leader whose first entry of the term is applied
  std::uint64_t conf_index = 0;  // log index of the configuration in force (0: the --peer bootstrap)
  std::vector<ClusterMember> members;
};

// A membership change or leader transfer asked through the admin API
// (interfaces.md v1.2; the cluster node does it, cluster_node.h).
enum class MemberChangeOp : std::uint8_t { kAdd, kPromote, kRemove, kTransfer, kInit };
struct MemberChangeRequest {
  MemberChangeOp op = MemberChangeOp::kAdd;
  std::uint64_t id = 0;     // kTransfer: 0 = the best voter
  std::string client_addr;  // kAdd
  std::string raft_addr;    // kAdd
};
// How it ended: 200 (reply with the new /v1/cluster) or an error.
struct MemberChangeReply {
  int status = 200;
  std::string error;
  std::string message;  // "" = the body is {"error"} alone (the contract's 409s)
  std::optional<std::string> leader_admin;  // 503 not_leader
};
using MemberChangeFn =
    std::function<void(const MemberChangeRequest&, std::function<void(const MemberChangeReply&)>)>;

// One peer link as this node's transport sees it, for /metrics.
struct PeerLinkMetrics {
  std::uint64_t id = 0;
  std::string link;                // our outgoing link: down | connecting | connected
  bool inbound_connected = false;  // the peer has a handshaken connection to us
  std::uint64_t bytes_sent = 0;
  std::uint64_t bytes_received = 0;
  std::uint64_t messages_sent = 0;
  std::uint64_t messages_received = 0;
  std::uint64_t messages_dropped = 0;  // link down, queue full, unsent at close
  std::uint64_t reconnects = 0;
  std::uint64_t resolve_failures = 0;  // lookups of its raft host name that failed
  std::optional<double> last_contact_seconds;  // since its last byte; none: never
};

// A cluster node's counters for /metrics, read at scrape time. Counters
// only grow; the histograms are copies (22 buckets each).
struct ClusterMetrics {
  // Raft core.
  std::uint64_t elections = 0;        // campaigns started (term bumped)
  std::uint64_t pre_votes = 0;        // pre-vote rounds started
  std::uint64_t leaderships = 0;      // times this node became leader
  std::uint64_t leader_changes = 0;   // times the leader this node knows changed
  std::uint64_t step_downs_check_quorum = 0;
  std::uint64_t snapshots_sent = 0;
  std::uint64_t snapshots_installed = 0;
  std::uint64_t snapshots_refused = 0;  // from a peer, failed the full check, never stored
  // Proposals (the leader's replicated lock service).
  std::uint64_t proposals = 0;
  std::uint64_t proposals_refused = 0;
  std::uint64_t indeterminate = 0;    // E indeterminate replies
  LatencyHistogram commit_latency;    // leader: WAL write -> applied, per entry
  // WAL.
  std::uint64_t wal_saves = 0;
  std::uint64_t wal_syncs = 0;
  std::uint64_t wal_entries = 0;
  std::uint64_t wal_bytes = 0;
  std::uint64_t snapshots_written = 0;
  LatencyHistogram sync_latency;      // write + fdatasync of one save
  std::vector<PeerLinkMetrics> peers;
  // Refused peer handshakes by reason (wrong_cluster, bad_version, ...).
  std::vector<std::pair<std::string, std::uint64_t>> peer_refused;
};

// What `GET /v1/snapshot` exports right now (admin/snapshot_export.h).
struct SnapshotSource {
  bool not_leader = false;  // a cluster node that is not the serving leader: 503 not_leader
  std::optional<std::string> leader_admin;  // the leader's admin host:port, when known
  std::string refused;      // non-empty: 409 cannot_export with this message
  std::string filename;     // the download's suggested name
  std::function<std::string()> produce;  // runs in a forked child: the whole backup file
};

// The descriptor budget lockd found at start (daemon/fd_limit.h).
struct FdStatus {
  std::uint64_t limit = 0;   // RLIMIT_NOFILE soft limit after raising it; 0: unknown
  std::uint64_t needed = 0;  // --max-connections + peers + files
};

// What a node says about itself beyond the lock table.
struct NodeInfo {
  std::string version;       // version::full(): "0.1.0+g9c497a1"
  std::string mode;          // "single" or "cluster"
  std::string listen;        // client address, host:port
  TimeNs started_ns = 0;     // monotonic, for uptime
  // Cluster mode: the node's Raft state now. Empty in single mode.
  std::function<ClusterStatus(TimeNs now_ns)> cluster;
  // Cluster mode: the node's counters for /metrics. Empty in single mode.
  std::function<ClusterMetrics(TimeNs now_ns)> cluster_metrics;
  // Cluster mode: the lock table's time at monotonic `now_ns` (leases and
  // waits run on the leader's clock mapped to table time; see
  // cluster/lock_state_machine.h). Empty in single mode: the table runs on
  // the monotonic clock.
  std::function<TimeNs(TimeNs now_ns)> table_now;
  // `GET /v1/snapshot`; empty: 404.
  std::function<SnapshotSource()> snapshot;
  // `/v1/status` says when the descriptor limit is below the need.
  FdStatus fds;
  // The member endpoints and POST /v1/cluster/leader; empty (single mode): 404.
  MemberChangeFn change_members;
};

// The lock table's time at monotonic `now_ns`: what every lease and wait in
// a view is measured against (uptime stays on the monotonic clock).
TimeNs table_time(const NodeInfo& node, TimeNs now_ns);

// `/readyz`: single mode always; cluster mode when this node can serve or
// redirect A/R: the leader serving, or a follower that knows a leader.
bool node_ready(const NodeInfo& node, TimeNs now_ns);

// Milliseconds from `now` to `at`, rounded toward -infinity so a lease that
// ran out even 1 ns ago is negative.
std::int64_t ms_until(TimeNs at_ns, TimeNs now_ns);

// Largest table whose holders are counted exactly. A scan costs ~140 ns a
// key at 1M keys (hash-map nodes are cache misses), far too long a stall
// for every scrape; above this, `holders` is the key count.
constexpr std::size_t kExactHoldersMaxKeys = 10'000;

// Keys holding a lease that has not run out (expired, unswept keys are not
// counted). One scan of the table.
std::size_t count_holders(const locks::LockTable& table, TimeNs now_ns);

// What `/v1/status` and `lockd_holders` report: count_holders() when the
// table has at most kExactHoldersMaxKeys keys (`exact` set), else the key
// count, an upper bound that counts a run-out lease until the next sweep
// or takeover.
std::size_t holders_bounded(const locks::LockTable& table, TimeNs now_ns, bool& exact);

// `/v1/status`.
// `holders`, when given, is an exact count the caller already has.
nlohmann::ordered_json status_json(const server::LockServer& server, const NodeInfo& node,
                                   TimeNs now_ns,
                                   std::optional<std::size_t> holders = std::nullopt);

// `/v1/cluster` (cluster mode): every member as this node sees it.
nlohmann::ordered_json cluster_json(const ClusterStatus& c);

// What the asking identity may see of one key in `/v1/locks` and
// `/v1/locks/KEY` (protocol.md §11a, "Tokens are shown only to whom they
// belong"; admin_auth.h decides it from the ACL).
enum class KeyView {
  kHidden,   // not listed; /v1/locks/KEY answers 404 as for a free key
  kNoToken,  // listed, but every holder's `token` is null
  kFull,     // listed with its tokens
};
using KeyViewFn = std::function<KeyView(std::string_view key)>;

// `/v1/locks` query: keys starting with `prefix` and greater than `after`
// (exclusive, for the next page), first `limit` in byte order.
struct ListQuery {
  std::string prefix;
  std::string after;
  std::size_t limit = kDefaultListLimit;
};

// A walk over every key that a caller may split into slices of buckets
// across loop turns (LockTable::for_each_in_buckets), so that listing a
// million keys never holds the reactor for more than one slice. What it
// keeps between slices is bounded by its `limit`: copies of at most
// limit+1 keys, never pointers into the table, which may change between
// slices. finish() looks each kept key up again, so the answer shows the
// state at the end; a key created or deleted during the walk may or may
// not be listed (like Redis SCAN), a key present throughout always is.
class KeyScan {
 public:
  virtual ~KeyScan() = default;
  // Sees one key (from any slice, in bucket order).
  virtual void offer(std::string_view key, const locks::KeyState& s, TimeNs now_ns) = 0;
  // Forgets everything offered (the table rehashed: the walk restarts).
  virtual void reset() = 0;
  // The reply body once every bucket was walked.
  virtual nlohmann::ordered_json finish(TimeNs now_ns) = 0;
};

// `/v1/locks`: the first `limit` matching keys by key order, kept in a
// bounded max-heap: O(n log limit) time over n keys, O(limit) memory.
class ListScan final : public KeyScan {
 public:
  // `view` (empty: every key in full) hides keys and tokens from the
  // identity that asks.
  ListScan(const locks::LockTable& table, ListQuery q, KeyViewFn view = {});
  void offer(std::string_view key, const locks::KeyState& s, TimeNs now_ns) override;
  void reset() override { heap_.clear(); }
  nlohmann::ordered_json finish(TimeNs now_ns) override;

 private:
  const locks::LockTable& table_;
  ListQuery q_;
  KeyViewFn view_;
  std::vector<std::string> heap_;  // max-heap on key; at most limit + 1
};

// `/v1/top` (lockctl top): status, the busiest keys among the latest
// requests, the longest queues and the oldest live holders, `limit` rows
// each; also counts live holders exactly on its way.
class TopScan final : public KeyScan {
 public:
  // `started_ns`: the monotonic time of the request, for the status part.
  // `view` (§11a, as /v1/locks): keys it hides are in no list (the status
  // part's totals still count them); empty: every key.
  TopScan(const server::LockServer& server, const NodeInfo& node, std::size_t limit,
          TimeNs started_ns, KeyViewFn view = {});
  void offer(std::string_view key, const locks::KeyState& s, TimeNs now_ns) override;
  void reset() override;
  nlohmann::ordered_json finish(TimeNs now_ns) override;

 private:
  using Ranked = std::pair<std::int64_t, std::string>;  // (rank, key): smaller is better
  void keep(std::vector<Ranked>& heap, Ranked r);

  const server::LockServer& server_;
  const NodeInfo& node_;  // owned by the AdminServer, which outlives its scans
  std::size_t limit_;
  TimeNs started_ns_;
  KeyViewFn view_;
  std::vector<Ranked> queues_;  // rank: -waiters
  std::vector<Ranked> oldest_;  // rank: granted_at_ns
  std::size_t holders_ = 0;
};

// Runs a whole scan at once: fine for small tables, tests and benchmarks.
nlohmann::ordered_json scan_all(const locks::LockTable& table, KeyScan& scan, TimeNs now_ns);

nlohmann::ordered_json list_locks_json(const locks::LockTable& table, const ListQuery& q,
                                       TimeNs now_ns);

// `/v1/locks/KEY`, or nullopt when the key is not registered (or `view`
// hides it). `view` empty: in full.
std::optional<nlohmann::ordered_json> lock_json(const locks::LockTable& table,
                                                std::string_view key, TimeNs now_ns,
                                                const KeyViewFn& view = {});

}  // namespace lockd::admin
