// PeerTransport: Raft messages between cluster members over TCP, on the
// daemon's one libevent loop (no threads). docs/cluster.md, "Peer
// transport", has the design and the bounds.
//
// Usage, from the loop that drives the Raft core:
//
//   PeerTransport t(base, self, members, [&](const raft::Message& m) { raft.step(m); });
//   if (!t.listen(err)) ...;            // binds our raft address, starts dialing peers
//   ...
//   for (auto& m : ready.messages) t.send(m);   // queued, never blocks
//   ...
//   t.flush();                          // once per loop turn: one write per peer
//
// One TCP connection per direction: each node dials every peer and sends
// its messages to that peer on the connection it dialed; connections it
// accepts only receive. The dialer opens with a hello handshake, the
// acceptor answers with its own (even when it refuses, so both sides log
// why) and the dialer's link counts as connected once the answer checks.
//
// Delivery is best effort, as Raft expects: a message to a peer whose link
// is down, or whose queue is over max_queued_bytes_per_peer, is dropped and
// counted. Messages are queued (bounded) while the link is connecting and
// written once the reply checks out.
//
// Runs on the loop thread; not thread-safe. on_message runs inside a read
// callback and may call send(), never the destructor.
#pragma once

#include <cstddef>
#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <sys/socket.h>

#include "lockd/cluster/lock_command.h"
#include "lockd/cluster/peer_handshake.h"
#include "lockd/cluster/peer_input.h"
#include "lockd/common/time.h"
#include "lockd/net/address.h"
#include "lockd/net/listener.h"
#include "lockd/net/resolver.h"
#include "lockd/raft/message.h"
#include "lockd/tls/tls_context.h"

struct event_base;

