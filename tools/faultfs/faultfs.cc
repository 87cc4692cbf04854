// liblockd_faultfs.so: storage fault injection as an LD_PRELOAD shim.
//
//   env LD_PRELOAD=build/bin/liblockd_faultfs.so LOCKD_FAULTFS_DIR=/data/node1
//       LOCKD_FAULTFS_CONTROL=/tmp/fault build/bin/lockd ...
//
// Intercepts write, pwrite, fdatasync, fsync and open/openat (via dlsym(RTLD_NEXT)) and
// fails or delays them according to the control file, re-read on every
// intercepted call (a stat and a small read, so a test flips faults while
// the process runs). The control file holds one line:
//
//   (missing or empty)        no fault
//   fdatasync EIO             fdatasync() fails with EIO
//   fsync EIO                 fsync() fails with EIO (the directory syncs too)
//   write ENOSPC              write()/pwrite() fail with ENOSPC
//   write EIO                 write()/pwrite() fail with EIO
//   fdatasync delay_us=N      fdatasync() sleeps N µs, then really syncs
//   open EMFILE [N]           the next N (default 1) opens that create a WAL
//                             segment (a file named wal-*, O_CREAT) fail with
//                             EMFILE, once per process: out of descriptors
//   open EMFILE N PREFIX      the same for the next N opens of any file whose
//                             name starts with PREFIX, created or read (e.g.
//                             `open EMFILE 3 snap`: snapshot files)
//
// Faults apply only to file descriptors whose path (/proc/self/fd/N) is
// LOCKD_FAULTFS_DIR or under it; everything else (logs, sockets) passes
// through. Unset LOCKD_FAULTFS_DIR or LOCKD_FAULTFS_CONTROL: no faults.
// docs/storage.md documents this interface; the chaos tests depend on it.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <stdarg.h>
#include <sys/syscall.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace {

enum class Op { kWrite, kFdatasync, kFsync, kOpen };

struct Fault {
  bool active = false;
  int error = 0;          // errno to fail with (0: none)
  long delay_us = 0;      // sleep before the real call
  long times = 0;         // open: how many opens fail, per process
  char prefix[32] = {0};  // open: the file names it applies to ("": wal-*, created only)
};

using WriteFn = ssize_t (*)(int, const void*, size_t);
using PwriteFn = ssize_t (*)(int, const void*, size_t, off_t);
using SyncFn = int (*)(int);

template <typename Fn>
Fn next(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
}

// The real directory, resolved once (symlinks like /tmp -> /private/tmp).
const char* fault_dir() {
  static char resolved[PATH_MAX];
  static int state = 0;  // 0 unknown, 1 set, 2 unset
  if (state == 0) {
    const char* d = getenv("LOCKD_FAULTFS_DIR");
    if (d == nullptr || *d == '\0' || realpath(d, resolved) == nullptr) {
      state = 2;
    } else {
      state = 1;
    }
  }
  return state == 1 ? resolved : nullptr;
}

bool fd_under_dir(int fd) {
  const char* dir = fault_dir();
  if (dir == nullptr) return false;
  char link[64];
  std::snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  char target[PATH_MAX];
  const ssize_t n = readlink(link, target, sizeof target - 1);
  if (n <= 0) return false;
  target[n] = '\0';
  const size_t len = std::strlen(dir);
  return std::strncmp(target, dir, len) == 0 && (target[len] == '\0' || target[len] == '/');
}

// Reads the control file (raw syscalls, never the intercepted ones).
Fault read_fault(Op op) {
  Fault f;
  const char* path = getenv("LOCKD_FAULTFS_CONTROL");
  if (path == nullptr) return f;
  // A raw syscall: open() is intercepted here too.
  const int fd = static_cast<int>(syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC));
  if (fd < 0) return f;
  char buf[128];
  const ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return f;
  buf[n] = '\0';
  char what[32] = {0};
  char arg[64] = {0};
  long times = 1;
  char prefix[32] = {0};
  const int got = std::sscanf(buf, "%31s %63s %ld %31s", what, arg, &times, prefix);
  if (got < 2) return f;
  const bool match = (op == Op::kWrite && std::strcmp(what, "write") == 0) ||
                     (op == Op::kFdatasync && std::strcmp(what, "fdatasync") == 0) ||
                     (op == Op::kFsync && std::strcmp(what, "fsync") == 0) ||
                     (op == Op::kOpen && std::strcmp(what, "open") == 0);
  if (!match) return f;
  if (std::strcmp(arg, "EIO") == 0) {
    f.error = EIO;
  } else if (op == Op::kOpen && std::strcmp(arg, "EMFILE") == 0) {
    f.error = EMFILE;
    f.times = times;
    std::memcpy(f.prefix, prefix, sizeof f.prefix);
  } else if (std::strcmp(arg, "ENOSPC") == 0) {
    f.error = ENOSPC;
  } else if (std::strncmp(arg, "delay_us=", 9) == 0) {
    f.delay_us = std::strtol(arg + 9, nullptr, 10);
  } else {
    return f;
  }
  f.active = true;
  return f;
}

