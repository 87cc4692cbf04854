#include "lockd/admin/metrics.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "lockd/server/lock_server.h"
#include "lockd/storage/fd_exhausted.h"
#include "lockd/version/version.h"

namespace lockd::admin {

void MetricsWriter::family(std::string_view name, std::string_view type, std::string_view help) {
  fmt::format_to(std::back_inserter(out_), "# HELP {} {}\n# TYPE {} {}\n", name, help, name,
                 type);
}

void MetricsWriter::labels(std::initializer_list<Label> ls, std::string_view extra_name,
                           std::string_view extra_value) {
  if (ls.size() == 0 && extra_name.empty()) return;
  out_.push_back('{');
  bool first = true;
  const auto one = [&](std::string_view n, std::string_view v) {
    if (!first) out_.push_back(',');
    first = false;
    out_.append(n);
    out_.append("=\"");
    for (const char c : v) {  // exposition escapes: backslash, quote, newline
      if (c == '\\') {
        out_.append("\\\\");
      } else if (c == '"') {
        out_.append("\\\"");
      } else if (c == '\n') {
        out_.append("\\n");
      } else {
        out_.push_back(c);
      }
    }
    out_.push_back('"');
  };
  for (const auto& [n, v] : ls) one(n, v);
  if (!extra_name.empty()) one(extra_name, extra_value);
  out_.push_back('}');
}

void MetricsWriter::sample(std::string_view name, std::initializer_list<Label> ls, double value) {
  out_.append(name);
  labels(ls);
  fmt::format_to(std::back_inserter(out_), " {}\n", value);
}

void MetricsWriter::sample(std::string_view name, std::initializer_list<Label> ls,
                           std::uint64_t value) {
  out_.append(name);
  labels(ls);
  fmt::format_to(std::back_inserter(out_), " {}\n", value);
}

void MetricsWriter::histogram(std::string_view name, std::string_view help,
                              const LatencyHistogram& h) {
  family(name, "histogram", help);
  const std::string bucket = fmt::format("{}_bucket", name);
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < LatencyHistogram::kFiniteBuckets; ++i) {
    cumulative += h.counts()[i];
    const std::string le =
        fmt::format("{}", static_cast<double>(LatencyHistogram::bound_ns(i)) / 1e9);
    out_.append(bucket);
    labels({}, "le", le);
    fmt::format_to(std::back_inserter(out_), " {}\n", cumulative);
  }
  out_.append(bucket);
  labels({}, "le", "+Inf");
  fmt::format_to(std::back_inserter(out_), " {}\n", h.count());
  sample(fmt::format("{}_sum", name), {}, static_cast<double>(h.sum_ns()) / 1e9);
  sample(fmt::format("{}_count", name), {}, h.count());
}

ProcessStats read_process_stats() {
  ProcessStats p;
  const long page = sysconf(_SC_PAGESIZE);
  const long ticks = sysconf(_SC_CLK_TCK);
  if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
    unsigned long long size = 0, resident = 0;
    if (std::fscanf(f, "%llu %llu", &size, &resident) == 2) {
      p.virtual_bytes = size * static_cast<unsigned long long>(page);
      p.resident_bytes = resident * static_cast<unsigned long long>(page);
    }
    std::fclose(f);
  }
  {
    // /proc/self/stat: fields after the `(comm)`; utime, stime are fields
    // 14 and 15, starttime is 22 (man 5 proc).
    std::ifstream f("/proc/self/stat");
    std::string line;
    if (std::getline(f, line)) {
      const std::size_t close = line.rfind(')');
      if (close != std::string::npos) {
        std::istringstream rest(line.substr(close + 2));
        std::string field;
        unsigned long long utime = 0, stime = 0, start = 0;
        for (int i = 3; i <= 22 && rest >> field; ++i) {
          if (i == 14) utime = std::stoull(field);
          if (i == 15) stime = std::stoull(field);
          if (i == 22) start = std::stoull(field);
        }
        if (ticks > 0) {
          p.cpu_seconds = static_cast<double>(utime + stime) / static_cast<double>(ticks);
          // starttime counts ticks since boot; add the boot time.
          std::ifstream st("/proc/stat");
          std::string key;
          unsigned long long btime = 0;
          while (st >> key) {
            if (key == "btime") {
              st >> btime;
              break;
            }
          }
          p.start_time_seconds =
              static_cast<double>(btime) + static_cast<double>(start) / static_cast<double>(ticks);
        }
      }
    }
  }
  if (DIR* d = opendir("/proc/self/fd")) {
    std::uint64_t n = 0;
    while (const dirent* e = readdir(d)) {
      if (e->d_name[0] != '.') ++n;
    }
    closedir(d);
    p.open_fds = n > 0 ? n - 1 : 0;  // minus the fd of this listing
  }
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0) p.max_fds = rl.rlim_cur;
  return p;
}

