// LockCommand codec and application; see lock_command.h.
#include "lockd/cluster/lock_command.h"

#include <algorithm>

#include "lockd/common/byte_io.h"
#include "lockd/common/check.h"
#include "lockd/proto/parser.h"

namespace lockd::cluster {
namespace {

// The fields the lock table relies on, within the protocol's limits (§2).
bool fields_valid(const LockCommand& c) {
  // A monotonic clock reading: non-negative, and far from where adding a
  // lease would overflow (2^62 ns is 146 years of uptime).
  if (c.now_ns < 0 || c.now_ns > (TimeNs{1} << 62)) return false;
  const bool key_ok = !c.key.empty() && c.key.size() <= proto::kMaxKeyBytes;
  switch (c.type) {
    case LockCommandType::kAcquire:
    case LockCommandType::kAcquireShared:
      return key_ok && !c.owner.empty() && c.owner.size() <= proto::kMaxOwnerBytes &&
             c.lease_ms >= 1 && c.lease_ms <= kMaxLockCommandMs && c.wait_ms <= kMaxLockCommandMs;
    case LockCommandType::kRelease:
    case LockCommandType::kExpire:
      return key_ok;
    case LockCommandType::kKeep:
      return key_ok && c.lease_ms >= 1 && c.lease_ms <= kMaxLockCommandMs;
    case LockCommandType::kCancelWaiter:
      return true;
    case LockCommandType::kCancelWaiters:
      return c.owner.empty() && c.key.empty() && !c.waiters.empty() &&
             c.waiters.size() <= kMaxCancelWaiters;
    case LockCommandType::kLeaderStart:
      // A base far below any wall clock since 2001 cannot be a real one;
      // one near 2^64 would leave no room for the indexes added to it.
      return c.owner.empty() && c.key.empty() && c.token_base >= kMinTokenBase &&
             c.token_base <= kMaxTokenBase;
    case LockCommandType::kClock:
      return c.owner.empty() && c.key.empty();
    case LockCommandType::kConfig:
      return c.owner.empty() && c.key.empty() && c.max_keys >= 1 &&
             c.max_keys <= kMaxConfigCap && c.max_waiters_per_key >= 1 &&
             c.max_waiters_per_key <= kMaxConfigCap && c.max_waiters >= 1 &&
             c.max_waiters <= kMaxConfigCap && c.token_floor < kMaxTokenBase;
  }
  return false;
}

}  // namespace

std::uint16_t lock_command_version(std::string_view bytes) {
  return bytes.empty() ? 0 : static_cast<unsigned char>(bytes[0]);
}

std::string encode_lock_command(const LockCommand& c, std::uint16_t version) {
  LOCKD_CHECK(version >= kEntryVersionMin && version <= kEntryVersionMax);
  LOCKD_CHECK(static_cast<std::uint8_t>(c.type) <= max_lock_command_type(version));
  std::string out;
  ByteWriter w(out);
  w.u8(static_cast<std::uint8_t>(version));
  w.u8(static_cast<std::uint8_t>(c.type));
  w.u64(static_cast<std::uint64_t>(c.now_ns));
  w.bytes(c.owner);
  w.bytes(c.key);
  w.u64(c.lease_ms);
  w.u64(c.wait_ms);
  w.u64(c.client);
  w.u64(c.waiter);
  w.u64(c.token);
  w.u64(c.token_base);
  if (c.type == LockCommandType::kConfig) {
    w.u64(c.max_keys);
    w.u64(c.max_waiters_per_key);
    w.u64(c.max_waiters);
    w.u64(c.token_floor);
  }
  // Only kAcquireShared carries the limit: every other kind keeps its bytes.
  if (c.type == LockCommandType::kAcquireShared) w.u32(c.limit);
  if (c.type == LockCommandType::kCancelWaiters) {
    LOCKD_CHECK(c.waiters.size() <= kMaxCancelWaiters);
    w.u32(static_cast<std::uint32_t>(c.waiters.size()));
    for (const locks::WaiterId id : c.waiters) w.u64(id);
  }
  return out;
}

LockCommandError decode_lock_command(std::string_view bytes, LockCommand& out) {
  ByteReader<LockCommandError> r(bytes, LockCommandError::kOk, LockCommandError::kTruncated);
  const std::uint8_t version = r.u8();
  if (r.error() != LockCommandError::kOk) return r.error();
  if (version < kEntryVersionMin || version > kEntryVersionMax) return LockCommandError::kBadVersion;
  std::uint8_t t = r.u8();
  if (r.error() != LockCommandError::kOk) return r.error();
  if (t < 1 || t > max_lock_command_type(version)) return LockCommandError::kBadType;
  LockCommand c;
  c.type = static_cast<LockCommandType>(t);
  c.now_ns = static_cast<TimeNs>(r.u64());
  c.owner = r.bytes(kMaxLockCommandField, LockCommandError::kTooLong);
  c.key = r.bytes(kMaxLockCommandField, LockCommandError::kTooLong);
  c.lease_ms = r.u64();
  c.wait_ms = r.u64();
  c.client = r.u64();
  c.waiter = r.u64();
  c.token = r.u64();
  c.token_base = r.u64();
  if (c.type == LockCommandType::kConfig) {
    c.max_keys = r.u64();
    c.max_waiters_per_key = r.u64();
    c.max_waiters = r.u64();
    c.token_floor = r.u64();
  }
  if (c.type == LockCommandType::kAcquireShared) {
    const std::uint32_t limit = r.u32();
    if (limit > proto::kMaxLimit) return LockCommandError::kBadField;
    c.limit = static_cast<std::uint16_t>(limit);
  }
  if (c.type == LockCommandType::kCancelWaiters) {
    const std::uint32_t n = r.u32();
    if (r.error() != LockCommandError::kOk) return r.error();
    if (n == 0 || n > kMaxCancelWaiters) return LockCommandError::kBadField;
    if (r.remaining() < std::size_t{n} * 8) return LockCommandError::kTruncated;
    c.waiters.reserve(n);
    for (std::uint32_t i = 0; i < n; ++i) c.waiters.push_back(r.u64());
  }
  if (r.error() != LockCommandError::kOk) return r.error();
  if (r.remaining() != 0) return LockCommandError::kTrailing;
  if (!fields_valid(c)) return LockCommandError::kBadField;
  out = std::move(c);
  return LockCommandError::kOk;
}

}  // namespace lockd::cluster
