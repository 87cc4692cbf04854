// TlsContext: an OpenSSL SSL_CTX built from certificate, key and CA files,
// reloadable in place (SIGHUP) without touching the sessions made from it.
//
// Why a wrapper: every TLS port of lockd (client, admin, raft) and every
// TLS client (lockctl, the C++ client) needs the same rules — TLS 1.2 or
// later, the files read and checked together, a peer certificate asked
// for, required or ignored — and the same reload: a new SSL_CTX is built
// from the files and swapped in only if all of it loads, so a bad file
// leaves the old certificate serving. Sessions made earlier keep a
// reference to the context they were made from (OpenSSL counts them), so
// a reload never drops a connection.
//
// Not thread-safe; lockd uses it on the reactor thread.
#pragma once

#include <memory>
#include <string>

struct ssl_ctx_st;

namespace lockd::tls {

// Which end of the handshake sessions made from the context play.
enum class TlsRole {
  kServer,  // accepts: must have a certificate and key
  kClient,  // dials: a certificate and key are optional (client certificates)
};

// Whether the other side must show a certificate that chains to `ca`.
enum class PeerCertPolicy {
  kNone,      // not asked for (a server without client authentication)
  kOptional,  // asked for; verified when shown, the handshake goes on without one
  kRequired,  // asked for; no certificate, or one that does not verify, fails the handshake
};

struct TlsOptions {
  TlsRole role = TlsRole::kServer;
  std::string cert_file;  // PEM chain, leaf first ("" on a client without one)
  std::string key_file;   // PEM private key of cert_file
  std::string ca_file;    // PEM CA bundle that peers must chain to ("" = system default for clients)
  PeerCertPolicy peer = PeerCertPolicy::kNone;
};

class TlsContext {
 public:
  // Reads the files. Returns null with `error` set (one line naming the
  // file and OpenSSL's reason) when any of them does not load.
  static std::unique_ptr<TlsContext> create(const TlsOptions& options, std::string& error);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  // Reads the same files again. On success the new certificate, key and
  // CA serve every session made from now on; on failure the old ones stay
  // and `error` says why.
  bool reload(std::string& error);
  // reload() in two steps, so that several files can be applied together
  // or not at all (SIGHUP, protocol.md §11a): stage_reload() reads the
  // files into a new context kept aside (false with `error`: nothing
  // staged); commit_reload() makes the staged one current; drop_staged()
  // forgets it.
  bool stage_reload(std::string& error);
  void commit_reload();
  void drop_staged();

  // The current SSL_CTX (owned; valid until the next successful reload()).
  ssl_ctx_st* native() const { return ctx_; }
  const TlsOptions& options() const { return options_; }
  // How many successful reloads so far (0 after create()).
  std::uint64_t reloads() const { return reloads_; }

 private:
  explicit TlsContext(TlsOptions options) : options_(std::move(options)) {}

  TlsOptions options_;
  ssl_ctx_st* ctx_ = nullptr;
  ssl_ctx_st* staged_ = nullptr;  // read by stage_reload(), not yet current
  std::uint64_t reloads_ = 0;
};

// OpenSSL's queued errors as one line (and clears the queue); `fallback`
// when there are none.
std::string openssl_errors(std::string_view fallback);

}  // namespace lockd::tls