namespace lockd::cluster {

// Every bound of the transport; tests shrink them.
struct PeerTransportLimits {
  std::size_t max_queued_bytes_per_peer = 64u << 20;  // unsent bytes per outgoing link
  TimeNs reconnect_min_ns = 50 * kNsPerMs;   // first retry after a failure (before jitter)
  TimeNs reconnect_max_ns = 1000 * kNsPerMs; // backoff doubles up to this
  TimeNs handshake_timeout_ns = 2000 * kNsPerMs;  // connect + handshake, either side
  // A link whose socket accepts no byte for this long is closed and redialed,
  // so a long partition does not leave a queue of stale messages behind it.
  TimeNs write_stall_timeout_ns = 5000 * kNsPerMs;
  // Accepted connections that have not completed the handshake (with auth:
  // the confirm), in two pools so strangers cannot lock members out
  // (issue 21): those from the IP of a member's raft address, and the rest.
  // One more in a full pool is closed at once (refused: pending_full).
  std::size_t max_pending_from_members = 16;
  std::size_t max_pending_strangers = 32;
  // Handshaken connections per member. A member redialing while its old
  // connection lingers (half-open after a partition, until TCP keepalive
  // ends it) gets another; past this, with peer auth the oldest makes way
  // (every one proved it is the member), without it the newcomer is
  // refused (member_links_full), so a forger cannot push the member's
  // working link out.
  std::size_t max_links_per_member = 4;
  std::size_t read_chunk_bytes = 64u << 10;  // bytes read per readable event
  // One refusal warning per remote address per interval; the rest go to
  // debug, so a misconfigured node redialing does not flood the log.
  TimeNs refusal_warn_interval_ns = 60'000 * kNsPerMs;
};

// State of the link this node dialed to a peer (what it sends on).
enum class LinkState : std::uint8_t {
  kDown = 0,        // no connection; waiting out the backoff; sends are dropped
  kConnecting = 1,  // connecting or handshaking; sends are queued (bounded) until the reply
  kConnected = 2,   // handshake answered; sends are queued and flushed each turn
};
std::string_view to_string(LinkState s);

// Per-peer counters, for metrics and /v1/cluster. Counters only grow.
struct PeerStats {
  raft::NodeId id = raft::kNoNode;
  LinkState link = LinkState::kDown;   // our outgoing link to it
  bool inbound_connected = false;      // it has a handshaken connection to us
  std::uint64_t bytes_sent = 0;        // written to the socket (handshakes included)
  std::uint64_t bytes_received = 0;    // read from its connections (handshakes included)
  std::uint64_t messages_sent = 0;     // frames accepted into the queue
  std::uint64_t messages_received = 0; // checked messages handed to on_message
  std::uint64_t messages_dropped = 0;  // link down, queue full, or unsent when a link closed
  std::uint64_t decode_errors = 0;     // its connections closed for bad input
  std::uint64_t handshake_rejected = 0;  // handshakes with or from it refused
  std::uint64_t reconnects = 0;        // dial attempts after the first
  std::uint64_t resolve_failures = 0;  // lookups of its raft host name that failed
  std::uint64_t writes = 0;            // send() syscalls on its link
  std::uint64_t write_stalls = 0;      // links closed by write_stall_timeout_ns
  std::size_t queued_bytes = 0;        // unsent bytes now
  TimeNs last_contact_ns = 0;          // monotonic time of the last byte from it; 0 = never
};

// Refusals decided by the transport rather than by a handshake's content;
// lockd_peer_refused_total{reason=to_string(r)} next to the handshake's.
enum class TransportRefusal : std::uint8_t {
  kPendingFull = 0,    // its pool of not-yet-handshaken connections was full
  kHandshakeTimeout,   // no complete handshake (with auth: confirm) within handshake_timeout_ns
  kMemberLinksFull,    // the member already had max_links_per_member connections (no auth)
  kTls,                // --peer-tls: the TLS handshake failed (no or a bad certificate, plaintext)
  kCertName,           // --peer-tls: the certificate does not name the member the hello claims
  kTlsHandshakes,      // --peer-tls: PeerSecurity::max_tls_handshakes accepted handshakes in progress
};
constexpr std::size_t kTransportRefusalCount = 6;
std::string_view to_string(TransportRefusal r);

// Transport-wide counters, including input that names no known peer.
struct PeerTransportStats {
  std::uint64_t accepted = 0;            // inbound sockets accepted
  std::uint64_t inbound_refused = 0;     // closed at once: its pending pool was full
  std::uint64_t handshake_rejected = 0;  // refused handshakes (all peers and strangers)
  std::uint64_t handshake_timeouts = 0;  // connections closed for never handshaking
  // Refused handshakes (ours refused by a peer's reply, or a peer's we
  // refused) by reason: lockd_peer_refused_total{reason=to_string(e)}.
  std::array<std::uint64_t, kHandshakeErrorCount> refused_by_reason{};
  std::array<std::uint64_t, kTransportRefusalCount> refused_by_transport{};
  std::uint64_t decode_errors = 0;       // connections closed for bad input (all)
  std::uint64_t writes = 0;              // send() syscalls on all links
  std::uint64_t dropped_no_member = 0;   // messages to an id that is not (or no longer) a member
};

// How members prove who they are (docs/security.md, "Peer port").
struct PeerSecurity {
  // --peer-secret-file's secret (peer_secret.h); empty: no secret auth.
  std::string secret;
  // --peer-tls: mutual TLS on every peer connection, or null for plaintext.
  // `tls_server` accepts (requires a client certificate from --peer-tls-ca
  // or --tls-ca),
  // `tls_client` dials (shows ours, checks the acceptor's). Owned by the
  // daemon, which reloads them on SIGHUP; they outlive the transport.
  // A member's certificate names it: SAN DNS:lockd-node-<ID> only (the CN
  // is never read for member identity); `--peer-tls-ca` may name a CA of
  // the members' own.
  const tls::TlsContext* tls_server = nullptr;
  const tls::TlsContext* tls_client = nullptr;
  // --max-tls-handshakes: accepted TLS handshakes in progress at once; one
  // more connection is closed at once (refused: max_tls_handshakes).
  std::size_t max_tls_handshakes = 64;
};

// The name a member's certificate carries (interfaces.md "Security files").
std::string member_cert_name(raft::NodeId id);

// What this node says about itself in every handshake it sends, beyond
// its id and member addresses (peer_handshake.h).
struct PeerLocal {
  std::uint64_t cluster_id = 0;       // 0 until the group has formed
  // The log entry encodings this binary applies.
  EntryVersionRange entry_versions{kEntryVersionMin, kEntryVersionMax};
  std::string admin_addr;             // "" when admin is off
  DataState data_state = DataState::kEmpty;
  // Handshake tag 14: random per start of this process (0: not sent).
  std::uint64_t incarnation = 0;
  // What our configuration says of the node we talk to (handshake tag 11);
  // empty: nothing said.
  std::function<MemberStatus(raft::NodeId)> status_of;
  // Whether we ever heard from the node we talk to (tag 12), and the
  // voters of our latest configuration (tag 13); empty: nothing said.
  std::function<HeardReceiver(raft::NodeId)> heard_of;
  std::function<std::vector<raft::NodeId>()> voters;
  // Which voters of our configuration we ever heard from (tag 15); empty,
  // or returning nullopt: nothing said.
  std::function<std::optional<std::vector<raft::NodeId>>()> heard_voters;
};

class PeerTransport {
 public:
  // May move out of the message (Raft::step(Message&&) takes an append's
  // entries instead of copying them).
  using MessageFn = std::function<void(raft::Message&)>;
  using RandomFn = std::function<std::uint64_t()>;
  // A member's handshake passed (its hello on a connection it dialed, or
  // its reply on ours): what it says about itself.
  using HandshakeFn = std::function<void(const Handshake&)>;

