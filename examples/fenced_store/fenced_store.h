// A resource that checks fencing tokens: a tiny file store that refuses a
// write carrying a lower token than the highest it has accepted for that
// file. This is what makes a lease-based lock safe: a holder that paused
// (GC, swap, a stopped VM) past its lease and wakes up still "holding" the
// lock carries an old token, and the store turns its late write away.
//
// Layout (shared with fenced_store.py, so both clients' tests can use one
// store): `DIR/NAME` holds the data, `DIR/NAME.token` the highest token
// accepted, in decimal. The check and the write happen under flock(2) on
// `DIR/NAME.lock` (never replaced, unlike the files renamed into place), so
// they are atomic against every other writer.
#pragma once

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

namespace lockd::examples {

class FencedStore {
 public:
  explicit FencedStore(std::string dir) : dir_(std::move(dir)) {}

  // Writes `data` to `name` if `token` is at least the highest token
  // accepted for `name` so far, and records it. False: refused (stale
  // token) or an I/O error.
  bool write(const std::string& name, std::uint64_t token, const std::string& data) {
    const std::string path = dir_ + "/" + name;
    const int fd = ::open((path + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return false;
    ::flock(fd, LOCK_EX);
    bool ok = false;
    if (token >= highest_token(name)) {
      const std::string tmp = path + ".tmp";
      std::ofstream(tmp, std::ios::trunc) << data;
      std::ofstream(path + ".token.tmp", std::ios::trunc) << token;
      ok = ::rename(tmp.c_str(), path.c_str()) == 0 &&
           ::rename((path + ".token.tmp").c_str(), (path + ".token").c_str()) == 0;
    }
    ::flock(fd, LOCK_UN);
    ::close(fd);
    return ok;
  }

  std::optional<std::string> read(const std::string& name) const {
    std::ifstream in(dir_ + "/" + name);
    if (!in) return std::nullopt;
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  // The highest token accepted for `name` (0 if none).
  std::uint64_t highest_token(const std::string& name) const {
    std::ifstream in(dir_ + "/" + name + ".token");
    std::uint64_t t = 0;
    in >> t;
    return t;
  }

 private:
  std::string dir_;
};

}  // namespace lockd::examples
