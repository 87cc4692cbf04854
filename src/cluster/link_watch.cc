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
    const bool was_reported = std::exchange(reported_, false);
    if (was_reported) return fmt::format("{} is back after {}s", id_only_, (now - down_since_ns_) / kNsPerS);
    return std::nullopt;
  }
  if (!up && up_) {
    up_ = false;
    reported_ = true;
    down_since_ns_ = now;
    next_report_ns_ = now + kFirstReportNs;
    return fmt::format("lost the link to {}; retrying", who_);
  }
  if (!up && now >= next_report_ns_) {
    reported_ = true;
    next_report_ns_ = now + kReportEveryNs;
    return fmt::format("{} still down for {}s", who_, (now - down_since_ns_) / kNsPerS);
  }
  return std::nullopt;
}

}  // namespace lockd::cluster
