// SnapshotExport: answers `GET /v1/snapshot` without stalling the loop.
//
// Like the state machine's own snapshots (storage/snapshot_writer.h), a
// forked child serializes the copy-on-write image of the table, frozen at
// the moment of the fork, so the loop only pays for fork() itself (a few
// ms at 1 M locks). The child writes the whole backup file into an
// anonymous in-memory file (memfd) and exits; a timer on the loop reaps it
// (waitpid WNOHANG, every kPollNs) and then every waiting request gets the
// file as its body, sent by the kernel from the memfd (one refcounted
// evbuffer file segment shared by all of them; no copy on the heap).
//
// A request that arrives while a child runs joins it (it gets the same
// file: a snapshot at most that child's age), up to kMaxWaiters; one more
// is answered 503 `busy`. A request whose client left meanwhile is
// answered anyway (evhttp keeps it for us and frees it), so every request
// is answered exactly once. Memory: the memfd holds one file (about the
// size of the table's snapshot) until the last reply is sent.
//
// Runs on the loop thread.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

#include "lockd/common/time.h"
#include "lockd/net/timer.h"

struct event_base;
struct evhttp_request;

namespace lockd::admin {

class SnapshotExport {
 public:
  // Builds the whole file; runs in the forked child (it may allocate, and
  // must not touch sockets or exit).
  using Produce = std::function<std::string()>;

  // How often the loop looks whether the child is done.
  static constexpr TimeNs kPollNs = 2 * kNsPerMs;
  // Requests waiting for one child at most; more get 503 busy.
  static constexpr std::size_t kMaxWaiters = 8;

  explicit SnapshotExport(event_base* base);
  ~SnapshotExport();  // kills and reaps a running child; waiting requests are left to evhttp
  SnapshotExport(const SnapshotExport&) = delete;
  SnapshotExport& operator=(const SnapshotExport&) = delete;

  // Answers `req` once a file is ready. `produce` starts a child when none
  // runs; a request joining a running child ignores its own. `filename`
  // names the download (Content-Disposition) of a started child.
  void request(evhttp_request* req, const Produce& produce, const std::string& filename);

  bool busy() const { return pid_ > 0; }
  std::uint64_t exports() const { return exports_; }  // files served (for tests and logs)

 private:
  void poll();
  void answer_all(int code, const std::string& error, const std::string& message);

  net::Timer timer_;
  pid_t pid_ = -1;
  int fd_ = -1;             // the memfd the child writes into
  std::string filename_;
  TimeNs started_ns_ = 0;
  std::vector<evhttp_request*> waiting_;
  std::uint64_t exports_ = 0;
};

}  // namespace lockd::admin
