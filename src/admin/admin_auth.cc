#include "lockd/admin/admin_auth.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/http.h>
#include <openssl/ssl.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>

#include "lockd/common/check.h"
#include "lockd/tls/peer_certificate.h"

namespace lockd::admin {

namespace {

void refuse(evhttp_request* req, int code, std::string_view error, std::string_view message) {
  evkeyvalq* headers = evhttp_request_get_output_headers(req);
  evhttp_add_header(headers, "Content-Type", "application/json");
  if (code == 401) evhttp_add_header(headers, "WWW-Authenticate", "Bearer");
  const std::string body = "{\"error\":\"" + std::string(error) + "\",\"message\":\"" +
                           std::string(message) + "\"}\n";
  evbuffer* buf = evbuffer_new();
  LOCKD_CHECK(buf != nullptr);
  evbuffer_add(buf, body.data(), body.size());
  evhttp_send_reply(req, code, nullptr, buf);
  evbuffer_free(buf);
}

}  // namespace

AdminAccess admin_access_for(int method, std::string_view path) {
  if (path == "/healthz" || path == "/readyz") return AdminAccess::kPublic;
  if (path == "/v1/snapshot" || path.starts_with("/v1/snapshot/")) return AdminAccess::kAdmin;
  if (method == EVHTTP_REQ_GET || method == EVHTTP_REQ_HEAD) return AdminAccess::kIdentity;
  return AdminAccess::kAdmin;
}

std::optional<std::string> admin_identity(evhttp_request* req, const auth::Authenticator& auth) {
  const char* header = evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization");
  if (header != nullptr) {
    // `Bearer <credential>`; the scheme is case-insensitive (RFC 7235
    // §2.1), and one or more spaces follow it.
    std::string_view h(header);
    constexpr std::string_view kBearer = "bearer";
    if (h.size() <= kBearer.size() || h[kBearer.size()] != ' ' ||
        !std::equal(kBearer.begin(), kBearer.end(), h.begin(),
                    [](char want, char got) { return want == std::tolower(static_cast<unsigned char>(got)); })) {
      return std::nullopt;
    }
    h.remove_prefix(kBearer.size());
    while (!h.empty() && h.front() == ' ') h.remove_prefix(1);
    while (!h.empty() && h.back() == ' ') h.remove_suffix(1);
    return auth.by_credential(h);
  }
  evhttp_connection* conn = evhttp_request_get_connection(req);
  if (conn == nullptr) return std::nullopt;
  bufferevent* bev = evhttp_connection_get_bufferevent(conn);
  if (bev == nullptr) return std::nullopt;
  SSL* ssl = bufferevent_openssl_get_ssl(bev);
  if (ssl == nullptr) return std::nullopt;
  const auto cert = tls::verified_peer_certificate(ssl);
  if (!cert) return std::nullopt;
  return auth.by_certificate(*cert);
}

bool authorize_admin(evhttp_request* req, const auth::Authenticator* auth, AdminAccess access) {
  if (auth == nullptr || !auth->required() || access == AdminAccess::kPublic) return true;
  const std::optional<std::string> identity = admin_identity(req, *auth);
  if (!identity) {
    refuse(req, 401, "unauthenticated",
           "a client certificate or Authorization: Bearer <credential> is required");
    return false;
  }
  if (access == AdminAccess::kAdmin && !auth->is_admin(*identity)) {
    spdlog::info("admin API: {} refused to '{}' (not an admin)", evhttp_request_get_uri(req),
                 *identity);
    refuse(req, 403, "forbidden", "this endpoint needs an admin identity");
    return false;
  }
  return true;
}

}  // namespace lockd::admin
