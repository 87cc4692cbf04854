#include "lockd/auth/authenticator.h"

namespace lockd::auth {

std::unique_ptr<Authenticator> Authenticator::create(AuthMode mode, AuthFiles files,
                                                     std::string& error) {
  std::unique_ptr<Authenticator> a(new Authenticator(mode, std::move(files)));
  if (!a->files_.credentials.empty()) {
    a->credentials_ = Credentials::load(a->files_.credentials, error);
    if (!a->credentials_) return nullptr;
  }
  if (!a->files_.acl.empty()) {
    a->acl_ = Acl::load(a->files_.acl, error);
    if (!a->acl_) return nullptr;
  }
  return a;
}

bool Authenticator::reload(std::string& error) {
  error.clear();
  if (!files_.credentials.empty()) {
    std::string e;
    if (auto c = Credentials::load(files_.credentials, e)) {
      credentials_ = std::move(c);
    } else {
      error = e;
    }
  }
  if (!files_.acl.empty()) {
    std::string e;
    if (auto a = Acl::load(files_.acl, e)) {
      acl_ = std::move(a);
    } else {
      error += (error.empty() ? "" : "; ") + e;
    }
  }
  return error.empty();
}

std::optional<std::string> Authenticator::by_credential(std::string_view credential) const {
  if (!credentials_) return std::nullopt;
  return credentials_->identify(credential);
}

std::optional<std::string> Authenticator::by_certificate(const tls::PeerCertificate& cert) const {
  if (mode_ != AuthMode::kCert && mode_ != AuthMode::kAny) return std::nullopt;
  if (!valid_identity(cert.subject_cn)) return std::nullopt;
  return cert.subject_cn;
}

bool Authenticator::allows(std::string_view identity, char verb, std::string_view key) const {
  return !acl_ || acl_->allows(identity, verb, key);
}

bool Authenticator::is_admin(std::string_view identity) const {
  return !acl_ || acl_->is_admin(identity);
}

}  // namespace lockd::auth
