// TCP keepalive on an accepted client socket (protocol.md §11a), so the
// connection of a host that vanished (power loss, a cable pulled, a NAT
// that forgot the flow) is reaped instead of holding its descriptor, its
// connection slot and its waiters forever.
//
// The kernel's defaults (2 h idle, then 9 probes 75 s apart) would keep
// such a connection for over two hours; these values reap it in about two
// minutes while costing an idle healthy connection one empty segment a
// minute. Documented in docs/operations.md ("Connections").
#pragma once

namespace lockd::net {

// Seconds of silence before the first probe.
inline constexpr int kKeepaliveIdleS = 60;
// Seconds between unanswered probes.
inline constexpr int kKeepaliveIntervalS = 10;
// Unanswered probes after which the kernel resets the connection.
inline constexpr int kKeepaliveProbes = 6;

// Turns keepalive on for `fd` with the values above. Best effort: a
// failure leaves the socket as it was (it still works, it is only reaped
// later), so nothing is reported.
void enable_keepalive(int fd);

}  // namespace lockd::net
