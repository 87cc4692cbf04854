// The ZooKeeper backend; see zk_runner.h for the recipe.
//
// Threads: the multi-threaded C client gives each session (zhandle_t) an
// I/O thread and a completion thread; every completion and watcher of one
// session runs on that session's completion thread, so a Session's state is
// only touched there (and by the main thread after the run). The main
// thread starts the sessions, sleeps for the run, raises `stop` and waits
// until every session has finished its pair in progress.
#include "zk_runner.h"

#include <zookeeper/zookeeper.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace lockbench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kSessionTimeoutMs = 10'000;
constexpr char kRoot[] = "/lockbench";

struct Shared {
  std::atomic<bool> stop{false};
  Clock::time_point stop_at;
  std::mutex mu;
  std::condition_variable cv;
  std::size_t finished = 0;   // sessions that stopped
  std::size_t connected = 0;  // sessions that reached ZOO_CONNECTED_STATE
  std::string failure;        // first fatal error (session lost)
};

std::uint64_t ns_between(Clock::time_point a, Clock::time_point b) {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count());
}

// The sequence number ZooKeeper appended to a child's name (10 digits).
long long sequence_of(const std::string& name) {
  const std::size_t dash = name.rfind('-');
  if (dash == std::string::npos) return -1;
  try {
    return std::stoll(name.substr(dash + 1));
  } catch (const std::exception&) {
    return -1;
  }
}

class Session {
 public:
  Session(const Config& cfg, Shared& shared, std::size_t id)
      : cfg_(cfg), shared_(shared), rng_(cfg.seed * 1'000'003 + id) {}

  bool open(const std::string& hosts) {
    zh_ = zookeeper_init(hosts.c_str(), &Session::on_session_event, kSessionTimeoutMs, nullptr, this, 0);
    return zh_ != nullptr;
  }
  void close() {
    if (zh_ != nullptr) zookeeper_close(zh_);
    zh_ = nullptr;
  }
  void start() { next_pair(); }

  Counters counters;
  LogHistogram latency_ns;
  std::uint64_t pairs = 0;

 private:
  // --- one lock + unlock pair ---
  void next_pair() {
    if (shared_.stop.load()) return finish();
    const std::uint64_t k =
        cfg_.workload == Workload::kContended ? rng_() % cfg_.hot_keys : rng_() % cfg_.keyspace;
    parent_ = std::string(kRoot) + "/" + cfg_.key_prefix + "-" + std::to_string(k);
    node_.clear();
    lock_start_ = Clock::now();
    create_child();
  }

  void create_child() {
    const std::string prefix = parent_ + "/lock-";
    check(zoo_acreate(zh_, prefix.c_str(), "", 0, &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL_SEQUENTIAL,
                      &Session::on_child_created, this),
          "acreate");
  }
  static void on_child_created(int rc, const char* value, const void* data) {
    auto* s = const_cast<Session*>(static_cast<const Session*>(data));
    if (rc == ZNONODE) {
      // First lock on this key: make its parent, a container node.
      return s->check(zoo_acreate(s->zh_, s->parent_.c_str(), "", 0, &ZOO_OPEN_ACL_UNSAFE, ZOO_CONTAINER,
                                  &Session::on_parent_created, s),
                      "acreate parent");
    }
    if (rc != ZOK) return s->error("create", rc);
    s->node_ = value;
    s->list_children();
  }
  static void on_parent_created(int rc, const char*, const void* data) {
    auto* s = const_cast<Session*>(static_cast<const Session*>(data));
    if (rc == ZNODEEXISTS && s->root_made_) rc = ZOK;
    if (rc == ZNONODE && !s->root_made_) {
      // The root itself is missing (first run on this ensemble).
      return s->check(zoo_acreate(s->zh_, kRoot, "", 0, &ZOO_OPEN_ACL_UNSAFE, 0, &Session::on_root_created, s),
                      "acreate root");
    }
    if (rc != ZOK && rc != ZNODEEXISTS) return s->error("create parent", rc);
    s->create_child();
  }
  static void on_root_created(int rc, const char*, const void* data) {
    auto* s = const_cast<Session*>(static_cast<const Session*>(data));
    if (rc != ZOK && rc != ZNODEEXISTS) return s->error("create root", rc);
    s->root_made_ = true;
    s->check(zoo_acreate(s->zh_, s->parent_.c_str(), "", 0, &ZOO_OPEN_ACL_UNSAFE, ZOO_CONTAINER,
                         &Session::on_parent_created, s),
             "acreate parent");
  }

  void list_children() {
    check(zoo_aget_children(zh_, parent_.c_str(), 0, &Session::on_children, this), "aget_children");
  }
  static void on_children(int rc, const String_vector* strings, const void* data) {
    auto* s = const_cast<Session*>(static_cast<const Session*>(data));
    if (rc != ZOK) return s->error("get_children", rc);
    const std::string mine = s->node_.substr(s->node_.rfind('/') + 1);
    const long long my_seq = sequence_of(mine);
    std::string pred;
    long long pred_seq = -1;
    for (int i = 0; i < strings->count; ++i) {
      const std::string c = strings->data[i];
      const long long q = sequence_of(c);
      if (q < my_seq && q > pred_seq) {
        pred_seq = q;
        pred = c;
      }
    }
    if (pred.empty()) return s->held();
    // Wait for the node just below ours to go, then look again.
    s->watched_ = s->parent_ + "/" + pred;
    s->check(zoo_awexists(s->zh_, s->watched_.c_str(), &Session::on_predecessor_event, s,
                          &Session::on_predecessor_stat, s),
             "awexists");
  }
  static void on_predecessor_stat(int rc, const Stat*, const void* data) {
    auto* s = const_cast<Session*>(static_cast<const Session*>(data));
    if (rc == ZNONODE) return s->list_children();  // already gone
    if (rc != ZOK) s->error("exists", rc);
    // ZOK: the watch is set; on_predecessor_event continues.
  }
  static void on_predecessor_event(zhandle_t*, int type, int, const char*, void* ctx) {
    auto* s = static_cast<Session*>(ctx);
    if (type == ZOO_DELETED_EVENT) s->list_children();
  }

