// PeerCertificate: the names of the certificate the other side of a TLS
// session showed, once OpenSSL has verified it against our CA.
//
// Client identities are the subject CN (interfaces.md "Security files");
// members are named by the SAN `DNS:lockd-node-<ID>` only (v1.3: the CN is
// never read for member identity, so a client certificate whose CN is
// `lockd-node-2` names no member).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

struct ssl_st;

namespace lockd::tls {

struct PeerCertificate {
  std::string subject_cn;              // "" when the subject has no CN
  std::vector<std::string> dns_names;  // the SAN dNSName entries

  // True if `name` is one of the DNS SANs, byte for byte (never the CN,
  // never a prefix or a wildcard).
  bool names(std::string_view name) const;
};

// The verified certificate of `ssl`'s peer, or nullopt when it showed none
// or it did not verify (only possible with PeerCertPolicy::kOptional off the
// handshake's failure path, or before the handshake completed).
std::optional<PeerCertificate> verified_peer_certificate(const ssl_st* ssl);

}  // namespace lockd::tls
