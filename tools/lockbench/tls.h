// TLS for lockbench's connections (--tls-ca, --tls-cert/--tls-key,
// --tls-server-name): the same for the lockd and the Redis backends.
//
// The handshake runs on the still-blocking socket right after connect (set-up
// stays out of the measured interval, as the blocking connect does); after
// it the socket turns nonblocking and the runner calls SSL_read/SSL_write on
// it directly, one read() and one write() per event as for plaintext.
// Plaintext connections never touch this file's code.
#pragma once

#include <memory>
#include <string>

struct ssl_st;
struct ssl_ctx_st;

namespace lockbench {

struct TlsOptions {
  std::string ca;           // the CA the server's certificate must chain to ("" = TLS off)
  std::string cert;         // client certificate (optional, with key)
  std::string key;
  std::string server_name;  // the name the certificate must show ("" = the host dialed)
  bool enabled() const { return !ca.empty(); }
};

class TlsClient {
 public:
  // Loads the files; nullptr and `error` when one cannot be used.
  static std::unique_ptr<TlsClient> make(const TlsOptions& opts, std::string& error);
  ~TlsClient();
  TlsClient(const TlsClient&) = delete;
  TlsClient& operator=(const TlsClient&) = delete;

  // Runs the handshake on `fd` (connected, blocking; its SO_RCVTIMEO bounds
  // it), requiring the certificate to name --tls-server-name or else
  // `host` (a DNS name, sent as SNI too, or an IP literal). Returns the
  // session, or nullptr and `error`.
  ssl_st* handshake(int fd, const std::string& host, std::string& error) const;

 private:
  TlsClient(ssl_ctx_st* ctx, std::string server_name)
      : ctx_(ctx), server_name_(std::move(server_name)) {}
  ssl_ctx_st* ctx_;
  std::string server_name_;
};

// OpenSSL's error queue as one line after `what` (and clears it).
std::string tls_error(const std::string& what);

// Empties the thread's OpenSSL error queue before an SSL_read/SSL_write
// (SSL_get_error needs it empty), walking it only when it holds something:
// ERR_clear_error() on every call costs ~2% of a TLS process's CPU.
void tls_clear_errors();

}  // namespace lockbench
