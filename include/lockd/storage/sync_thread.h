// SyncThread: runs a WAL's fdatasync off the loop (issue 23).
//
// The loop writes a Ready's records (FileStorage::write) and hands the
// segment's fd here; the thread syncs it while the loop goes on reading
// requests and peer acks, then makes notify_fd() readable. The loop, woken
// by it, takes the result and only then lets the Raft core advance (and
// so answer anything that depended on it):
//
//   storage.write(hs, entries, pending);        // loop thread
//   if (pending) sync.submit(storage.sync_fd());
//   ... loop turns; notify_fd() becomes readable ...
//   if (auto err = sync.take()) storage.synced(*err), raft::complete_ready(raft);
//
// One sync at a time (checked): the next batch forms while this one runs
// and is written once it is done, so every sync covers a whole batch.
// Thread-safe where marked; the rest is the loop thread's.
#pragma once

#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

#include <unistd.h>

namespace lockd::storage {

class SyncThread {
 public:
  // How a file is synced: ::fdatasync, or a stand-in in tests (0 or -1
  // with errno, as fdatasync).
  using SyncFn = int (*)(int fd);
  // Starts the thread. Aborts (LOCKD_CHECK) if the eventfd cannot be made.
  explicit SyncThread(SyncFn sync = ::fdatasync);
  // Waits for a sync in flight to end, then joins.
  ~SyncThread();
  SyncThread(const SyncThread&) = delete;
  SyncThread& operator=(const SyncThread&) = delete;

  // Readable (an eventfd) once a submitted sync has ended; take() clears it.
  int notify_fd() const { return event_fd_; }
  // Starts fdatasync(fd) on the thread; fd < 0 syncs nothing (a storage
  // built without sync) but still completes through take(). The fd must
  // stay open until take() returned its result.
  void submit(int fd);
  bool busy() const { return busy_; }
  // The errno of the sync that ended (0: durable), or nullopt if it is
  // still running. Never blocks.
  std::optional<int> take();

 private:
  void run();

  SyncFn sync_;
  int event_fd_ = -1;
  bool busy_ = false;  // loop thread only: submitted, not yet taken
  std::mutex mu_;
  std::condition_variable cv_;
  int job_fd_ = -1;        // guarded by mu_
  bool has_job_ = false;   // guarded by mu_
  bool done_ = false;      // guarded by mu_
  int result_ = 0;         // guarded by mu_
  bool stop_ = false;      // guarded by mu_
  std::thread thread_;
};

}  // namespace lockd::storage
