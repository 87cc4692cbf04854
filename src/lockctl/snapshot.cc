// lockctl snapshot save / verify; see snapshot.h.
#include "snapshot.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "client.h"
#include "lockd/cluster/backup_file.h"

namespace lockd::lockctl {
namespace {

using json = nlohmann::ordered_json;

void fail(const std::string& msg) { std::fprintf(stderr, "lockctl: %s\n", msg.c_str()); }

// Checks `bytes` as a backup and returns its summary line (or its fields
// as JSON with --json), without the newline; nullopt with `error` when it
// is not a good backup.
std::optional<std::string> check_and_describe(const Globals& g, const std::string& file,
                                              std::string_view bytes, std::string& error) {
  const std::optional<cluster::DecodedBackup> d = cluster::decode_backup(bytes, error);
  if (!d) return std::nullopt;
  cluster::LockStateMachine sm(cluster::unbounded_limits());
  cluster::BackupSummary sum;
  if (!cluster::load_backup(*d, sm, sum, error)) return std::nullopt;
  const char* source = d->meta.source == cluster::BackupSource::kSingle ? "single" : "cluster";
  if (g.json) {
    json j{{"file", file},
           {"source", source},
           {"cluster_id", d->meta.cluster_id},
           {"index", d->meta.index},
           {"term", d->meta.term},
           {"token_floor", d->meta.token_floor},
           {"taken_unix_ms", d->meta.taken_unix_ms},
           {"keys", sum.keys},
           {"largest_token", sum.largest_token},
           {"bytes", bytes.size()}};
    return j.dump();
  }
  return fmt::format("{}: {} snapshot at index {} term {}, cluster {}, {} keys, token floor {}, {} "
                     "bytes, checksum ok",
                     file, source, d->meta.index, d->meta.term, d->meta.cluster_id, sum.keys,
                     d->meta.token_floor, bytes.size());
}

std::string dir_of(const std::string& file) {
  const std::size_t slash = file.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : file.substr(0, slash);
}

// FILE written atomically: FILE.tmp.PID, created before the download (so a
// FILE that cannot be written costs the server nothing and is said at
// once), synced, renamed over FILE, directory synced: FILE is the old one
// or the whole new one, never a torn mix. The temp file is removed unless
// commit() succeeded.
class AtomicFile {
 public:
  explicit AtomicFile(std::string file)
      : file_(std::move(file)), tmp_(file_ + ".tmp." + std::to_string(::getpid())) {}
  ~AtomicFile() {
    if (fd_ >= 0) ::close(fd_);
    if (created_ && !committed_) ::unlink(tmp_.c_str());
  }
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Creates the temp file; one line on failure.
  std::string create() {
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd_ < 0) return "cannot write " + file_ + ": cannot create " + tmp_ + ": " + std::strerror(errno);
    created_ = true;
    return {};
  }

  // Writes `bytes`, syncs, renames over FILE, syncs the directory; one line
  // on failure.
  std::string commit(std::string_view bytes) {
    std::string_view left = bytes;
    while (!left.empty()) {
      const ssize_t n = ::write(fd_, left.data(), left.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return failed("cannot write " + tmp_, n < 0 ? std::strerror(errno) : "short write");
      left.remove_prefix(static_cast<std::size_t>(n));
    }
    if (::fsync(fd_) != 0) return failed("cannot sync " + tmp_, std::strerror(errno));
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) return failed("cannot write " + tmp_, std::strerror(errno));
    if (::rename(tmp_.c_str(), file_.c_str()) != 0) {
      return failed("cannot rename " + tmp_ + " to " + file_, std::strerror(errno));
    }
    committed_ = true;
    const int dfd = ::open(dir_of(file_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0 || ::fsync(dfd) != 0) {
      const std::string why = std::strerror(errno);
      if (dfd >= 0) ::close(dfd);
      return "cannot sync the directory of " + file_ + ": " + why;
    }
    ::close(dfd);
    return {};
  }

 private:
  std::string failed(const std::string& what, const std::string& why) const {
    return what + ": " + why + " (" + file_ + " not written)";
  }

  std::string file_;
  std::string tmp_;
  int fd_ = -1;
  bool created_ = false;
  bool committed_ = false;
};

}  // namespace

int cmd_snapshot_save(const Globals& g, const std::string& file) {
  AtomicFile out(file);
  if (const std::string err = out.create(); !err.empty()) {
    fail(err);
    return kExitUsage;
  }
  net::Endpoint admin = g.admin;
  std::optional<HttpResponse> resp;
  // A follower names the leader's admin address: follow it once.
  for (int hop = 0; hop < 2; ++hop) {
    std::string error;
    Failure failure = Failure::kUnreachable;
    resp = http_get(admin, "/v1/snapshot", kSnapshotTimeoutMs, error, failure,
                    cluster::kMaxBackupBytes);
    if (!resp) {
      fail(fmt::format("cannot reach the lockd admin API at {}: {}", admin.to_string(), error));
      return kExitUnreachable;
    }
    if (resp->status != 503 || hop > 0) break;
    const json j = json::parse(resp->body, nullptr, false);
    if (!j.is_object() || j.value("error", "") != "not_leader" || !j["leader_admin"].is_string()) break;
    const auto next = net::parse_endpoint(j["leader_admin"].get<std::string>(), error);
    if (!next) break;
    admin = *next;
  }
  if (resp->status != 200) {
    const json j = json::parse(resp->body, nullptr, false);
    std::string why = j.is_object() && j.contains("message") ? j["message"].get<std::string>()
                      : j.is_object() && j.contains("error")  ? j["error"].get<std::string>()
                                                               : resp->body;
    if (j.is_object() && j.value("error", "") == "not_leader") {
      why = "this node is not the leader; ask the leader's admin address (lockctl cluster shows it)";
    }
    fail(fmt::format("no snapshot from {}: {} (HTTP {})", admin.to_string(), why, resp->status));
    return kExitNegative;
  }
  // Check before writing: a damaged download never replaces a good file.
  std::string bad;
  const std::optional<std::string> line = check_and_describe(g, file, resp->body, bad);
  if (!line) {
    fail(fmt::format("the snapshot from {} is damaged, {} not written: {}", admin.to_string(), file, bad));
    return kExitNegative;
  }
  // Said only once FILE is in place.
  if (const std::string err = out.commit(resp->body); !err.empty()) {
    fail(err);
    return kExitUsage;
  }
  std::printf("%s\n", line->c_str());
  return kExitOk;
}

int cmd_snapshot_verify(const Globals& g, const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    fail(fmt::format("cannot read {}: {}", file, std::strerror(errno)));
    return kExitUsage;
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  std::string bad;
  const std::optional<std::string> line = check_and_describe(g, file, ss.str(), bad);
  if (!line) {
    fail(fmt::format("{}: {}", file, bad));
    return kExitNegative;
  }
  std::printf("%s\n", line->c_str());
  return kExitOk;
}

}  // namespace lockd::lockctl
