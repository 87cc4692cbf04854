// SyncThread: see sync_thread.h.
#include "lockd/storage/sync_thread.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

#include "lockd/common/check.h"

namespace lockd::storage {

SyncThread::SyncThread(SyncFn sync) : sync_(sync) {
  event_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  LOCKD_CHECK(event_fd_ >= 0);
  thread_ = std::thread([this] { run(); });
}

SyncThread::~SyncThread() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  thread_.join();
  ::close(event_fd_);
}

void SyncThread::submit(int fd) {
  LOCKD_CHECK(!busy_);
  busy_ = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_fd_ = fd;
    has_job_ = true;
    done_ = false;
  }
  cv_.notify_one();
}

std::optional<int> SyncThread::take() {
  if (!busy_) return std::nullopt;
  int result = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!done_) return std::nullopt;
    done_ = false;
    result = result_;
  }
  std::uint64_t count = 0;
  // Clears the eventfd (nonblocking: EAGAIN if already read).
  [[maybe_unused]] const ssize_t n = ::read(event_fd_, &count, sizeof count);
  busy_ = false;
  return result;
}

void SyncThread::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || has_job_; });
    // A job in flight is finished even when stopping: its fd is still open.
    if (!has_job_) return;
    const int fd = job_fd_;
    has_job_ = false;
    lock.unlock();
    int err = 0;
    if (fd >= 0 && sync_(fd) != 0) err = errno;
    lock.lock();
    result_ = err;
    done_ = true;
    const std::uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(event_fd_, &one, sizeof one);
  }
}

}  // namespace lockd::storage
