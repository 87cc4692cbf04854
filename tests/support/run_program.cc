#include "run_program.h"

#include <signal.h>

#include "lockd_process.h"

namespace lockd::testing {

RunResult run_program(const std::vector<std::string>& argv, std::chrono::milliseconds timeout) {
  ChildProcess p;
  RunResult r;
  if (!p.start(argv, ChildProcess::Capture::kStdoutToo)) return r;
  if (const auto status = p.wait_exit(timeout)) {
    r.status = *status;
  } else {
    p.signal(SIGKILL);
    p.wait_exit(std::chrono::seconds(10));
  }
  r.out = p.stdout_text();
  r.err = p.stderr_text();
  return r;
}

}  // namespace lockd::testing
