// LOCKD_CHECK: an assertion for our own bugs that stays on in release builds.
//
// Two kinds of error (STYLE §10): what a client, peer, operator or disk can
// get wrong is a value that is handled and reported; what can only be a bug
// in lockd aborts loudly here, with the file and line, in every build type.
#pragma once

#include <cstdio>
#include <cstdlib>

#define LOCKD_CHECK(cond)                                                        \
  do {                                                                           \
    if (!(cond)) [[unlikely]] {                                                  \
      std::fprintf(stderr, "lockd: internal check failed: %s at %s:%d\n", #cond, \
                   __FILE__, __LINE__);                                          \
      std::abort();                                                              \
    }                                                                            \
  } while (0)
