// §11a (v1.3): running out of file descriptors never stops a node. A WAL
// segment open that fails with EMFILE/ENFILE is retried with a short,
// bounded back-off (1, 2, 4 … 128 ms: about a quarter of a second in all,
// docs/storage.md "Out of descriptors"), each failure counted in
// lockd_fd_exhausted_total{what}. Any other error, or descriptors still
// short after the last try, is the storage failure it always was.
#pragma once

#include <fcntl.h>
#include <sys/types.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <thread>

namespace lockd::storage {

// Failed opens for want of descriptors, process-wide (read by /metrics).
inline std::atomic<std::uint64_t> fd_exhausted_wal{0};
// Snapshot file opens (written, read back, installed from a leader, read
// to send), retried the same way or put off (snapshot_writer.h).
inline std::atomic<std::uint64_t> fd_exhausted_snapshot{0};

inline int open_retrying_fds(const char* path, int flags, mode_t mode,
                             std::atomic<std::uint64_t>& exhausted) {
  constexpr int kTries = 9;  // 8 waits: 1 + 2 + … + 128 = 255 ms
  for (int i = 0;; ++i) {
    const int fd = ::open(path, flags, mode);
    if (fd >= 0 || (errno != EMFILE && errno != ENFILE)) return fd;
    exhausted.fetch_add(1, std::memory_order_relaxed);
    if (i + 1 == kTries) return fd;
    const int saved = errno;
    std::this_thread::sleep_for(std::chrono::milliseconds(1 << i));
    errno = saved;
  }
}

}  // namespace lockd::storage
