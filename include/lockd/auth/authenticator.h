// Authenticator: who a client is and what it may do (protocol.md §11), for
// the client port and the admin API alike.
//
// It holds the --auth mode and the current credentials and ACL; a reload
// (SIGHUP) swaps in both files together, or neither when one does not load
// (stage_reload(), then commit_reload(), so the daemon can apply the TLS
// files in the same all-or-nothing step: protocol.md §11a).
// Requests decided after a reload see the new files; a connection keeps
// the identity it authenticated as (a removed credential does not log it
// out, exactly like a certificate that is rotated away).
//
// Runs on the reactor thread.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "lockd/auth/acl.h"
#include "lockd/auth/credentials.h"
#include "lockd/tls/peer_certificate.h"

namespace lockd::auth {

// Who a client must be (`--auth`).
enum class AuthMode {
  kNone,   // nobody is asked; `H` answers `H anonymous`
  kCert,   // the TLS client certificate's CN (a client without one fails the handshake)
  kToken,  // `H <credential>` checked against --credentials
  kAny,    // either a verified client certificate or `H`
};

struct AuthFiles {
  std::string credentials;  // "" = none
  std::string acl;          // "" = no ACL: an authenticated identity may do everything
};

class Authenticator {
 public:
  // Loads the files. null with `error` (one line) when one does not load.
  static std::unique_ptr<Authenticator> create(AuthMode mode, AuthFiles files, std::string& error);

  // Reads every file again into a staged set, replacing nothing. False
  // with `error` naming the first file that does not load (nothing staged).
  bool stage_reload(std::string& error);
  // Makes the staged files current (no-op when nothing is staged).
  void commit_reload();
  void drop_staged() { staged_.reset(); }
  // stage_reload() then commit_reload(): both files or neither.
  bool reload(std::string& error);

  AuthMode mode() const { return mode_; }
  // Whether clients must authenticate at all.
  bool required() const { return mode_ != AuthMode::kNone; }
  bool has_acl() const { return acl_.has_value(); }

  // The identity of `credential` (`H`, bearer token), or nullopt.
  std::optional<std::string> by_credential(std::string_view credential) const;
  // The identity a verified client certificate gives (its CN) in modes
  // cert and any; nullopt otherwise or when the CN is not a valid identity.
  std::optional<std::string> by_certificate(const tls::PeerCertificate& cert) const;
  // May `identity` use `verb` on `key`? Without an ACL, yes.
  bool allows(std::string_view identity, char verb, std::string_view key) const;
  // May `identity` use the mutating admin endpoints? Without an ACL, any
  // authenticated identity may (there is no policy to say otherwise).
  bool is_admin(std::string_view identity) const;

 private:
  Authenticator(AuthMode mode, AuthFiles files) : mode_(mode), files_(std::move(files)) {}

  AuthMode mode_;
  AuthFiles files_;
  std::optional<Credentials> credentials_;
  std::optional<Acl> acl_;
  // What stage_reload() read: the files' new contents, not yet in force.
  struct Staged {
    std::optional<Credentials> credentials;
    std::optional<Acl> acl;
  };
  std::optional<Staged> staged_;
};

}  // namespace lockd::auth
