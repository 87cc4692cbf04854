// LockCommand codec and application; see lock_command.h.
#include "lockd/cluster/lock_command.h"

#include <algorithm>

namespace lockd::cluster {
namespace {

constexpr std::uint8_t kLockCommandVersion = 1;

void put_u64(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(static_cast<std::uint8_t>(v >> (8 * i))));
}
void put_str(std::string& out, std::string_view s) {
  put_u64(out, s.size());
  out.append(s);
}

// Bounds-checked reader that stays failed after the first error.
class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  std::uint8_t u8() {
    if (!need(1)) return 0;
    return static_cast<std::uint8_t>(in_[pos_++]);
  }
  std::uint64_t u64() {
    if (!need(8)) return 0;
    std::uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<std::uint64_t>(static_cast<std::uint8_t>(in_[pos_++])) << (8 * i);
    return v;
  }
  std::string str() {
    std::uint64_t n = u64();
    if (n > kMaxLockCommandField) {
      fail(LockCommandError::kTooLong);
      return {};
    }
    if (!need(n)) return {};
    std::string s(in_.substr(pos_, n));
    pos_ += n;
    return s;
  }
  bool at_end() const { return pos_ == in_.size(); }
  LockCommandError error() const { return error_; }
  void fail(LockCommandError e) {
    if (error_ == LockCommandError::kOk) error_ = e;
  }

 private:
  bool need(std::uint64_t n) {
    if (error_ != LockCommandError::kOk) return false;
    if (in_.size() - pos_ < n) {
      fail(LockCommandError::kTruncated);
      return false;
    }
    return true;
  }
  std::string_view in_;
  std::size_t pos_ = 0;
  LockCommandError error_ = LockCommandError::kOk;
};

}  // namespace

std::string encode_lock_command(const LockCommand& c) {
  std::string out;
  out.push_back(static_cast<char>(kLockCommandVersion));
  out.push_back(static_cast<char>(c.type));
  put_u64(out, static_cast<std::uint64_t>(c.now_ns));
  put_str(out, c.owner);
  put_str(out, c.key);
  put_u64(out, c.lease_ms);
  put_u64(out, c.wait_ms);
  put_u64(out, c.client);
  put_u64(out, c.waiter);
  put_u64(out, c.token);
  return out;
}

LockCommandError decode_lock_command(std::string_view bytes, LockCommand& out) {
  Reader r(bytes);
  if (r.u8() != kLockCommandVersion) {
    return r.error() != LockCommandError::kOk ? r.error() : LockCommandError::kBadVersion;
  }
  std::uint8_t t = r.u8();
  if (r.error() != LockCommandError::kOk) return r.error();
  if (t < 1 || t > 4) return LockCommandError::kBadType;
  LockCommand c;
  c.type = static_cast<LockCommandType>(t);
  c.now_ns = static_cast<TimeNs>(r.u64());
  c.owner = r.str();
  c.key = r.str();
  c.lease_ms = r.u64();
  c.wait_ms = r.u64();
  c.client = r.u64();
  c.waiter = r.u64();
  c.token = r.u64();
  if (r.error() != LockCommandError::kOk) return r.error();
  if (!r.at_end()) return LockCommandError::kTrailing;
  out = std::move(c);
  return LockCommandError::kOk;
}

ApplyOutcome apply_lock_command(locks::LockTable& table, const LockCommand& c, TimeNs floor_ns) {
  TimeNs now = std::max(c.now_ns, floor_ns);
  ApplyOutcome out;
  switch (c.type) {
    case LockCommandType::kAcquire: {
      locks::AcquireRequest req;
      req.owner = c.owner;
      req.key = c.key;
      req.lease_ms = c.lease_ms;
      req.wait_ms = c.wait_ms;
      req.client = c.client;
      req.waiter = c.waiter;
      locks::AcquireResult r = table.acquire(now, req);
      switch (r.outcome) {
        case locks::AcquireOutcome::kGranted:
          out.granted = r.token;
          out.summary = "granted " + std::to_string(r.token);
          break;
        case locks::AcquireOutcome::kHeld: out.summary = "held"; break;
        case locks::AcquireOutcome::kQueued: out.summary = "queued"; break;
        case locks::AcquireOutcome::kBusy: out.summary = "busy"; break;
      }
      break;
    }
    case LockCommandType::kRelease: {
      auto r = table.release(now, c.token, c.key, out.deliveries);
      out.summary = r == locks::ReleaseOutcome::kReleased ? "released" : "not-released";
      break;
    }
    case LockCommandType::kExpire:
      out.summary = table.expire(now, c.key, c.token, out.deliveries) ? "expired" : "not-expired";
      break;
    case LockCommandType::kCancelWaiter:
      out.summary = table.cancel_waiter(c.waiter) ? "cancelled" : "not-waiting";
      break;
  }
  for (const locks::Delivery& d : out.deliveries) {
    out.summary += d.kind == locks::DeliveryKind::kGranted ? " +grant " : " +timeout ";
    out.summary += std::to_string(d.token) + "/" + d.key;
  }
  return out;
}

}  // namespace lockd::cluster
