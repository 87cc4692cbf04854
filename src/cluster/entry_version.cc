// kEntryVersionMax: the one value lockd and bin/lockd-next differ in.
//
// lockd-next (src/CMakeLists.txt) compiles this file again with
// LOCKD_ENTRY_VERSION_NEXT and links that object ahead of the libraries, so
// the linker never takes lockd_entry_version's copy out of its archive (an
// archive member is only pulled in for a symbol still undefined). Keep this
// file to this one definition: anything else here would pull the member in
// and define the constant twice.
#include <cstdint>

#include "lockd/cluster/lock_command.h"

namespace lockd::cluster {

#if defined(LOCKD_ENTRY_VERSION_NEXT)  // the lockd-next test binary
// One above the build's max: 6 by default (the layout of 5 under a new
// number), or a real version when the build emulates an older release
// (-DLOCKD_ENTRY_VERSION_MAX=3 or 4 gives a lockd-next of 4 or 5).
static_assert(LOCKD_ENTRY_VERSION_NEXT >= 4 && LOCKD_ENTRY_VERSION_NEXT < 256,
              "LOCKD_ENTRY_VERSION_NEXT is 4..255");
const std::uint16_t kEntryVersionMax = LOCKD_ENTRY_VERSION_NEXT;
#elif defined(LOCKD_ENTRY_VERSION_MAX)  // -DLOCKD_ENTRY_VERSION_MAX=N (docs/cluster.md)
static_assert(LOCKD_ENTRY_VERSION_MAX >= 3 && LOCKD_ENTRY_VERSION_MAX < 256,
              "LOCKD_ENTRY_VERSION_MAX is 3..255");
const std::uint16_t kEntryVersionMax = LOCKD_ENTRY_VERSION_MAX;
#else
const std::uint16_t kEntryVersionMax = 5;
#endif

}  // namespace lockd::cluster
