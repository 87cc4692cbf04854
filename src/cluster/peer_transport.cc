// PeerTransport: see peer_transport.h and docs/cluster.md "Peer transport".
#include "lockd/cluster/peer_transport.h"

#include <event2/event.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <limits>
#include <memory>
#include <random>
#include <string>

#include "lockd/cluster/lock_command.h"
#include "lockd/cluster/peer_input.h"
#include "lockd/common/check.h"
#include "lockd/net/clock.h"
#include "lockd/raft/codec.h"
#include "lockd/tls/tls_session.h"

namespace lockd::cluster {
namespace {

// Listen backlog: members are few; strangers beyond this wait or fail.
constexpr int kBacklog = 128;
// Once the written prefix of an output buffer is this large, drop it.
constexpr std::size_t kCompactBytes = 64 * 1024;

timeval to_timeval(TimeNs ns) {
  if (ns < 0) ns = 0;
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ns / 1'000'000'000);
  tv.tv_usec = static_cast<suseconds_t>((ns % 1'000'000'000) / 1000);
  return tv;
}

void set_nodelay(int fd) {
  // Each flush is one write of whole frames; Nagle would only delay it.
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// The IP a connection comes from ("" when unknown), for refusal warnings.
std::string remote_host(int fd) { return net::peer_endpoint(fd).host; }

bool is_wildcard(const std::string& host) {
  return host.empty() || host == "0.0.0.0" || host == "::" || host == "*";
}

}  // namespace

std::string member_cert_name(raft::NodeId id) { return "lockd-node-" + std::to_string(id); }

std::string_view to_string(TransportRefusal r) {
  switch (r) {
    case TransportRefusal::kPendingFull: return "pending_full";
    case TransportRefusal::kHandshakeTimeout: return "handshake_timeout";
    case TransportRefusal::kMemberLinksFull: return "member_links_full";
    case TransportRefusal::kTls: return "tls";
    case TransportRefusal::kCertName: return "cert_name";
    case TransportRefusal::kTlsHandshakes: return "max_tls_handshakes";
  }
  return "unknown";
}

std::string_view to_string(LinkState s) {
  switch (s) {
    case LinkState::kDown: return "down";
    case LinkState::kConnecting: return "connecting";
    case LinkState::kConnected: return "connected";
  }
  return "unknown";
}

// One TCP socket with its events: a link we dialed (peer set from the
// start) or a connection we accepted (peer set once it handshakes).
// Closing deletes the events and closes the fd at once, but the object
// lives on in the graveyard until flush(), because it may be closed
// inside its own callback (STYLE §7).
struct PeerTransport::Socket {
  Socket(PeerTransport& o, int f, bool d, HandshakeExpect expect, const Nonce& own_nonce)
      : owner(o), fd(f), dialed(d), nonce(own_nonce), input(std::move(expect), o.auth(own_nonce)) {}
  ~Socket() {
    shut();
    for (event* ev : {read_ev, write_ev, timer_ev}) {
      if (ev != nullptr) event_free(ev);
    }
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  void shut() {
    for (event* ev : {read_ev, write_ev, timer_ev}) {
      if (ev != nullptr) event_del(ev);
    }
    if (fd >= 0) ::close(fd);
    fd = -1;
  }

  PeerTransport& owner;
  int fd;
  std::string remote;  // the peer's IP address, for refusal warnings
  bool dialed;      // we dialed it (send side) or accepted it (receive side)
  Peer* peer = nullptr;
  event* read_ev = nullptr;
  event* write_ev = nullptr;   // dialed: connect completion, then partial writes
  event* timer_ev = nullptr;   // handshake timeout, then (dialed) write stall
  // Accepted: counted in a pending pool until adopted as a member's link.
  bool pending = false;
  bool member_pool = false;  // which pool: from a member's IP, or a stranger's
  Nonce nonce{};             // the nonce this side sent (peer-secret auth)
  std::uint64_t hello_cluster_id = 0;  // dialed: the cluster id our hello said (the confirm repeats it)
  // --peer-tls: the session, and ciphertext the socket has not taken yet.
  std::unique_ptr<tls::TlsSession> tls;
  std::string wire;
  std::size_t wire_off = 0;
  bool inbound_write_armed = false;  // accepted: write_ev waits for room for `wire`
  // Accepted from a non-member for its status words only (accept_strangers):
  // closed once its hello is authenticated, never adopted as a link.
  bool stranger = false;
  PeerInput input;
};

// Everything about one other member: its address, our dialed link with
// its output queue, its handshaken inbound connection, and its stats.
struct PeerTransport::Peer {
  ~Peer() {
    if (redial_ev != nullptr) event_free(redial_ev);
  }

  PeerTransport* owner = nullptr;
  Member member;
  PeerStats stats;
  sockaddr_storage addr{};  // its raft address as last resolved (net::Resolver)
  socklen_t addr_len = 0;  // 0: not resolved yet
  bool awaiting_name = false;  // dial() waits for a name lookup (on_resolved)

  std::unique_ptr<Socket> link;  // the connection we dialed; null while down
  bool tcp_connected = false;    // connect() completed: writes may go out
  bool write_armed = false;      // a partial write is waiting for the socket
  // Output queue: out[out_off..] is unsent. Stream positions count every
  // byte ever queued on this link so frame ends survive compaction.
  std::string out;
  std::size_t out_off = 0;
  std::uint64_t out_base = 0;          // stream position of out[0]
  std::deque<std::uint64_t> frame_ends;  // stream positions where queued messages end
  std::uint64_t hello_end = 0;  // stream position where this link's hello ends
  event* redial_ev = nullptr;
  int failures = 0;  // consecutive failed dials: the backoff exponent
  bool dialed_once = false;
  std::vector<Socket*> inbound;  // its handshaken connections to us, oldest first

  std::size_t unsent() const { return out.size() - out_off; }
};

PeerTransport::PeerTransport(event_base* base, raft::NodeId self, std::vector<Member> members,
                             MessageFn on_message, PeerTransportLimits limits, RandomFn random)
    : base_(base),
      self_(self),
      members_(std::move(members)),
      on_message_(std::move(on_message)),
      limits_(limits),
      random_(std::move(random)),
      resolver_(std::make_unique<net::Resolver>(
          base, [this](const std::string& host) { on_resolved(host); })),
      read_buf_(limits.read_chunk_bytes) {
  LOCKD_CHECK(self_ != raft::kNoNode);
  LOCKD_CHECK(limits_.max_queued_bytes_per_peer > 0 && limits_.read_chunk_bytes > 0);
  LOCKD_CHECK(limits_.reconnect_min_ns > 0 && limits_.reconnect_max_ns >= limits_.reconnect_min_ns);
  if (!random_) {
    auto rng = std::make_shared<std::mt19937_64>(self_ ^ static_cast<std::uint64_t>(
                                                             net::monotonic_now_ns()));
    random_ = [rng] { return (*rng)(); };
  }
  bool found_self = false;
  for (const Member& m : members_) {
    if (m.id == self_) {
      found_self = true;
      self_raft_ = m.raft;
      continue;
    }
    peers_.push_back(make_peer(m));
  }
  LOCKD_CHECK(found_self);
}

std::unique_ptr<PeerTransport::Peer> PeerTransport::make_peer(const Member& m) {
  auto p = std::make_unique<Peer>();
  p->owner = this;
  p->member = m;
  p->stats.id = m.id;
  Peer* raw = p.get();
  p->redial_ev = event_new(
      base_, -1, 0,
      [](int, short, void* arg) {
        auto* peer = static_cast<Peer*>(arg);
        peer->stats.reconnects += 1;
        peer->owner->dial(*peer);
      },
      raw);
  LOCKD_CHECK(p->redial_ev != nullptr);
  return p;
}

void PeerTransport::set_members(std::vector<Member> members) {
  const auto same = [](const Member& a, const Member& b) {
    return a.id == b.id && a.raft.to_string() == b.raft.to_string() &&
           a.client.to_string() == b.client.to_string();
  };
  bool found_self = false;
  for (const Member& m : members) found_self = found_self || m.id == self_;
  LOCKD_CHECK(found_self);
  members_ = std::move(members);
  // Gone or moved: close everything of it now. The Peer itself lives until
  // flush(), like its sockets, in case a caller up the stack holds it.
  for (auto it = peers_.begin(); it != peers_.end();) {
    Peer& p = **it;
    const auto keep = std::find_if(members_.begin(), members_.end(),
                                   [&](const Member& m) { return same(m, p.member); });
    if (keep != members_.end()) {
      ++it;
      continue;
    }
    spdlog::info("peer transport: node {} ({}) is no longer a member at that address; closing its "
                 "links",
                 p.member.id, p.member.raft.to_string());
    if (p.link != nullptr) discard(std::move(p.link));
    event_del(p.redial_ev);
    while (!p.inbound.empty()) close_inbound(*p.inbound.front());
    p.stats.link = LinkState::kDown;
    peer_graveyard_.push_back(std::move(*it));
    it = peers_.erase(it);
  }
  for (const Member& m : members_) {
    if (m.id == self_ || find_peer(m.id) != nullptr) continue;
    spdlog::info("peer transport: node {} at {} is a member now", m.id, m.raft.to_string());
    peers_.push_back(make_peer(m));
    if (listener_ != nullptr) dial(*peers_.back());
  }
  // Accepted connections of ids that are not members any more: their
  // handshake said who they are; refuse them from now on.
  std::vector<Socket*> stale;
  for (const auto& s : inbound_) {
    if (s->peer == nullptr && s->input.handshaken() && find_peer(s->input.peer()) == nullptr) {
      stale.push_back(s.get());
    }
  }
  for (Socket* s : stale) close_inbound(*s);
}

PeerTransport::~PeerTransport() {
  listener_.reset();
  // Dialed sockets' events carry Peer pointers: free them while the peers live.
  for (auto& p : peers_) p->link.reset();
  inbound_.clear();
  graveyard_.clear();
}

std::optional<Member> PeerTransport::member(raft::NodeId id) const {
  for (const Member& m : members_) {
    if (m.id == id) return m;
  }
  return std::nullopt;
}

HandshakeExpect PeerTransport::expect(HandshakeKind kind, raft::NodeId peer) const {
  HandshakeExpect e;
  e.self = self_;
  e.cluster_id = local_.cluster_id;
  e.entry_versions = local_.entry_versions;
  e.kind = kind;
  e.peer = peer;
  e.member = [this](raft::NodeId id) { return member(id); };
  // An empty node waiting to be let in hears an authenticated stranger's
  // status words (never its Raft messages): see on_stranger_.
  e.accept_strangers = kind == HandshakeKind::kHello && on_stranger_ &&
                       local_.data_state == DataState::kEmpty &&
                       (!security_.secret.empty() || security_.tls_server != nullptr);
  return e;
}

Handshake PeerTransport::own_handshake(HandshakeKind kind, raft::NodeId receiver) const {
  Handshake h;
  h.kind = kind;
  h.sender = self_;
  h.receiver = receiver;
  h.cluster_id = local_.cluster_id;
  h.entry_versions = local_.entry_versions;
  if (const std::optional<Member> me = member(self_)) {
    h.client_addr = me->client.to_string();
    h.raft_addr = me->raft.to_string();
  }
  h.admin_addr = local_.admin_addr;
  h.data_state = local_.data_state;
  h.incarnation = local_.incarnation;
  if (local_.status_of && receiver != raft::kNoNode) h.receiver_status = local_.status_of(receiver);
  if (local_.heard_of && receiver != raft::kNoNode) h.heard_receiver = local_.heard_of(receiver);
  if (local_.voters) h.voters = local_.voters();
  if (local_.heard_voters) h.heard_voters = local_.heard_voters();
  return h;
}

PeerTransport::Peer* PeerTransport::find_peer(raft::NodeId id) {
  for (auto& p : peers_) {
    if (p->member.id == id) return p.get();
  }
  return nullptr;
}

// --- listening --------------------------------------------------------------

bool PeerTransport::listen(std::string& error) {
  sockaddr_storage ss{};
  socklen_t len = 0;
  if (!net::resolve(self_raft_, ss, len, error)) return false;
  const int fd = ::socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    error = std::string("socket: ") + std::strerror(errno);
    return false;
  }
  // A restarted node must get its address back while old connections sit
  // in TIME_WAIT.
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0 || ::listen(fd, kBacklog) != 0) {
    error = "cannot listen on raft address " + self_raft_.to_string() + ": " + std::strerror(errno);
    ::close(fd);
    return false;
  }
  return listen_on_fd(fd, error);
}

bool PeerTransport::listen_on_fd(int fd, std::string& error) {
  LOCKD_CHECK(listener_ == nullptr);
  const int flags = fcntl(fd, F_GETFL, 0);
  fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  listener_ = std::make_unique<net::Listener>(
      base_, [this](int accepted, const sockaddr*, int) { on_accept(accepted); }, "raft");
  if (!listener_->listen_on_fd(fd, error)) {
    error = "raft listener: " + error;
    listener_.reset();
    return false;
  }
  // Not "listening": the daemon's one `listening` line names the client
  // port, once every address is bound.
  spdlog::info("node {}: peers connect to {} (cluster {}, log entry versions {}..{})", self_,
               bound().to_string(),
               local_.cluster_id == 0 ? std::string("not formed yet") : cluster_id_text(local_.cluster_id),
               local_.entry_versions.min, local_.entry_versions.max);
  for (auto& p : peers_) {
    if (!p->dialed_once) dial(*p);
  }
  return true;
}

net::Endpoint PeerTransport::bound() const {
  return listener_ == nullptr ? net::Endpoint{} : listener_->bound();
}

// --- the links we dial (send side) --------------------------------------------

namespace {
void set_port(sockaddr_storage& ss, std::uint16_t port) {
  if (ss.ss_family == AF_INET) {
    reinterpret_cast<sockaddr_in*>(&ss)->sin_port = htons(port);
  } else if (ss.ss_family == AF_INET6) {
    reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port = htons(port);
  }
}
}  // namespace

net::Resolver::State PeerTransport::resolve_member(Peer& p) {
  sockaddr_storage ss{};
  socklen_t len = 0;
  const net::Resolver::State st = resolver_->lookup(p.member.raft.host, ss, len);
  if (st == net::Resolver::State::kReady) {
    set_port(ss, p.member.raft.port);
    p.addr = ss;
    p.addr_len = len;
  }
  return st;
}

void PeerTransport::on_resolved(const std::string& host) {
  (void)host;  // a name may be shared (ours and a peer's): recheck every waiter
  for (auto& p : peers_) {
    if (!p->awaiting_name) continue;
    p->awaiting_name = false;
    dial(*p);
  }
}

void PeerTransport::dial(Peer& p) {
  using State = net::Resolver::State;
  p.dialed_once = true;
  p.awaiting_name = false;
  // Names resolve off the loop (§11a): while a name has no answer yet the
  // dial waits for on_resolved(); a peer name that failed is redialed with
  // the usual back-off (the resolver asks again after its own).
  const bool self_named = !is_wildcard(self_raft_.host);
  State self_state = State::kFailed;
  if (self_named) self_state = resolver_->lookup(self_raft_.host, src_, src_len_);
  if (self_state != State::kReady) src_len_ = 0;  // failed: dial from any address
  const State peer_state = resolve_member(p);
  if (self_state == State::kWaiting || peer_state == State::kWaiting) {
    // Down, not connecting: messages for it are dropped (Raft retries)
    // rather than queued ahead of a hello not written yet.
    p.stats.link = LinkState::kDown;
    p.awaiting_name = true;
    return;
  }
  if (peer_state == State::kFailed) {
    close_link(p);
    return;
  }
  p.stats.link = LinkState::kConnecting;
  const int fd = ::socket(p.addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    spdlog::warn("peer transport: socket for node {}: {}", p.member.id, std::strerror(errno));
    close_link(p);
    return;
  }
  set_nodelay(fd);
  // Leave from our own raft host, so a link between two nodes is the pair
  // of their raft addresses (a chaos harness cuts links by address).
  if (!is_wildcard(self_raft_.host)) {
    if (src_len_ != 0 && src_.ss_family == p.addr.ss_family) {
#ifdef IP_BIND_ADDRESS_NO_PORT
      // Pick the port at connect() time, per destination, not at bind().
      const int one = 1;
      setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
#endif
      if (::bind(fd, reinterpret_cast<sockaddr*>(&src_), src_len_) != 0) {
        spdlog::warn("peer transport: cannot bind source address {} to reach node {}: {}",
                     self_raft_.host, p.member.id, std::strerror(errno));
        ::close(fd);
        close_link(p);
        return;
      }
    }
  }
  if (::connect(fd, reinterpret_cast<sockaddr*>(&p.addr), p.addr_len) != 0 &&
      errno != EINPROGRESS) {
    spdlog::debug("peer transport: connect to node {} at {}: {}", p.member.id,
                  p.member.raft.to_string(), std::strerror(errno));
    ::close(fd);
    close_link(p);
    return;
  }
  const Nonce nonce = security_.secret.empty() ? Nonce{} : random_nonce();
  p.link = std::make_unique<Socket>(*this, fd, true, expect(HandshakeKind::kReply, p.member.id),
                                    nonce);
  p.link->remote = p.member.raft.host;
  if (security_.tls_client != nullptr) {
    // The acceptor's certificate must name the member we dial.
    p.link->tls = tls::TlsSession::connect(*security_.tls_client, member_cert_name(p.member.id),
                                            /*san_only=*/true);
  }
  Socket& s = *p.link;
  s.peer = &p;
  s.read_ev = event_new(
      base_, fd, EV_READ | EV_PERSIST,
      [](int, short, void* arg) {
        auto* peer = static_cast<Peer*>(arg);
        peer->owner->on_dial_readable(*peer);
      },
      &p);
  s.write_ev = event_new(
      base_, fd, EV_WRITE | EV_PERSIST,
      [](int, short, void* arg) {
        auto* peer = static_cast<Peer*>(arg);
        if (peer->tcp_connected) {
          peer->owner->write_link(*peer);
        } else {
          peer->owner->on_dial_writable(*peer);
        }
      },
      &p);
  s.timer_ev = event_new(
      base_, -1, 0,
      [](int, short, void* arg) {
        auto* peer = static_cast<Peer*>(arg);
        PeerTransport& t = *peer->owner;
        if (peer->stats.link == LinkState::kConnected) {
          peer->stats.write_stalls += 1;
          spdlog::warn("peer transport: link to node {} accepted no byte for {} ms; redialing",
                       peer->member.id, t.limits_.write_stall_timeout_ns / kNsPerMs);
        } else {
          t.stats_.handshake_timeouts += 1;
          spdlog::debug("peer transport: no handshake reply from node {} in time",
                        peer->member.id);
        }
        t.close_link(*peer);
      },
      &p);
  LOCKD_CHECK(s.read_ev != nullptr && s.write_ev != nullptr && s.timer_ev != nullptr);
  // The hello goes first; messages queued while connecting follow it in
  // the same write.
  LOCKD_CHECK(p.unsent() == 0);
  Handshake hello = own_handshake(HandshakeKind::kHello, p.member.id);
  if (!security_.secret.empty()) hello.nonce = nonce;
  s.hello_cluster_id = hello.cluster_id;
  encode_handshake(hello, p.out);
  p.hello_end = p.out_base + p.out.size();
  event_add(s.write_ev, nullptr);
  p.write_armed = true;
  const timeval tv = to_timeval(limits_.handshake_timeout_ns);
  event_add(s.timer_ev, &tv);
}

void PeerTransport::on_dial_writable(Peer& p) {
  Socket& s = *p.link;
  int err = 0;
  socklen_t len = sizeof err;
  if (getsockopt(s.fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
  if (err != 0) {
    spdlog::debug("peer transport: connect to node {} at {}: {}", p.member.id,
                  p.member.raft.to_string(), std::strerror(err));
    close_link(p);
    return;
  }
  p.tcp_connected = true;
  event_del(s.write_ev);
  p.write_armed = false;
  event_add(s.read_ev, nullptr);
  write_link(p);  // the hello; queued messages wait for the reply
}

void PeerTransport::write_link(Peer& p) {
  Socket& s = *p.link;
  const bool connected = p.stats.link == LinkState::kConnected;
  // Until the reply checks out only the hello may go: messages wait (in
  // the bounded queue) so nothing reaches a node that refuses us, and a
  // refusing acceptor closes with no unread input, a clean FIN after its
  // reply rather than a reset that could hide the reply from us.
  const std::uint64_t limit = connected ? p.out_base + p.out.size() : p.hello_end;
  const std::uint64_t written_before = p.out_base + p.out_off;
  ssize_t n = 0;
  if (s.tls) {
    // Plaintext enters the session only while the socket keeps up, so
    // unsent bytes stay in the bounded queue, not in ciphertext.
    if (limit > written_before && s.wire.size() - s.wire_off < kCompactBytes) {
      const auto len = static_cast<std::size_t>(limit - written_before);
      if (s.tls->write(std::string_view(p.out.data() + p.out_off, len)) !=
          tls::TlsSession::Status::kOk) {
        refuse(TransportRefusal::kTls, s.remote, &p, "TLS with node " +
               std::to_string(p.member.id) + ": " + s.tls->error());
        close_link(p);
        return;
      }
      p.out_off += len;
      const std::uint64_t taken = p.out_base + p.out_off;
      while (!p.frame_ends.empty() && p.frame_ends.front() <= taken) p.frame_ends.pop_front();
    }
    s.tls->take_output(s.wire);
    if (s.wire.size() > s.wire_off) {
      do {
        n = ::send(s.fd, s.wire.data() + s.wire_off, s.wire.size() - s.wire_off,
                   MSG_NOSIGNAL | MSG_DONTWAIT);
      } while (n < 0 && errno == EINTR);
      p.stats.writes += 1;
      stats_.writes += 1;
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
        spdlog::debug("peer transport: write to node {}: {}", p.member.id, std::strerror(errno));
        close_link(p);
        return;
      }
      if (n > 0) {
        s.wire_off += static_cast<std::size_t>(n);
        p.stats.bytes_sent += static_cast<std::uint64_t>(n);
      }
      if (s.wire_off == s.wire.size()) {
        s.wire.clear();
        s.wire_off = 0;
      } else if (s.wire_off >= kCompactBytes) {
        s.wire.erase(0, s.wire_off);
        s.wire_off = 0;
      }
    }
    n = 0;  // the plaintext bookkeeping below is done
  } else if (limit > written_before) {
    const auto len = static_cast<std::size_t>(limit - written_before);
    do {
      n = ::send(s.fd, p.out.data() + p.out_off, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    p.stats.writes += 1;
    stats_.writes += 1;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      spdlog::debug("peer transport: write to node {}: {}", p.member.id, std::strerror(errno));
      close_link(p);
      return;
    }
  }
  if (n > 0) {
    p.out_off += static_cast<std::size_t>(n);
    p.stats.bytes_sent += static_cast<std::uint64_t>(n);
    const std::uint64_t written = p.out_base + p.out_off;
    while (!p.frame_ends.empty() && p.frame_ends.front() <= written) p.frame_ends.pop_front();
  }
  if (p.unsent() == 0) {
    p.out_base += p.out.size();
    p.out.clear();
    p.out_off = 0;
  } else if (p.out_off >= kCompactBytes) {
    p.out_base += p.out_off;
    p.out.erase(0, p.out_off);
    p.out_off = 0;
  }
  // Writable bytes the socket did not take (with TLS: ciphertext left over).
  const bool blocked = s.tls ? s.wire.size() > s.wire_off || p.out_base + p.out_off < limit
                             : p.out_base + p.out_off < limit;
  if (blocked && !p.write_armed) {
    event_add(s.write_ev, nullptr);
    p.write_armed = true;
  } else if (!blocked && p.write_armed) {
    event_del(s.write_ev);
    p.write_armed = false;
  }
  if (connected) {
    // The stall clock runs while the socket refuses bytes: restarted on
    // every write that made progress, stopped when all is out. While
    // handshaking, the handshake timeout runs instead.
    if (!blocked) {
      event_del(s.timer_ev);
    } else if (n > 0 || !event_pending(s.timer_ev, EV_TIMEOUT, nullptr)) {
      const timeval tv = to_timeval(limits_.write_stall_timeout_ns);
      event_add(s.timer_ev, &tv);
    }
  }
  p.stats.queued_bytes = p.unsent();
}

void PeerTransport::on_dial_readable(Peer& p) {
  Socket& s = *p.link;
  std::vector<char>& buf = read_buf_;
  const ssize_t n = ::recv(s.fd, buf.data(), buf.size(), 0);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
  if (n <= 0) {
    spdlog::debug("peer transport: node {} closed our link", p.member.id);
    close_link(p);
    return;
  }
  p.stats.bytes_received += static_cast<std::uint64_t>(n);
  p.stats.last_contact_ns = net::monotonic_now_ns();
  std::string plain;
  std::string why;
  if (!read_plain(s, std::string_view(buf.data(), static_cast<std::size_t>(n)), plain, why)) {
    if (!why.empty()) {
      refuse(TransportRefusal::kTls, s.remote, &p, "TLS with node " + std::to_string(p.member.id) +
                                                       ": " + why);
      send_alert(s);
    }
    close_link(p);
    return;
  }
  if (s.tls) {
    write_link(p);  // the session's own answers (handshake flights)
    if (p.link == nullptr) return;
  }
  s.input.feed(s.tls ? std::string_view(plain)
                     : std::string_view(buf.data(), static_cast<std::size_t>(n)));
  for (;;) {
    switch (s.input.next()) {
      case PeerInput::Event::kNeedMore:
        return;
      case PeerInput::Event::kHandshake:
        p.stats.link = LinkState::kConnected;
        p.failures = 0;
        event_del(s.timer_ev);
        spdlog::info("peer transport: connected to node {} at {}", p.member.id,
                     p.member.raft.to_string());
        if (!security_.secret.empty()) {
          // The confirm goes right after the hello, before the messages
          // queued behind it: the acceptor reads nothing else first.
          Handshake confirm;
          confirm.kind = HandshakeKind::kConfirm;
          confirm.sender = self_;
          confirm.receiver = p.member.id;
          confirm.cluster_id = s.hello_cluster_id;
          confirm.proof = confirm_proof(security_.secret, *s.input.handshake().nonce, s.nonce,
                                        self_, p.member.id, s.hello_cluster_id);
          std::string frame;
          encode_handshake(confirm, frame);
          p.out.insert(p.out_off, frame);
          for (std::uint64_t& end : p.frame_ends) end += frame.size();
        }
        if (on_handshake_) on_handshake_(s.input.handshake());
        write_link(p);  // what queued while connecting: one write (arms the stall clock if blocked)
        if (p.link == nullptr) return;  // the write failed and closed the link
        continue;
      case PeerInput::Event::kMessage:    // impossible on a dialed link: kUnexpectedFrame
      case PeerInput::Event::kConfirmed:  // only an acceptor receives a confirm
      case PeerInput::Event::kError:
        break;
    }
    break;
  }
  if (s.input.error() == PeerInputError::kHandshake && s.input.has_handshake()) {
    p.stats.handshake_rejected += 1;
    stats_.handshake_rejected += 1;
    stats_.refused_by_reason[static_cast<std::size_t>(s.input.handshake_error())] += 1;
    warn_rejected(s.remote, &p, "refusing the answer of", s.input.describe_error());
  } else {
    p.stats.decode_errors += 1;
    stats_.decode_errors += 1;
    warn_rejected(s.remote, &p, "bad input on our link to", s.input.describe_error());
  }
  close_link(p);
}

void PeerTransport::close_link(Peer& p) {
  if (p.link != nullptr) {
    if (p.stats.link == LinkState::kConnected) {
      spdlog::debug("peer transport: link to node {} lost", p.member.id);  // ClusterNode warns
    }
    discard(std::move(p.link));
  }
  // The rest of a partly written frame is meaningless on a new
  // connection: everything unsent is dropped, and counted.
  p.stats.messages_dropped += p.frame_ends.size();
  p.frame_ends.clear();
  p.out_base += p.out.size();
  p.out.clear();
  p.out_off = 0;
  p.tcp_connected = false;
  p.write_armed = false;
  p.stats.queued_bytes = 0;
  p.stats.link = LinkState::kDown;
  const timeval tv = to_timeval(backoff_ns(p));
  event_add(p.redial_ev, &tv);
}

TimeNs PeerTransport::backoff_ns(Peer& p) {
  // Exponential, capped, with "equal jitter": uniform in [d/2, d], so
  // nodes that lost each other at once do not redial in lockstep.
  TimeNs d = limits_.reconnect_min_ns;
  for (int i = 0; i < p.failures && d < limits_.reconnect_max_ns; ++i) d *= 2;
  d = std::min(d, limits_.reconnect_max_ns);
  if (p.failures < 62) p.failures += 1;
  const auto half = static_cast<std::uint64_t>(d / 2);
  return static_cast<TimeNs>(half + random_() % (half + 1));
}

void PeerTransport::send(const raft::Message& m) {
  LOCKD_CHECK(m.from == self_);
  Peer* p = find_peer(m.to);
  if (p == nullptr) {
    // The core may still answer a node the configuration just dropped.
    stats_.dropped_no_member += 1;
    return;
  }
  if (p->stats.link == LinkState::kDown) {
    p->stats.messages_dropped += 1;
    return;
  }
  const std::size_t before = p->out.size();
  raft::encode_message(m, p->out);
  LOCKD_CHECK(p->out.size() - before <= raft::kFrameLengthBytes + raft::kMaxFrameBytes);
  if (p->unsent() > limits_.max_queued_bytes_per_peer) {
    p->out.resize(before);
    p->stats.messages_dropped += 1;
    return;
  }
  p->frame_ends.push_back(p->out_base + p->out.size());
  p->stats.messages_sent += 1;
  p->stats.queued_bytes = p->unsent();
}

void PeerTransport::flush() {
  for (auto& p : peers_) {
    // An armed write event means the socket is full; it writes when the
    // socket says so. Before the handshake reply only the hello goes, and
    // the dial path writes it.
    if (p->link != nullptr && p->stats.link == LinkState::kConnected && !p->write_armed &&
        p->unsent() > 0) {
      write_link(*p);
    }
  }
  graveyard_.clear();
  peer_graveyard_.clear();
}

// --- connections we accept (receive side) -----------------------------------

std::optional<PeerInputAuth> PeerTransport::auth(const Nonce& own_nonce) const {
  if (security_.secret.empty()) return std::nullopt;
  return PeerInputAuth{security_.secret, own_nonce};
}

bool PeerTransport::from_member_host(const std::string& ip) {
  if (ip.empty()) return false;
  for (auto& p : peers_) {
    // Cached answers only (a lookup starts, never waits): a member whose
    // name has no answer yet is a stranger until it has one.
    if (resolve_member(*p) != net::Resolver::State::kReady) continue;
    const std::string host = net::endpoint_of(p->addr).host;
    if (!host.empty() && ip == host) return true;
  }
  return false;
}

void PeerTransport::on_accept(int fd) {
  stats_.accepted += 1;
  const std::string remote = remote_host(fd);
  // Members dial from their own raft host (dial() binds it), so a
  // connection from any other address is a stranger's and waits in a pool
  // of its own: filling it cannot keep members out.
  const bool member_pool = from_member_host(remote);
  std::size_t& pending = member_pool ? pending_from_members_ : pending_strangers_;
  const std::size_t cap = member_pool ? limits_.max_pending_from_members : limits_.max_pending_strangers;
  if (pending >= cap) {
    stats_.inbound_refused += 1;
    ::close(fd);
    refuse(TransportRefusal::kPendingFull, remote, nullptr,
           std::string("too many connections still handshaking (") + std::to_string(cap) + " from " +
               (member_pool ? "members' hosts" : "non-member hosts") + ")");
    return;
  }
  if (security_.tls_server != nullptr) {
    // §11a: TLS handshakes in progress per port are capped, on the raft
    // port too (the pools above bound them as well, but by their own sizes).
    std::size_t handshaking = 0;
    for (const auto& s : inbound_) {
      if (s->tls != nullptr && !s->tls->handshake_done() && s->fd >= 0) handshaking += 1;
    }
    if (handshaking >= security_.max_tls_handshakes) {
      // Room is made by closing the oldest handshake in progress (as on the
      // client port): sockets that never finish one cannot keep a member
      // out. A stranger's only ever pushes out a stranger's (inbound_ is in
      // accept order); when none is there, the new one is closed instead.
      Socket* oldest = nullptr;
      for (const auto& s : inbound_) {
        if (s->tls == nullptr || s->tls->handshake_done() || s->fd < 0) continue;
        if (!s->member_pool) {
          oldest = s.get();
          break;
        }
        if (member_pool && oldest == nullptr) oldest = s.get();
      }
      stats_.inbound_refused += 1;
      const std::string why = std::to_string(handshaking) + " TLS handshakes in progress (--max-tls-handshakes)";
      if (oldest == nullptr) {
        ::close(fd);
        refuse(TransportRefusal::kTlsHandshakes, remote, nullptr, why);
        return;
      }
      refuse(TransportRefusal::kTlsHandshakes, oldest->remote, nullptr, why + ": the oldest is closed");
      close_inbound(*oldest);
    }
  }
  set_nodelay(fd);
  // A member whose host vanished leaves a half-open connection behind;
  // keepalive ends it in about half a minute (it holds a member link).
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  const int idle_s = 10, intvl_s = 5, cnt = 3;
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof idle_s);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl_s, sizeof intvl_s);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
  const Nonce nonce = security_.secret.empty() ? Nonce{} : random_nonce();
  auto s = std::make_unique<Socket>(*this, fd, false, expect(HandshakeKind::kHello, raft::kNoNode),
                                    nonce);
  s->remote = remote;
  if (security_.tls_server != nullptr) s->tls = tls::TlsSession::accept(*security_.tls_server);
  s->pending = true;
  s->member_pool = member_pool;
  pending += 1;
  Socket* raw = s.get();
  s->read_ev = event_new(
      base_, fd, EV_READ | EV_PERSIST,
      [](int, short, void* arg) {
        auto* sock = static_cast<Socket*>(arg);
        sock->owner.on_inbound_readable(*sock);
      },
      raw);
  s->timer_ev = event_new(
      base_, -1, 0,
      [](int, short, void* arg) {
        auto* sock = static_cast<Socket*>(arg);
        PeerTransport& t = sock->owner;
        t.stats_.handshake_timeouts += 1;
        t.refuse(TransportRefusal::kHandshakeTimeout, sock->remote,
                 sock->input.handshaken() ? t.find_peer(sock->input.peer()) : nullptr,
                 sock->input.awaiting_confirm()
                     ? "no confirm of the peer secret in time"
                     : "no complete handshake in " +
                           std::to_string(t.limits_.handshake_timeout_ns / kNsPerMs) + " ms");
        t.close_inbound(*sock);
      },
      raw);
  LOCKD_CHECK(s->read_ev != nullptr && s->timer_ev != nullptr);
  event_add(s->read_ev, nullptr);
  // The deadline runs from the accept, whatever arrives meanwhile: a peer
  // dribbling a byte at a time gets no longer than a silent one.
  const timeval tv = to_timeval(limits_.handshake_timeout_ns);
  event_add(s->timer_ev, &tv);
  inbound_.push_back(std::move(s));
}

void PeerTransport::on_stranger_hello(Socket& s) {
  const Handshake& hello = s.input.handshake();
  const std::string who = "node " + std::to_string(hello.sender) + " (not in our member list)";
  if (s.tls) {
    const auto& cert = s.tls->peer_certificate();
    if (!cert || !cert->names(member_cert_name(hello.sender))) {
      refuse(TransportRefusal::kCertName, s.remote, nullptr,
             "its certificate (CN " + (cert ? cert->subject_cn : std::string("none")) +
                 ") has no SAN DNS:" + member_cert_name(hello.sender) + ", the member its hello claims");
      close_inbound(s);
      return;
    }
  }
  if (!s.input.awaiting_confirm()) {
    // TLS alone: the certificate proved who it is.
    spdlog::debug("peer transport: {} says what it knows of us; hearing that only", who);
    const Handshake copy = hello;
    close_inbound(s);
    on_stranger_(copy);
    return;
  }
  // The secret: our proof and challenge; its confirm proves it (kConfirmed).
  spdlog::debug("peer transport: {} says what it knows of us; hearing that only, once it proves "
               "the peer secret",
               who);
  s.stranger = true;
  Handshake reply = own_handshake(HandshakeKind::kReply, hello.sender);
  reply.nonce = s.nonce;
  reply.proof = reply_proof(security_.secret, *hello.nonce, s.nonce, self_, hello.sender,
                            reply.cluster_id);
  std::string out;
  encode_handshake(reply, out);
  send_inbound(s, out);
}

bool PeerTransport::adopt_inbound(Socket& s, Peer& p) {
  if (p.inbound.size() >= limits_.max_links_per_member) {
    if (security_.secret.empty()) {
      // Anyone can claim to be this member: keep the links it has.
      refuse(TransportRefusal::kMemberLinksFull, s.remote, &p,
             "node " + std::to_string(p.member.id) + " already has " +
                 std::to_string(p.inbound.size()) + " connections to us");
      close_inbound(s);
      return false;
    }
    // Each proved it is the member: the oldest is the one most likely dead.
    close_inbound(*p.inbound.front());
  }
  LOCKD_CHECK(s.pending);
  s.pending = false;
  (s.member_pool ? pending_from_members_ : pending_strangers_) -= 1;
  s.peer = &p;
  p.inbound.push_back(&s);
  p.stats.inbound_connected = true;
  p.stats.last_contact_ns = net::monotonic_now_ns();
  event_del(s.timer_ev);
  if (on_handshake_) on_handshake_(s.input.handshake());
  return true;
}

void PeerTransport::on_inbound_readable(Socket& s) {
  std::vector<char>& buf = read_buf_;
  const ssize_t n = ::recv(s.fd, buf.data(), buf.size(), 0);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
  if (n <= 0) {
    if (s.input.awaiting_confirm()) {
      // It took our proof and left without giving its own: a node with
      // another secret (it refused our reply and says so in its log).
      stats_.handshake_rejected += 1;
      stats_.refused_by_reason[static_cast<std::size_t>(HandshakeError::kAuthFailed)] += 1;
      Peer* p = find_peer(s.input.peer());
      if (p != nullptr) p->stats.handshake_rejected += 1;
      warn_rejected(s.remote, p, "refusing a connection from",
                    "node " + std::to_string(s.input.peer()) +
                        " hung up before proving it knows the peer secret (another "
                        "--peer-secret-file, or none)");
    }
    close_inbound(s);
    return;
  }
  const auto bytes = static_cast<std::uint64_t>(n);
  if (s.peer != nullptr) {
    s.peer->stats.bytes_received += bytes;
    s.peer->stats.last_contact_ns = net::monotonic_now_ns();
  }
  std::string plain;
  std::string why;
  if (!read_plain(s, std::string_view(buf.data(), static_cast<std::size_t>(n)), plain, why)) {
    // A plaintext peer on a TLS port ends here too: nothing it sent is read.
    if (!why.empty()) {
      refuse(TransportRefusal::kTls, s.remote, s.peer, "TLS: " + why);
      send_alert(s);
    }
    close_inbound(s);
    return;
  }
  if (s.tls && !send_inbound(s, {})) return;  // the session's handshake flights
  s.input.feed(s.tls ? std::string_view(plain)
                     : std::string_view(buf.data(), static_cast<std::size_t>(n)));
  for (;;) {
    const PeerInput::Event ev = s.input.next();
    if (ev == PeerInput::Event::kNeedMore) return;
    if (ev == PeerInput::Event::kError) break;
    if (ev == PeerInput::Event::kHandshake) {
      Peer* p = find_peer(s.input.peer());
      if (p == nullptr) {
        // check_handshake let a non-member through (accept_strangers): its
        // status words count once it is authenticated, nothing else does.
        on_stranger_hello(s);
        return;
      }
      if (s.tls) {
        // The certificate (verified against --peer-tls-ca, default
        // --tls-ca, in the TLS handshake) must name the member the hello
        // claims, in a SAN (never the CN: that is a client's identity).
        const auto& cert = s.tls->peer_certificate();
        if (!cert || !cert->names(member_cert_name(p->member.id))) {
          refuse(TransportRefusal::kCertName, s.remote, p,
                 "its certificate (CN " + (cert ? cert->subject_cn : std::string("none")) +
                     ") has no SAN DNS:" + member_cert_name(p->member.id) +
                     ", the member its hello claims");
          close_inbound(s);
          return;
        }
      }
      Handshake reply = own_handshake(HandshakeKind::kReply, p->member.id);
      if (s.input.awaiting_confirm()) {
        // Our challenge and our proof; the link is theirs only once their
        // confirm proves the secret too (until then nothing reaches Raft).
        reply.nonce = s.nonce;
        reply.proof = reply_proof(security_.secret, *s.input.handshake().nonce, s.nonce, self_,
                                  p->member.id, reply.cluster_id);
      } else if (!adopt_inbound(s, *p)) {
        return;
      }
      p->stats.bytes_received += bytes;  // this read, handshake included
      std::string out;
      encode_handshake(reply, out);
      if (!send_inbound(s, out)) return;
      continue;
    }
    if (ev == PeerInput::Event::kConfirmed) {
      if (s.stranger) {
        // Proved now; never adopted, even if it became a member meanwhile
        // (its hello skipped the member checks).
        const Handshake hello = s.input.handshake();
        close_inbound(s);
        if (on_stranger_) on_stranger_(hello);
        return;
      }
      Peer* p = find_peer(s.input.peer());
      if (p == nullptr) {  // removed from the configuration since its hello
        close_inbound(s);
        return;
      }
      if (!adopt_inbound(s, *p)) return;
      continue;
    }
    // kMessage: only after the handshake (and confirm) passed, so s.peer is set.
    Peer* p = s.peer;
    LOCKD_CHECK(p != nullptr);
    p->stats.messages_received += 1;
    on_message_(s.input.message());
  }
  Peer* p = s.peer != nullptr ? s.peer : find_peer(s.input.handshake().sender);
  if (s.input.error() == PeerInputError::kHandshake && s.input.has_handshake()) {
    // Answer with our own view, so the dialer can log what differs too;
    // a 1.1 node in its own layout (it reads our version and says so).
    // A failed confirm gets nothing more: our reply already went.
    std::string reply;
    if (s.input.handshake().version == kPeerProtocolVersionV1) {
      encode_handshake_v1(kPeerProtocolVersion, HandshakeKind::kReply, self_,
                          s.input.handshake().sender, reply);
    } else if (!s.input.handshaken()) {
      const Handshake& hello = s.input.handshake();
      Handshake refusal = own_handshake(HandshakeKind::kReply, hello.sender);
      if (!security_.secret.empty() && hello.nonce) {
        // Proved like any reply, so that the dialer believes what it says
        // of it (tag 11: "removed"); without the proof a member removed
        // from an authenticated group never learnt it and ran on.
        refusal.nonce = s.nonce;
        refusal.proof = reply_proof(security_.secret, *hello.nonce, s.nonce, self_, hello.sender,
                                    refusal.cluster_id);
      }
      encode_handshake(refusal, reply);
    }
    if (!reply.empty()) {
      if (s.tls) {
        s.tls->write(reply);
        s.tls->take_output(s.wire);
      } else {
        s.wire.assign(reply);
        s.wire_off = 0;
      }
      [[maybe_unused]] const ssize_t sent = ::send(s.fd, s.wire.data() + s.wire_off,
                                                   s.wire.size() - s.wire_off,
                                                   MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    stats_.handshake_rejected += 1;
    stats_.refused_by_reason[static_cast<std::size_t>(s.input.handshake_error())] += 1;
    if (p != nullptr) p->stats.handshake_rejected += 1;
    warn_rejected(s.remote, p, "refusing a connection from", s.input.describe_error());
  } else {
    stats_.decode_errors += 1;
    if (s.peer != nullptr) s.peer->stats.decode_errors += 1;
    warn_rejected(s.remote, s.peer, "closing a connection from", s.input.describe_error());
  }
  close_inbound(s);
}

void PeerTransport::close_inbound(Socket& s) {
  if (s.pending) {
    (s.member_pool ? pending_from_members_ : pending_strangers_) -= 1;
    s.pending = false;
  }
  if (s.peer != nullptr) {
    std::vector<Socket*>& links = s.peer->inbound;
    links.erase(std::remove(links.begin(), links.end(), &s), links.end());
    s.peer->stats.inbound_connected = !links.empty();
  }
  auto it = std::find_if(inbound_.begin(), inbound_.end(),
                         [&](const std::unique_ptr<Socket>& x) { return x.get() == &s; });
  LOCKD_CHECK(it != inbound_.end());
  std::unique_ptr<Socket> owned = std::move(*it);
  inbound_.erase(it);
  discard(std::move(owned));
}

bool PeerTransport::read_plain(Socket& s, std::string_view cipher, std::string& plain,
                               std::string& why) {
  if (!s.tls) return true;  // the caller reads `cipher` itself
  const tls::TlsSession::Status st = s.tls->on_input(cipher, plain);
  if (st == tls::TlsSession::Status::kError) {
    why = s.tls->error().empty() ? "bad TLS input" : s.tls->error();
    return false;
  }
  return st == tls::TlsSession::Status::kOk;  // kClosed: the peer said close_notify
}

void PeerTransport::send_alert(Socket& s) {
  // The session's last words (the alert saying why), best effort, so the
  // other side can log the reason rather than a bare close.
  std::string out;
  s.tls->take_output(out);
  if (!out.empty()) {
    [[maybe_unused]] const ssize_t n = ::send(s.fd, out.data(), out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  }
}

bool PeerTransport::send_inbound(Socket& s, std::string_view plain) {
  if (s.tls) {
    if (!plain.empty() && s.tls->write(plain) != tls::TlsSession::Status::kOk) {
      refuse(TransportRefusal::kTls, s.remote, s.peer, "TLS: " + s.tls->error());
      close_inbound(s);
      return false;
    }
    s.tls->take_output(s.wire);
  } else {
    s.wire.append(plain);
  }
  if (s.wire.size() > s.wire_off) {
    ssize_t n = 0;
    do {
      n = ::send(s.fd, s.wire.data() + s.wire_off, s.wire.size() - s.wire_off,
                 MSG_NOSIGNAL | MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      close_inbound(s);
      return false;
    }
    if (n > 0) s.wire_off += static_cast<std::size_t>(n);
  }
  if (s.wire_off == s.wire.size()) {
    s.wire.clear();
    s.wire_off = 0;
  }
  // An accepted connection only answers (handshakes, TLS flights): a few
  // KiB. Past this the peer is not reading what it asked for.
  if (s.wire.size() - s.wire_off > kCompactBytes) {
    close_inbound(s);
    return false;
  }
  const bool blocked = s.wire.size() > s.wire_off;
  if (blocked && !s.inbound_write_armed) {
    if (s.write_ev == nullptr) {
      s.write_ev = event_new(
          base_, s.fd, EV_WRITE | EV_PERSIST,
          [](int, short, void* arg) {
            auto* sock = static_cast<Socket*>(arg);
            sock->owner.send_inbound(*sock, {});
          },
          &s);
      LOCKD_CHECK(s.write_ev != nullptr);
    }
    event_add(s.write_ev, nullptr);
    s.inbound_write_armed = true;
  } else if (!blocked && s.inbound_write_armed) {
    event_del(s.write_ev);
    s.inbound_write_armed = false;
  }
  return true;
}

void PeerTransport::refuse(TransportRefusal r, const std::string& address, Peer* p,
                           const std::string& what) {
  stats_.refused_by_transport[static_cast<std::size_t>(r)] += 1;
  warn_rejected(address, p, "refusing a connection from", what);
}

void PeerTransport::discard(std::unique_ptr<Socket> s) {
  s->shut();
  graveyard_.push_back(std::move(s));
}

void PeerTransport::warn_rejected(const std::string& address, Peer* p, std::string_view side,
                                  const std::string& what) {
  const TimeNs now = net::monotonic_now_ns();
  // One key per address and member (nodes on one host share an IP);
  // bounded: a flood of strangers from many addresses forgets them all.
  const std::string key = address + "/" + (p != nullptr ? std::to_string(p->member.id) : "?");
  if (last_warn_ns_.size() >= 1024 && last_warn_ns_.find(key) == last_warn_ns_.end()) {
    last_warn_ns_.clear();
  }
  TimeNs& last = last_warn_ns_.try_emplace(key, kNeverNs).first->second;
  const std::string who = (p != nullptr ? "node " + std::to_string(p->member.id) : "a stranger") +
                          (address.empty() ? "" : " (" + address + ")");
  if (last == kNeverNs || now - last >= limits_.refusal_warn_interval_ns) {
    last = now;
    spdlog::warn("peer transport: {} {}: {}", side, who, what);
  } else {
    spdlog::debug("peer transport: {} {}: {}", side, who, what);
  }
}

std::vector<PeerStats> PeerTransport::peer_stats() const {
  std::vector<PeerStats> out;
  out.reserve(peers_.size());
  for (const auto& p : peers_) {
    out.push_back(p->stats);
    out.back().resolve_failures = resolver_->failures(p->member.raft.host);
  }
  return out;
}

const PeerStats* PeerTransport::peer_stats(raft::NodeId id) const {
  for (const auto& p : peers_) {
    if (p->member.id == id) return &p->stats;
  }
  return nullptr;
}

std::size_t PeerTransport::inbound_connections() const { return inbound_.size(); }

}  // namespace lockd::cluster
