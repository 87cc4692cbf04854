// Test support: runs a program to completion (lockctl, lockd that should
// refuse to start, ...) and returns its exit status, stdout and stderr,
// captured through pipes (no files left anywhere).
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace lockd::testing {

struct RunResult {
  int status = -1;  // exit status, 128+signal; -1 if it did not finish in time (then SIGKILLed)
  std::string out;  // all it wrote to stdout (up to the kill, on a timeout)
  std::string err;  // all it wrote to stderr
};

// Runs `argv[0]` with `argv` and stdin from /dev/null; waits at most
// `timeout`. Output written after the program exits (by a child it left
// running) is not waited for.
RunResult run_program(const std::vector<std::string>& argv,
                      std::chrono::milliseconds timeout = std::chrono::seconds(30));

}  // namespace lockd::testing
