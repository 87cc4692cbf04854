// SyncThread: a sync runs off the caller's thread, wakes notify_fd, and
// reports fdatasync's errno.
#include "lockd/storage/sync_thread.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <optional>
#include <thread>

#include "temp_dir.h"

namespace lockd::storage {
namespace {

// Waits (generously) for notify_fd, then takes the result.
std::optional<int> wait_and_take(SyncThread& t) {
  pollfd p{t.notify_fd(), POLLIN, 0};
  if (::poll(&p, 1, 30'000) != 1) return std::nullopt;
  return t.take();
}

TEST(SyncThread, SyncsAFileAndWakesTheLoop) {
  test::TempDir dir;
  const int fd = ::open((dir.path() + "/f").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, "x", 1), 1);
  SyncThread t;
  EXPECT_FALSE(t.take());  // nothing submitted
  t.submit(fd);
  EXPECT_TRUE(t.busy());
  EXPECT_EQ(wait_and_take(t), std::optional<int>(0));
  EXPECT_FALSE(t.busy());
  // The eventfd was cleared: nothing to read until the next sync ends.
  pollfd p{t.notify_fd(), POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 0), 0);
  // Again, and a storage that never syncs (fd -1) completes the same way.
  t.submit(fd);
  EXPECT_EQ(wait_and_take(t), std::optional<int>(0));
  t.submit(-1);
  EXPECT_EQ(wait_and_take(t), std::optional<int>(0));
  ::close(fd);
}

TEST(SyncThread, ReportsTheErrnoOfAFailedSync) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  SyncThread t;
  t.submit(fds[1]);  // a pipe cannot be synced: EINVAL
  EXPECT_EQ(wait_and_take(t), std::optional<int>(EINVAL));
  ::close(fds[0]);
  ::close(fds[1]);
}

// A slow disk: the sync ends 200 ms after it starts, and says so. The
// sleep is the disk's slowness, not a wait for something to happen: code
// that joins passes however slow the machine is; code that does not wait
// returns long before the 200 ms are up and fails.
std::atomic<bool> slow_sync_ended{false};
int slow_sync(int) {
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  slow_sync_ended = true;
  return 0;
}

// The node stops with a batch still syncing: the destructor must let that
// sync finish (its fd is still open) rather than drop it or leave the
// thread running.
TEST(SyncThread, ADestructorWaitsForTheSyncInFlight) {
  slow_sync_ended = false;
  {
    SyncThread t(slow_sync);
    t.submit(0);
  }  // joins without taking the result
  EXPECT_TRUE(slow_sync_ended) << "the destructor returned before the sync in flight ended";
}

}  // namespace
}  // namespace lockd::storage
