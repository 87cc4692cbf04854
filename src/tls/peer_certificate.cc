#include "lockd/tls/peer_certificate.h"

#include <openssl/ssl.h>
#include <openssl/x509v3.h>

namespace lockd::tls {

bool PeerCertificate::names(std::string_view name) const {
  // SAN dNSName entries only, compared whole: the CN names a client
  // identity, never a member (protocol.md §11a), and `lockd-node-1` is not
  // `lockd-node-12`.
  if (name.empty()) return false;
  for (const std::string& d : dns_names) {
    if (d == name) return true;
  }
  return false;
}

std::optional<PeerCertificate> verified_peer_certificate(const ssl_st* ssl) {
  if (SSL_get_verify_result(ssl) != X509_V_OK) return std::nullopt;
  X509* cert = SSL_get0_peer_certificate(ssl);
  if (cert == nullptr) return std::nullopt;
  PeerCertificate pc;
  if (X509_NAME* subject = X509_get_subject_name(cert)) {
    const int i = X509_NAME_get_index_by_NID(subject, NID_commonName, -1);
    if (i >= 0) {
      const ASN1_STRING* s = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, i));
      pc.subject_cn.assign(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                           static_cast<std::size_t>(ASN1_STRING_length(s)));
    }
  }
  auto* sans = static_cast<GENERAL_NAMES*>(
      X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  if (sans != nullptr) {
    for (int i = 0; i < sk_GENERAL_NAME_num(sans); ++i) {
      const GENERAL_NAME* n = sk_GENERAL_NAME_value(sans, i);
      if (n->type != GEN_DNS) continue;
      const ASN1_STRING* s = n->d.dNSName;
      pc.dns_names.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                                static_cast<std::size_t>(ASN1_STRING_length(s)));
    }
    GENERAL_NAMES_free(sans);
  }
  return pc;
}

}  // namespace lockd::tls
