// LinkWatch: what the operator's log says about one peer's link
// (docs/cluster.md, "Logs"). Pure: the node feeds it whether the link is
// up and its monotonic clock each tick, and logs (at warn) the line it
// returns:
// - "lost the link to node N (raft ADDR); retrying" when an up link has
//   been down for kLossGraceNs (a link closed and redialled at once, as a
//   waiting node's new handshake does, says nothing);
// - "node N (raft ADDR) still down for Ss" kFirstReportNs after it went
//   down (or after start, for a peer never reached), then every
//   kReportEveryNs while it stays down;
// - "node N is back after Ss" when a link that was reported comes back (a
//   peer that connects within kFirstReportNs of start says nothing).
#pragma once

#include <optional>
#include <string>

#include "lockd/common/time.h"

namespace lockd::cluster {

class LinkWatch {
 public:
  static constexpr TimeNs kLossGraceNs = 1'000 * kNsPerMs;
  static constexpr TimeNs kFirstReportNs = 5'000 * kNsPerMs;
  static constexpr TimeNs kReportEveryNs = 30'000 * kNsPerMs;

  // `who`: how lines name the peer ("node 2 (raft 10.0.0.2:7121)").
  // `now`: when watching starts (the link counts as down until it is up).
  LinkWatch(std::string who, std::string id_only, TimeNs now);

  // The link's state at `now`; the line to log, if any.
  std::optional<std::string> observe(bool up, TimeNs now);

 private:
  std::string who_;      // "node 2 (raft 10.0.0.2:7121)"
  std::string id_only_;  // "node 2"
  bool up_ = false;
  bool reported_ = false;  // a warning about this outage went out: its end is logged too
  bool loss_pending_ = false;  // an up link went down: said once it stays down kLossGraceNs
  TimeNs down_since_ns_;
  TimeNs next_report_ns_;
};

}  // namespace lockd::cluster
