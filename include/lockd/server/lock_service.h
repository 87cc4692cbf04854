// LockService: the seam between client connections and whatever decides
// lock requests.
//
// Single mode decides in LockServer itself, straight on its LockTable (the
// local service, today's code path, unchanged). Cluster mode plugs in the
// replicated service (src/cluster/replicated_lock_service.h), which turns
// requests into Raft proposals and answers once they are applied.
//
// The server keeps owning connections, framing, parsing and flushing; the
// service sees parsed requests, closed clients, and answers either at once
// (into the request's connection buffer) or later through ClientReplies.
//
// Runs on the reactor thread.
#pragma once

#include <string>

#include "lockd/common/time.h"
#include "lockd/locks/lock_table.h"
#include "lockd/proto/request.h"
#include "lockd/server/server_stats.h"
#include "lockd/server/watch_hub.h"

namespace lockd::server {

// How a service answers a client after the request's own callback
// (implemented by LockServer).
class ClientReplies {
 public:
  virtual ~ClientReplies() = default;
  // The output buffer for one reply of `kind` to `client` (the reply is
  // counted), or nullptr when that client is gone. Call reply_queued()
  // after appending.
  virtual std::string* reply_buffer(locks::ClientId client, ReplyKind kind) = 0;
  // Schedules the flush of `client`'s output (may close it on overflow).
  virtual void reply_queued(locks::ClientId client) = 0;
};

class LockService {
 public:
  virtual ~LockService() = default;
  // Called once by the server that will feed this service.
  virtual void attach(ClientReplies& replies) = 0;
  // The server's watch index (v1.3, §5c): the service tells it of every
  // changed key and the rev of each applied entry. Not owned.
  // `push` carries `X` notices to clients.
  virtual void attach_watches(WatchHub& /*hub*/, PushOutput& /*push*/) {}
  // One well-formed request from `client`, read at `now_ns`. Appends an
  // immediate reply to `out` (counted in `stats`) and returns true, or
  // returns false: the answer comes later through ClientReplies.
  virtual bool handle(locks::ClientId client, const proto::Request& req, TimeNs now_ns,
                      std::string& out, ServerStats& stats) = 0;
  // `client`'s connection closed: its waiting acquires leave without a
  // reply (§9). Must not reply to anyone from inside this call.
  virtual void client_closed(locks::ClientId client) = 0;
  // The table the admin views read.
  virtual const locks::LockTable& table() const = 0;
};

}  // namespace lockd::server
