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

bool Authenticator::stage_reload(std::string& error) {
  staged_.reset();
  Staged s;
  if (!files_.credentials.empty()) {
    s.credentials = Credentials::load(files_.credentials, error);
    if (!s.credentials) return false;
  }
  if (!files_.acl.empty()) {
    s.acl = Acl::load(files_.acl, error);
    if (!s.acl) return false;
  }
  staged_ = std::move(s);
  return true;
}

void Authenticator::commit_reload() {
  if (!staged_) return;
  // A file that was not configured stays absent (it was never loaded).
  if (!files_.credentials.empty()) credentials_ = std::move(staged_->credentials);
  if (!files_.acl.empty()) acl_ = std::move(staged_->acl);
  staged_.reset();
}

bool Authenticator::reload(std::string& error) {
  if (!stage_reload(error)) return false;
  commit_reload();
  return true;
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
