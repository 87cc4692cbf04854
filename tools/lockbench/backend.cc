#include "backend.h"

#include "lockd_codec.h"
#include "resp_codec.h"

namespace lockbench {
namespace {

// Fence token for lockd: `R 1 <fence key>` on a key nobody acquires always
// answers `N 1 <fence key>` and changes nothing.
constexpr std::uint64_t kFenceToken = 1;

class LockdBackend final : public Backend {
 public:
  std::string_view name() const override { return "lockd"; }
  bool in_order() const override { return false; }
  bool server_queues() const override { return true; }
  std::uint32_t handshakes() const override { return 0; }

  void encode_handshake(std::string&, std::uint32_t) override {}
  void encode_acquire(std::string& out, std::string_view owner, std::string_view key,
                      std::uint64_t lease_ms, std::uint64_t wait_ms) override {
    encode_lockd_acquire(out, owner, key, lease_ms, wait_ms);
  }
  void encode_release(std::string& out, std::uint64_t token, std::string_view,
                      std::string_view key) override {
    encode_lockd_release(out, token, key);
  }
  void encode_acquire_as(std::string& out, Flavor flavor, std::uint32_t limit,
                         std::string_view owner, std::string_view key, std::uint64_t lease_ms,
                         std::uint64_t wait_ms) override {
    if (flavor == Flavor::kRead || flavor == Flavor::kSemaphore) {
      encode_lockd_shared(out, owner, key, flavor == Flavor::kRead ? 0 : limit, lease_ms, wait_ms);
    } else {
      encode_lockd_acquire(out, owner, key, lease_ms, wait_ms);
    }
  }
  void encode_release_as(std::string& out, Flavor, std::uint64_t token, std::string_view,
                         std::string_view key) override {
    encode_lockd_release(out, token, key);
  }
  void encode_fence(std::string& out, std::string_view fence_key) override {
    encode_lockd_release(out, kFenceToken, fence_key);
  }
  void encode_keep(std::string& out, std::uint64_t token, std::string_view, std::string_view key,
                   std::uint64_t lease_ms) override {
    encode_lockd_keep(out, token, key, lease_ms);
  }

  DecodeStatus decode(std::string_view in, std::size_t& consumed, ReqKind, Flavor,
                      Reply& out) override {
    LockdReply r;
    const DecodeStatus st = decode_lockd_reply(in, consumed, r);
    if (st != DecodeStatus::kReply) return st;
    out = Reply{};
    out.token = r.token;
    out.owner = r.owner;
    out.key = r.key;
    out.has_echo = !r.key.empty();
    switch (r.kind) {
      case LockdReplyKind::kAcquired: out.outcome = Outcome::kGranted; break;
      case LockdReplyKind::kHeld: out.outcome = Outcome::kNotGranted; break;
      case LockdReplyKind::kBusy: out.outcome = Outcome::kBusy; break;
      case LockdReplyKind::kReleased: out.outcome = Outcome::kReleased; break;
      case LockdReplyKind::kNotReleased: out.outcome = Outcome::kNotReleased; break;
      case LockdReplyKind::kKept: out.outcome = Outcome::kKept; break;
      case LockdReplyKind::kMoved:
        out.outcome = Outcome::kMoved;
        out.detail = r.code;  // the leader's client address
        break;
      case LockdReplyKind::kError:
        out.outcome = r.code == "no_leader"       ? Outcome::kNoLeader
                      : r.code == "indeterminate" ? Outcome::kIndeterminate
                                                  : Outcome::kError;
        out.detail = in.substr(0, consumed - 1);
        break;
    }
    return DecodeStatus::kReply;
  }
};

class RedisBackend final : public Backend {
 public:
  std::string_view name() const override { return "redis"; }
  bool in_order() const override { return true; }
  bool server_queues() const override { return false; }
  // The scripts, loaded on every connection: release, keep, then
  // Redisson's read lock/unlock, write lock/unlock, semaphore acquire/release.
  std::uint32_t handshakes() const override { return kScripts; }

