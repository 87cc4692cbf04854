// Event priorities of the daemon's loop: the work of clients that are in
// (requests, replies, peers, timers) runs before the bytes of a client
// whose TLS handshake is still in progress (protocol.md §11a: a flood of
// ClientHellos must not delay lock replies).
//
// libevent runs, in each pass, only the most urgent non-empty queue of
// ready events. The daemon's base has three (use_priorities()), and an
// event gets the middle one unless it says otherwise, so every event but
// a handshake's keeps its order. A client connection whose TLS handshake
// is in progress reads at kPriorityHandshake (Connection) until it is
// done; its crypto runs on the HandshakeWorker. docs/architecture.md
// ("TLS handshakes off the loop, and priorities").
#pragma once

struct event_base;

namespace lockd::net {

inline constexpr int kPriorities = 3;
inline constexpr int kPriorityNormal = 1;  // libevent's default with kPriorities queues
inline constexpr int kPriorityHandshake = 2;

// Gives `base` the queues above. Call before any event is added.
void use_priorities(event_base* base);
// Whether `base` has them (a base made elsewhere, e.g. by a test, does not:
// its events all share one queue).
bool has_priorities(const event_base* base);

}  // namespace lockd::net
