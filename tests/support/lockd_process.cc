#include "lockd_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <regex>
#include <sstream>
#include <thread>

namespace lockd::testing {

using namespace std::chrono;

ChildProcess::~ChildProcess() {
  if (pid_ > 0 && !status_) {
    ::kill(pid_, SIGKILL);
    int st = 0;
    ::waitpid(pid_, &st, 0);
  }
  if (err_fd_ >= 0) ::close(err_fd_);
  if (out_fd_ >= 0) ::close(out_fd_);
}

bool ChildProcess::start(const std::vector<std::string>& argv, Capture capture) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return false;
  int out[2] = {-1, -1};
  if (capture == Capture::kStdoutToo && ::pipe2(out, O_CLOEXEC) != 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return false;
  }
  const pid_t parent = ::getpid();
  pid_ = ::fork();
  if (pid_ < 0) return false;
  if (pid_ == 0) {
    // Dies with the test: a test process that crashes (or is killed by a
    // signal) runs no destructor, and an orphaned lockd would keep its
    // ports, and ctest's output pipe open, so ctest waited until its
    // timeout as if the test hung.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    if (capture == Capture::kStdoutToo) {
      const int in = ::open("/dev/null", O_RDONLY);
      ::dup2(in, 0);
      ::dup2(out[1], 1);
    }
    ::dup2(fds[1], 2);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    std::fprintf(stderr, "exec %s failed: %s\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  ::close(fds[1]);
  err_fd_ = fds[0];
  if (out[1] >= 0) {
    ::close(out[1]);
    out_fd_ = out[0];
  } else {
    out_eof_ = true;
  }
  return true;
}

// Reads what is there from the open pipes, waiting up to `timeout` for
// something; false if nothing came. With every pipe at EOF it only waits
// (at most 10 ms), so callers polling for the exit do not spin.
bool ChildProcess::read_some(milliseconds timeout) {
  pollfd p[2];
  std::string* into[2];
  bool* eof[2];
  nfds_t n = 0;
  if (err_fd_ >= 0 && !err_eof_) {
    p[n] = {err_fd_, POLLIN, 0};
    into[n] = &err_;
    eof[n++] = &err_eof_;
  }
  if (out_fd_ >= 0 && !out_eof_) {
    p[n] = {out_fd_, POLLIN, 0};
    into[n] = &out_;
    eof[n++] = &out_eof_;
  }
  if (n == 0) {
    ::poll(nullptr, 0, static_cast<int>(std::min(timeout, milliseconds(10)).count()));
    return false;
  }
  if (::poll(p, n, static_cast<int>(timeout.count())) <= 0) return false;
  bool got = false;
  for (nfds_t i = 0; i < n; ++i) {
    if (p[i].revents == 0) continue;
    char buf[4096];
    const ssize_t r = ::read(p[i].fd, buf, sizeof buf);
    if (r > 0) {
      into[i]->append(buf, static_cast<std::size_t>(r));
      got = true;
    } else if (r == 0 || errno != EINTR) {
      *eof[i] = true;
    }
  }
  return got;
}

// True once the child has exited, leaving it for wait_exit() to reap
// (waitpid() has no WNOWAIT: it failed with EINVAL, so a child that died
// at start was only noticed at the deadline).
bool ChildProcess::exited_unreaped() const {
  if (pid_ <= 0) return false;
  siginfo_t info{};
  return ::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
         info.si_pid == pid_;
}

const std::string& ChildProcess::stderr_now() {
  while (read_some(milliseconds(0))) {
  }
  return err_;
}

std::optional<std::string> ChildProcess::wait_for_line(const std::string& needle,
                                                       milliseconds timeout) {
  const auto deadline = steady_clock::now() + timeout;
  for (;;) {
    std::size_t nl;
    while ((nl = err_.find('\n', scanned_)) != std::string::npos) {
      std::string line = err_.substr(scanned_, nl - scanned_);
      scanned_ = nl + 1;
      if (line.find(needle) != std::string::npos) return line;
    }
    const auto left = duration_cast<milliseconds>(deadline - steady_clock::now());
    if (left.count() <= 0) return std::nullopt;
    if (!read_some(left) && steady_clock::now() >= deadline) return std::nullopt;
    if (status_ || exited_unreaped()) {
      // Drain what is left and give up after one more scan.
      while (read_some(milliseconds(10))) {
      }
      while ((nl = err_.find('\n', scanned_)) != std::string::npos) {
        std::string line = err_.substr(scanned_, nl - scanned_);
        scanned_ = nl + 1;
        if (line.find(needle) != std::string::npos) return line;
      }
      return std::nullopt;
    }
  }
}

void ChildProcess::signal(int sig) {
  if (pid_ > 0 && !status_) ::kill(pid_, sig);
}

std::optional<int> ChildProcess::wait_exit(milliseconds timeout) {
  if (status_) return status_;
  const auto deadline = steady_clock::now() + timeout;
  while (steady_clock::now() < deadline) {
    int st = 0;
    const pid_t r = ::waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
      status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      while (read_some(milliseconds(0))) {
      }
      return status_;
    }
    read_some(milliseconds(10));
  }
  return std::nullopt;
}

