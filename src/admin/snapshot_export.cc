// SnapshotExport: a forked child writes the backup into a memfd; see
// snapshot_export.h.
#include "lockd/admin/snapshot_export.h"

#include <event2/buffer.h>
#include <event2/http.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "lockd/common/check.h"
#include "lockd/common/forked_child.h"
#include "lockd/net/clock.h"

namespace lockd::admin {
namespace {

bool write_all(int fd, std::string_view b) {
  while (!b.empty()) {
    const ssize_t n = ::write(fd, b.data(), b.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    b.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

void send_json_error(evhttp_request* req, int code, const std::string& error, const std::string& message) {
  std::string body = nlohmann::json{{"error", error}, {"message", message}}.dump() + "\n";
  evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "application/json");
  evbuffer* buf = evbuffer_new();
  LOCKD_CHECK(buf != nullptr);
  evbuffer_add(buf, body.data(), body.size());
  evhttp_send_reply(req, code, nullptr, buf);
  evbuffer_free(buf);
}

}  // namespace

SnapshotExport::SnapshotExport(event_base* base) : timer_(base, [this] { poll(); }) {}

SnapshotExport::~SnapshotExport() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  if (fd_ >= 0) ::close(fd_);
}

void SnapshotExport::request(evhttp_request* req, const Produce& produce, const std::string& filename) {
  if (pid_ > 0) {
    if (waiting_.size() >= kMaxWaiters) {
      send_json_error(req, 503, "busy", "too many snapshot downloads in progress; retry");
      return;
    }
    waiting_.push_back(req);
    return;
  }
  const int fd = ::memfd_create("lockd-snapshot", MFD_CLOEXEC);
  if (fd < 0) {
    send_json_error(req, 500, "snapshot_failed", std::string("memfd_create: ") + std::strerror(errno));
    return;
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fd);
    send_json_error(req, 500, "snapshot_failed", std::string("fork: ") + std::strerror(errno));
    return;
  }
  if (pid == 0) {
    // The child: the table as of the fork, into the memfd, and out.
    forked_child_detach(parent, fd);
    const std::string bytes = produce();
    ::_exit(write_all(fd, bytes) ? 0 : 3);
  }
  pid_ = pid;
  fd_ = fd;
  filename_ = filename;
  started_ns_ = net::monotonic_now_ns();
  waiting_.push_back(req);
  timer_.arm_after(kPollNs);
}

void SnapshotExport::poll() {
  int status = 0;
  const pid_t r = ::waitpid(pid_, &status, WNOHANG);
  if (r == 0) {
    timer_.arm_after(kPollNs);
    return;
  }
  pid_ = -1;
  if (r < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    const std::string why = r < 0 ? std::string("waitpid: ") + std::strerror(errno)
                            : WIFEXITED(status) ? "exit status " + std::to_string(WEXITSTATUS(status))
                                                : "killed by signal " + std::to_string(WTERMSIG(status));
    spdlog::error("snapshot export failed: child {}", why);
    answer_all(500, "snapshot_failed", "the snapshot child failed: " + why);
    return;
  }
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    answer_all(500, "snapshot_failed", std::string("fstat: ") + std::strerror(errno));
    return;
  }
  const auto size = static_cast<ev_off_t>(st.st_size);
  // The segment owns the descriptor from here (closed when the last reply
  // that uses it has been sent).
  evbuffer_file_segment* seg = evbuffer_file_segment_new(fd_, 0, size, EVBUF_FS_CLOSE_ON_FREE);
  if (seg == nullptr) {
    answer_all(500, "snapshot_failed", "cannot map the snapshot for sending");
    return;
  }
  fd_ = -1;
  const double ms = static_cast<double>(net::monotonic_now_ns() - started_ns_) / 1e6;
  spdlog::info("snapshot export: {} bytes in {:.1f} ms to {} request(s)", static_cast<long long>(size), ms,
               waiting_.size());
  const std::string disposition = "attachment; filename=\"" + filename_ + "\"";
  std::vector<evhttp_request*> reqs;
  reqs.swap(waiting_);
  for (evhttp_request* req : reqs) {
    evkeyvalq* h = evhttp_request_get_output_headers(req);
    evhttp_add_header(h, "Content-Type", "application/octet-stream");
    evhttp_add_header(h, "Content-Disposition", disposition.c_str());
    evbuffer* buf = evbuffer_new();
    LOCKD_CHECK(buf != nullptr);
    if (evbuffer_add_file_segment(buf, seg, 0, size) != 0) {
      evbuffer_free(buf);
      send_json_error(req, 500, "snapshot_failed", "cannot queue the snapshot for sending");
      continue;
    }
    evhttp_send_reply(req, 200, "OK", buf);
    evbuffer_free(buf);
    ++exports_;
  }
  evbuffer_file_segment_free(seg);
}

void SnapshotExport::answer_all(int code, const std::string& error, const std::string& message) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  std::vector<evhttp_request*> reqs;
  reqs.swap(waiting_);
  for (evhttp_request* req : reqs) send_json_error(req, code, error, message);
}

}  // namespace lockd::admin