namespace {

// Cluster mode's families (docs/operations.md "Cluster metrics"): the Raft
// state, elections, proposals and their commit latency, the WAL's syncs,
// snapshots, and every peer link.
void render_cluster_metrics(MetricsWriter& w, const NodeInfo& node, TimeNs now_ns) {
  const ClusterStatus c = node.cluster(now_ns);
  w.single("lockd_raft_term", "gauge", "The Raft term this node is in.", c.term);
  w.family("lockd_raft_role", "gauge",
           "1 for the role this node has now (leader, follower or candidate; a "
           "pre-candidate shows as candidate), 0 for the others.");
  for (const char* role : {"leader", "follower", "candidate", "learner"}) {
    w.sample("lockd_raft_role", {{"role", role}}, std::uint64_t{c.role == role ? 1u : 0u});
  }
  w.single("lockd_raft_leader_id", "gauge", "The leader's node id as this node knows it; 0: none.",
           c.leader_id);
  w.single("lockd_raft_commit_index", "gauge", "Highest log index known committed.",
           c.commit_index);
  w.single("lockd_raft_applied_index", "gauge",
           "Highest log index applied to this node's lock table.", c.applied_index);
  // The leader knows every member's match index (its own: its last index);
  // other nodes export nothing here.
  std::optional<std::uint64_t> own_last;
  for (const ClusterMember& mb : c.members) {
    if (mb.id == c.node_id && c.role == "leader") own_last = mb.match_index;
  }
  w.family("lockd_raft_follower_lag_entries", "gauge",
           "Leader only: log entries a member (voter or learner) is behind the leader's last index.");
  if (own_last) {
    for (const ClusterMember& mb : c.members) {
      if (mb.id == c.node_id || !mb.match_index) continue;
      w.sample("lockd_raft_follower_lag_entries", {{"peer", std::to_string(mb.id)}},
               *own_last > *mb.match_index ? *own_last - *mb.match_index : std::uint64_t{0});
    }
  }
  // Membership (issue 20).
  w.single("lockd_raft_configuration_index", "gauge",
           "Log index of the configuration in force (0: the --peer bootstrap, never changed).",
           c.conf_index);
  std::uint64_t voters = 0;
  std::uint64_t learners = 0;
  for (const ClusterMember& mb : c.members) ++(mb.voter ? voters : learners);
  w.single("lockd_raft_voters", "gauge", "Voters in the configuration in force.", voters);
  w.single("lockd_raft_learners", "gauge", "Learners in the configuration in force.", learners);
  w.family("lockd_raft_learner_lag_entries", "gauge",
           "Leader only: log entries a learner is behind the commit index (promote waits for it "
           "to be caught up).");
  if (c.role == "leader") {
    for (const ClusterMember& mb : c.members) {
      if (mb.voter || !mb.match_index) continue;
      w.sample("lockd_raft_learner_lag_entries", {{"peer", std::to_string(mb.id)}},
               c.commit_index > *mb.match_index ? c.commit_index - *mb.match_index
                                                : std::uint64_t{0});
    }
  }
  if (!node.cluster_metrics) return;
  const ClusterMetrics m = node.cluster_metrics(now_ns);
  w.single("lockd_raft_elections_total", "counter",
           "Elections this node started (term bumped after a won pre-vote).", m.elections);
  w.single("lockd_raft_pre_votes_total", "counter", "Pre-vote rounds this node started.",
           m.pre_votes);
  w.single("lockd_raft_leaderships_total", "counter", "Times this node became leader.",
           m.leaderships);
  w.single("lockd_raft_leader_changes_total", "counter",
           "Times the leader this node knows changed (to another node or to none).",
           m.leader_changes);
  w.single("lockd_raft_check_quorum_step_downs_total", "counter",
           "Times this leader stepped down for not hearing from a majority.",
           m.step_downs_check_quorum);
  w.single("lockd_raft_proposals_total", "counter",
           "Commands this leader proposed (client requests and its own: expiries, clock).",
           m.proposals);
  w.single("lockd_raft_proposals_refused_total", "counter",
           "Proposals refused (not the leader, or too many uncommitted entries).",
           m.proposals_refused);
  w.single("lockd_raft_indeterminate_total", "counter",
           "Requests answered E indeterminate because leadership was lost before commit.",
           m.indeterminate);
  w.histogram("lockd_raft_commit_duration_seconds",
              "Leader: from writing an entry to the WAL (the loop turn it was proposed in) to "
              "applying it after a majority stored it.",
              m.commit_latency);
  w.single("lockd_wal_saves_total", "counter", "WAL saves that wrote anything.", m.wal_saves);
  w.single("lockd_wal_syncs_total", "counter", "fdatasync calls on WAL segments.", m.wal_syncs);
  w.single("lockd_wal_entries_total", "counter",
           "Log entries written to the WAL; divided by lockd_wal_syncs_total: entries per sync "
           "(the group-commit factor).",
           m.wal_entries);
  w.single("lockd_wal_bytes_total", "counter", "Bytes written to the WAL.", m.wal_bytes);
  w.histogram("lockd_wal_sync_duration_seconds",
              "One WAL save: its write and fdatasync.", m.sync_latency);
  w.single("lockd_snapshots_written_total", "counter", "Snapshots of the lock table written.",
           m.snapshots_written);
  w.single("lockd_raft_snapshots_sent_total", "counter",
           "Snapshots this leader sent that a follower acknowledged.", m.snapshots_sent);
  w.single("lockd_raft_snapshots_installed_total", "counter",
           "Snapshots from a leader installed on this node.", m.snapshots_installed);
  w.single("lockd_raft_snapshots_refused_total", "counter",
           "Snapshots received whole that failed the full check (decode, limits, waiter ids) "
           "and were dropped before anything was stored.",
           m.snapshots_refused);

  std::vector<std::string> ids;
  ids.reserve(m.peers.size());
  for (const PeerLinkMetrics& p : m.peers) ids.push_back(std::to_string(p.id));
  w.family("lockd_peer_up", "gauge",
           "1 when this node's outgoing link to the peer is connected (handshake done).");
  for (std::size_t i = 0; i < m.peers.size(); ++i) {
    w.sample("lockd_peer_up", {{"peer", ids[i]}},
             std::uint64_t{m.peers[i].link == "connected" ? 1u : 0u});
  }
  w.family("lockd_peer_inbound_up", "gauge",
           "1 when the peer has a handshaken connection to this node.");
  for (std::size_t i = 0; i < m.peers.size(); ++i) {
    w.sample("lockd_peer_inbound_up", {{"peer", ids[i]}},
             std::uint64_t{m.peers[i].inbound_connected ? 1u : 0u});
  }
  const auto per_peer = [&](const char* name, const char* help, auto field) {
    w.family(name, "counter", help);
    for (std::size_t i = 0; i < m.peers.size(); ++i) {
      w.sample(name, {{"peer", ids[i]}}, field(m.peers[i]));
    }
  };
  per_peer("lockd_peer_sent_bytes_total", "Bytes written to the peer.",
           [](const PeerLinkMetrics& p) { return p.bytes_sent; });
  per_peer("lockd_peer_received_bytes_total", "Bytes read from the peer.",
           [](const PeerLinkMetrics& p) { return p.bytes_received; });
  per_peer("lockd_peer_sent_messages_total", "Raft messages queued to the peer.",
           [](const PeerLinkMetrics& p) { return p.messages_sent; });
  per_peer("lockd_peer_received_messages_total", "Raft messages received from the peer.",
           [](const PeerLinkMetrics& p) { return p.messages_received; });
  per_peer("lockd_peer_dropped_messages_total",
           "Raft messages to the peer dropped (link down, queue full, unsent when a link "
           "closed); Raft retries.",
           [](const PeerLinkMetrics& p) { return p.messages_dropped; });
  per_peer("lockd_peer_reconnects_total", "Dial attempts to the peer after the first.",
           [](const PeerLinkMetrics& p) { return p.reconnects; });
  per_peer("lockd_peer_resolve_failures_total",
           "Lookups of the peer's raft host name that failed (retried with back-off).",
           [](const PeerLinkMetrics& p) { return p.resolve_failures; });
  w.family("lockd_peer_refused_total", "counter",
           "Peer handshakes refused, ours by a peer or a peer's by us, by reason "
           "(wrong_cluster: a node of another or a re-created cluster).");
  for (const auto& [reason, n] : m.peer_refused) {
    w.sample("lockd_peer_refused_total", {{"reason", reason}}, n);
  }
  w.family("lockd_peer_last_contact_seconds", "gauge",
           "Seconds since the last byte from the peer (absent: never heard from).");
  for (std::size_t i = 0; i < m.peers.size(); ++i) {
    if (m.peers[i].last_contact_seconds) {
      w.sample("lockd_peer_last_contact_seconds", {{"peer", ids[i]}},
               *m.peers[i].last_contact_seconds);
    }
  }
}

}  // namespace