std::string lockd_binary() { return LOCKD_BINARY; }

LockdProcess::LockdProcess(std::vector<std::string> flags, std::vector<std::string> launcher) {
  std::vector<std::string> argv = std::move(launcher);
  argv.push_back(lockd_binary());
  auto has = [&](const std::string& f) {
    for (const auto& x : flags) {
      if (x == f || x.rfind(f + "=", 0) == 0) return true;
    }
    return false;
  };
  if (!has("--listen")) argv.insert(argv.end(), {"--listen", "127.0.0.1:0"});
  if (!has("--admin")) argv.insert(argv.end(), {"--admin", "off"});
  argv.insert(argv.end(), flags.begin(), flags.end());
  if (!proc_.start(argv)) {
    ADD_FAILURE() << "cannot start lockd";
    return;
  }
  auto line = proc_.wait_for_line("listening on", seconds(30));
  if (!line) {
    ADD_FAILURE() << "lockd did not log 'listening'; stderr: " << proc_.stderr_text();
    return;
  }
  static const std::regex kPort(R"(listening on \S+:(\d+))");
  std::smatch m;
  if (std::regex_search(*line, m, kPort)) port_ = static_cast<std::uint16_t>(std::stoi(m[1]));
  bool admin_on = false;
  for (std::size_t i = 0; i < flags.size(); ++i) {
    if (flags[i] == "--admin" && i + 1 < flags.size()) admin_on = flags[i + 1] != "off";
    if (flags[i].rfind("--admin=", 0) == 0) admin_on = flags[i] != "--admin=off";
  }
  if (admin_on) {
    if (auto admin = proc_.wait_for_line("admin listening on", seconds(30))) {
      static const std::regex kAdmin(R"(admin listening on \S+:(\d+))");
      if (std::regex_search(*admin, m, kAdmin)) {
        admin_port_ = static_cast<std::uint16_t>(std::stoi(m[1]));
      }
    }
  }
  EXPECT_NE(port_, 0) << *line;
}

LineClient::LineClient(std::uint16_t port, const std::string& host) {
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  ::inet_pton(AF_INET, host.c_str(), &sa.sin_addr);
  if (::connect(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    ::close(fd_);
    fd_ = -1;
    return;
  }
  const int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

LineClient::~LineClient() { close(); }

void LineClient::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void LineClient::send(const std::string& bytes) {
  std::size_t off = 0;
  while (off < bytes.size()) {
    const ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      return;
    }
    off += static_cast<std::size_t>(n);
  }
}

std::optional<std::string> LineClient::read_line(milliseconds timeout) {
  const auto deadline = steady_clock::now() + timeout;
  for (;;) {
    const auto nl = buf_.find('\n');
    if (nl != std::string::npos) {
      std::string line = buf_.substr(0, nl);
      buf_.erase(0, nl + 1);
      return line;
    }
    if (eof_ || fd_ < 0) return std::nullopt;
    const auto left = duration_cast<milliseconds>(deadline - steady_clock::now()).count();
    if (left <= 0) return std::nullopt;
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) return std::nullopt;
    char tmp[65536];
    const ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
    if (n <= 0) {
      eof_ = true;
      continue;
    }
    buf_.append(tmp, static_cast<std::size_t>(n));
  }
}

std::string LineClient::call(const std::string& line) {
  send(line + "\n");
  return read_line().value_or("<no reply>");
}

bool LineClient::wait_closed(milliseconds timeout) {
  const auto deadline = steady_clock::now() + timeout;
  while (!eof_ && steady_clock::now() < deadline) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    char tmp[65536];
    const ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
    if (n <= 0) {
      eof_ = true;
    } else {
      buf_.append(tmp, static_cast<std::size_t>(n));
    }
  }
  return eof_;
}

std::vector<std::string> fields(const std::string& line) {
  std::vector<std::string> out;
  std::istringstream in(line);
  std::string f;
  while (in >> f) out.push_back(f);
  return out;
}

}  // namespace lockd::testing
