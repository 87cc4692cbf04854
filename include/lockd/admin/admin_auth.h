// Who may use the admin API (protocol.md §11): with authentication on,
// every endpoint but /healthz and /readyz needs an identity — a verified
// client certificate on the HTTPS port (--admin-tls) or `Authorization:
// Bearer <credential>` — and endpoints that change anything (membership,
// leader transfer, snapshots) need an identity the ACL marks admin.
//
// AdminServer::handle() applies admin_access_for() to every request before
// it routes it, so an endpoint added later is covered without a call of
// its own; authorize_admin() is the one function an endpoint calls if it
// ever needs a stricter level than its method and path give.
//
// Runs on the reactor thread.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "lockd/admin/views.h"
#include "lockd/auth/authenticator.h"

struct evhttp_request;

namespace lockd::admin {

// What a request needs.
enum class AdminAccess {
  kPublic,    // /healthz, /readyz: anyone
  kIdentity,  // reads: any authenticated identity
  kAdmin,     // changes (and the snapshot, which holds every token): an admin
};

// The level a request needs by its method and path: anything but GET and
// HEAD is kAdmin, as is /v1/snapshot.
//
// Hook for `POST /v1/cluster/init` (protocol.md §11a, "No identity is admin
// unless the ACL says so"): on a node that belongs to no formed group it
// needs only an authenticated identity (it can only form the group that
// node's own flags describe). The caller passes `in_formed_group` false
// for such a node; for every other path and node it changes nothing.
AdminAccess admin_access_for(int evhttp_method, std::string_view path,
                             bool in_formed_group = true);

// Whether a request changes anything (any method but GET and HEAD) or is
// `GET /v1/snapshot`: those must pass web_origin_refusal() (§11a, "The
// admin API cannot be driven by a web page"), with authentication on or off.
bool needs_web_checks(int evhttp_method, std::string_view path);

// Why a request that needs_web_checks() could come from a web page, or ""
// when it could not: its `Host` must name the admin address
// (`configured_host`, as --admin gave it), the local address the request
// came in on, a loopback address or `localhost`; an `Origin` header, when
// present, must name one of those too; and a request with a body (or any
// `Content-Type`) must say `Content-Type: application/json`. The reason is
// a metric label: "host", "origin" or "content_type".
std::string_view web_origin_refusal(evhttp_request* req, std::string_view configured_host);

// Whether `host` (a Host or Origin header's host, port already removed)
// names this node's admin API: `localhost`, a loopback IP, `configured_host`
// (case-insensitive, unless it is a wildcard), or `local_ip` (the address
// the connection came in on; "" when unknown).
bool host_names_admin(std::string_view host, std::string_view configured_host,
                      std::string_view local_ip);
// The host part of a Host header value: `[::1]:7071` -> `::1`,
// `127.0.0.1:7071` -> `127.0.0.1`, `localhost` -> `localhost`.
std::string_view host_of_authority(std::string_view authority);

// The identity of `req` (bearer credential, else a verified client
// certificate), nullopt when it has none. A bearer credential that is not
// accepted gives none, even if a certificate was shown.
std::optional<std::string> admin_identity(evhttp_request* req, const auth::Authenticator& auth);

// True when `req` may go on at `access`. Otherwise it has been answered:
// 401 `{"error":"unauthenticated"}` (with `WWW-Authenticate: Bearer`) or
// 403 `{"error":"forbidden"}`, and nothing was changed. `auth` null or not
// required: always true. `identity`, when given, receives the request's
// identity (nullopt with authentication off, or on a public endpoint).
//
// An identity is an admin only when the ACL file names it in `admins`:
// with authentication on and no --acl, nobody is (§11a), so the changing
// endpoints and the snapshot answer 403 to every identity.
bool authorize_admin(evhttp_request* req, const auth::Authenticator* auth, AdminAccess access,
                     std::optional<std::string>* identity = nullptr);

// What `identity` may see of `key` in `/v1/locks` and `/v1/locks/KEY`
// (§11a, "Tokens are shown only to whom they belong"). Without authentication, without an ACL, or for an admin: kFull. Else
// kHidden unless the ACL grants `identity` some verb (A, S, R, K, W) on
// `key`; kFull only if one of them is R.
KeyView key_view(const auth::Authenticator* auth, const std::optional<std::string>& identity,
                 std::string_view key);

}  // namespace lockd::admin
