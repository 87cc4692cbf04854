#include "lockd/proto/reply.h"

#include <charconv>

namespace lockd::proto {

namespace {

void append_u64(std::string& out, std::uint64_t v) {
  char buf[20];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, static_cast<std::size_t>(end - buf));
}

// `<owner> <key>` for A and S, `<token> <key>` for R and K, `<key>` for W and U.
void append_echo(std::string& out, const Request& req) {
  if (req.echoes_key_only()) {
    out.append(req.key);
    return;
  }
  if (req.echoes_owner()) {
    out.append(req.owner);
  } else {
    append_u64(out, req.token);
  }
  out.push_back(' ');
  out.append(req.key);
}

void append_pair(std::string& out, char verb, std::string_view a, std::string_view b) {
  out.push_back(verb);
  out.push_back(' ');
  out.append(a);
  out.push_back(' ');
  out.append(b);
  out.push_back('\n');
}

void append_token_key(std::string& out, char verb, std::uint64_t token, std::string_view key) {
  out.push_back(verb);
  out.push_back(' ');
  append_u64(out, token);
  out.push_back(' ');
  out.append(key);
  out.push_back('\n');
}

}  // namespace

void append_acquired(std::string& out, std::uint64_t token, std::string_view owner,
                     std::string_view key) {
  out.append("A ");
  append_u64(out, token);
  out.push_back(' ');
  out.append(owner);
  out.push_back(' ');
  out.append(key);
  out.push_back('\n');
}

void append_shared(std::string& out, std::uint64_t token, std::string_view owner,
                   std::string_view key) {
  out.append("S ");
  append_u64(out, token);
  out.push_back(' ');
  out.append(owner);
  out.push_back(' ');
  out.append(key);
  out.push_back('\n');
}

void append_held(std::string& out, std::string_view owner, std::string_view key) {
  append_pair(out, 'T', owner, key);
}

void append_busy(std::string& out, std::string_view owner, std::string_view key) {
  append_pair(out, 'B', owner, key);
}

void append_released(std::string& out, std::uint64_t token, std::string_view key) {
  append_token_key(out, 'R', token, key);
}

void append_kept(std::string& out, std::uint64_t token, std::string_view key) {
  append_token_key(out, 'K', token, key);
}

void append_not_released(std::string& out, std::uint64_t token, std::string_view key) {
  append_token_key(out, 'N', token, key);
}

void append_error(std::string& out, ParseError e) {
  out.append("E ");
  out.append(error_code(e));
  out.push_back('\n');
}

void append_error_echo(std::string& out, std::string_view code, const Request& req) {
  out.append("E ");
  out.append(code);
  out.push_back(' ');
  append_echo(out, req);
  out.push_back('\n');
}

void append_moved(std::string& out, std::string_view leader_addr, const Request& req) {
  out.append("M ");
  out.append(leader_addr);
  out.push_back(' ');
  append_echo(out, req);
  out.push_back('\n');
}

void append_watch_state(std::string& out, char verb, std::string_view key, std::uint64_t rev,
                        const WatchState& state) {
  out.push_back(verb);
  out.push_back(' ');
  out.append(key);
  out.push_back(' ');
  append_u64(out, rev);
  switch (state.kind) {
    case WatchState::Kind::kFree:
      out.append(" free\n");
      return;
    case WatchState::Kind::kHeld:
      out.append(" held ");
      out.append(state.owner);
      out.push_back(' ');
      append_u64(out, state.token);
      out.push_back('\n');
      return;
    case WatchState::Kind::kShared:
      out.append(" shared ");
      append_u64(out, state.limit);
      out.push_back(' ');
      append_u64(out, state.count);
      out.push_back('\n');
      return;
  }
}

void append_unwatched(std::string& out, std::string_view key) {
  out.append("U ");
  out.append(key);
  out.push_back('\n');
}

void append_watch_busy(std::string& out, std::string_view key) {
  out.append("B ");
  out.append(key);
  out.push_back('\n');
}

void append_lost(std::string& out, std::uint64_t token, std::string_view key) {
  append_token_key(out, 'X', token, key);
}

}  // namespace lockd::proto
