// SnapshotWriter: fork, serialize and write in the child, adopt in the
// parent; see snapshot_writer.h.
#include "lockd/storage/snapshot_writer.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <system_error>

#include "lockd/common/check.h"
#include "lockd/common/forked_child.h"
#include "lockd/raft/codec.h"
#include "lockd/storage/fd_exhausted.h"
#include "lockd/storage/file_snapshot_bytes.h"
#include "lockd/storage/wal_format.h"

namespace lockd::storage {
namespace {

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool write_all(int fd, std::string_view b) {
  while (!b.empty()) {
    const ssize_t n = ::write(fd, b.data(), b.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    b.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

// Writes `data` as the snapshot file through `fd` (the temporary name,
// opened by start()), syncs it, renames it into place and syncs the
// directory through `dfd` (-1 without sync): every slow, durable step.
// Closes both. Returns 0 when done, or the step that failed (errno says
// why): 4 write, 5 sync, 6 rename, 7 directory sync. A child exits with it.
int write_snapshot_file(int fd, int dfd, const std::string& temp, const std::string& final_path,
                        const raft::SnapshotMeta& meta, const std::string& data, bool sync) {
  std::string head;
  encode_snapshot_header(meta, data.size(), head);
  const std::uint32_t crc = raft::crc32c(data, raft::crc32c(head));
  std::string tail;
  for (int i = 0; i < 4; ++i) tail.push_back(static_cast<char>(crc >> (8 * i)));
  struct CloseDir {
    int fd;
    ~CloseDir() {
      if (fd >= 0) ::close(fd);
    }
  } close_dir{dfd};
  const bool written = write_all(fd, head) && write_all(fd, data) && write_all(fd, tail);
  const bool synced = written && (!sync || ::fdatasync(fd) == 0);
  const int saved = errno;
  ::close(fd);
  errno = saved;
  if (!written) return 4;
  if (!synced) return 5;
  if (::rename(temp.c_str(), final_path.c_str()) != 0) return 6;
  if (sync && (dfd < 0 || ::fsync(dfd) != 0)) return 7;
  return 0;
}

const char* failed_step(int code) {
  switch (code) {
    case 4: return "writing";
    case 5: return "fdatasync";
    case 6: return "rename into place";
    case 7: return "syncing the directory";
    default: return "unknown step";
  }
}

}  // namespace

SnapshotWriter::SnapshotWriter(FileStorage& storage, std::size_t max_read_bytes)
    : storage_(storage), max_read_bytes_(max_read_bytes) {
  LOCKD_CHECK(max_read_bytes_ > 0);
}

SnapshotWriter::~SnapshotWriter() {
  if (thread_.joinable()) thread_.join();  // a few syncs at most
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  if (fd_ >= 0) ::close(fd_);
}

raft::StorageStatus SnapshotWriter::start(raft::SnapshotMeta meta, const Produce& produce, Where where) {
  LOCKD_CHECK(state_ == State::kIdle);
  LOCKD_CHECK(meta.index > storage_.snapshot().meta.index);
  if (backing_off()) return raft::StorageStatus::Ok();  // put off: busy() stays false
  meta_ = meta;
  temp_ = storage_.temp_path("snap-child");
  final_ = storage_.snapshot_path(meta.index);
  const std::string& dir = storage_.options().dir;
  const bool sync = storage_.options().sync;
  // Opened here, not in the child: a child's descriptor table is a copy,
  // so only the parent can wait for descriptors to come back.
  const int fd = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  const int open_errno = errno;
  int dfd = -1;
  if (fd >= 0 && sync) dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  const int dir_errno = errno;
  if (fd < 0 || (sync && dfd < 0)) {
    const int err = fd < 0 ? open_errno : dir_errno;
    if (fd >= 0) ::close(fd);
    if (err == EMFILE || err == ENFILE) {
      out_of_descriptors(fd < 0 ? temp_ : dir);
      return raft::StorageStatus::Ok();
    }
    return raft::StorageStatus{raft::StorageError::kIo,
                               "data dir " + dir + ": snapshot: open of " + (fd < 0 ? temp_ : dir) +
                                   " failed: " + std::strerror(err)};
  }
  fd_failures_in_row_ = 0;
  timing_ = Timing{};
  started_ms_ = now_ms();
  if (where == Where::kThread) {
    // The table is read here, on the loop, at `applied`; only the file
    // work goes to the thread.
    thread_done_.store(false, std::memory_order_relaxed);
    try {
      thread_ = std::thread([this, fd, dfd, data = produce(), sync] {
        thread_step_ = write_snapshot_file(fd, dfd, temp_, final_, meta_, data, sync);
        thread_errno_ = errno;
        thread_done_.store(true, std::memory_order_release);
      });
    } catch (const std::system_error& e) {
      ::close(fd);
      if (dfd >= 0) ::close(dfd);
      return raft::StorageStatus{raft::StorageError::kIo, "data dir " + storage_.options().dir +
                                                              ": no thread for a snapshot: " + e.what()};
    }
    timing_.on_thread = true;
    state_ = State::kThread;
    return raft::StorageStatus::Ok();
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid != 0) {
    ::close(fd);  // the child's copies write the file
    if (dfd >= 0) ::close(dfd);
  }
  if (pid < 0) {
    return raft::StorageStatus{raft::StorageError::kIo, "data dir " + storage_.options().dir +
                                                            ": fork for a snapshot failed: " + std::strerror(errno)};
  }
  if (pid == 0) {
    forked_child_detach(parent, fd, dfd);
    ::_exit(write_snapshot_file(fd, dfd, temp_, final_, meta_, produce(), sync));
  }
  timing_.fork_ms = now_ms() - started_ms_;
  pid_ = pid;
  state_ = State::kChild;
  return raft::StorageStatus::Ok();
}

bool SnapshotWriter::backing_off() const { return now_ms() < retry_at_ms_; }

void SnapshotWriter::out_of_descriptors(const std::string& what) {
  fd_exhausted_snapshot.fetch_add(1, std::memory_order_relaxed);
  double wait_ms = 10;
  for (int i = 0; i < fd_failures_in_row_ && wait_ms < 1000; ++i) wait_ms *= 2;
  wait_ms = std::min(wait_ms, 1000.0);
  if (fd_failures_in_row_ == 0) {
    // Once per run of failures; the metric counts every one.
    spdlog::warn("snapshot: out of file descriptors opening {}; retrying with back-off up to 1 s "
                 "(lockd_fd_exhausted_total{{what=\"snapshot\"}}); raise the descriptor limit",
                 what);
  }
  if (fd_failures_in_row_ < 62) fd_failures_in_row_ += 1;
  retry_at_ms_ = now_ms() + wait_ms;
}

SnapshotWriter::Done SnapshotWriter::finish(raft::StorageStatus status, bool adopted) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!status.ok() && !adopted) {
    // No WAL mark can name it: remove it, or the next open() would take a
    // file that failed its read-back as the newest snapshot.
    ::unlink(temp_.c_str());
    ::unlink(final_.c_str());
  }
  state_ = State::kIdle;
  Done done{std::move(status), meta_, 0};
  if (done.status.ok()) done.bytes = data_bytes_;
  slice_ = std::string();
  return done;
}

std::optional<SnapshotWriter::Done> SnapshotWriter::poll() {
  const std::string& dir = storage_.options().dir;
  auto io_error = [&](const std::string& what) {
    return finish({raft::StorageError::kIo, "data dir " + dir + ": " + snapshot_name(meta_.index) + ": " + what});
  };
  if (state_ == State::kThread) {
    if (!thread_done_.load(std::memory_order_acquire)) return std::nullopt;
    thread_.join();
    timing_.child_ms = now_ms() - started_ms_;
    if (thread_step_ != 0) {
      return finish({raft::StorageError::kIo, "data dir " + dir + ": " + snapshot_name(meta_.index) + ": " +
                                                  failed_step(thread_step_) + " failed: " + std::strerror(thread_errno_)});
    }
    state_ = State::kWritten;
  }
  if (state_ == State::kChild) {
    int status = 0;
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == 0) return std::nullopt;
    pid_ = -1;
    timing_.child_ms = now_ms() - started_ms_;
    if (r < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::string why = r < 0 ? std::string("waitpid failed: ") + std::strerror(errno)
                        : WIFEXITED(status) ? "exit status " + std::to_string(WEXITSTATUS(status)) + ": " +
                                                  failed_step(WEXITSTATUS(status)) + " failed"
                                            : "killed by signal " + std::to_string(WTERMSIG(status));
      return finish({raft::StorageError::kIo, "data dir " + dir + ": snapshot child failed (" + why + ")"});
    }
    state_ = State::kWritten;
  }
  if (state_ == State::kWritten) {
    // Header and CRC now; the data in slices on later calls.
    if (backing_off()) return std::nullopt;
    fd_ = ::open(final_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0 && (errno == EMFILE || errno == ENFILE)) {
      out_of_descriptors(final_);
      return std::nullopt;
    }
    if (fd_ < 0) return io_error(std::string("open failed: ") + std::strerror(errno));
    fd_failures_in_row_ = 0;
    std::string what;
    const std::optional<SnapshotFileFrame> frame = read_snapshot_frame(fd_, meta_, what);
    if (!frame) return io_error(what);
    crc_ = frame->head_crc;
    expected_crc_ = frame->expected_crc;
    data_bytes_ = frame->data_bytes;
    head_bytes_ = frame->data_offset;
    data_read_ = 0;
    state_ = State::kReading;
    return std::nullopt;
  }
  if (state_ != State::kReading) return std::nullopt;

  // One bounded slice per call, checksummed as it arrives.
  const double t0 = now_ms();
  const std::uint64_t have = data_read_;
  const auto want = static_cast<std::size_t>(std::min<std::uint64_t>(max_read_bytes_, data_bytes_ - have));
  slice_.resize(want);
  std::size_t got = 0;
  while (got < want) {
    const ssize_t n = ::pread(fd_, slice_.data() + got, want - got, static_cast<off_t>(head_bytes_ + have + got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return io_error("offset " + std::to_string(head_bytes_ + have + got) + ": read failed");
    got += static_cast<std::size_t>(n);
  }
  crc_ = raft::crc32c(slice_, crc_);
  data_read_ += want;
  timing_.read_ms += now_ms() - t0;
  if (data_read_ < data_bytes_) return std::nullopt;
  if (crc_ != expected_crc_) return io_error("bad checksum reading it back");

  timing_.bytes = data_bytes_ + head_bytes_ + 4;
  const double t1 = now_ms();
  raft::StorageStatus st = storage_.adopt_snapshot_file(meta_, std::string());
  timing_.adopt_ms = now_ms() - t1;
  return finish(std::move(st), true);
}

}  // namespace lockd::storage