// Applies the fault for `op` on `fd`: true (errno set) if the call must fail.
bool inject(Op op, int fd) {
  if (fault_dir() == nullptr) return false;
  const Fault f = read_fault(op);
  if (!f.active || !fd_under_dir(fd)) return false;
  if (f.delay_us > 0) {
    timespec ts{static_cast<time_t>(f.delay_us / 1000000), static_cast<long>(f.delay_us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
  }
  if (f.error != 0) {
    errno = f.error;
    return true;
  }
  return false;
}

// open EMFILE: true (errno set) if this open of `path` must fail.
bool inject_open(const char* path, int flags) {
  static long failed = 0;
  if (fault_dir() == nullptr || path == nullptr) return false;
  const char* base = std::strrchr(path, '/');
  base = base == nullptr ? path : base + 1;
  const Fault f = read_fault(Op::kOpen);
  if (!f.active || failed >= f.times) return false;
  if (f.prefix[0] == '\0') {
    if ((flags & O_CREAT) == 0 || std::strncmp(base, "wal-", 4) != 0) return false;
  } else if (std::strncmp(base, f.prefix, std::strlen(f.prefix)) != 0) {
    return false;
  }
  ++failed;
  errno = f.error;
  return true;
}

using OpenFn = int (*)(const char*, int, ...);
using OpenatFn = int (*)(int, const char*, int, ...);

}  // namespace

extern "C" {

int open(const char* path, int flags, ...) {
  static OpenFn real = next<OpenFn>("open");
  mode_t mode = 0;
  if ((flags & O_CREAT) != 0) {
    va_list ap;
    va_start(ap, flags);
    mode = static_cast<mode_t>(va_arg(ap, int));
    va_end(ap);
  }
  if (inject_open(path, flags)) return -1;
  return real(path, flags, mode);
}

int open64(const char* path, int flags, ...) {
  static OpenFn real = next<OpenFn>("open64");
  mode_t mode = 0;
  if ((flags & O_CREAT) != 0) {
    va_list ap;
    va_start(ap, flags);
    mode = static_cast<mode_t>(va_arg(ap, int));
    va_end(ap);
  }
  if (inject_open(path, flags)) return -1;
  return real(path, flags, mode);
}

int openat(int dirfd, const char* path, int flags, ...) {
  static OpenatFn real = next<OpenatFn>("openat");
  mode_t mode = 0;
  if ((flags & O_CREAT) != 0) {
    va_list ap;
    va_start(ap, flags);
    mode = static_cast<mode_t>(va_arg(ap, int));
    va_end(ap);
  }
  if (inject_open(path, flags)) return -1;
  return real(dirfd, path, flags, mode);
}


ssize_t write(int fd, const void* buf, size_t count) {
  static WriteFn real = next<WriteFn>("write");
  const int saved = errno;
  if (inject(Op::kWrite, fd)) return -1;
  errno = saved;
  return real(fd, buf, count);
}

ssize_t pwrite(int fd, const void* buf, size_t count, off_t offset) {
  static PwriteFn real = next<PwriteFn>("pwrite");
  const int saved = errno;
  if (inject(Op::kWrite, fd)) return -1;
  errno = saved;
  return real(fd, buf, count, offset);
}

ssize_t pwrite64(int fd, const void* buf, size_t count, off_t offset) {
  static PwriteFn real = next<PwriteFn>("pwrite64");
  const int saved = errno;
  if (inject(Op::kWrite, fd)) return -1;
  errno = saved;
  return real(fd, buf, count, offset);
}

int fdatasync(int fd) {
  static SyncFn real = next<SyncFn>("fdatasync");
  if (inject(Op::kFdatasync, fd)) return -1;
  return real(fd);
}

int fsync(int fd) {
  static SyncFn real = next<SyncFn>("fsync");
  if (inject(Op::kFsync, fd)) return -1;
  return real(fd);
}

}  // extern "C"
