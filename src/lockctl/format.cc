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

std::string render_cluster(const nlohmann::ordered_json& j) {
  using json = nlohmann::ordered_json;
  const auto field = [](const json& o, const char* name) {
    return o.is_object() && o.contains(name) ? cell(o[name]) : std::string("-");
  };
  std::string out = fmt::format("node {}  leader {}  term {}  commit index {}\n\n",
                                field(j, "node_id"), field(j, "leader_id"), field(j, "term"),
                                field(j, "commit_index"));
  // Lag needs the leader's commit index, which only the leader's own view
  // pairs with match indexes.
  const json commit = j.is_object() ? j.value("commit_index", json()) : json();
  Table t({"ID", "ROLE", "CLIENT", "RAFT", "LINK", "MATCH", "LAG", "LAST CONTACT"});
  const json self = j.is_object() ? j.value("node_id", json()) : json();
  const json members = j.is_object() ? j.value("members", json::array()) : json::array();
  for (const json& m : members) {
    if (!m.is_object()) continue;
    const json match = m.value("match_index", json());
    std::string lag = "-";
    if (match.is_number_unsigned() && commit.is_number_unsigned()) {
      const auto c = commit.get<std::uint64_t>();
      const auto mi = match.get<std::uint64_t>();
      lag = std::to_string(c > mi ? c - mi : 0);  // a match past commit is not behind
    }
    // The leader's last contact, else when this node last heard from it.
    json contact = m.value("last_contact_ms", json());
    if (!contact.is_number()) contact = m.value("last_heard_ms", json());
    const json link = m.value("link", json());
    const bool is_self = m.value("id", json()) == self;
    // A member this node has no connection to is not shown as a healthy
    // follower: its role is whatever it is now, unknown from here.
    std::string role = field(m, "role");
    if (link == "down" && role != "leader") role = role == "learner" ? "learner (unreachable)" : "unreachable";
    t.add({field(m, "id"), role, field(m, "client_addr"), field(m, "raft_addr"),
           is_self ? std::string("self") : (link.is_string() ? link.get<std::string>() : "-"),
           field(m, "match_index"), lag,
           contact.is_number() ? human_duration_ms(contact.get<std::int64_t>()) + " ago"
                               : (link == "down" ? "never" : "-")});
  }
  out += t.render();
  return out;
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
