// libFuzzer target: a random command sequence against the lock table, with
// every internal invariant checked after each command, plus the protocol's
// own: tokens only grow, a granted key has exactly that holder, a keep
// (§6a) moves only a live lease and never its token, a shared (`S`, §5b)
// grant is one of its key's holders, and after advance() no key with
// waiters is left without a live holder.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <string>
#include <vector>

#include "lockd/locks/lock_table.h"

using namespace lockd;
using namespace lockd::locks;

namespace {

void require(bool ok) {
  if (!ok) std::abort();
}

// The holder `t` of `s` (the exclusive one, or one of its shared ones).
const Holder* holder_of(const KeyState* s, Token t) {
  if (s == nullptr || t == 0) return nullptr;
  if (s->shared()) {
    auto it = s->extra->holders.find(t);
    return it == s->extra->holders.end() ? nullptr : &it->second;
  }
  return s->token == t ? s : nullptr;
}

bool has_live_holder(const KeyState& s, TimeNs now) {
  if (!s.shared()) return s.token != 0 && s.expires_at_ns > now;
  for (const auto& [t, h] : s.extra->holders) {
    if (h.expires_at_ns > now) return true;
  }
  return false;
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
    const std::uint8_t op = in.next() % 8;
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
          require(s.waiter_count() == 0 || has_live_holder(s, now));
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
        if (s == nullptr) break;
        const Token t = !s->shared()                 ? s->token
                        : s->extra->holders.empty() ? 0
                                                    : s->extra->holders.begin()->first;
        table.expire(now, key, t, out);
        break;
      }
      case 6: {  // keep with the key's token, a token seen before, or garbage
        const KeyState* s = table.find(key);
        const std::uint8_t pick = in.next() % 4;
        Token own = s != nullptr ? s->token : 0;
        if (s != nullptr && s->shared() && !s->extra->holders.empty()) {
          own = std::next(s->extra->holders.begin(), in.next() % s->extra->holders.size())->first;
        }
        const Token t = s != nullptr && pick < 2 ? own
                        : tokens.empty() || pick == 3 ? in.next()
                                                      : tokens[in.next() % tokens.size()];
        const std::uint64_t lease = 1 + in.next() % 50;
        const Holder* h = holder_of(s, t);
        const bool live = h != nullptr && h->expires_at_ns > now;
        const Token before_token = s != nullptr ? s->token : 0;
        const TimeNs before_expiry = h != nullptr ? h->expires_at_ns : 0;
        const auto r = table.keep(now, t, key, lease);
        require((r == KeepOutcome::kKept) == live);
        const KeyState* after = table.find(key);
        require((after != nullptr) == (s != nullptr));
        if (after != nullptr) {
          require(after->token == before_token);
          const Holder* ha = holder_of(after, t);
          require((ha != nullptr) == (h != nullptr));
          if (live) {
            require(ha->expires_at_ns >= now + ms_to_ns(lease));
            require(ha->expires_at_ns < now + ms_to_ns(lease) + kNsPerMs);
          } else if (ha != nullptr) {
            require(ha->expires_at_ns == before_expiry);
          }
        }
        break;
      }
      case 7: {  // S: a reader (limit 0) or a semaphore holder (limit 1..3)
        const std::uint64_t lease = 1 + in.next() % 50;
        const std::uint64_t wait = in.next() % 3 == 0 ? 0 : in.next() % 100;
        const auto limit = static_cast<std::uint16_t>(in.next() % 4);
        const WaiterId w = next_waiter++;
        const auto r = table.acquire(now, {"s", key, lease, wait, 1, w, true, limit});
        if (r.outcome == AcquireOutcome::kGranted) {
          saw(r.token);
          const KeyState* s = table.find(key);
          require(s != nullptr && s->shared() && holder_of(s, r.token) != nullptr);
          std::size_t live = 0;
          for (const auto& [tok, h] : s->extra->holders) live += h.expires_at_ns > now ? 1 : 0;
          require(limit == 0 || live <= limit);
        }
        if (r.outcome == AcquireOutcome::kQueued) waiters.push_back(w);
        break;
      }
    }
    for (const Delivery& d : out) {
      if (d.kind == DeliveryKind::kGranted) {
        saw(d.token);
        require(holder_of(table.find(d.key), d.token) != nullptr);
      }
    }
    table.check_invariants();
  }
  return 0;
}
