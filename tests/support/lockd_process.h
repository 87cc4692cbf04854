// Test support: runs a real lockd (or any program) as a child process and
// talks to it over real TCP. Used by the integration tests of every module.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace lockd::testing {

// A child process whose stderr (and, if asked, stdout) is captured through
// a pipe. See run_program.h to run a program to completion.
class ChildProcess {
 public:
  enum class Capture {
    kStderr,     // stderr through a pipe; stdin and stdout are the test's
    kStdoutToo,  // stdout through a pipe as well, stdin from /dev/null
  };
  ChildProcess() = default;
  ~ChildProcess();  // SIGKILLs the child if it still runs
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // Starts `argv[0]` with `argv`. Returns false if fork/exec failed.
  bool start(const std::vector<std::string>& argv, Capture capture = Capture::kStderr);
  // Reads stderr until a line containing `needle` arrives; returns it.
  std::optional<std::string> wait_for_line(const std::string& needle,
                                           std::chrono::milliseconds timeout);
  // Everything read from stderr so far.
  const std::string& stderr_text() const { return err_; }
  // Everything the child has written to stderr by now (reads what is
  // waiting in the pipe first): for a failure's message.
  const std::string& stderr_now();
  // Everything read from stdout so far (Capture::kStdoutToo).
  const std::string& stdout_text() const { return out_; }
  void signal(int sig);
  // Waits for the exit and returns the exit status (or 128+signal);
  // nullopt on timeout.
  std::optional<int> wait_exit(std::chrono::milliseconds timeout);
  pid_t pid() const { return pid_; }

 private:
  bool read_some(std::chrono::milliseconds timeout);
  bool exited_unreaped() const;

  pid_t pid_ = -1;
  int err_fd_ = -1;
  int out_fd_ = -1;
  bool err_eof_ = false;
  bool out_eof_ = false;
  std::string err_;
  std::string out_;
  std::size_t scanned_ = 0;  // lines of err_ before this offset were matched
  std::optional<int> status_;
};

// A lockd started on port 0 with extra flags; knows its bound port.
class LockdProcess {
 public:
  // Starts lockd with `--listen 127.0.0.1:0 --admin off` plus `flags`
  // (a flag given in `flags` replaces the default). Aborts the test on
  // failure. A `launcher` runs first with lockd's command line as its
  // arguments (e.g. `sh -c 'ulimit -n 64 && exec "$0" "$@"'`).
  explicit LockdProcess(std::vector<std::string> flags = {}, std::vector<std::string> launcher = {});
  std::uint16_t port() const { return port_; }
  std::uint16_t admin_port() const { return admin_port_; }
  ChildProcess& process() { return proc_; }

 private:
  ChildProcess proc_;
  std::uint16_t port_ = 0;
  std::uint16_t admin_port_ = 0;
};

// A blocking TCP client for line protocols.
class LineClient {
 public:
  explicit LineClient(std::uint16_t port, const std::string& host = "127.0.0.1");
  ~LineClient();
  LineClient(const LineClient&) = delete;
  LineClient& operator=(const LineClient&) = delete;

  bool connected() const { return fd_ >= 0; }
  void send(const std::string& bytes);
  // Next line without its `\n`; nullopt on timeout or EOF. The default
  // is generous: a reply that is due arrives long before it even under
  // ASan on a loaded machine; a test that expects silence passes its own.
  std::optional<std::string> read_line(std::chrono::milliseconds timeout =
                                           std::chrono::milliseconds(20'000));
  // Sends `line\n` and reads one reply line.
  std::string call(const std::string& line);
  // True if the server closed the connection (EOF) within `timeout`, with
  // nothing but already-buffered lines before it.
  bool wait_closed(std::chrono::milliseconds timeout);
  void close();
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
  std::string buf_;
  bool eof_ = false;
};

// Path of the lockd binary under test (set by CMake).
std::string lockd_binary();

// Splits a reply line on spaces.
std::vector<std::string> fields(const std::string& line);

}  // namespace lockd::testing
