#include "run.h"

#include <fmt/format.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "client.h"
#include "lockd/client/client.h"

namespace lockd::lockctl {

namespace {

namespace lc = lockd::client;

// How often the wait for the command looks at the keeper's verdict.
constexpr int kLostPollMs = 50;
// Signals passed on to the command when someone sends them to lockctl.
constexpr int kForwarded[] = {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGWINCH};

void fail(const std::string& msg) { std::fprintf(stderr, "lockctl: %s\n", msg.c_str()); }

std::string default_owner() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "localhost");
  std::string owner = fmt::format("lockctl-run@{}:{}", host, ::getpid());
  for (char& c : owner) {
    if (c < 0x21 || c > 0x7E) c = '_';
  }
  if (owner.size() > lc::kMaxOwnerBytes) owner.erase(0, owner.size() - lc::kMaxOwnerBytes);
  return owner;
}

// Forks and execs the command with the lock in its environment; the child
// gets the signal mask lockctl had before blocking. Returns the pid or -1.
pid_t spawn(const RunOptions& opt, const lc::Lock& lock, const sigset_t& old_mask) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  // Child (lockctl is still single-threaded here: the keeper starts after
  // the fork, so setenv and friends are safe).
  ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  // lockctl's own credential is not the job's (issue 35): a job that needs
  // one is given its own, not the identity that holds its lock.
  ::unsetenv("LOCKD_CREDENTIAL");
  ::setenv("LOCKD_TOKEN", std::to_string(lock.token).c_str(), 1);
  ::setenv("LOCKD_KEY", lock.key.c_str(), 1);
  ::setenv("LOCKD_OWNER", lock.owner.c_str(), 1);
  std::vector<char*> argv;
  for (const auto& a : opt.command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execvp(argv[0], argv.data());
  const int err = errno;
  std::fprintf(stderr, "lockctl: cannot run %s: %s\n", argv[0], std::strerror(err));
  ::_exit(err == ENOENT ? 127 : 126);  // what a shell would return
}

int exit_status_of(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 1;
}

}  // namespace

int cmd_run(const Globals& g, const RunOptions& opt) {
  if (opt.command.empty()) {
    fail("run needs a command after --");
    return kExitUsage;
  }
  if (opt.lease_ms == 0) {
    fail("--lease must be 1 or more");
    return kExitUsage;
  }
  const std::string owner = opt.owner.value_or(default_owner());
  // The same credential and TLS files as every other verb (--credential-file
  // or LOCKD_CREDENTIAL, --tls-ca, --tls-cert, --tls-key).
  const ClientSecurity& sec = client_security();
  if (!sec.tls_cert.empty() && sec.tls_ca.empty()) {
    fail("run: --tls-cert needs --tls-ca (the CA the server's certificate chains to)");
    return kExitUsage;
  }

  lc::Options copt;
  copt.credential = sec.credential;
  copt.tls.ca_file = sec.tls_ca;
  copt.tls.cert_file = sec.tls_cert;
  copt.tls.key_file = sec.tls_key;
  copt.addresses.clear();
  for (const net::Endpoint& ep : g.addrs) copt.addresses.push_back(ep.to_string());
  copt.connect_timeout = std::chrono::milliseconds(g.timeout_ms);
  copt.reply_timeout = std::chrono::milliseconds(g.timeout_ms);
  lc::Client client(copt);
  // Signals keep their default action during the acquire: Ctrl-C while
  // waiting just ends lockctl, and lockd cancels the waiting acquire when
  // the connection closes.
  auto acquired = opt.shared
                      ? client.acquire_shared(owner, opt.key, opt.limit, opt.lease_ms, opt.wait_ms)
                      : client.acquire(owner, opt.key, opt.lease_ms, opt.wait_ms);
  if (!acquired.ok()) {
    const lc::Status& s = acquired.status();
    if (s.code == lc::Code::kInvalidArgument) {
      fail(s.message);
      return kExitUsage;
    }
    fail(fmt::format("lock {} not acquired: {}", opt.key, s.to_string()));
    return s.code == lc::Code::kUnreachable ? kExitUnreachable : kExitNegative;
  }
  const lc::Lock lock = acquired.value();

  // From here every signal we care about is taken synchronously with
  // sigtimedwait, in this thread only (the keeper thread inherits the mask).
  sigset_t wanted;
  sigset_t old_mask;
  sigemptyset(&wanted);
  for (const int sig : kForwarded) sigaddset(&wanted, sig);
  sigaddset(&wanted, SIGCHLD);
  ::sigprocmask(SIG_BLOCK, &wanted, &old_mask);

  const pid_t child = spawn(opt, lock, old_mask);
  if (child < 0) {
    fail(fmt::format("cannot fork: {}", std::strerror(errno)));
    client.release(lock);
    return kExitNegative;
  }
  lc::Keeper keeper(client, lock);

  bool lost = false;
  std::chrono::steady_clock::time_point kill_at{};
  int wait_status = 0;
  for (;;) {
    siginfo_t info{};
    const timespec timeout{0, kLostPollMs * 1'000'000L};
    const int sig = ::sigtimedwait(&wanted, &info, &timeout);
    if (sig > 0 && sig != SIGCHLD && info.si_code <= 0) {
      // Sent by a process (kill, systemd ...). A signal from the terminal
      // (si_code > 0) already reached the command: it is in our process
      // group.
      ::kill(child, sig);
    }
    const pid_t done = ::waitpid(child, &wait_status, WNOHANG);
    if (done == child) break;
    if (!lost && keeper.lost()) {
      lost = true;
      fail(fmt::format("lost the lock on {} ({}); stopping the command with SIGTERM", opt.key,
                       keeper.lost_reason().to_string()));
      ::kill(child, SIGTERM);
      kill_at = std::chrono::steady_clock::now() + std::chrono::milliseconds(kLostKillGraceMs);
    }
    if (lost && kill_at.time_since_epoch().count() != 0 &&
        std::chrono::steady_clock::now() >= kill_at) {
      ::kill(child, SIGKILL);
      kill_at = {};
    }
  }
  keeper.stop();
  if (lost || keeper.lost()) {
    if (!lost) fail(fmt::format("lost the lock on {} ({})", opt.key,
                                keeper.lost_reason().to_string()));
    return kExitNegative;
  }
  if (const lc::Status s = client.release(lock); !s.ok()) {
    // The command ran under the lock; say so, but report its status.
    fail(fmt::format("release of {} failed: {}", opt.key, s.to_string()));
  }
  return exit_status_of(wait_status);
}

}  // namespace lockd::lockctl
