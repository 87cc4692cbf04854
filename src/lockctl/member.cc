// lockctl member ... and leader transfer; see member.h.
#include "member.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdio>

#include "format.h"

namespace lockd::lockctl {
namespace {

using json = nlohmann::ordered_json;

void out(const std::string& s) { std::fwrite(s.data(), 1, s.size(), stdout); }
void err(const std::string& s) { std::fprintf(stderr, "lockctl: %s\n", s.c_str()); }

// Sends the change to the first admin address that answers, then to the
// leader it names (503 not_leader), at most 3 hops; prints the outcome.
int change(const Globals& g, const std::string& method, const std::string& target,
           const std::string& body) {
  std::optional<HttpResponse> resp;
  net::Endpoint at;
  std::string error;
  Failure failure = Failure::kUnreachable;
  const int timeout = std::max(g.timeout_ms, kMemberChangeTimeoutMs);
  for (const net::Endpoint& ep : g.admins) {
    resp = http_request(ep, method, target, body, timeout, error, failure);
    at = ep;
    if (resp || failure != Failure::kUnreachable) break;
  }
  for (int hop = 0; resp && resp->status == 503 && hop < 3; ++hop) {
    const json j = json::parse(resp->body, nullptr, false);
    if (!j.is_object() || j.value("error", "") != "not_leader" || !j.contains("leader_admin") ||
        !j["leader_admin"].is_string()) {
      break;
    }
    const auto next = net::parse_endpoint(j["leader_admin"].get<std::string>(), error);
    if (!next) break;
    at = *next;
    resp = http_request(at, method, target, body, timeout, error, failure);
  }
  if (!resp) {
    err(fmt::format("cannot reach the lockd admin API at {}: {}", at.to_string(), error));
    return failure == Failure::kWrongPort ? kExitUsage : kExitUnreachable;
  }
  const json j = json::parse(resp->body, nullptr, false);
  if (resp->status == 200 && j.is_object()) {
    if (g.json) {
      out(resp->body);
      if (!resp->body.empty() && resp->body.back() != '\n') out("\n");
    } else {
      out(render_cluster(j));
    }
    return kExitOk;
  }
  if (g.json) {
    out(resp->body);
    if (!resp->body.empty() && resp->body.back() != '\n') out("\n");
  }
  std::string why = j.is_object() ? j.value("error", "") : resp->body;
  if (j.is_object() && j.contains("message") && j["message"].is_string()) {
    why += ": " + j["message"].get<std::string>();
  }
  if (why == "not_leader") why = "no leader answered (the group has none right now?)";
  if (why == "not_caught_up") why = "not_caught_up: the learner has not caught up yet; retry shortly";
  if (why == "change_in_progress") why = "change_in_progress: another membership change is in flight; retry once it committed";
  err(fmt::format("{} {}: {} (HTTP {})", method, target, why, resp->status));
  return kExitNegative;
}

}  // namespace

int cmd_member_list(const Globals& g) { return cmd_cluster(g); }

int cmd_cluster_init(const Globals& g) {
  Globals one = g;
  // The node asked becomes the first leader: no redirect, no other address
  // (the first that answers is the one).
  return change(one, "POST", "/v1/cluster/init", "{}");
}

int cmd_member_add(const Globals& g, std::uint64_t id, const std::string& addrs) {
  const std::size_t slash = addrs.find('/');
  std::string error;
  if (id == 0 || slash == std::string::npos || !net::parse_endpoint(addrs.substr(0, slash), error) ||
      !net::parse_endpoint(addrs.substr(slash + 1), error)) {
    err("member add ID CLIENT_HOST:PORT/RAFT_HOST:PORT: a positive id and both addresses" +
        (error.empty() ? std::string() : " (" + error + ")"));
    return kExitUsage;
  }
  const json body{{"id", id}, {"client_addr", addrs.substr(0, slash)},
                  {"raft_addr", addrs.substr(slash + 1)}};
  return change(g, "POST", "/v1/cluster/members", body.dump());
}

int cmd_member_promote(const Globals& g, std::uint64_t id) {
  return change(g, "POST", "/v1/cluster/members/" + std::to_string(id) + "/promote", "");
}

int cmd_member_remove(const Globals& g, std::uint64_t id) {
  return change(g, "DELETE", "/v1/cluster/members/" + std::to_string(id), "");
}

int cmd_leader_transfer(const Globals& g, std::optional<std::uint64_t> id) {
  return change(g, "POST", "/v1/cluster/leader", id ? json{{"id", *id}}.dump() : std::string());
}

}  // namespace lockd::lockctl
