#include "tls_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

namespace lockd::testing {

using namespace std::chrono;

namespace {

std::string ssl_errors() {
  std::string out;
  while (const unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    out += buf;
    out += ' ';
  }
  return out;
}

struct PkiDir {
  std::string path;
  PkiDir() {
    char tmpl[] = "/tmp/lockd-pki-XXXXXX";
    const char* d = ::mkdtemp(tmpl);
    if (d == nullptr) std::abort();
    path = d;
    const std::string cmd = std::string(LOCKD_TEST_PKI_SCRIPT) + " " + path + " >/dev/null";
    if (std::system(cmd.c_str()) != 0) {
      std::fprintf(stderr, "make-test-pki failed\n");
      std::abort();
    }
  }
  ~PkiDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

}  // namespace

const std::string& test_pki_dir() {
  static PkiDir dir;
  return dir.path;
}

std::string pki(const std::string& name) { return test_pki_dir() + "/" + name; }

TlsLineClient::TlsLineClient(std::uint16_t port, const TlsClientFiles& files) {
  // OpenSSL's socket BIO writes with write(2), not send(MSG_NOSIGNAL): a
  // write to a connection the server has just refused (a TLS 1.3 client
  // finishes its handshake before the server has checked its certificate)
  // would kill the test process with SIGPIPE, orphaning its lockd.
  static const bool sigpipe_ignored = [] {
    ::signal(SIGPIPE, SIG_IGN);
    return true;
  }();
  (void)sigpipe_ignored;
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    error_ = "connect failed";
    return;
  }
  int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  timeval tv{20, 0};
  ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ctx_ = SSL_CTX_new(TLS_client_method());
  SSL_CTX_set_min_proto_version(ctx_, TLS1_2_VERSION);
  SSL_CTX_load_verify_locations(ctx_, files.ca.c_str(), nullptr);
  SSL_CTX_set_verify(ctx_, SSL_VERIFY_PEER, nullptr);
  if (!files.cert.empty()) {
    SSL_CTX_use_certificate_chain_file(ctx_, files.cert.c_str());
    SSL_CTX_use_PrivateKey_file(ctx_, files.key.c_str(), SSL_FILETYPE_PEM);
  }
  SSL* ssl = SSL_new(ctx_);
  SSL_set_fd(ssl, fd_);
  if (SSL_connect(ssl) != 1) {
    error_ = "handshake failed: " + ssl_errors();
    SSL_free(ssl);
    return;
  }
  ssl_ = ssl;
}

TlsLineClient::~TlsLineClient() {
  if (ssl_ != nullptr) SSL_free(ssl_);
  if (ctx_ != nullptr) SSL_CTX_free(ctx_);
  if (fd_ >= 0) ::close(fd_);
}

std::string TlsLineClient::protocol() const { return ssl_ ? SSL_get_version(ssl_) : ""; }

std::string TlsLineClient::server_serial() const {
  if (ssl_ == nullptr) return "";
  X509* cert = SSL_get0_peer_certificate(ssl_);
  if (cert == nullptr) return "";
  BIGNUM* bn = ASN1_INTEGER_to_BN(X509_get0_serialNumber(cert), nullptr);
  char* hex = BN_bn2hex(bn);
  std::string out(hex);
  OPENSSL_free(hex);
  BN_free(bn);
  return out;
}

bool TlsLineClient::send(const std::string& bytes) {
  if (ssl_ == nullptr) {
    ADD_FAILURE() << "send on a connection whose handshake failed: " << error_;
    return false;
  }
  if (SSL_write(ssl_, bytes.data(), static_cast<int>(bytes.size())) == static_cast<int>(bytes.size())) {
    return true;
  }
  // The server closed it (EPIPE, a reset, an alert): what it sent before
  // is still readable; read_line() then reports the end.
  ERR_clear_error();
  return false;
}

std::optional<std::string> TlsLineClient::read_line(milliseconds timeout) {
  const auto deadline = steady_clock::now() + timeout;
  for (;;) {
    const auto nl = buf_.find('\n');
    if (nl != std::string::npos) {
      std::string line = buf_.substr(0, nl);
      buf_.erase(0, nl + 1);
      return line;
    }
    if (eof_ || ssl_ == nullptr) return std::nullopt;
    if (SSL_pending(ssl_) == 0) {
      const auto left = duration_cast<milliseconds>(deadline - steady_clock::now()).count();
      if (left <= 0) return std::nullopt;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left)) <= 0) return std::nullopt;
    }
    char tmp[4096];
    const int n = SSL_read(ssl_, tmp, sizeof tmp);
    if (n > 0) {
      buf_.append(tmp, static_cast<std::size_t>(n));
      continue;
    }
    const int e = SSL_get_error(ssl_, n);
    if (e == SSL_ERROR_WANT_READ) continue;  // a ticket or key update, no data
    ERR_clear_error();
    eof_ = true;  // close_notify, EOF, an alert (e.g. a refused certificate)
  }
}

std::string TlsLineClient::call(const std::string& line) {
  send(line + "\n");
  return read_line().value_or("<no reply>");
}

bool TlsLineClient::wait_closed(milliseconds timeout) {
  const auto deadline = steady_clock::now() + timeout;
  while (steady_clock::now() < deadline) {
    if (!read_line(duration_cast<milliseconds>(deadline - steady_clock::now()))) return eof_;
  }
  return eof_;
}

}  // namespace lockd::testing
