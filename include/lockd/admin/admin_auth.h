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
AdminAccess admin_access_for(int evhttp_method, std::string_view path);

// The identity of `req` (bearer credential, else a verified client
// certificate), nullopt when it has none. A bearer credential that is not
// accepted gives none, even if a certificate was shown.
std::optional<std::string> admin_identity(evhttp_request* req, const auth::Authenticator& auth);

// True when `req` may go on at `access`. Otherwise it has been answered:
// 401 `{"error":"unauthenticated"}` (with `WWW-Authenticate: Bearer`) or
// 403 `{"error":"forbidden"}`, and nothing was changed. `auth` null or not
// required: always true.
bool authorize_admin(evhttp_request* req, const auth::Authenticator* auth, AdminAccess access);

}  // namespace lockd::admin
