// LockTable snapshot codec; see lock_table_snapshot.h.
#include "lockd/locks/lock_table_snapshot.h"

#include <algorithm>
#include <set>
#include <unordered_set>

#include "lockd/common/byte_io.h"
#include "lockd/common/check.h"
#include "lockd/common/crc32c.h"

namespace lockd::locks {

namespace {

enum class Err { kOk, kTruncated, kTooLong };
using Reader = ByteReader<Err>;

// Longest string field accepted on restore; bounds allocation on garbage.
constexpr std::size_t kMaxField = 1u << 20;

}  // namespace

struct SnapshotAccess {
  // Version 1 has no room for shared keys or `S` waiters; a table without
  // either is still written as version 1, so that a node of an older build
  // can load it (a rolling upgrade never meets a version-2 snapshot before
  // the first `S`).
  static bool needs_v2(const LockTable& t) {
    if (t.shared_keys_ > 0) return true;
    for (const auto& [id, ref] : t.waiter_index_) {
      if (ref.it->shared) return true;
    }
    return false;
  }

  static std::string serialize(const LockTable& t, std::string_view app_header) {
    std::string out;
    // ~ key + owner + 40 bytes per key; reserve to avoid regrowth copies.
    out.reserve(64 + app_header.size() + t.keys_.size() * 96 + t.deadlines_.size() * 32);
    ByteWriter w(out);
    const bool v2 = needs_v2(t);
    w.u8(v2 ? kTableSnapshotVersion : 1);
    w.bytes(app_header);
    w.u64(t.next_token_);
    w.u64(t.keys_.size());
    auto put_holder = [&w](const Holder& h) {
      w.bytes(h.owner);
      w.u64(h.token);
      w.u64(static_cast<std::uint64_t>(h.expires_at_ns));
      w.u64(h.lease_ms);
    };
    for (const auto& [key, s] : t.keys_) {
      w.bytes(key.view());
      if (v2) {
        w.u8(s.shared() ? 1 : 0);
        const bool has_limit = s.shared() || (s.extra && s.extra->queued_shared > 0);
        w.u32(has_limit ? s.limit() : 0);
        w.u32(static_cast<std::uint32_t>(s.holder_count()));
        s.for_each_holder(put_holder);
      } else {
        put_holder(s);
      }
      w.u32(static_cast<std::uint32_t>(s.waiter_count()));
      if (const std::list<Waiter>* waiters = s.waiters()) {
        for (const Waiter& wt : *waiters) {
          w.u64(wt.id);
          w.u64(wt.client);
          w.bytes(wt.owner);
          w.u64(wt.lease_ms);
          w.u64(static_cast<std::uint64_t>(wt.wait_deadline_ns));
          if (v2) {
            w.u8(wt.shared ? 1 : 0);
            w.u32(wt.limit);
          }
        }
      }
    }
    w.u64(t.deadlines_.size());
    for (const LockTable::Deadline& d : t.deadlines_) {
      w.u64(static_cast<std::uint64_t>(d.at_ns));
      w.u8(static_cast<std::uint8_t>(d.kind));
      w.u64(d.id);
      w.bytes(d.key);
    }
    w.u32(crc32c(out));
    return out;
  }

  static bool restore(std::string_view bytes, LockTable& t, std::string& app_header, std::string& error) {
    LOCKD_CHECK(t.keys_.empty() && t.waiter_index_.empty() && t.deadlines_.empty());
    if (!parse(bytes, t, app_header, error)) {
      t.keys_.clear();
      t.waiter_index_.clear();
      t.deadlines_.clear();
      t.keys_with_waiters_ = 0;
      t.shared_keys_ = 0;
      t.shared_holders_ = 0;
      return false;
    }
    return true;
  }

