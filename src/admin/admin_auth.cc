#include "lockd/admin/admin_auth.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/http.h>
#include <openssl/ssl.h>
#include <spdlog/spdlog.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <cstring>

#include "lockd/common/check.h"
#include "lockd/net/address.h"
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

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool is_wildcard(std::string_view host) {
  return host.empty() || host == "0.0.0.0" || host == "::" || host == "*";
}

// 127.0.0.0/8, ::1, and ::ffff:127.0.0.0/104.
bool is_loopback_ip(const std::string& host) {
  in_addr v4{};
  if (::inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (::inet_pton(AF_INET6, host.c_str(), &v6) != 1) return false;
  if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
  return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
}

// The same IP written two ways ("::ffff:10.0.0.1" and "10.0.0.1" are not
// folded: a listener sees one form only).
bool same_ip(const std::string& a, const std::string& b) {
  in6_addr x{}, y{};
  if (::inet_pton(AF_INET6, a.c_str(), &x) == 1 && ::inet_pton(AF_INET6, b.c_str(), &y) == 1) {
    return std::memcmp(&x, &y, sizeof x) == 0;
  }
  in_addr p{}, q{};
  return ::inet_pton(AF_INET, a.c_str(), &p) == 1 && ::inet_pton(AF_INET, b.c_str(), &q) == 1 &&
         p.s_addr == q.s_addr;
}

// The address `req` came in on, "" when unknown.
std::string local_ip_of(evhttp_request* req) {
  evhttp_connection* conn = evhttp_request_get_connection(req);
  if (conn == nullptr) return "";
  bufferevent* bev = evhttp_connection_get_bufferevent(conn);
  if (bev == nullptr) return "";
  const int fd = bufferevent_getfd(bev);
  if (fd < 0) return "";
  return net::local_endpoint(fd).host;
}

// `application/json`, any case, with or without parameters.
bool is_json_media_type(std::string_view v) {
  const std::size_t semi = v.find(';');
  return iequals(trim(v.substr(0, semi)), "application/json");
}

}  // namespace

AdminAccess admin_access_for(int method, std::string_view path, bool in_formed_group) {
  if (path == "/healthz" || path == "/readyz") return AdminAccess::kPublic;
  if (path == "/v1/snapshot" || path.starts_with("/v1/snapshot/")) return AdminAccess::kAdmin;
  if (method == EVHTTP_REQ_GET || method == EVHTTP_REQ_HEAD) return AdminAccess::kIdentity;
  // §11a's one exception: forming a group from a node that is in none.
  if (path == "/v1/cluster/init" && method == EVHTTP_REQ_POST && !in_formed_group) {
    return AdminAccess::kIdentity;
  }
  return AdminAccess::kAdmin;
}

bool needs_web_checks(int method, std::string_view path) {
  if (path == "/v1/snapshot" || path.starts_with("/v1/snapshot/")) return true;
  return method != EVHTTP_REQ_GET && method != EVHTTP_REQ_HEAD;
}

std::string_view host_of_authority(std::string_view a) {
  a = trim(a);
  if (a.starts_with('[')) {
    const std::size_t close = a.find(']');
    return close == std::string_view::npos ? std::string_view{} : a.substr(1, close - 1);
  }
  const std::size_t colon = a.find(':');
  if (colon != std::string_view::npos && a.find(':', colon + 1) == std::string_view::npos) {
    return a.substr(0, colon);
  }
  return a;  // no port, or a bare IPv6 literal (not valid in Host, compared as is)
}

bool host_names_admin(std::string_view host, std::string_view configured_host,
                      std::string_view local_ip) {
  if (host.empty()) return false;
  if (iequals(host, "localhost")) return true;
  const std::string h(host);
  if (is_loopback_ip(h)) return true;
  if (!is_wildcard(configured_host) &&
      (iequals(host, configured_host) || same_ip(h, std::string(configured_host)))) {
    return true;
  }
  return !local_ip.empty() && same_ip(h, std::string(local_ip));
}

std::string_view web_origin_refusal(evhttp_request* req, std::string_view configured_host) {
  const evkeyvalq* in = evhttp_request_get_input_headers(req);
  const std::string local_ip = local_ip_of(req);
  const char* host = evhttp_find_header(in, "Host");
  if (host == nullptr || !host_names_admin(host_of_authority(host), configured_host, local_ip)) {
    return "host";
  }
  // A browser names the page that sent a request in Origin (also a POST
  // with no body, which needs no Content-Type): it must be the admin API's
  // own. Command-line clients send none.
  if (const char* origin = evhttp_find_header(in, "Origin"); origin != nullptr) {
    std::string_view o = trim(origin);
    const std::size_t scheme = o.find("://");
    if (scheme == std::string_view::npos) return "origin";  // "null" included
    o.remove_prefix(scheme + 3);
    o = o.substr(0, o.find('/'));
    if (!host_names_admin(host_of_authority(o), configured_host, local_ip)) return "origin";
  }
  const char* type = evhttp_find_header(in, "Content-Type");
  const bool has_body = evbuffer_get_length(evhttp_request_get_input_buffer(req)) > 0;
  if ((has_body || type != nullptr) && (type == nullptr || !is_json_media_type(type))) {
    return "content_type";
  }
  return {};
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

bool authorize_admin(evhttp_request* req, const auth::Authenticator* auth, AdminAccess access,
                     std::optional<std::string>* who) {
  if (auth == nullptr || !auth->required() || access == AdminAccess::kPublic) return true;
  const std::optional<std::string> identity = admin_identity(req, *auth);
  if (!identity) {
    refuse(req, 401, "unauthenticated",
           "a client certificate or Authorization: Bearer <credential> is required");
    return false;
  }
  if (who != nullptr) *who = identity;
  // Admin only where an ACL file says so: no --acl, no admin (§11a).
  if (access == AdminAccess::kAdmin && !(auth->has_acl() && auth->is_admin(*identity))) {
    spdlog::info("admin API: {} refused to '{}' (not an admin)", evhttp_request_get_uri(req),
                 *identity);
    refuse(req, 403, "forbidden",
           auth->has_acl() ? "this endpoint needs an admin identity (the ACL's admins)"
                           : "this endpoint needs an admin identity, and without --acl there is "
                             "none");
    return false;
  }
  return true;
}

KeyView key_view(const auth::Authenticator* auth, const std::optional<std::string>& identity,
                 std::string_view key) {
  if (auth == nullptr || !auth->required() || !auth->has_acl()) return KeyView::kFull;
  if (!identity) return KeyView::kHidden;
  if (auth->is_admin(*identity)) return KeyView::kFull;
  if (auth->allows(*identity, 'R', key)) return KeyView::kFull;
  for (const char verb : {'A', 'S', 'K', 'W'}) {
    if (auth->allows(*identity, verb, key)) return KeyView::kNoToken;
  }
  return KeyView::kHidden;
}

}  // namespace lockd::admin