std::string render_metrics(const server::LockServer& server, const NodeInfo& node,
                           TimeNs now_ns) {
  using server::ReplyKind;
  const server::ServerStats& st = server.stats();
  const locks::LockTable& table = server.table();
  const locks::LockStats& ls = table.stats();
  const auto reply = [&st](ReplyKind k) { return st.replies[static_cast<std::size_t>(k)]; };

  std::string out;
  out.reserve(8192);
  MetricsWriter w(out);

  w.family("lockd_build_info", "gauge",
           "Always 1; labels carry the version, the git revision (empty outside a checkout) "
           "and the mode.");
  w.sample("lockd_build_info",
           {{"version", node.version}, {"revision", version::revision()},
            {"mode", node.mode}},
           std::uint64_t{1});

  w.family("lockd_requests_total", "counter",
           "Requests answered, by verb (A, R, K, S, or invalid for malformed lines) and result "
           "(the reply's letter). A waiting acquire counts when it is answered.");
  w.sample("lockd_requests_total", {{"verb", "A"}, {"result", "A"}}, reply(ReplyKind::kAcquired));
  w.sample("lockd_requests_total", {{"verb", "A"}, {"result", "T"}}, reply(ReplyKind::kHeld));
  w.sample("lockd_requests_total", {{"verb", "A"}, {"result", "B"}}, reply(ReplyKind::kBusy));
  w.sample("lockd_requests_total", {{"verb", "R"}, {"result", "R"}}, reply(ReplyKind::kReleased));
  w.sample("lockd_requests_total", {{"verb", "R"}, {"result", "N"}},
           reply(ReplyKind::kNotReleased));
  w.sample("lockd_requests_total", {{"verb", "K"}, {"result", "K"}}, reply(ReplyKind::kKept));
  w.sample("lockd_requests_total", {{"verb", "K"}, {"result", "N"}}, reply(ReplyKind::kNotKept));
  w.sample("lockd_requests_total", {{"verb", "S"}, {"result", "S"}}, reply(ReplyKind::kShared));
  w.sample("lockd_requests_total", {{"verb", "S"}, {"result", "T"}}, reply(ReplyKind::kSharedHeld));
  w.sample("lockd_requests_total", {{"verb", "S"}, {"result", "B"}}, reply(ReplyKind::kSharedBusy));
  w.sample("lockd_requests_total", {{"verb", "W"}, {"result", "W"}}, reply(ReplyKind::kWatching));
  w.sample("lockd_requests_total", {{"verb", "W"}, {"result", "B"}}, reply(ReplyKind::kWatchBusy));
  w.sample("lockd_requests_total", {{"verb", "U"}, {"result", "U"}}, reply(ReplyKind::kUnwatched));
  w.sample("lockd_requests_total", {{"verb", "invalid"}, {"result", "E"}},
           reply(ReplyKind::kError));

  w.family("lockd_requests_received_total", "counter",
           "Request lines received, by verb (invalid: malformed or too long).");
  w.sample("lockd_requests_received_total", {{"verb", "A"}}, st.requests_acquire);
  w.sample("lockd_requests_received_total", {{"verb", "R"}}, st.requests_release);
  w.sample("lockd_requests_received_total", {{"verb", "K"}}, st.requests_keep);
  w.sample("lockd_requests_received_total", {{"verb", "S"}}, st.requests_shared);
  w.sample("lockd_requests_received_total", {{"verb", "invalid"}},
           st.requests_malformed + st.lines_too_long);

  w.histogram("lockd_request_duration_seconds",
              "Server-side latency of requests answered at once, from parse to reply queued.",
              st.latency);

  w.single("lockd_keys", "gauge",
           "Registered keys (held, or expired and not yet swept).",
           static_cast<std::uint64_t>(table.key_count()));
  bool exact = false;
  const std::size_t holders = holders_bounded(table, table_time(node, now_ns), exact);
  w.family("lockd_holders", "gauge",
           "Holders whose lease has not run out, each shared holder counted (exact up to "
           "10000 keys; above, every registered holder).");
  w.sample("lockd_holders", {}, static_cast<std::uint64_t>(holders));
  w.single("lockd_waiters", "gauge",
           "Acquires queued behind a holder, over all keys.",
           static_cast<std::uint64_t>(table.waiter_count()));
  w.single("lockd_connections", "gauge",
           "Open client connections.",
           static_cast<std::uint64_t>(server.connection_count()));
  w.single("lockd_connections_accepted_total", "counter",
           "Client connections accepted.",
           st.connections_accepted);
  w.single("lockd_connections_rejected_total", "counter",
           "Client connections closed at once because of --max-connections.",
           st.connections_rejected);
  // §11a (v1.3): every connection the client port closed to protect itself.
  w.family("lockd_client_connections_closed_total", "counter",
           "Client connections closed by a v1.3 bound, by reason: auth_timeout, "
           "max_unauthenticated (the oldest, to make room), max_connections_per_ip, "
           "unauthenticated_output (not reading its refusals), max_tls_handshakes.");
  for (std::size_t i = 0; i < st.closed.size(); ++i) {
    w.sample("lockd_client_connections_closed_total",
             {{"reason", server::to_string(static_cast<server::CloseReason>(i))}}, st.closed[i]);
  }
  w.single("lockd_connections_unauthenticated", "gauge",
           "Open client connections not yet authenticated (with --auth).",
           static_cast<std::uint64_t>(server.unauthenticated_count()));
  w.single("lockd_accept_pauses_total", "counter",
           "Times accept() failed for want of descriptors and the listener paused 100 ms.",
           server.accept_pauses());
  w.family("lockd_fd_exhausted_total", "counter",
           "Storage opens that failed for want of descriptors (EMFILE/ENFILE) and were retried, by what.");
  w.sample("lockd_fd_exhausted_total", {{"what", "wal"}},
           storage::fd_exhausted_wal.load(std::memory_order_relaxed));
  w.sample("lockd_fd_exhausted_total", {{"what", "snapshot"}},
           storage::fd_exhausted_snapshot.load(std::memory_order_relaxed));

  w.single("lockd_grants_total", "counter",
           "Fencing tokens handed out (every grant).",
           ls.grants);
  w.family("lockd_handoffs_total", "counter",
           "Grants to a queued waiter, by cause (release, expiry, or queue: the waiter "
           "before it left).");
  w.sample("lockd_handoffs_total", {{"cause", "release"}}, ls.handoffs_release);
  w.sample("lockd_handoffs_total", {{"cause", "expiry"}}, ls.handoffs_expiry);
  w.sample("lockd_handoffs_total", {{"cause", "queue"}}, ls.handoffs_queue);
  w.single("lockd_shared_grants_total", "counter",
           "Fencing tokens handed to shared (S) holders.",
           ls.shared_grants);
  w.single("lockd_limit_mismatches_total", "counter",
           "S requests refused with E limit_mismatch.",
           ls.limit_mismatches);
  w.single("lockd_takeovers_total", "counter",
           "Expired keys taken over on the spot by a new acquire.",
           ls.takeovers);
  w.single("lockd_keeps_total", "counter",
           "Leases moved by a keep (K answered K); the lock table's count, which in "
           "cluster mode includes keeps applied from the log.",
           ls.keeps);
  w.single("lockd_expirations_total", "counter",
           "Leases that ended because they ran out.",
           ls.expirations);
  w.single("lockd_wait_timeouts_total", "counter",
           "Waiters answered T because their wait ran out.",
           ls.wait_timeouts);
  w.single("lockd_waiters_cancelled_total", "counter",
           "Waiters dropped without a reply (their connection closed).",
           ls.waiters_cancelled);
  w.single("lockd_sweeps_total", "counter",
           "Sweeps of expired keys without waiters.",
           ls.sweeps);
  w.single("lockd_swept_keys_total", "counter",
           "Expired keys deleted by sweeps.",
           ls.swept_keys);
  w.single("lockd_watches", "gauge",
           "Keys watched (W), summed over connections.",
           static_cast<std::uint64_t>(server.watches().watch_count()));
  w.single("lockd_watchers", "gauge",
           "Connections watching at least one key.",
           static_cast<std::uint64_t>(server.watches().watcher_count()));
  w.single("lockd_watch_pushes_total", "counter",
           "V lines pushed to watchers (one per watcher and change).",
           server.watches().stats().pushes);
  w.single("lockd_watches_refused_total", "counter",
           "W answered B: --max-watches-per-connection or --max-watches was full.",
           server.watches().stats().refused);
  w.single("lockd_watchers_dropped_total", "counter",
           "Watching connections closed because their unsent output passed the cap.",
           server.watchers_dropped());
  w.single("lockd_lost_notices_total", "counter",
           "X lines pushed: a holder told that its lease ended by expiry.",
           server.lost_notices());
  w.single("lockd_output_overflows_total", "counter",
           "Connections closed because their unsent output passed the cap.",
           st.output_overflows);
  w.single("lockd_lines_too_long_total", "counter",
           "Request lines over 1024 bytes (answered E line_too_long, then closed).",
           st.lines_too_long);
  w.single("lockd_client_tls_failures_total", "counter",
           "Client connections closed because the TLS handshake or a record failed "
           "(plaintext on a TLS port, a certificate refused).",
           st.tls_failures);
  w.single("lockd_client_tls_handshake_timeouts_total", "counter",
           "Client connections closed because their TLS handshake did not complete within "
           "--tls-handshake-timeout-ms of the accept.",
           st.tls_handshake_timeouts);
  w.single("lockd_auth_failures_total", "counter",
           "H requests whose credential was not accepted (answered E unauthenticated, then closed).",
           st.auth_failures);
  w.single("lockd_requests_refused_total", "counter",
           "Requests refused before they were decided: E unauthenticated or E forbidden.",
           st.requests_refused);
  w.single("lockd_uptime_seconds", "gauge",
           "Seconds since lockd started.",
           static_cast<double>(now_ns - node.started_ns) / 1e9);

  if (node.cluster) render_cluster_metrics(w, node, now_ns);

  // Process metrics under the names every Prometheus client library uses.
  const ProcessStats p = read_process_stats();
  w.single("process_resident_memory_bytes", "gauge",
           "Resident memory size in bytes.",
           p.resident_bytes);
  w.single("process_virtual_memory_bytes", "gauge",
           "Virtual memory size in bytes.",
           p.virtual_bytes);
  w.single("process_open_fds", "gauge",
           "Open file descriptors.",
           p.open_fds);
  w.single("process_max_fds", "gauge",
           "Limit on open file descriptors.",
           p.max_fds);
  w.single("process_cpu_seconds_total", "counter",
           "User and system CPU time in seconds.",
           p.cpu_seconds);
  w.single("process_start_time_seconds", "gauge",
           "Start time since the Unix epoch in seconds.",
           p.start_time_seconds);
  return out;
}

}  // namespace lockd::admin
