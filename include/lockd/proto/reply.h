// Reply formatting (§4): appends one `\n`-terminated line to an output
// buffer. No allocation beyond the buffer's own growth.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "lockd/proto/request.h"

namespace lockd::proto {

// A key's state as a watcher sees it (§5c): `free`, `held <owner> <token>`
// or `shared <limit> <count>`.
struct WatchState {
  enum class Kind : std::uint8_t { kFree, kHeld, kShared };
  Kind kind = Kind::kFree;
  std::string owner;         // kHeld
  std::uint64_t token = 0;   // kHeld
  std::uint16_t limit = 0;   // kShared
  std::uint32_t count = 0;   // kShared
  friend bool operator==(const WatchState&, const WatchState&) = default;
};

// `A <token> <owner> <key>`
void append_acquired(std::string& out, std::uint64_t token, std::string_view owner,
                     std::string_view key);
// `S <token> <owner> <key>`: acquired shared (v1.2, §5b).
void append_shared(std::string& out, std::uint64_t token, std::string_view owner,
                   std::string_view key);
// `T <owner> <key>`
void append_held(std::string& out, std::string_view owner, std::string_view key);
// `B <owner> <key>`
void append_busy(std::string& out, std::string_view owner, std::string_view key);
// `R <token> <key>`
void append_released(std::string& out, std::uint64_t token, std::string_view key);
// `K <token> <key>`: lease extended (v1.1).
void append_kept(std::string& out, std::uint64_t token, std::string_view key);
// `N <token> <key>`: not released, or (for `K`) not extended.
void append_not_released(std::string& out, std::uint64_t token, std::string_view key);
// `E <code>` for a malformed line (no echo).
void append_error(std::string& out, ParseError e);
// `E <code> <echo>` for a well-formed request the server could not process
// (cluster: no_leader, indeterminate).
void append_error_echo(std::string& out, std::string_view code, const Request& req);
// `M <leader_addr> <echo>` (cluster: not the leader).
void append_moved(std::string& out, std::string_view leader_addr, const Request& req);

// `W <key> <rev> <state>` (verb 'W', the reply) or `V <key> <rev> <state>`
// (verb 'V', a push) (v1.3, §5c).
void append_watch_state(std::string& out, char verb, std::string_view key, std::uint64_t rev,
                        const WatchState& state);
// `U <key>`: no longer watching key (v1.3).
void append_unwatched(std::string& out, std::string_view key);
// `B <key>`: a watch refused at a cap (v1.3).
void append_watch_busy(std::string& out, std::string_view key);
// `X <token> <key>`: the push telling a holder its lease ended (v1.3).
void append_lost(std::string& out, std::uint64_t token, std::string_view key);

}  // namespace lockd::proto