  // `members` lists every member, `self` included (ids unique, nonzero:
  // the caller validated the config). `random` draws backoff jitter; by
  // default a generator seeded from the node id and the clock.
  PeerTransport(event_base* base, raft::NodeId self, std::vector<Member> members,
                MessageFn on_message, PeerTransportLimits limits = {}, RandomFn random = {});
  ~PeerTransport();
  PeerTransport(const PeerTransport&) = delete;
  PeerTransport& operator=(const PeerTransport&) = delete;

  // Binds our own raft address (SO_REUSEADDR), listens, and starts dialing
  // every peer. On failure returns false with `error` set.
  bool listen(std::string& error);
  // Same with a socket the caller already bound and made listen (tests:
  // bind port 0 first, then build the member list from the bound ports).
  // Takes ownership of `fd`.
  bool listen_on_fd(int fd, std::string& error);
  // The bound listening address (port 0 resolved); empty when not listening.
  net::Endpoint bound() const;

  // Queues `m` for m.to (from == self: checked). Never blocks; drops and
  // counts when the link is down, the queue full, or m.to is not a member
  // (any more: the configuration moved on).
  void send(const raft::Message& m);
  // The members from now on (membership changes, issue 20): `members`
  // lists every member, self included with the address it listens on.
  // New members are dialed (once listening); a member gone or moved has its
  // links closed and its connections refused from now on (handshakes check
  // the list); the others keep their links.
  void set_members(std::vector<Member> members);
  const std::vector<Member>& members() const { return members_; }
  // Writes every peer's pending bytes, one send() per peer, and frees
  // connections closed during this turn. Call once per loop turn.
  void flush();

  // What the next handshakes say about us; set before listen() and
  // whenever it changes (the cluster id once the group formed). Links
  // already up keep what they said.
  void set_local(PeerLocal local) { local_ = std::move(local); }
  const PeerLocal& local() const { return local_; }
  void set_on_handshake(HandshakeFn fn) { on_handshake_ = std::move(fn); }
  // An authenticated hello from an id outside our member list, accepted
  // only while our data dir is empty and peer authentication is on (issue
  // 37 case 1: a node grown from one, wiped, restarted with its flags). The
  // connection is closed before the call; nothing it sent reaches Raft.
  void set_on_stranger(HandshakeFn fn) { on_stranger_ = std::move(fn); }
  // How members authenticate; set before listen().
  void set_security(PeerSecurity security) { security_ = std::move(security); }

