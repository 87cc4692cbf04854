// The one version of lockd, for `--version`, the `listening` log line,
// `/v1/status` and the `lockd_build_info` metric.
//
// The number comes from `project(lockd VERSION ...)` in the root
// CMakeLists.txt; the git revision is read at build time (not configure
// time, so a rebuild after a commit is right) and is empty when built from
// a tree without git, e.g. a source tarball.
#pragma once

#include <string_view>

namespace lockd::version {

// "0.1.0": the CMake project version.
std::string_view number();

// "9c497a1", "9c497a1-dirty" (uncommitted changes), or "" outside a checkout.
std::string_view revision();

// "0.1.0+g9c497a1" (semver build metadata) or "0.1.0" without a revision.
std::string_view full();

}  // namespace lockd::version