  void held() {
    const auto now = Clock::now();
    ++counters.ops;
    ++counters.granted;
    if (now <= shared_.stop_at) latency_ns.record(ns_between(lock_start_, now));
    release_start_ = now;
    check(zoo_adelete(zh_, node_.c_str(), -1, &Session::on_deleted, this), "adelete");
  }
  static void on_deleted(int rc, const void* data) {
    auto* s = const_cast<Session*>(static_cast<const Session*>(data));
    if (rc != ZOK) return s->error("delete", rc);
    const auto now = Clock::now();
    ++s->counters.ops;
    if (now <= s->shared_.stop_at) {
      ++s->counters.released;
      ++s->pairs;
      s->latency_ns.record(ns_between(s->release_start_, now));
    }
    s->next_pair();
  }

  // --- errors and the end ---
  void check(int rc, const char* what) {
    if (rc != ZOK) error(what, rc);
  }
  void error(const char* what, int rc) {
    ++counters.protocol_errors;
    {
      std::lock_guard<std::mutex> g(shared_.mu);
      if (shared_.failure.empty()) {
        shared_.failure = std::string("zookeeper ") + what + ": " + zerror(rc);
      }
    }
    // A session that lost its server cannot go on; anything else: the
    // next pair (an ephemeral node left behind goes with the session).
    if (rc == ZSESSIONEXPIRED || rc == ZINVALIDSTATE || rc == ZCLOSING) return finish();
    next_pair();
  }
  void finish() {
    if (finished_) return;
    finished_ = true;
    std::lock_guard<std::mutex> g(shared_.mu);
    ++shared_.finished;
    shared_.cv.notify_all();
  }

  static void on_session_event(zhandle_t*, int type, int state, const char*, void* ctx) {
    auto* s = static_cast<Session*>(ctx);
    if (type != ZOO_SESSION_EVENT) return;
    if (state == ZOO_CONNECTED_STATE && !s->was_connected_) {
      s->was_connected_ = true;
      std::lock_guard<std::mutex> g(s->shared_.mu);
      ++s->shared_.connected;
      s->shared_.cv.notify_all();
    } else if (state == ZOO_EXPIRED_SESSION_STATE) {
      s->error("session", ZSESSIONEXPIRED);
    }
  }

  const Config& cfg_;
  Shared& shared_;
  std::mt19937_64 rng_;
  zhandle_t* zh_ = nullptr;
  bool was_connected_ = false;
  bool root_made_ = false;
  bool finished_ = false;
  std::string parent_, node_, watched_;
  Clock::time_point lock_start_, release_start_;
};

}  // namespace

Results run_zookeeper(const Config& cfg) {
  Results res;
  if (cfg.workload != Workload::kUncontended && cfg.workload != Workload::kContended) {
    res.failure = "the zookeeper backend runs the uncontended and contended workloads";
    res.exit_code = kExitUsage;
    return res;
  }
  std::string hosts;
  if (cfg.cluster.empty()) {
    hosts = cfg.host + ":" + std::to_string(cfg.port);
  } else {
    for (const Endpoint& e : cfg.cluster) hosts += (hosts.empty() ? "" : ",") + e.to_string();
  }
  zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
  Shared shared;
  std::vector<std::unique_ptr<Session>> sessions;
  for (std::uint32_t i = 0; i < cfg.connections; ++i) {
    sessions.push_back(std::make_unique<Session>(cfg, shared, i));
    if (!sessions.back()->open(hosts)) {
      res.failure = "cannot start a zookeeper session to " + hosts;
      res.exit_code = kExitNoServer;
      return res;
    }
  }
  {
    std::unique_lock<std::mutex> g(shared.mu);
    if (!shared.cv.wait_for(g, std::chrono::seconds(15),
                            [&] { return shared.connected == sessions.size(); })) {
      g.unlock();
      for (auto& s : sessions) s->close();
      res.failure = "zookeeper sessions did not connect to " + hosts + " within 15 s";
      res.exit_code = kExitNoServer;
      return res;
    }
  }
  const auto t0 = Clock::now();
  shared.stop_at = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(cfg.duration_s));
  // Each session's first call runs here; the rest on its completion thread.
  for (auto& s : sessions) s->start();
  std::this_thread::sleep_until(shared.stop_at);
  shared.stop.store(true);
  {
    std::unique_lock<std::mutex> g(shared.mu);
    shared.cv.wait_for(g, std::chrono::seconds(30), [&] { return shared.finished == sessions.size(); });
  }
  for (auto& s : sessions) s->close();  // joins the session's threads
  res.elapsed_s = cfg.duration_s;
  for (auto& s : sessions) {
    const Counters& c = s->counters;
    res.counters.ops += c.ops;
    res.counters.granted += c.granted;
    res.counters.released += c.released;
    res.counters.protocol_errors += c.protocol_errors;
    res.latency_ns.merge(s->latency_ns);
    res.grants_per_connection.push_back(s->pairs);
  }
  res.ops_per_s = static_cast<double>(res.counters.ops) / res.elapsed_s;
  if (!shared.failure.empty()) {
    res.failure = shared.failure;
    res.exit_code = kExitFailed;
  }
  return res;
}

}  // namespace lockbench