  raft::NodeId self() const { return self_; }
  // Stats of every peer (self excluded), in member order.
  std::vector<PeerStats> peer_stats() const;
  // Stats of one peer; nullptr for self or a non-member.
  const PeerStats* peer_stats(raft::NodeId id) const;
  const PeerTransportStats& stats() const { return stats_; }
  // Accepted connections alive now (handshaken or not).
  std::size_t inbound_connections() const;

 private:
  struct Peer;
  struct Socket;

  Peer* find_peer(raft::NodeId id);
  std::unique_ptr<Peer> make_peer(const Member& m);
  void dial(Peer& p);
  void on_dial_writable(Peer& p);
  void on_dial_readable(Peer& p);
  void write_link(Peer& p);
  void close_link(Peer& p);
  void on_accept(int fd);
  void on_inbound_readable(Socket& s);
  void close_inbound(Socket& s);
  void discard(std::unique_ptr<Socket> s);
  void warn_rejected(const std::string& address, Peer* p, std::string_view side,
                     const std::string& what);
  void refuse(TransportRefusal r, const std::string& address, Peer* p, const std::string& what);
  // The accepted connection `s` is now `p`'s link: messages may flow.
  bool adopt_inbound(Socket& s, Peer& p);
  void on_stranger_hello(Socket& s);
  std::optional<PeerInputAuth> auth(const Nonce& own_nonce) const;
  bool from_member_host(const std::string& ip);
  // p.addr from the resolver's answer for its raft host when kReady.
  // Never blocks.
  net::Resolver::State resolve_member(Peer& p);
  void on_resolved(const std::string& host);
  // TLS: plaintext read from `s` (through its session when it has one);
  // false when the connection must close (`why` set for a TLS failure).
  bool read_plain(Socket& s, std::string_view cipher, std::string& plain, std::string& why);
  // Accepted `s`: sends `plain` (through TLS when on) and whatever the
  // session has to say; false when the connection broke.
  bool send_inbound(Socket& s, std::string_view plain);
  // After a TLS failure: sends the alert the session queued, best effort.
  void send_alert(Socket& s);
  HandshakeExpect expect(HandshakeKind kind, raft::NodeId peer) const;
  Handshake own_handshake(HandshakeKind kind, raft::NodeId receiver) const;
  std::optional<Member> member(raft::NodeId id) const;
  TimeNs backoff_ns(Peer& p);

  static constexpr TimeNs kNeverNs = std::numeric_limits<TimeNs>::min();


  event_base* base_;
  raft::NodeId self_;
  std::vector<Member> members_;
  PeerLocal local_;
  PeerSecurity security_;
  std::size_t pending_from_members_ = 0;  // accepted, not handshaken, from a member's IP
  std::size_t pending_strangers_ = 0;     // accepted, not handshaken, from anywhere else
  MessageFn on_message_;
  HandshakeFn on_handshake_;
  HandshakeFn on_stranger_;
  PeerTransportLimits limits_;
  RandomFn random_;
  std::unique_ptr<net::Resolver> resolver_;  // member names, off the loop
  net::Endpoint self_raft_;
  sockaddr_storage src_{};  // our raft host, port 0: the source of every dial
  socklen_t src_len_ = 0;   // 0: not resolved yet
  std::unique_ptr<net::Listener> listener_;  // pauses on EMFILE (net/listener.h)
  std::vector<std::unique_ptr<Peer>> peers_;
  std::vector<std::unique_ptr<Socket>> inbound_;
  std::vector<std::unique_ptr<Socket>> graveyard_;  // closed this turn; freed in flush()
  std::vector<std::unique_ptr<Peer>> peer_graveyard_;  // members gone this turn; freed in flush()
  PeerTransportStats stats_;
  std::map<std::string, TimeNs> last_warn_ns_;  // remote address -> last refusal warning
  std::vector<char> read_buf_;  // one read's bytes; PeerInput copies what it keeps
};

}  // namespace lockd::cluster
