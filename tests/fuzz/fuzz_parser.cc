// libFuzzer target: arbitrary bytes, cut into arbitrary reads, through the
// line framer and the parser. Checks what must hold for any input: no
// crash, no line over the limit, and every accepted request is in range.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <variant>

#include "lockd/proto/line_framer.h"
#include "lockd/proto/parser.h"
#include "lockd/proto/reply.h"

using namespace lockd::proto;

namespace {

void require(bool ok) {
  if (!ok) std::abort();
}

bool visible(std::string_view s, std::size_t max) {
  if (s.empty() || s.size() > max) return false;
  for (unsigned char c : s) {
    if (c < 0x21 || c > 0x7E) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  // The first byte picks the read size, so one input covers many splits.
  const std::size_t chunk = 1 + data[0] % 64;
  const std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  const ParseLimits limits{30'000, 3'600'000, 300'000};
  LineFramer framer;
  std::string out;
  for (std::size_t i = 0; i < input.size(); i += chunk) {
    framer.feed(input.substr(i, chunk));
    std::string_view line;
    for (;;) {
      const auto st = framer.next(line);
      if (st == LineFramer::Status::kNeedMore) break;
      if (st == LineFramer::Status::kTooLong) return 0;
      require(line.size() < kMaxLineBytes);
      const ParseResult r = parse_line(line, limits);
      if (const auto* req = std::get_if<Request>(&r)) {
        if (req->verb == Verb::kHello) {  // `H <credential>`: no key (§11)
          require(visible(req->credential, 512));
          continue;
        }
        require(visible(req->key, kMaxKeyBytes));
        if (req->verb == Verb::kAcquire || req->verb == Verb::kShared) {  // `S`: §5b
          require(visible(req->owner, kMaxOwnerBytes));
          require(req->lease_ms >= 1 && req->lease_ms <= limits.max_lease_ms);
          require(req->wait_ms <= limits.max_wait_ms);
          if (req->verb == Verb::kShared) {
            append_shared(out, 1, req->owner, req->key);
          } else {
            append_acquired(out, 1, req->owner, req->key);
          }
        } else if (req->verb == Verb::kWatch || req->verb == Verb::kUnwatch) {
          // `W <key>` / `U <key>` (v1.3, §5c): the key alone.
          require(req->token == 0 && req->owner.empty());
        } else if (req->verb == Verb::kKeep) {
          require(req->token >= 1);
          require(req->lease_ms >= 1 && req->lease_ms <= limits.max_lease_ms);
          append_kept(out, req->token, req->key);
        } else {
          require(req->token >= 1);
          append_released(out, req->token, req->key);
        }
      } else if (const auto* err = std::get_if<ParseError>(&r)) {
        append_error(out, *err);
      }
      out.clear();
    }
  }
  return 0;
}
