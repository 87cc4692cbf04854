// A client TLS session over memory buffers (OpenSSL memory BIOs), private
// to the client library: the Connection does the socket I/O, this only
// turns bytes into records and back. One mutex inside, because a
// Connection's reader and its writers run on different threads and an SSL
// object must not be entered twice at once. Records must leave in the
// order they were made: the Connection sends what encrypt() and pending()
// return while holding its one write lock.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "lockd/client/connection.h"
#include "lockd/client/status.h"

struct ssl_st;
struct ssl_ctx_st;
struct bio_st;

namespace lockd::client {

class TlsStream {
 public:
  // A session that verifies the server against `files.ca_file` and its
  // certificate's name against `files.server_name`, or else `host` (a DNS
  // name or an IP address); shows `files.cert_file` if given.
  // kInvalidArgument when a file does not load.
  static Result<std::unique_ptr<TlsStream>> client(const TlsFiles& files, const std::string& host);
  ~TlsStream();
  TlsStream(const TlsStream&) = delete;
  TlsStream& operator=(const TlsStream&) = delete;

  // Feeds received bytes and advances the handshake; appends to `out` what
  // to send. True when it has completed; an error Status when it failed
  // (another CA, another name, not TLS).
  Result<bool> handshake(std::string_view in, std::string& out);
  // Appends `plain` as records (after any made earlier and not yet taken).
  bool encrypt(std::string_view plain, std::string& out);
  // Feeds received bytes; appends the plaintext they complete. False with
  // `error` on an alert or a bad record; `closed` once close_notify came.
  bool decrypt(std::string_view cipher, std::string& plain, bool& closed, std::string& error);
  // True if decrypting made records to send (a key update's answer).
  bool has_pending() const;
  void take_pending(std::string& out);

 private:
  TlsStream() = default;
  void drain_locked(std::string& out);

  mutable std::mutex mu_;
  ssl_ctx_st* ctx_ = nullptr;
  ssl_st* ssl_ = nullptr;
  bio_st* in_ = nullptr;   // owned by ssl_
  bio_st* out_ = nullptr;  // owned by ssl_
};

}  // namespace lockd::client
