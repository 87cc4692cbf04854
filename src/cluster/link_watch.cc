// LinkWatch; see link_watch.h.
#include "lockd/cluster/link_watch.h"

#include <fmt/format.h>

#include <utility>

namespace lockd::cluster {

LinkWatch::LinkWatch(std::string who, std::string id_only, TimeNs now)
    : who_(std::move(who)), id_only_(std::move(id_only)), down_since_ns_(now),
      next_report_ns_(now + kFirstReportNs) {}

std::optional<std::string> LinkWatch::observe(bool up, TimeNs now) {
  constexpr TimeNs kNsPerS = 1000 * kNsPerMs;
  if (up && !up_) {
    up_ = true;
    loss_pending_ = false;  // back within the grace: nothing to say
    const bool was_reported = std::exchange(reported_, false);
    if (was_reported) return fmt::format("{} is back after {}s", id_only_, (now - down_since_ns_) / kNsPerS);
    return std::nullopt;
  }
  if (up) return std::nullopt;
  if (up_) {
    up_ = false;
    loss_pending_ = true;
    down_since_ns_ = now;
    next_report_ns_ = now + kFirstReportNs;
  }
  if (loss_pending_ && now - down_since_ns_ >= kLossGraceNs) {
    loss_pending_ = false;
    reported_ = true;
    return fmt::format("lost the link to {}; retrying", who_);
  }
  if (now >= next_report_ns_) {
    reported_ = true;
    next_report_ns_ = now + kReportEveryNs;
    return fmt::format("{} still down for {}s", who_, (now - down_since_ns_) / kNsPerS);
  }
  return std::nullopt;
}

}  // namespace lockd::cluster
