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
  void encode_fence(std::string& out, std::string_view fence_key) override {
    encode_lockd_release(out, kFenceToken, fence_key);
  }
  void encode_keep(std::string& out, std::uint64_t token, std::string_view, std::string_view key,
                   std::uint64_t lease_ms) override {
    encode_lockd_keep(out, token, key, lease_ms);
  }

  DecodeStatus decode(std::string_view in, std::size_t& consumed, ReqKind,
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
  // 0: the release script, 1: the keep script.
  std::uint32_t handshakes() const override { return 2; }

  void encode_handshake(std::string& out, std::uint32_t i) override {
    encode_resp_command(out, {"SCRIPT", "LOAD", i == 0 ? kRedisReleaseScript : kRedisKeepScript});
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

  DecodeStatus decode(std::string_view in, std::size_t& consumed, ReqKind oldest,
                      Reply& out) override {
    RespValue v;
    const DecodeStatus st = decode_resp(in, consumed, v);
    if (st != DecodeStatus::kReply) return st;
    out = Reply{};
    out.outcome = Outcome::kError;
    out.detail = v.text;
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
    (i == 0 ? sha_ : keep_sha_) = sha;
  }

 private:
  std::string sha_;       // of kRedisReleaseScript, from SCRIPT LOAD
  std::string keep_sha_;  // of kRedisKeepScript
};

}  // namespace

std::unique_ptr<Backend> make_backend(BackendKind kind) {
  if (kind == BackendKind::kRedis) return std::make_unique<RedisBackend>();
  return std::make_unique<LockdBackend>();
}

}  // namespace lockbench
