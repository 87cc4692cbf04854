// Human output for lockctl: durations with units, aligned tables and the
// cluster view.
// Pure functions, shared by the one-shot commands and `lockctl top`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace lockd::lockctl {

// 850ms, 12.3s, 4m05s, 2h03m, 3d04h.
std::string human_duration_ms(std::int64_t ms);
// `in 12.3s`, or `expired 1.2s ago` for a negative value.
std::string human_expiry_ms(std::int64_t expires_in_ms);
// A JSON value as a table cell: strings bare, null as `-`.
std::string cell(const nlohmann::ordered_json& v);

// `lockctl cluster`'s human output from a GET /v1/cluster body: a header
// line (node, leader, term, commit index), then one row per member with
// LAG = the leader's commit index - the member's match index (only the
// leader knows match indexes, so elsewhere MATCH and LAG are `-`).
std::string render_cluster(const nlohmann::ordered_json& cluster);

// A table with a header row; columns padded to their widest cell.
class Table {
 public:
  explicit Table(std::vector<std::string> header) : rows_{std::move(header)} {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  std::size_t size() const { return rows_.size() - 1; }
  // Each line ends with `\n`; no trailing spaces. `indent` prefixes lines.
  std::string render(const std::string& indent = "") const;

 private:
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace lockd::lockctl