  static bool parse(std::string_view bytes, LockTable& t, std::string& app_header, std::string& error) {
    if (bytes.size() < 1 + 4) {
      error = "lock table snapshot: shorter than its header";
      return false;
    }
    Reader crc_reader(bytes.substr(bytes.size() - 4), Err::kOk, Err::kTruncated);
    if (crc_reader.u32() != crc32c(bytes.substr(0, bytes.size() - 4))) {
      error = "lock table snapshot: bad checksum";
      return false;
    }
    Reader r(bytes.substr(0, bytes.size() - 4), Err::kOk, Err::kTruncated);
    const std::uint8_t version = r.u8();
    if (version != 1 && version != kTableSnapshotVersion) {
      error = "lock table snapshot: version " + std::to_string(version) + " is not 1 or " +
              std::to_string(kTableSnapshotVersion);
      return false;
    }
    const bool v2 = version == 2;
    std::string header = r.bytes(bytes.size(), Err::kTooLong);
    const Token next_token = r.u64();
    const std::uint64_t key_count = r.u64();
    auto bad = [&](const std::string& what) {
      error = "lock table snapshot: " + what;
      return false;
    };
    if (!r.ok()) return bad("truncated header");
    if (next_token == 0) return bad("token counter is 0");
    // Each key takes at least 38 bytes (a 1-byte key and owner with their
    // u32 lengths, token, expiry, lease, waiter count): refuse counts the
    // bytes cannot hold. (It said 40, refusing tables of short keys.)
    if (key_count > r.remaining() / 38) return bad("key count beyond the snapshot's size");
    if (key_count > t.limits_.max_keys) return bad("more keys than --max-keys allows");
    t.next_token_ = next_token;
    t.keys_.reserve(static_cast<std::size_t>(key_count));
    auto get_holder = [&](Holder& h) {
      // Owners are at most 64 bytes on the wire (§2) and an OwnerString
      // holds 255: a longer one is not a table this lockd wrote (refused
      // like any other bad field, never a crash).
      const std::string_view owner = r.bytes_view(kMaxField, Err::kTooLong);
      if (owner.size() > OwnerString::kMaxBytes) return false;
      h.owner.assign(owner);
      h.token = r.u64();
      h.expires_at_ns = static_cast<TimeNs>(r.u64());
      h.lease_ms = r.u64();
      return r.ok() && !h.owner.empty() && h.token != 0 && h.token < next_token;
    };
    for (std::uint64_t k = 0; k < key_count; ++k) {
      const std::string_view key = r.bytes_view(kMaxField, Err::kTooLong);
      KeyState s;
      bool shared = false;
      std::uint32_t limit = 0;
      if (v2) {
        const std::uint8_t mode = r.u8();
        limit = r.u32();
        const std::uint32_t holders = r.u32();
        if (!r.ok()) return bad("truncated key");
        if (mode > 1 || limit > 0xFFFF) return bad("bad mode or limit of key '" + std::string(key) + "'");
        shared = mode == 1;
        if (holders == 0 || (!shared && holders != 1)) return bad("bad holder count of key '" + std::string(key) + "'");
        // Each holder takes at least 28 bytes.
        if (holders > r.remaining() / 28) return bad("holder count beyond the snapshot's size");
        if (shared) {
          s.extra = std::make_unique<KeyExtra>();
          s.extra->shared = true;
          s.extra->limit = static_cast<std::uint16_t>(limit);
          for (std::uint32_t i = 0; i < holders; ++i) {
            Holder h;
            if (!get_holder(h)) return bad("bad holder of key '" + std::string(key) + "'");
            const Token token = h.token;
            if (!s.extra->holders.emplace(token, std::move(h)).second) return bad("duplicate holder token");
          }
        } else if (!get_holder(s)) {
          return bad("bad holder of key '" + std::string(key) + "'");
        }
      } else if (!get_holder(s)) {
        if (!r.ok()) return bad("truncated key");
        return bad("bad holder of key '" + std::string(key) + "'");
      }
      const std::uint32_t waiters = r.u32();
      if (!r.ok()) return bad("truncated key");
      if (waiters > t.limits_.max_waiters_per_key) return bad("more waiters on a key than allowed");
      auto [it, inserted] = t.keys_.emplace(KeyString(key), std::move(s));
      if (!inserted) return bad("duplicate key '" + std::string(key) + "'");
      if (shared) {
        ++t.shared_keys_;
        t.shared_holders_ += it->second.extra->holders.size();
      }
      if (waiters == 0) continue;
      if (!it->second.extra) it->second.extra = std::make_unique<KeyExtra>();
      KeyExtra& x = *it->second.extra;
      ++t.keys_with_waiters_;
      for (std::uint32_t i = 0; i < waiters; ++i) {
        Waiter wt;
        wt.id = r.u64();
        wt.client = r.u64();
        wt.owner = r.bytes(kMaxField, Err::kTooLong);
        wt.lease_ms = r.u64();
        wt.wait_deadline_ns = static_cast<TimeNs>(r.u64());
        if (v2) {
          const std::uint8_t mode = r.u8();
          const std::uint32_t wlimit = r.u32();
          if (mode > 1 || wlimit > 0xFFFF) return bad("bad waiter mode or limit");
          wt.shared = mode == 1;
          wt.limit = static_cast<std::uint16_t>(wlimit);
        }
        if (!r.ok()) return bad("truncated waiter");
        if (wt.lease_ms == 0) return bad("waiter with a zero lease");
        if (wt.shared) {
          if (wt.limit != limit) return bad("a shared waiter's limit is not its key's");
          ++x.queued_shared;
        }
        if (t.waiter_index_.size() >= t.limits_.max_waiters) return bad("more waiters than --max-waiters allows");
        const WaiterId id = wt.id;
        x.waiters.push_back(std::move(wt));
        if (!t.waiter_index_.emplace(id, LockTable::WaiterRef{&*it, std::prev(x.waiters.end())}).second) {
          return bad("duplicate waiter id " + std::to_string(id));
        }
      }
      if (x.queued_shared > 0) x.limit = static_cast<std::uint16_t>(limit);
      // The hand-off always runs as far as it can (§5b).
      if (LockTable::can_grant(it->second, x.waiters.front())) {
        return bad("the front waiter of key '" + std::string(key) + "' could be granted");
      }
    }
    const std::uint64_t deadline_count = r.u64();
    if (!r.ok()) return bad("truncated deadline count");
    if (deadline_count > r.remaining() / 21) return bad("deadline count beyond the snapshot's size");
    t.deadlines_.reserve(static_cast<std::size_t>(deadline_count));
    for (std::uint64_t i = 0; i < deadline_count; ++i) {
      LockTable::Deadline d;
      d.at_ns = static_cast<TimeNs>(r.u64());
      const std::uint8_t kind = r.u8();
      d.id = r.u64();
      d.key = r.bytes(kMaxField, Err::kTooLong);
      if (!r.ok()) return bad("truncated deadline");
      if (kind > 1) return bad("bad deadline kind");
      d.kind = static_cast<LockTable::Deadline::Kind>(kind);
      t.deadlines_.push_back(std::move(d));
    }
    if (r.remaining() != 0) return bad("trailing bytes");
    if (!std::is_heap(t.deadlines_.begin(), t.deadlines_.end(), LockTable::DeadlineLater{})) {
      return bad("deadline index is not a heap");
    }
    // Every live lease and wait must have its deadline, or it would never fire.
    std::unordered_set<WaiterId> waits;
    std::set<std::pair<std::string, Token>> leases;
    for (const LockTable::Deadline& d : t.deadlines_) {
      if (!t.deadline_is_live(d)) continue;
      if (d.kind == LockTable::Deadline::Kind::kWait) {
        waits.insert(d.id);
      } else {
        leases.insert({d.key, d.id});
      }
    }
    if (waits.size() != t.waiter_index_.size()) return bad("a waiter has no deadline");
    std::size_t armed_wanted = 0;
    for (const auto& [key, s] : t.keys_) {
      if (s.waiter_count() > 0) armed_wanted += s.holder_count();
    }
    if (leases.size() != armed_wanted) return bad("a holder of a key with waiters has no lease deadline");
    app_header = std::move(header);
    return true;
  }
};

std::string serialize(const LockTable& table, std::string_view app_header) {
  return SnapshotAccess::serialize(table, app_header);
}

bool restore(std::string_view bytes, LockTable& table, std::string& app_header, std::string& error) {
  return SnapshotAccess::restore(bytes, table, app_header, error);
}

}  // namespace lockd::locks