  void encode_handshake(std::string& out, std::uint32_t i) override {
    static constexpr std::string_view scripts[kScripts] = {
        kRedisReleaseScript,        kRedisKeepScript,           kRedissonReadLockScript,
        kRedissonReadUnlockScript,  kRedissonWriteLockScript,   kRedissonWriteUnlockScript,
        kRedissonSemaphoreAcquireScript, kRedissonSemaphoreReleaseScript};
    encode_resp_command(out, {"SCRIPT", "LOAD", scripts[i]});
  }
  void encode_acquire_as(std::string& out, Flavor flavor, std::uint32_t limit,
                         std::string_view owner, std::string_view key, std::uint64_t lease_ms,
                         std::uint64_t wait_ms) override {
    switch (flavor) {
      case Flavor::kPlain:
        encode_acquire(out, owner, key, lease_ms, wait_ms);
        return;
      case Flavor::kRead:
        encode_rw(out, shas_[kReadLock], owner, key, lease_ms);
        return;
      case Flavor::kWrite:
        encode_rw(out, shas_[kWriteLock], owner, key, lease_ms);
        return;
      case Flavor::kSemaphore:
        encode_semaphore(out, shas_[kSemAcquire], owner, key, limit, lease_ms);
        return;
    }
  }
  void encode_release_as(std::string& out, Flavor flavor, std::uint64_t token,
                         std::string_view owner, std::string_view key) override {
    switch (flavor) {
      case Flavor::kPlain:
        encode_release(out, token, owner, key);
        return;
      case Flavor::kRead:
        encode_rw(out, shas_[kReadUnlock], owner, key, 30'000);
        return;
      case Flavor::kWrite:
        encode_rw(out, shas_[kWriteUnlock], owner, key, 30'000);
        return;
      case Flavor::kSemaphore:
        encode_semaphore(out, shas_[kSemRelease], owner, key, 0, 0);
        return;
    }
  }
  void encode_acquire(std::string& out, std::string_view owner, std::string_view key,
                      std::uint64_t lease_ms, std::uint64_t) override {
    append_resp_array_header(out, 6);
    append_resp_bulk(out, std::string_view("SET"));
    append_resp_bulk(out, key);
    append_resp_bulk(out, owner);
    append_resp_bulk(out, std::string_view("NX"));
    append_resp_bulk(out, std::string_view("PX"));
    append_resp_bulk(out, lease_ms);
  }
  void encode_release(std::string& out, std::uint64_t, std::string_view owner,
                      std::string_view key) override {
    append_resp_array_header(out, 5);
    append_resp_bulk(out, std::string_view("EVALSHA"));
    append_resp_bulk(out, sha_);
    append_resp_bulk(out, std::string_view("1"));
    append_resp_bulk(out, key);
    append_resp_bulk(out, owner);
  }
  void encode_fence(std::string& out, std::string_view) override {
    encode_resp_command(out, {"PING"});
  }
  void encode_keep(std::string& out, std::uint64_t, std::string_view owner, std::string_view key,
                   std::uint64_t lease_ms) override {
    append_resp_array_header(out, 6);
    append_resp_bulk(out, std::string_view("EVALSHA"));
    append_resp_bulk(out, keep_sha_);
    append_resp_bulk(out, std::string_view("1"));
    append_resp_bulk(out, key);
    append_resp_bulk(out, owner);
    append_resp_bulk(out, lease_ms);
  }

  DecodeStatus decode(std::string_view in, std::size_t& consumed, ReqKind oldest, Flavor flavor,
                      Reply& out) override {
    RespValue v;
    const DecodeStatus st = decode_resp(in, consumed, v);
    if (st != DecodeStatus::kReply) return st;
    out = Reply{};
    out.outcome = Outcome::kError;
    out.detail = v.text;
    if (flavor == Flavor::kRead || flavor == Flavor::kWrite) {
      // Redisson's rw scripts: acquire nil = held, a pttl = not; release
      // 1/0 = released (0: other readers remain), nil = not held.
      if (oldest == ReqKind::kAcquire) {
        if (v.type == RespType::kNull) out.outcome = Outcome::kGranted;
        if (v.type == RespType::kInteger) out.outcome = Outcome::kNotGranted;
      } else if (oldest == ReqKind::kRelease) {
        if (v.type == RespType::kInteger) out.outcome = Outcome::kReleased;
        if (v.type == RespType::kNull) out.outcome = Outcome::kNotReleased;
      }
      if (out.outcome == Outcome::kError && out.detail.empty()) out.detail = "reply of the wrong type";
      return DecodeStatus::kReply;
    }
    if (flavor == Flavor::kSemaphore) {
      // Acquire: the permit id = held; nil or ":<next expiry>" = not.
      if (oldest == ReqKind::kAcquire) {
        if (v.type == RespType::kBulk) {
          out.outcome = !v.text.empty() && v.text[0] == ':' ? Outcome::kNotGranted : Outcome::kGranted;
        }
        if (v.type == RespType::kNull) out.outcome = Outcome::kNotGranted;
      } else if (oldest == ReqKind::kRelease) {
        if (v.type == RespType::kInteger) {
          out.outcome = v.integer == 1 ? Outcome::kReleased : Outcome::kNotReleased;
        }
      }
      if (out.outcome == Outcome::kError && out.detail.empty()) out.detail = "reply of the wrong type";
      return DecodeStatus::kReply;
    }
    switch (oldest) {
      case ReqKind::kHandshake:
        if (v.type == RespType::kBulk) out.outcome = Outcome::kHandshakeOk;
        break;
      case ReqKind::kAcquire:
        if (v.type == RespType::kSimple && v.text == "OK") out.outcome = Outcome::kGranted;
        if (v.type == RespType::kNull) out.outcome = Outcome::kNotGranted;
        break;
      case ReqKind::kRelease:
        if (v.type == RespType::kInteger && v.integer == 1) out.outcome = Outcome::kReleased;
        if (v.type == RespType::kInteger && v.integer == 0) out.outcome = Outcome::kNotReleased;
        break;
      case ReqKind::kFence:
        if (v.type == RespType::kSimple && v.text == "PONG") out.outcome = Outcome::kPong;
        break;
      case ReqKind::kKeep:
        if (v.type == RespType::kInteger && v.integer == 1) out.outcome = Outcome::kKept;
        if (v.type == RespType::kInteger && v.integer == 0) out.outcome = Outcome::kNotReleased;
        break;
    }
    if (out.outcome == Outcome::kError && out.detail.empty()) out.detail = "reply of the wrong type";
    return DecodeStatus::kReply;
  }
  void on_handshake(std::uint32_t i, std::string_view sha) override {
    if (i == 0) sha_ = sha;
    if (i == 1) keep_sha_ = sha;
    shas_[i] = sha;
  }

 private:
  // Indexes of the scripts in shas_ (the handshake order).
  enum : std::uint32_t {
    kReadLock = 2, kReadUnlock, kWriteLock, kWriteUnlock, kSemAcquire, kSemRelease, kScripts
  };

  // EVALSHA sha 4 key {key}:owner:rwlock_timeout {key} channel lease owner owner:write
  void encode_rw(std::string& out, std::string_view sha, std::string_view owner,
                 std::string_view key, std::uint64_t lease_ms) {
    std::string braced = "{" + std::string(key) + "}";
    append_resp_array_header(out, 10);
    append_resp_bulk(out, std::string_view("EVALSHA"));
    append_resp_bulk(out, sha);
    append_resp_bulk(out, std::string_view("4"));
    append_resp_bulk(out, key);
    append_resp_bulk(out, braced + ":" + std::string(owner) + ":rwlock_timeout");
    append_resp_bulk(out, std::string_view(braced));
    append_resp_bulk(out, "redisson_rwlock:" + braced);
    append_resp_bulk(out, lease_ms);
    append_resp_bulk(out, owner);
    append_resp_bulk(out, std::string(owner) + ":write");
  }
  // EVALSHA sha 3 key {key}:timeout channel limit lease owner
  void encode_semaphore(std::string& out, std::string_view sha, std::string_view owner,
                        std::string_view key, std::uint32_t limit, std::uint64_t lease_ms) {
    const std::string braced = "{" + std::string(key) + "}";
    append_resp_array_header(out, 9);
    append_resp_bulk(out, std::string_view("EVALSHA"));
    append_resp_bulk(out, sha);
    append_resp_bulk(out, std::string_view("3"));
    append_resp_bulk(out, key);
    append_resp_bulk(out, braced + ":timeout");
    append_resp_bulk(out, "redisson_sc:" + braced);
    append_resp_bulk(out, static_cast<std::uint64_t>(limit));
    append_resp_bulk(out, lease_ms);
    append_resp_bulk(out, owner);
  }

  std::string sha_;       // of kRedisReleaseScript, from SCRIPT LOAD
  std::string keep_sha_;  // of kRedisKeepScript
  std::string shas_[kScripts];
};

}  // namespace

std::unique_ptr<Backend> make_backend(BackendKind kind) {
  if (kind == BackendKind::kRedis) return std::make_unique<RedisBackend>();
  return std::make_unique<LockdBackend>();
}

}  // namespace lockbench
