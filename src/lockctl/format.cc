#include "format.h"

#include <fmt/format.h>

#include <algorithm>

namespace lockd::lockctl {

std::string human_duration_ms(std::int64_t ms) {
  if (ms < 0) return "-" + human_duration_ms(-ms);
  if (ms < 1'000) return fmt::format("{}ms", ms);
  // Truncated, not rounded: 59.96 s left is `59.9s`, never `60.0s`.
  if (ms < 60'000) return fmt::format("{}.{}s", ms / 1000, (ms % 1000) / 100);
  const std::int64_t s = ms / 1000;
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  if (s < 86400) return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
  return fmt::format("{}d{:02}h", s / 86400, (s % 86400) / 3600);
}

std::string human_expiry_ms(std::int64_t expires_in_ms) {
  if (expires_in_ms >= 0) return "in " + human_duration_ms(expires_in_ms);
  return "expired " + human_duration_ms(-expires_in_ms) + " ago";
}

std::string cell(const nlohmann::ordered_json& v) {
  if (v.is_null()) return "-";
  if (v.is_string()) return v.get<std::string>();
  return v.dump();
}

std::string Table::render(const std::string& indent) const {
  std::vector<std::size_t> width;
  for (const auto& row : rows_) {
    if (width.size() < row.size()) width.resize(row.size(), 0);
    for (std::size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  std::string out;
  for (const auto& row : rows_) {
    std::string line = indent;
    for (std::size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line.append(width[i] - row[i].size() + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line;
    out.push_back('\n');
  }
  return out;
}

}  // namespace lockd::lockctl
