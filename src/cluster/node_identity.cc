// The data dir's IDENTITY file (see node_identity.h).
#include "lockd/cluster/node_identity.h"

#include "lockd/cluster/peer_handshake.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

namespace lockd::cluster {
namespace {

constexpr std::string_view kPrefix = "lockd node ";
constexpr std::string_view kMembers = " of members ";
constexpr std::string_view kCluster = " cluster ";
constexpr std::size_t kMaxIdentityBytes = 4096;

std::optional<raft::NodeId> parse_id(std::string_view s) {
  raft::NodeId v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v == raft::kNoNode) return std::nullopt;
  return v;
}

std::string members_text(const std::vector<raft::NodeId>& members) {
  std::string out;
  for (raft::NodeId m : members) {
    if (!out.empty()) out += ',';
    out += std::to_string(m);
  }
  return out;
}

std::string errno_text(int err) { return std::strerror(err); }

// Writes `text` to dir/name through a temporary file; "" or what failed.
std::string write_durably(const std::string& dir, const std::string& name, const std::string& text,
                          bool sync) {
  const std::string tmp = dir + "/" + name + ".new";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return "cannot create " + tmp + ": " + errno_text(errno);
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      ::close(fd);
      return "cannot write " + tmp + ": " + errno_text(err);
    }
    done += static_cast<std::size_t>(n);
  }
  if (sync && ::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    return "cannot sync " + tmp + ": " + errno_text(err);
  }
  ::close(fd);
  if (::rename(tmp.c_str(), (dir + "/" + name).c_str()) != 0) {
    return "cannot rename " + tmp + ": " + errno_text(errno);
  }
  if (!sync) return "";
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return "cannot open " + dir + ": " + errno_text(errno);
  const int rc = ::fsync(dfd);
  const int err = errno;
  ::close(dfd);
  if (rc != 0) return "cannot sync " + dir + ": " + errno_text(err);
  return "";
}

// Reads at most `max` bytes of the file at `path` into `out`: 0, or the
// errno of the failed open or read (ENOENT: no such file).
int read_small_file(const std::string& path, std::size_t max, std::string& out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  out.assign(max, '\0');
  std::size_t got = 0;
  int err = 0;
  while (got < out.size()) {
    const ssize_t n = ::read(fd, out.data() + got, out.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) err = errno;
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  ::close(fd);
  out.resize(got);
  return err;
}

}  // namespace

std::string format_identity(const NodeIdentity& id) {
  return std::string(kPrefix) + std::to_string(id.self) + std::string(kMembers) +
         members_text(id.members) +
         (id.cluster_id != 0 ? std::string(kCluster) + cluster_id_text(id.cluster_id) : "") + "\n";
}

std::string write_identity(const std::string& dir, const NodeIdentity& me, bool sync) {
  const std::string err = write_durably(dir, kIdentityFile, format_identity(me), sync);
  return err.empty() ? "" : "data dir " + dir + ": " + err;
}

std::string write_heard(const std::string& dir, const std::set<raft::NodeId>& ids, bool sync) {
  std::string text = "lockd heard";
  bool first = true;
  for (raft::NodeId id : ids) {
    text += (first ? " " : ",") + std::to_string(id);
    first = false;
  }
  text += "\n";
  const std::string err = write_durably(dir, kHeardFile, text, sync);
  return err.empty() ? "" : "data dir " + dir + ": " + err;
}

std::optional<std::set<raft::NodeId>> read_heard(const std::string& dir, std::string& error) {
  error.clear();
  std::string text;
  if (const int err = read_small_file(dir + "/" + kHeardFile, kMaxIdentityBytes * 4, text); err != 0) {
    if (err != ENOENT) error = "data dir " + dir + ": cannot read " + kHeardFile + ": " + errno_text(err);
    return std::nullopt;
  }
  const std::string bad = "data dir " + dir + ": " + kHeardFile + " is not a lockd heard line";
  constexpr std::string_view kHeard = "lockd heard";
  std::string_view t(text);
  if (!t.starts_with(kHeard) || !t.ends_with('\n')) {
    error = bad;
    return std::nullopt;
  }
  t.remove_prefix(kHeard.size());
  t.remove_suffix(1);
  std::set<raft::NodeId> ids;
  if (t.empty()) return ids;
  if (t.front() != ' ') {
    error = bad;
    return std::nullopt;
  }
  t.remove_prefix(1);
  while (true) {
    const std::size_t comma = t.find(',');
    const auto id = parse_id(t.substr(0, comma));
    if (!id) {
      error = bad;
      return std::nullopt;
    }
    ids.insert(*id);
    if (comma == std::string_view::npos) break;
    t.remove_prefix(comma + 1);
  }
  return ids;
}

