// Event priorities; see priority.h.
#include "lockd/net/priority.h"

#include <event2/event.h>

#include "lockd/common/check.h"

namespace lockd::net {

void use_priorities(event_base* base) { LOCKD_CHECK(event_base_priority_init(base, kPriorities) == 0); }

bool has_priorities(const event_base* base) {
  return event_base_get_npriorities(const_cast<event_base*>(base)) == kPriorities;
}

}  // namespace lockd::net
