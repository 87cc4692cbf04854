// libFuzzer target: a random command sequence against the lock table, with
// every internal invariant checked after each command, plus the protocol's
// own: tokens only grow, a granted key has exactly that holder, a keep
// (§6a) moves only a live lease and never its token, and after advance()
// no key with waiters is left past its (possibly kept) expiry.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "lockd/locks/lock_table.h"

using namespace lockd;
using namespace lockd::locks;

namespace {

void require(bool ok) {
  if (!ok) std::abort();
}

// Reads the input as a stream of small numbers.
class Input {
 public:
  Input(const std::uint8_t* d, std::size_t n) : d_(d), n_(n) {}
  bool done() const { return i_ >= n_; }
  std::uint8_t next() { return i_ < n_ ? d_[i_++] : 0; }

 private:
  const std::uint8_t* d_;
  std::size_t n_;
  std::size_t i_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Input in(data, size);
  LockTable table(Limits{8, 3, 10}, 1);
  std::vector<Delivery> out;
  std::vector<WaiterId> waiters;
  std::vector<Token> tokens;
  TimeNs now = 0;
  Token last = 0;
  WaiterId next_waiter = 1;
  auto saw = [&](Token t) {
    require(t > last);
    last = t;
    tokens.push_back(t);
  };
  while (!in.done()) {
    const std::uint8_t op = in.next() % 7;
    const std::string key = "k" + std::to_string(in.next() % 10);
    out.clear();
    switch (op) {
      case 0: {  // acquire
        const std::uint64_t lease = 1 + in.next() % 50;
        const std::uint64_t wait = in.next() % 3 == 0 ? 0 : in.next() % 100;
        const WaiterId w = next_waiter++;
        const auto r = table.acquire(now, {"o", key, lease, wait, 1, w});
        if (r.outcome == AcquireOutcome::kGranted) {
          saw(r.token);
          require(table.find(key)->token == r.token);
        }
        if (r.outcome == AcquireOutcome::kQueued) waiters.push_back(w);
        break;
      }
      case 1: {  // release a token seen before (or garbage)
        const Token t = tokens.empty() || in.next() % 4 == 0
                            ? in.next()
                            : tokens[in.next() % tokens.size()];
        table.release(now, t, key, out);
        break;
      }
      case 2:  // time passes, sometimes by less than a millisecond
        now += static_cast<TimeNs>(in.next()) * kNsPerMs + static_cast<TimeNs>(in.next() % 4) * 250'000;
        table.advance(now, out);
        // Every hand-off that is due has happened: a keep that shortened a
        // lease moved the deadline with it.
        table.for_each([&](std::string_view, const KeyState& s) {
          require(s.waiter_count() == 0 || s.expires_at_ns > now);
        });
        break;
      case 3:
        if (!waiters.empty()) table.cancel_waiter(now, waiters[in.next() % waiters.size()], out);
        break;
      case 4:
        table.sweep(now);
        break;
      case 5: {
        const KeyState* s = table.find(key);
        if (s != nullptr) table.expire(now, key, s->token, out);
        break;
      }
      case 6: {  // keep with the key's token, a token seen before, or garbage
        const KeyState* s = table.find(key);
        const std::uint8_t pick = in.next() % 4;
        const Token t = s != nullptr && pick < 2 ? s->token
                        : tokens.empty() || pick == 3 ? in.next()
                                                      : tokens[in.next() % tokens.size()];
        const std::uint64_t lease = 1 + in.next() % 50;
        const bool live = s != nullptr && s->token == t && s->expires_at_ns > now;
        const Token before_token = s != nullptr ? s->token : 0;
        const TimeNs before_expiry = s != nullptr ? s->expires_at_ns : 0;
        const auto r = table.keep(now, t, key, lease);
        require((r == KeepOutcome::kKept) == live);
        const KeyState* after = table.find(key);
        require((after != nullptr) == (s != nullptr));
        if (after != nullptr) {
          require(after->token == before_token);
          if (live) {
            require(after->expires_at_ns >= now + ms_to_ns(lease));
            require(after->expires_at_ns < now + ms_to_ns(lease) + kNsPerMs);
          } else {
            require(after->expires_at_ns == before_expiry);
          }
        }
        break;
      }
    }
    for (const Delivery& d : out) {
      if (d.kind == DeliveryKind::kGranted) {
        saw(d.token);
        require(table.find(d.key)->token == d.token);
      }
    }
    table.check_invariants();
  }
  return 0;
}