std::string write_versions(const std::string& dir,
                           const std::map<raft::NodeId, std::pair<std::uint16_t, std::uint16_t>>& v,
                           bool sync) {
  std::string text = "lockd entry versions";
  for (const auto& [id, range] : v) {
    text += " " + std::to_string(id) + "=" + std::to_string(range.first) + "-" + std::to_string(range.second);
  }
  text += "\n";
  const std::string err = write_durably(dir, kVersionsFile, text, sync);
  return err.empty() ? "" : "data dir " + dir + ": " + err;
}

std::map<raft::NodeId, std::pair<std::uint16_t, std::uint16_t>> read_versions(const std::string& dir) {
  std::map<raft::NodeId, std::pair<std::uint16_t, std::uint16_t>> out;
  std::string text;
  if (read_small_file(dir + "/" + kVersionsFile, kMaxIdentityBytes * 8, text) != 0) return out;
  constexpr std::string_view kHead = "lockd entry versions";
  std::string_view t(text);
  if (!t.starts_with(kHead) || !t.ends_with('\n')) return {};
  t.remove_prefix(kHead.size());
  t.remove_suffix(1);
  while (!t.empty()) {
    if (t.front() != ' ') return {};
    t.remove_prefix(1);
    const std::size_t end = std::min(t.find(' '), t.size());
    const std::string_view item = t.substr(0, end);
    t.remove_prefix(end);
    const std::size_t eq = item.find('=');
    const std::size_t dash = item.find('-');
    if (eq == std::string_view::npos || dash == std::string_view::npos || dash < eq) return {};
    const auto id = parse_id(item.substr(0, eq));
    unsigned lo = 0, hi = 0;
    const std::string_view a = item.substr(eq + 1, dash - eq - 1), b = item.substr(dash + 1);
    if (!id || std::from_chars(a.data(), a.data() + a.size(), lo).ec != std::errc() ||
        std::from_chars(b.data(), b.data() + b.size(), hi).ec != std::errc() || lo == 0 || lo > hi ||
        hi > 0xffff) {
      return {};
    }
    out[*id] = {static_cast<std::uint16_t>(lo), static_cast<std::uint16_t>(hi)};
  }
  return out;
}

std::optional<NodeIdentity> parse_identity(std::string_view text) {
  if (!text.starts_with(kPrefix) || !text.ends_with('\n')) return std::nullopt;
  text.remove_prefix(kPrefix.size());
  text.remove_suffix(1);
  const std::size_t at = text.find(kMembers);
  if (at == std::string_view::npos) return std::nullopt;
  NodeIdentity id;
  if (const std::size_t c = text.find(kCluster); c != std::string_view::npos) {
    const std::string_view hex = text.substr(c + kCluster.size());
    std::uint64_t v = 0;
    if (!hex.starts_with("0x") || hex.size() != 18) return std::nullopt;
    const auto [end, ec] = std::from_chars(hex.data() + 2, hex.data() + hex.size(), v, 16);
    if (ec != std::errc() || end != hex.data() + hex.size() || v == 0) return std::nullopt;
    id.cluster_id = v;
    text = text.substr(0, c);
  }
  const auto self = parse_id(text.substr(0, at));
  if (!self) return std::nullopt;
  id.self = *self;
  std::string_view rest = text.substr(at + kMembers.size());
  while (true) {
    const std::size_t comma = rest.find(',');
    const auto m = parse_id(rest.substr(0, comma));
    if (!m || (!id.members.empty() && *m <= id.members.back())) return std::nullopt;
    id.members.push_back(*m);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  if (!std::binary_search(id.members.begin(), id.members.end(), id.self)) return std::nullopt;
  return id;
}

std::string claim_data_dir(const std::string& dir, const NodeIdentity& me, bool sync,
                           bool write_if_absent, NodeIdentity* stored) {
  if (stored != nullptr) *stored = me;
  std::string text;
  if (const int read_err = read_small_file(dir + "/" + kIdentityFile, kMaxIdentityBytes + 1, text);
      read_err == ENOENT) {
    if (!write_if_absent) return "";
    const std::string err = write_durably(dir, kIdentityFile, format_identity(me), sync);
    return err.empty() ? "" : "data dir " + dir + ": " + err;
  } else if (read_err != 0) {
    return "data dir " + dir + ": cannot read " + kIdentityFile + ": " + errno_text(read_err);
  }
  const std::optional<NodeIdentity> found = parse_identity(text);
  if (!found) {
    return "data dir " + dir + ": " + kIdentityFile +
           " is not a lockd identity line; refusing to start (restore it, or wipe the data dir "
           "to replace this node)";
  }
  if (found->self != me.self) {
    return "data dir " + dir + " belongs to node " + std::to_string(found->self) + ", not node " +
           std::to_string(me.self) +
           ": wrong --data-dir or --node-id? (a node on another's data dir could vote twice in "
           "one term)";
  }
  // The members it was first started with are kept for the record only:
  // membership lives in the replicated configuration (issue 20), and
  // --peer is a bootstrap hint that may differ (a member added later
  // lists the group as it was then; old members keep their flags).
  if (stored != nullptr) *stored = *found;
  return "";
}

}  // namespace lockd::cluster
