#include "commands.h"

#include <fmt/format.h>

#include <charconv>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "client.h"
#include "format.h"
#include "lockd/admin/uri.h"

namespace lockd::lockctl {

using json = nlohmann::ordered_json;

namespace {

// Default lease when only --wait is given: the protocol puts lease_ms before
// wait_ms, so a wait needs an explicit lease (lockd's own default is 30 s).
constexpr std::uint64_t kDefaultLeaseWithWaitMs = 30'000;
// How many `M` redirects acquire/release follow (cluster mode).
constexpr int kMaxRedirects = 3;

void print(const std::string& s) { std::fwrite(s.data(), 1, s.size(), stdout); }

void fail(const std::string& msg) { std::fprintf(stderr, "lockctl: %s\n", msg.c_str()); }

// "a (connection refused), b (timed out)": what each address did.
void note_failure(std::string& all, const net::Endpoint& ep, const std::string& error) {
  if (!all.empty()) all += ", ";
  all += fmt::format("{} ({})", ep.to_string(), error);
}

int exit_for_http(int status) {
  if (status >= 200 && status < 300) return kExitOk;
  if (status == 400 || status == 405) return kExitUsage;
  return kExitNegative;
}

// GETs `target` from the admin API. Returns the exit status; on success
// (0) `out` holds the parsed body. With --json, prints the body as is.
// `quiet_status`: an HTTP status the caller explains itself (no line here).
int fetch(const Globals& g, const std::string& target, json& out, int& http_status,
          int quiet_status = 0) {
  std::string error;
  Failure failure = Failure::kUnreachable;
  net::Endpoint answered;
  const auto resp = admin_get(g, target, answered, error, failure);
  if (!resp) {
    fail(error);
    return failure == Failure::kWrongPort ? kExitUsage : kExitUnreachable;
  }
  http_status = resp->status;
  if (g.json) {
    print(resp->body);
    if (!resp->body.empty() && resp->body.back() != '\n') print("\n");
  }
  out = json::parse(resp->body, nullptr, /*allow_exceptions=*/false);
  if (resp->status == 404 && !g.json && out.is_object() && out.contains("key")) {
    fail(fmt::format("{}: not found (no such key)", cell(out["key"])));
  } else if (resp->status != 200 && resp->status != quiet_status && !g.json) {
    std::string why = out.is_object() && out.contains("message") ? cell(out["message"])
                      : out.is_object() && out.contains("error")  ? cell(out["error"])
                                                                   : resp->body;
    fail(fmt::format("{} (HTTP {})", why, resp->status));
  }
  if (out.is_discarded() && !g.json) {
    // An HTTP server, but not lockd's API: its own 404 page, a proxy's
    // error, another service on that port.
    fail(fmt::format("{} answered HTTP {} with a body that is not JSON: this does not look like "
                     "lockd's admin API (wrong --admin?)",
                     answered.to_string(), resp->status));
    return kExitUsage;
  }
  return exit_for_http(resp->status);
}

std::string str_or_dash(const json& j, const char* name) {
  return j.contains(name) ? cell(j[name]) : "-";
}

}  // namespace

std::optional<HttpResponse> admin_get(const Globals& g, const std::string& target,
                                      net::Endpoint& answered, std::string& error,
                                      Failure& failure) {
  std::string tried;
  for (const net::Endpoint& ep : g.admins) {
    std::string err;
    auto resp = http_get(ep, target, g.timeout_ms, err, failure);
    if (resp) {
      answered = ep;
      return resp;
    }
    if (failure == Failure::kWrongPort) {
      error = fmt::format("the admin address {}: {}", ep.to_string(), err);
      return std::nullopt;
    }
    note_failure(tried, ep, err);
  }
  error = fmt::format("cannot reach the lockd admin API at {}", tried);
  return std::nullopt;
}

int cmd_status(const Globals& g) {
  json j;
  int http = 0;
  const int rc = fetch(g, "/v1/status", j, http);
  if (rc != kExitOk || g.json) return rc;
  Table t({"FIELD", "VALUE"});
  const auto row = [&](const char* label, std::string value) { t.add({label, std::move(value)}); };
  row("mode", str_or_dash(j, "mode"));
  row("role", str_or_dash(j, "role"));
  row("node id", str_or_dash(j, "node_id"));
  row("term", str_or_dash(j, "term"));
  row("leader", str_or_dash(j, "leader"));
  row("listen", str_or_dash(j, "listen"));
  row("keys", str_or_dash(j, "keys"));
  row("holders", str_or_dash(j, "holders"));
  row("waiters", str_or_dash(j, "waiters"));
  row("connections", str_or_dash(j, "connections"));
  row("commit index", str_or_dash(j, "commit_index"));
  row("applied index", str_or_dash(j, "applied_index"));
  row("uptime", j.value("uptime_ms", json()).is_number()
                    ? human_duration_ms(j["uptime_ms"].get<std::int64_t>())
                    : "-");
  row("version", str_or_dash(j, "version"));
  // Drop the header: a two-column listing reads better without it.
  const std::string out = t.render();
  print(out.substr(out.find('\n') + 1));
  return kExitOk;
}

int cmd_locks(const Globals& g, const std::string& prefix, const std::string& after,
              std::optional<std::uint64_t> limit) {
  std::string target = "/v1/locks";
  char sep = '?';
  const auto param = [&](const char* name, const std::string& value) {
    target += fmt::format("{}{}={}", sep, name, admin::percent_encode(value));
    sep = '&';
  };
  if (!prefix.empty()) param("prefix", prefix);
  if (!after.empty()) param("after", after);
  if (limit) param("limit", std::to_string(*limit));
  json j;
  int http = 0;
  const int rc = fetch(g, target, j, http);
  if (rc != kExitOk || g.json) return rc;
  Table t({"KEY", "OWNER", "TOKEN", "EXPIRES", "WAITERS"});
  for (const json& l : j.value("locks", json::array())) {
    t.add({str_or_dash(l, "key"), str_or_dash(l, "owner"), str_or_dash(l, "token"),
           l.value("expires_in_ms", json()).is_number()
               ? human_expiry_ms(l["expires_in_ms"].get<std::int64_t>())
               : "-",
           str_or_dash(l, "waiters")});
  }
  if (t.size() == 0) {
    print(prefix.empty() ? "no locks\n" : fmt::format("no locks with prefix {}\n", prefix));
    return kExitOk;
  }
  print(t.render());
  if (j.value("truncated", false)) {
    const json& locks = j["locks"];
    print(fmt::format("(more keys; next page: lockctl locks{}{} --after {})\n",
                      prefix.empty() ? "" : " --prefix " + prefix,
                      limit ? fmt::format(" --limit {}", *limit) : "",
                      locks.empty() ? "" : cell(locks.back()["key"])));
  }
  return kExitOk;
}

int cmd_lock(const Globals& g, const std::string& key) {
  json j;
  int http = 0;
  const int rc = fetch(g, "/v1/locks/" + admin::percent_encode(key), j, http);
  if (rc != kExitOk || g.json) return rc;
  Table t({"FIELD", "VALUE"});
  t.add({"key", str_or_dash(j, "key")});
  const bool shared = j.value("mode", "") == "shared";
  if (j.contains("mode")) {
    std::string mode = str_or_dash(j, "mode");
    if (shared) mode += fmt::format(" (limit {})", j.value("limit", 0) == 0 ? std::string("none") : std::to_string(j.value("limit", 0)));
    t.add({"mode", mode});
  }
  t.add({"owner", str_or_dash(j, "owner") + (shared ? " (oldest holder)" : "")});
  t.add({"token", str_or_dash(j, "token")});
  std::string expires = "-";
  if (j.value("expires_in_ms", json()).is_number()) {
    expires = human_expiry_ms(j["expires_in_ms"].get<std::int64_t>());
    if (j.value("lease_ms", json()).is_number()) {
      expires += fmt::format(" (lease {}", human_duration_ms(j["lease_ms"].get<std::int64_t>()));
      if (j.value("held_ms", json()).is_number()) {
        expires += fmt::format(", held {}", human_duration_ms(j["held_ms"].get<std::int64_t>()));
      }
      expires += ")";
    }
  }
  t.add({"expires", expires});
  const json waiters = j.value("waiters", json::array());
  t.add({"waiters", std::to_string(j.value("waiter_count", waiters.size()))});
  const json holders = j.value("holders", json::array());
  if (j.contains("holder_count")) t.add({"holders", std::to_string(j["holder_count"].get<std::uint64_t>())});
  const std::string out = t.render();
  print(out.substr(out.find('\n') + 1));
  if (holders.size() > 1 || shared) {
    // Every holder, oldest grant first (v1.2: a shared key has several).
    Table h({"#", "HOLDER", "TOKEN", "EXPIRES"});
    std::size_t n = 0;
    for (const json& x : holders) {
      h.add({std::to_string(++n), str_or_dash(x, "owner"), str_or_dash(x, "token"),
             x.value("expires_in_ms", json()).is_number()
                 ? human_expiry_ms(x["expires_in_ms"].get<std::int64_t>())
                 : "-"});
    }
    print("\n");
    print(h.render("  "));
  }
  if (!waiters.empty()) {
    Table w({"#", "OWNER", "MODE", "LEASE", "WAIT LEFT"});
    std::size_t n = 0;
    for (const json& x : waiters) {
      w.add({std::to_string(++n), str_or_dash(x, "owner"), str_or_dash(x, "mode"),
             x.value("lease_ms", json()).is_number()
                 ? human_duration_ms(x["lease_ms"].get<std::int64_t>())
                 : "-",
             x.value("wait_left_ms", json()).is_number()
                 ? human_duration_ms(x["wait_left_ms"].get<std::int64_t>())
                 : "-"});
    }
    print("\n");
    print(w.render("  "));
  }
  return kExitOk;
}

int cmd_cluster(const Globals& g) {
  json j;
  int http = 0;
  const int rc = fetch(g, "/v1/cluster", j, http, /*quiet_status=*/404);
  if (http == 404 && !g.json && rc != kExitUsage) {
    fail(fmt::format("{} runs in single mode: there is no cluster to show (HTTP 404)",
                     g.admin.to_string()));
  }
  if (rc != kExitOk || g.json) return rc;
  print(render_cluster(j));
  return kExitOk;
}

namespace {

// After `E bad_lease` / `E bad_wait`: one line saying what the server
// allows (from /v1/status "limits"), or that its admin API could not say.
void explain_bound(const Globals& g, bool lease) {
  const char* flag = lease ? "--max-lease-ms" : "--max-wait-ms";
  const char* field = lease ? "max_lease_ms" : "max_wait_ms";
  std::string error;
  Failure failure = Failure::kUnreachable;
  net::Endpoint answered;
  const auto resp = admin_get(g, "/v1/status", answered, error, failure);
  json j = resp ? json::parse(resp->body, nullptr, false) : json();
  if (j.is_object() && j.contains("limits") && j["limits"].is_object() &&
      j["limits"].value(field, json()).is_number_unsigned()) {
    const auto max = j["limits"][field].get<std::uint64_t>();
    fail(fmt::format("the server's maximum {} is {} ms ({}, its {}){}", lease ? "lease" : "wait",
                     max, human_duration_ms(static_cast<std::int64_t>(max)), flag,
                     lease ? "; a lease must also be at least 1 ms" : ""));
    return;
  }
  fail(fmt::format("the {} is larger than the server's {} (its admin API did not say the "
                   "value: {})",
                   lease ? "lease" : "wait", flag, resp ? "no limits in /v1/status" : error));
}

// Sends one protocol line to the first of --addr that answers, follows `M`
// redirects, prints the reply and maps its letter to the exit status.
int protocol_request(const Globals& g, const std::string& line, int timeout_ms) {
  std::size_t next = 0;  // the next --addr to try
  net::Endpoint target = g.addrs.at(next++);
  std::string redirected_by;  // the node whose `M` sent us to `target`
  std::string tried;          // the --addr entries that did not answer
  for (int hop = 0;; ++hop) {
    std::string error;
    Failure failure = Failure::kUnreachable;
    const auto reply = exchange_line(target, line, g.timeout_ms, timeout_ms, error, failure);
    if (!reply && failure == Failure::kWrongPort) {
      fail(fmt::format("{}: {}", target.to_string(), error));
      return kExitUsage;
    }
    if (!reply && failure == Failure::kNoAnswer) {
      fail(fmt::format("no answer from {} in time ({}): the request may or may not have taken "
                       "effect (raise --timeout?)",
                       target.to_string(), error));
      return kExitUnreachable;
    }
    if (!reply && redirected_by.empty() && next < g.addrs.size()) {
      note_failure(tried, target, error);  // a dead node: the next one
      target = g.addrs[next++];
      --hop;
      continue;
    }
    if (!reply) {
      if (redirected_by.empty()) {
        note_failure(tried, target, error);
        fail(fmt::format("cannot reach lockd at {}", tried));
      } else {
        // A follower that has not yet noticed its leader died points at it.
        fail(fmt::format("cannot reach the leader {} that {} named: {} (a leader change under "
                         "way? try again)",
                         target.to_string(), redirected_by, error));
      }
      return kExitUnreachable;
    }
    const char kind = reply->empty() ? '?' : (*reply)[0];
    if (kind == 'M' && hop < kMaxRedirects) {
      // `M <leader_addr> <echo>`: ask the leader instead.
      const std::size_t a = reply->find(' ');
      const std::size_t b = reply->find(' ', a + 1);
      std::string perr;
      if (a != std::string::npos) {
        if (auto ep = net::parse_endpoint(reply->substr(a + 1, b - a - 1), perr)) {
          redirected_by = target.to_string();
          target = *ep;
          continue;
        }
      }
      fail(fmt::format("{} redirected to a leader address lockctl cannot use", target.to_string()));
    } else if (kind == 'M') {
      fail(fmt::format("still redirected after {} hops (leadership moving?); try again",
                       kMaxRedirects));
    } else if (reply->starts_with("E no_leader")) {
      fail(fmt::format("{} knows no leader (an election is under way?); the request was not "
                       "processed, try again",
                       target.to_string()));
    } else if (reply->starts_with("E bad_lease") || reply->starts_with("E bad_wait")) {
      explain_bound(g, reply->starts_with("E bad_lease"));
    } else if (reply->starts_with("E indeterminate")) {
      fail(fmt::format("{} lost leadership before the request committed: it may or may not "
                       "have taken effect",
                       target.to_string()));
    } else if (*reply == "E unauthenticated") {
      // The answer to our `H`: the request itself was not read.
      fail(fmt::format("credential refused by {}: check --credential-file or LOCKD_CREDENTIAL; "
                       "the request was not processed",
                       target.to_string()));
    } else if (reply->starts_with("E unauthenticated ")) {
      fail(fmt::format("{} requires authentication: give --credential-file (or "
                       "LOCKD_CREDENTIAL) or a client certificate",
                       target.to_string()));
    } else if (reply->starts_with("E forbidden")) {
      fail(fmt::format("{}: this identity may not do that on this key (the server's ACL)",
                       target.to_string()));
    }
    if (g.json) {
      json j{{"reply", std::string(1, kind)}, {"line", *reply}};
      std::vector<std::string> f;
      for (std::size_t i = 0; i <= reply->size();) {
        const std::size_t sp = std::min(reply->find(' ', i), reply->size());
        f.push_back(reply->substr(i, sp - i));
        i = sp + 1;
      }
      const bool token_key = (kind == 'R' || kind == 'N' || kind == 'K') && f.size() == 3;
      const bool granted = (kind == 'A' || kind == 'S') && f.size() == 4;
      if (granted || token_key) {
        std::uint64_t token = 0;
        std::from_chars(f[1].data(), f[1].data() + f[1].size(), token);
        j["token"] = token;
      }
      if (granted) {
        j["owner"] = f[2];
        j["key"] = f[3];
        if (kind == 'S') j["mode"] = "shared";
      } else if ((kind == 'T' || kind == 'B') && f.size() == 3) {
        j["owner"] = f[1];
        j["key"] = f[2];
      } else if (token_key) {
        j["key"] = f[2];
      } else if (kind == 'E' && f.size() >= 2) {
        j["error"] = f[1];
      }
      print(j.dump() + "\n");
    } else {
      print(*reply + "\n");
    }
    switch (kind) {
      case 'A':
      case 'S':
      case 'R':
      case 'K':
        return kExitOk;
      case 'E':
        // A limit mismatch, or a refusal by authentication or the ACL, is a
        // refusal like T (the server was reached and answered), not a usage
        // error.
        return reply->starts_with("E no_leader") || reply->starts_with("E indeterminate") ||
                       reply->starts_with("E limit_mismatch") ||
                       reply->starts_with("E unauthenticated") || reply->starts_with("E forbidden")
                   ? kExitNegative
                   : kExitUsage;
      default:
        return kExitNegative;  // T, B, N, M
    }
  }
}

// A protocol field must be visible ASCII (§2): anything else would split
// or end the request line.
bool visible_ascii(const std::string& s) {
  for (const char c : s) {
    if (c < 0x21 || c > 0x7E) return false;
  }
  return !s.empty();
}

}  // namespace

int cmd_acquire(const Globals& g, const std::string& owner, const std::string& key,
                std::optional<std::uint64_t> lease_ms, std::optional<std::uint64_t> wait_ms) {
  if (!visible_ascii(owner) || !visible_ascii(key)) {
    fail("OWNER and KEY must be non-empty visible ASCII without spaces");
    return kExitUsage;
  }
  std::string line = fmt::format("A {} {}", owner, key);
  if (lease_ms || wait_ms) line += fmt::format(" {}", lease_ms.value_or(kDefaultLeaseWithWaitMs));
  if (wait_ms) line += fmt::format(" {}", *wait_ms);
  // The wait is the server's to spend; --timeout is for the answer after it.
  const std::uint64_t timeout_ms = static_cast<std::uint64_t>(g.timeout_ms) + wait_ms.value_or(0);
  return protocol_request(g, line, static_cast<int>(std::min<std::uint64_t>(timeout_ms, INT32_MAX)));
}

int cmd_acquire_shared(const Globals& g, const std::string& owner, const std::string& key,
                       std::uint64_t limit, std::optional<std::uint64_t> lease_ms,
                       std::optional<std::uint64_t> wait_ms) {
  if (!visible_ascii(owner) || !visible_ascii(key)) {
    fail("OWNER and KEY must be non-empty visible ASCII without spaces");
    return kExitUsage;
  }
  std::string line = fmt::format("S {} {} {}", owner, key, limit);
  if (lease_ms || wait_ms) line += fmt::format(" {}", lease_ms.value_or(kDefaultLeaseWithWaitMs));
  if (wait_ms) line += fmt::format(" {}", *wait_ms);
  // The wait is the server's to spend; --timeout is for the answer after it.
  const std::uint64_t timeout_ms = static_cast<std::uint64_t>(g.timeout_ms) + wait_ms.value_or(0);
  return protocol_request(g, line, static_cast<int>(std::min<std::uint64_t>(timeout_ms, INT32_MAX)));
}

int cmd_release(const Globals& g, const std::string& token, const std::string& key) {
  if (!visible_ascii(token) || !visible_ascii(key)) {
    fail("TOKEN and KEY must be non-empty visible ASCII without spaces");
    return kExitUsage;
  }
  return protocol_request(g, fmt::format("R {} {}", token, key), g.timeout_ms);
}

int cmd_keep(const Globals& g, const std::string& token, const std::string& key,
             std::uint64_t lease_ms) {
  if (!visible_ascii(token) || !visible_ascii(key)) {
    fail("TOKEN and KEY must be non-empty visible ASCII without spaces");
    return kExitUsage;
  }
  return protocol_request(g, fmt::format("K {} {} {}", token, key, lease_ms), g.timeout_ms);
}

}  // namespace lockd::lockctl
