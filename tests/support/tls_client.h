// Test support for TLS: a throw-away PKI made with the openssl CLI
// (make-test-pki) and a blocking TLS line client for real lockd processes.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

struct ssl_st;
struct ssl_ctx_st;

namespace lockd::testing {

// The directory of certificates make-test-pki wrote (made once per test
// process, removed at exit). See that script for the file names.
const std::string& test_pki_dir();
// test_pki_dir() + "/" + name.
std::string pki(const std::string& name);

// What a TlsLineClient shows the server.
struct TlsClientFiles {
  std::string ca = pki("ca.pem");  // the CA the server's certificate must chain to
  std::string cert;                // client certificate ("" = none)
  std::string key;
};

// A blocking line client over TLS 1.2+ (verifies the server against
// `files.ca`; does not check its name).
class TlsLineClient {
 public:
  TlsLineClient(std::uint16_t port, const TlsClientFiles& files);
  ~TlsLineClient();
  TlsLineClient(const TlsLineClient&) = delete;
  TlsLineClient& operator=(const TlsLineClient&) = delete;

  // Whether the handshake completed. TLS 1.3 servers refuse a client
  // certificate after the client thinks the handshake is done, so this can
  // be true for a refused certificate: alive() tells.
  bool handshake_ok() const { return ssl_ != nullptr; }
  const std::string& error() const { return error_; }
  // The negotiated protocol, e.g. "TLSv1.3".
  std::string protocol() const;
  // The serial number (hex) of the certificate the server showed.
  std::string server_serial() const;
  // False when the server had already closed the connection (e.g. it
  // refused the certificate after a TLS 1.3 client's Finished).
  bool send(const std::string& bytes);
  std::optional<std::string> read_line(std::chrono::milliseconds timeout =
                                           std::chrono::milliseconds(20'000));
  std::string call(const std::string& line);
  // True if the server closed the connection (EOF or a fatal alert)
  // within `timeout`, with nothing but already-buffered lines before it.
  bool wait_closed(std::chrono::milliseconds timeout);

 private:
  int fd_ = -1;
  ssl_ctx_st* ctx_ = nullptr;
  ssl_st* ssl_ = nullptr;
  std::string buf_;
  std::string error_;
  bool eof_ = false;
};

}  // namespace lockd::testing
