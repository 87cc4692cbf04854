"""The sans-I/O core both Python clients drive (the h11 idea): every decision
of the protocol lives here as plain state machines that take what happened
(bytes received, a reply, a node unreachable, the time) and say what to do
next (which node to send to, how long to pause, what to raise). The
threaded client (:mod:`.client`) and the asyncio client (:mod:`.aio`) only
do the I/O — sockets or streams, threads or tasks, ``time.sleep`` or
``asyncio.sleep`` — so a rule is written once and both fronts keep it.

- :class:`Nodes` — the address list and the node requests go to.
- :class:`Wire` — one connection's bytes and matching: request ids, the
  :class:`~.protocol.Matcher`, abandoned requests, late grants to undo.
- :class:`CallPlan` — one request's round trips: redirects (``M``),
  ``E no_leader`` backoff, unreachable nodes, the outcome codes.
- :class:`KeepPlan` — a keeper's schedule: when to send ``K``, when the
  lease's safe end has passed, which failures are final.
- :class:`HeldBase` — what a held lock (exclusive or shared) knows.
- :class:`WatchBook`, :func:`watch_answer`, :func:`watch_wait_s` and
  :func:`w_overdue` — the watches a client's one watch connection carries:
  which keys, which ``U`` is due, what a ``W`` reply means, how long a
  ``get`` waits.
- :class:`ClientOptions` — the constructor both clients share (addresses,
  owner, timeouts, retry budget, security); each adds its connection state.

Both fronts log through ``logging.getLogger("lockd_client")`` (here, so
each rule is logged once): redirects, ``no_leader`` retries and
indeterminate outcomes at INFO; moving on from a node that cannot be
reached or does not answer, a connection lost with requests in flight, and
a lost lock at WARNING; the rest at DEBUG.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import ssl
import threading
from typing import Dict, Generic, List, Optional, Tuple, TypeVar, Union

from ._common import DEFAULT_ADDRESS, KEEP_RETRY_PAUSE_S, Addresses, Backoff, default_owner, parse_addresses
from .errors import (
    Forbidden,
    Indeterminate,
    LimitMismatch,
    LockBusy,
    LockdError,
    LockLost,
    NoLeader,
    NotHeld,
    ProtocolError,
    Rejected,
    Unauthenticated,
    Unreachable,
)
from .protocol import MAX_OWNER_BYTES, MAX_REPLY_LINE_BYTES, Matcher, Reply, Request, parse_address, parse_reply

Address = Tuple[str, int]

#: The client's logger (the package adds only a NullHandler: configure
#: logging, e.g. ``logging.basicConfig(level=logging.INFO)``, to see it).
log = logging.getLogger("lockd_client")


def address_name(address: Address) -> str:
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class Nodes:
    """Every node's address and the one requests go to (the leader, once
    known). A leader named by ``M`` that was not in the list is appended.
    Safe to share between threads (the lock is never held across I/O)."""

    def __init__(self, addresses: List[Address]) -> None:
        self._lock = threading.Lock()
        self._addresses = list(addresses)
        self._current = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._addresses)

    @property
    def current(self) -> int:
        with self._lock:
            return self._current

    def address(self, i: int) -> Address:
        with self._lock:
            return self._addresses[i]

    def after(self, i: int) -> int:
        with self._lock:
            return (i + 1) % len(self._addresses)

    def index_of(self, address: Address) -> int:
        with self._lock:
            if address not in self._addresses:
                self._addresses.append(address)
            return self._addresses.index(address)

    def connected(self, i: int) -> None:
        """A connection to node ``i`` is open: later requests go there."""
        with self._lock:
            self._current = i

    def went_silent(self, i: int) -> None:
        """Node ``i`` did not answer in time (paused, partitioned, dead): the
        next request goes to the next node, not to the same silent one."""
        with self._lock:
            if self._current == i:
                self._current = (i + 1) % len(self._addresses)


@dataclasses.dataclass
class Delivery:
    """A reply paired with the request it answers, or a push (``rid`` 0)."""

    rid: int
    reply: Reply
    #: Nobody waits for it any more (the caller gave up): drop it, and if it
    #: is a grant, release it (``undo``) so no lock is held by nobody.
    abandoned: bool

    @property
    def push(self) -> bool:
        """A ``V`` or ``X`` push (§5c): for the watchers and keepers, never a reply."""
        return self.rid == 0

    @property
    def undo(self) -> Optional[Request]:
        if self.abandoned and self.reply.is_grant:
            return Request("R", self.reply.key, token=self.reply.token)
        return None


class Wire:
    """One connection's protocol state, without the socket: ids for requests
    in wire order, the Matcher, and the requests whose callers gave up.

    A connection the client stopped sending on (it moved to another node) is
    *retired*: it stays open while a request whose caller still waits is in
    flight on it, and closes once none is (:meth:`idle`)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._matcher = Matcher()
        self._abandoned: set = set()
        self._next_id = 1
        self._buf = b""
        self.retired = False

    def __len__(self) -> int:
        """Requests in flight."""
        return len(self._matcher)

    def busy(self, request: Request) -> bool:
        """True if an acquire (``A`` or ``S``) with this owner and key is in
        flight: a second one must wait for its reply (rule 3)."""
        return self._matcher.busy(request)

    def add(self, request: Request) -> Tuple[int, bytes]:
        """Records ``request`` as sent next; returns its id and its line.
        The caller sends the line before adding anything else."""
        rid = self._next_id
        self._next_id += 1
        self._matcher.add(rid, request)
        return rid, request.line()

    def abandon(self, rid: int) -> None:
        """The caller of ``rid`` stopped waiting (rule 4)."""
        if self._matcher.request(rid) is not None:
            self._abandoned.add(rid)

    def idle(self) -> bool:
        """True if no request in flight has a caller still waiting for it: a
        retired connection can close (a late grant to a caller that gave up
        is then never delivered, but the server drops a closed connection's
        waiters, §9)."""
        return len(self._abandoned) >= len(self._matcher)

    def _deliver(self, rid: int, reply: Reply, out: List[Delivery]) -> None:
        abandoned = rid in self._abandoned
        self._abandoned.discard(rid)
        delivery = Delivery(rid, reply, abandoned)
        if delivery.undo is not None:
            log.info("%s granted %s to a caller that gave up: releasing token %d", self.name, reply.key,
                     reply.token)
        out.append(delivery)

    def receive(self, data: bytes) -> Tuple[List[Delivery], Optional[str]]:
        """Feeds bytes read; returns the replies and pushes they complete, in
        order, and why the connection is broken if it now is: a line nothing
        we sent can have drawn (or one too long) means no later reply can be
        trusted. Pushes (``V``, ``X``) are routed before matching (§5c)."""
        self._buf += data
        *lines, self._buf = self._buf.split(b"\n")
        out: List[Delivery] = []
        for raw in lines:
            text = raw.decode("ascii", "replace")
            reply = parse_reply(text)
            if reply is not None and reply.is_push:
                out.append(Delivery(0, reply, False))
                continue
            rid = self._matcher.match(reply) if reply else None
            if rid is None:
                return out, f"unexpected reply from {self.name}: {text!r}"
            if rid == Matcher.PENDING:
                log.info("%s answered %s without an echo and more than one request could have drawn it: "
                         "held until the others are answered", self.name, text)
            else:
                self._deliver(rid, reply, out)
            for rid, error in self._matcher.take_resolved():
                self._deliver(rid, error, out)
        if len(self._buf) > MAX_REPLY_LINE_BYTES:
            return out, f"reply line from {self.name} too long"
        return out, None

    def drain(self) -> List[Tuple[int, bool]]:
        """The connection is gone: every request in flight, oldest first, as
        ``(id, abandoned)``; afterwards nothing is in flight."""
        out = [(rid, rid in self._abandoned) for rid in self._matcher.drain()]
        self._abandoned.clear()
        if any(not abandoned for _, abandoned in out):
            log.warning("connection to %s lost with %d request(s) in flight: their outcome is unknown "
                        "(indeterminate)", self.name, len(out))
        else:
            log.debug("connection to %s closed", self.name)
        return out


class CallPlan:
    """One request's trip through a cluster, sans I/O (rules 7-9 of
    docs/clients.md). The front end sends ``request`` to ``target`` and
    reports what happened; each report returns the pause (seconds) before
    sending again to the new ``target``, returns None when the reply is the
    answer, or raises the outcome (``NoLeader``, ``Indeterminate`` ...).

    ``options`` is the client (``max_redirects``, ``no_leader_budget_s``,
    ``reply_timeout_s``, ``backoff_initial_s``, ``backoff_max_s``, ``_rng``).
    """

    def __init__(self, nodes: Nodes, request: Request, options, deadline: Optional[float], now: float) -> None:
        why = request.validate()
        if why:
            raise ValueError(why)
        self.nodes = nodes
        self.request = request
        self.options = options
        self.deadline = deadline if deadline is not None else float("inf")
        self.budget_end = min(now + options.no_leader_budget_s, self.deadline)
        self.backoff = Backoff(options.backoff_initial_s, options.backoff_max_s, options._rng)
        self.target = nodes.current
        self.redirects = 0
        self.redirected = False  # ``target`` is the leader named by the last M
        self.failures = 0  # unreachable nodes in a row
        self.stale = 0  # connections found closed before sending

    def queue_deadline(self, now: float) -> float:
        """How long a second acquire of one owner and key may wait for the first."""
        return now + self.request.wait_ms / 1000

    def reply_by(self, now: float) -> float:
        """When to give up waiting for the reply (then: :meth:`silent`)."""
        return min(now + self.request.wait_ms / 1000 + self.options.reply_timeout_s, self.deadline)

    def _back_off(self, now: float, error: LockdError) -> float:
        pause = self.backoff.pause()
        if now + pause >= self.budget_end:
            raise error
        return pause

    def _name(self, i: int) -> str:
        return address_name(self.nodes.address(i))

    def _naming(self, i: int, error: Exception) -> str:
        """``error``'s text, naming node ``i`` if it does not already."""
        name = self._name(i)
        return str(error) if name in str(error) else f"{name}: {error}"

    def unreachable(self, error: Unreachable, now: float) -> float:
        """``target`` could not be connected to: the request was not sent."""
        failed = self.target
        self.target = self.nodes.after(self.target)
        if self.redirected:
            # The leader an M named is down (killed a moment ago: its
            # followers name it until their election timeout). That is no
            # leader for now: back off within the budget, like
            # ``E no_leader``, and ask another node, instead of a hop.
            self.redirected = False
            self.redirects = 0
            pause = self._back_off(now, NoLeader(f"the leader named by M cannot be reached ({error})"))
            log.warning("%s (the leader M named): a leader change? asking %s in %.2f s",
                        self._naming(failed, error), self._name(self.target), pause)
            return pause
        # Safe to try the next node, once around the list.
        self.failures += 1
        if self.failures >= len(self.nodes):
            raise error
        log.warning("%s: trying %s", self._naming(failed, error), self._name(self.target))
        return 0.0

    def not_sent(self, why: str) -> float:
        """The connection had broken while idle (a restarted node): not
        sent, go over a new one; bounded (a node closing every connection)."""
        self.stale += 1
        if self.stale > 3:
            raise Unreachable(why)
        return 0.0

    def silent(self) -> None:
        """No reply in time: the outcome is unknown, so the request is not
        resent (the caller raises Indeterminate), but the next request goes
        to the next node."""
        log.warning("no reply from %s to %s %s (silent, or the connection was lost): indeterminate; the next "
                    "request goes to another node", self._name(self.target), self.request.verb, self.request.key)
        self.nodes.went_silent(self.target)

    def reply(self, reply: Reply, now: float) -> Optional[float]:
        self.failures = 0
        self.redirected = False
        if reply.kind == "M":
            leader = parse_address(reply.leader)
            if leader is None:
                raise ProtocolError(f"M names a bad leader address: {reply.leader}")
            self.redirects += 1
            if self.redirects > self.options.max_redirects:
                raise NoLeader(f"more than {self.options.max_redirects} redirects (last to {reply.leader})")
            log.info("%s is not the leader: following M to %s", self._name(self.target), reply.leader)
            self.target = self.nodes.index_of(leader)
            self.redirected = True
            return 0.0
        if reply.kind == "E":
            if reply.error_code == "no_leader":
                pause = self._back_off(now, NoLeader(
                    f"no leader known (retried for {self.options.no_leader_budget_s} s)"))
                asked = self.target
                self.target = self.nodes.after(self.target)  # another node may know one
                self.redirects = 0
                log.info("%s knows no leader (an election?): asking %s in %.2f s", self._name(asked),
                         self._name(self.target), pause)
                return pause
            if reply.error_code == "indeterminate":
                log.info("%s lost leadership before %s %s committed: indeterminate", self._name(self.target),
                         self.request.verb, self.request.key)
                raise Indeterminate(
                    "the leader lost leadership before the request committed; it may or may not have taken effect")
            if reply.error_code == "limit_mismatch":
                raise LimitMismatch()
            if reply.error_code == "unauthenticated":
                raise Unauthenticated()
            if reply.error_code == "forbidden":
                raise Forbidden()
            raise Rejected(reply.error_code)
        return None


#: Failures of a ``K`` after which asking again cannot help: the lock is lost.
FINAL_KEEP_ERRORS = (NotHeld, Rejected, ProtocolError, ValueError)


def lease_start(sent_at: float, arrived_at: float, wait_ms: int) -> float:
    """When a granted lease is dated from (rules 5 of docs/clients.md), the
    one place both fronts ask. An acquire without a wait is answered at
    once: the grant was made after it was sent, so ``sent_at`` is a safe
    start. An acquire that may have waited was granted at the hand-off,
    which can be any time up to the grant's arrival: the lease is dated
    from ``arrived_at`` (minus nothing more; the reply's one-way trip is
    the only error). Dating it from the send would make a keeper give up,
    without asking the server, on every lock whose wait outlasted its lease."""
    return sent_at if wait_ms == 0 else max(sent_at, arrived_at)


def requeued(request: Request, queue_deadline: float, now: float) -> Request:
    """A second acquire of one owner and key on one connection waits for the
    first's reply (rule 3), then goes out with the wait it has left: its
    wait counts from the call, not from when it could be sent."""
    if not request.is_acquire or request.wait_ms == 0:
        return request
    left_ms = max(0, int((queue_deadline - now) * 1000))
    return dataclasses.replace(request, wait_ms=min(request.wait_ms, left_ms))


@dataclasses.dataclass(frozen=True)
class KeyState:
    """A watched key's state (§5c), from a ``W`` reply or a ``V`` push.

    ``state`` is ``"free"``, ``"held"`` (``owner``, ``token``: one exclusive
    holder) or ``"shared"`` (``limit``, ``count``). ``rev`` grows with every
    change; a watch never yields a state whose ``rev`` is not newer than
    the last one it yielded."""

    key: str
    rev: int
    state: str
    owner: str = ""
    token: int = 0
    limit: int = 0
    count: int = 0

    @staticmethod
    def of(reply: Reply) -> "KeyState":
        return KeyState(reply.key, reply.rev, reply.state, reply.owner, reply.token, reply.limit, reply.count)


@dataclasses.dataclass(frozen=True)
class Leader:
    """The leader of an election on a key: its ``value`` (the winner's
    owner string), its fencing ``token`` and the ``rev`` it was seen at."""

    value: str
    token: int
    rev: int


def leader_of(state: KeyState) -> Optional[Leader]:
    """An election's leader in a key's state: its exclusive holder, or None."""
    if state.state != "held":
        return None
    return Leader(state.owner, state.token, state.rev)


class WatchFilter:
    """The watch rule (§5c) shared by both fronts: keep the largest ``rev``
    yielded and drop a state whose ``rev`` is not newer (a re-watch after a
    reconnect, on any member, answers with a state the watcher may have
    seen already; a lagging follower may answer with an older one)."""

    def __init__(self) -> None:
        self.rev = 0

    def admit(self, state: KeyState) -> bool:
        if state.rev <= self.rev:
            return False
        self.rev = state.rev
        return True


_W = TypeVar("_W")


class WatchBook(Generic[_W]):
    """The watches of one client, carried by its one watch connection (§5c),
    sans I/O: each key's watches in registration order, and the keys whose
    last watch closed and whose ``U`` is not sent yet.

    The server watches a key once per connection however many watches it
    has: each new watch sends its own ``W`` (its first state is the reply),
    a push goes to every watch of its key (:meth:`watching`), and only the
    last watch of a key to leave sends ``U``. That ``U`` is sent by
    whoever holds the front's send lock next (:meth:`unwatch`), and only if
    the key still has no watch then: a ``W`` sent meanwhile for a new watch
    of the key (under the same lock, so before this ``U`` would go) keeps it
    watched. So a ``U`` never overtakes a later ``W`` of its key. After a
    reconnect every key is watched again (:meth:`rewatch`).

    Not thread-safe: the front holds its lock around every call."""

    def __init__(self) -> None:
        # dicts as ordered sets: removing one of many watches of a key is O(1)
        self._keys: Dict[str, Dict[_W, None]] = {}
        self._unwatch: Dict[str, None] = {}

    def __len__(self) -> int:
        """Watches (not keys) in the book."""
        return sum(len(w) for w in self._keys.values())

    def add(self, key: str, watch: _W) -> None:
        """``watch`` watches ``key`` from now on (the front sends its ``W``)."""
        self._keys.setdefault(key, {})[watch] = None

    def remove(self, key: str, watch: _W, watched: bool = True) -> bool:
        """``watch`` stops; True if it was in the book. The last watch of
        ``key`` to leave makes its ``U`` due — unless the server refused
        its ``W`` (``watched`` False: ``B``, ``E forbidden``), so that the
        connection does not watch the key at all."""
        watches = self._keys.get(key)
        if watches is None or watch not in watches:
            return False
        del watches[watch]
        if not watches:
            del self._keys[key]
            if watched:
                self._unwatch[key] = None
        return True

    def watching(self, key: str) -> List[_W]:
        """The watches of ``key``, oldest first: a push for it goes to each."""
        return list(self._keys.get(key, ()))

    def watches(self) -> List[_W]:
        """Every watch in the book."""
        return [w for ws in self._keys.values() for w in ws]

    def keys(self) -> List[str]:
        return list(self._keys)

    @property
    def pending(self) -> bool:
        """True if a ``U`` may be due (:meth:`unwatch` says which)."""
        return bool(self._unwatch)

    def unwatch(self) -> List[str]:
        """The keys to send ``U`` for now, in the order their last watch
        left: those still without a watch (a key watched again meanwhile
        needs none: its new ``W`` went out after the close). Afterwards
        none is due."""
        due = [k for k in self._unwatch if k not in self._keys]
        self._unwatch.clear()
        return due

    def rewatch(self) -> List[str]:
        """A new connection: every key to watch again (one ``W`` each, its
        reply for every watch of the key). A ``U`` due on the old
        connection is void: the new one watches nothing else."""
        self._unwatch.clear()
        return self.keys()

    def clear(self) -> List[_W]:
        """The client closes: every watch, and an empty book."""
        out = self.watches()
        self._keys.clear()
        self._unwatch.clear()
        return out


def watch_answer(reply: Reply) -> Union[KeyState, LockdError, None]:
    """What the reply to a ``W`` means for the watches of its key: their
    state now (a :class:`KeyState`), the error their ``get`` raises
    (``B``: a watch limit, :class:`LockBusy`; ``E forbidden``,
    ``E unauthenticated`` ...), or None for ``E no_leader`` — a cluster
    member that has applied nothing yet: watch on another node."""
    if reply.kind == "W":
        return KeyState.of(reply)
    if reply.kind == "B":
        return LockBusy("the server's watch limit is reached")
    if reply.kind == "E":
        if reply.error_code == "no_leader":
            return None
        if reply.error_code == "unauthenticated":
            return Unauthenticated()
        if reply.error_code == "forbidden":
            return Forbidden()
        return Rejected(reply.error_code)
    return ProtocolError(f"unexpected reply {reply.kind} to W")


def watch_wait_s(now: float, deadline: Optional[float], asked_at: Optional[float],
                 reply_timeout_s: float) -> Optional[float]:
    """How long a watch's ``get`` waits for its next state (None: for
    ever): until its ``deadline``, and while the watch's ``W`` is
    unanswered (sent at ``asked_at``) no longer than that reply is due —
    a node that does not answer ``W`` in time is silent (:func:`w_overdue`)."""
    left = None if deadline is None else max(0.0, deadline - now)
    if asked_at is not None:
        due_in = max(0.0, asked_at + reply_timeout_s - now)
        left = due_in if left is None else min(left, due_in)
    return left


def w_overdue(now: float, asked_at: Optional[float], reply_timeout_s: float) -> bool:
    """True if a ``W`` sent at ``asked_at`` is still unanswered past the
    reply timeout: its node is silent (paused, cut off), watch elsewhere."""
    return asked_at is not None and now >= asked_at + reply_timeout_s


class LeaderFilter:
    """``observe``'s rule: one entry per change of leader (a new holder, a
    new token, or no leader); the same holder seen again is dropped."""

    _NOTHING = object()

    def __init__(self) -> None:
        self._last: object = self._NOTHING

    def admit(self, state: KeyState) -> Tuple[bool, Optional[Leader]]:
        leader = leader_of(state)
        same = (self._last is not self._NOTHING and
                (None if self._last is None else (self._last.value, self._last.token)) ==  # type: ignore[attr-defined]
                (None if leader is None else (leader.value, leader.token)))
        if same:
            return False, leader
        self._last = leader
        return True, leader


def check_value(value: str) -> str:
    """An election's value is the candidate's owner string (1..64 visible ASCII bytes)."""
    if not isinstance(value, str) or not (0 < len(value) <= MAX_OWNER_BYTES and value.isascii()
                                          and all(0x21 <= ord(c) <= 0x7E for c in value)):
        raise ValueError("an election value is the owner: 1..64 visible ASCII characters without spaces")
    return value


class KeepPlan:
    """A keeper's schedule (rules 5-6 of docs/clients.md), sans I/O: ``K``
    every third of the lease; a transient failure is retried every 100 ms
    until the lease's safe end (``start + lease``, where ``start`` is
    :func:`lease_start` of the grant, then the *sending* time of the last
    confirmed ``K``); ``N``, an ``X`` push, or the safe end passing is a loss."""

    def __init__(self, lease_ms: int, start: float) -> None:
        self.lease_s = lease_ms / 1000
        self.interval = max(self.lease_s / 3, 0.001)
        self.safe_end = start + self.lease_s
        self.next_at = start + self.interval
        self._sent = start

    def wait_s(self, now: float) -> float:
        """How long to sleep before the next ``K``."""
        return max(0.0, self.next_at - now)

    def sending(self, now: float) -> Optional[LockdError]:
        """About to send a ``K`` at ``now``: the loss if the safe end has passed."""
        if now >= self.safe_end:
            return NotHeld("the lease ended before an extension was confirmed")
        self._sent = now
        return None

    def kept(self) -> None:
        """The ``K`` sent last was confirmed: the lease surely runs a whole
        lease from when it was sent."""
        self.safe_end = self._sent + self.lease_s
        self.next_at = self._sent + self.interval

    @staticmethod
    def expired_notice() -> LockdError:
        """The server pushed ``X token key`` (§5c): the lease ended by expiry.
        The loss is reported at once, without another ``K``."""
        return NotHeld("the server reported the lease ended (X)")

    @staticmethod
    def client_closed() -> LockdError:
        """The client was closed: the keeper stops for good (never
        reconnects); the lease ends by itself."""
        return LockLost("the client was closed: the lease is no longer kept and ends by itself")

    def failed(self, error: Exception, now: float) -> Optional[LockdError]:
        """The ``K`` failed: the loss if final, else None (retry soon)."""
        if isinstance(error, FINAL_KEEP_ERRORS):
            return error if isinstance(error, LockdError) else Rejected("invalid", str(error))
        self.next_at = min(now + min(KEEP_RETRY_PAUSE_S, self.interval), self.safe_end)
        return None


class HeldBase:
    """What a held lock knows, exclusive or shared (the fronts add the
    ``lost`` event of their kind, release and the keeper).

    ``token`` is the fencing token to hand to every resource the lock
    protects; a shared holder has its own. ``shared`` is set for ``S``
    holds, whose ``limit`` is 0 for a read lock and N for a semaphore."""

    def __init__(self, client, token: int, key: str, owner: str, lease_ms: int, sent_at: float,
                 shared: bool = False, limit: int = 0) -> None:
        self.client = client
        self.token = token
        self.key = key
        self.owner = owner
        self.lease_ms = lease_ms
        #: monotonic time the lease is dated from (:func:`lease_start`).
        self.sent_at = sent_at
        self.shared = shared
        self.limit = limit
        self.lost_reason: Optional[LockdError] = None
        self.kept_count = 0
        #: Set only once the server confirmed the release (``R``), or said
        #: the token holds nothing (``N``): a release that failed for a
        #: transient reason can be retried through the handle.
        self.released = False
        #: The server pushed ``X`` for this token: the keeper stops at once.
        self._expired = False
        self._closing = False

    def __repr__(self) -> str:
        kind = f", shared limit={self.limit}" if self.shared else ""
        return f"{type(self).__name__}(key={self.key!r}, token={self.token}, owner={self.owner!r}{kind})"

    def _log_lost(self, why: LockdError) -> None:
        log.warning("lost the lock on %s (token %d, owner %s): %s", self.key, self.token, self.owner, why)

    def check(self) -> None:
        """Raises :class:`LockLost` if the keeper found the lock lost."""
        if self.lost.is_set():  # type: ignore[attr-defined]
            raise LockLost(f"lost the lock on {self.key}: {self.lost_reason}") from self.lost_reason

    def _exit_outcome(self, exc_type, error: Optional[LockdError]) -> None:
        """What leaving a ``with`` block raises, given the release's error:
        if the block finished normally but the lock had ended before it did,
        ``LockLost`` (the work ran unprotected for a while); a block's own
        exception is never masked."""
        if exc_type is not None:
            return
        if isinstance(error, NotHeld):
            raise LockLost(f"the lock on {self.key} ended before the block finished: {error}") from error
        if self.lost.is_set():  # type: ignore[attr-defined]
            self.check()


def permits(limit: int) -> int:
    """Checks a semaphore's permit count (1..65535)."""
    if not isinstance(limit, int) or not 1 <= limit <= 65535:
        raise ValueError("a semaphore needs 1..65535 permits (0 would be a read lock)")
    return limit


#: protocol.md §2: a credential is 1..512 bytes of 0x21..0x7E.
MAX_CREDENTIAL_BYTES = 512


class Security:
    """What every connection of a client shows the server (protocol.md §11):
    TLS (``ssl_context``, or one made from ``tls_ca``/``tls_cert``/``tls_key``)
    and a credential sent as ``H`` right after connecting — on the first
    connection and on each one a redirect or a reconnect opens. The
    server's certificate must name ``tls_server_name``, or else the host of
    the address dialled (so a redirect's node is checked under its name)."""

    def __init__(self, credential: Optional[str] = None, ssl_context: Optional[ssl.SSLContext] = None,
                 tls_ca: Optional[str] = None, tls_cert: Optional[str] = None, tls_key: Optional[str] = None,
                 tls_server_name: Optional[str] = None) -> None:
        if credential is not None and not (
                1 <= len(credential) <= MAX_CREDENTIAL_BYTES and credential.isascii()
                and all(0x21 <= ord(c) <= 0x7E for c in credential)):
            raise ValueError(f"bad credential (want 1..{MAX_CREDENTIAL_BYTES} visible ASCII bytes, no spaces)")
        if ssl_context is None and (tls_ca or tls_cert or tls_key):
            ssl_context = ssl.create_default_context(cafile=tls_ca)
            ssl_context.minimum_version = ssl.TLSVersion.TLSv1_2
            if tls_cert or tls_key:
                ssl_context.load_cert_chain(tls_cert, tls_key)
        self.credential = credential
        self.ssl_context = ssl_context
        self.tls_server_name = tls_server_name

    def server_hostname(self, address: Address) -> str:
        return self.tls_server_name or address[0]

    def hello(self) -> Optional[bytes]:
        """The ``H`` line to send first, or None without a credential."""
        return f"H {self.credential}\n".encode("ascii") if self.credential else None

    @staticmethod
    def identity(line: bytes, name: str) -> str:
        """The identity an ``H`` reply names; raises :class:`Unauthenticated`
        (the server refused the credential and closes the connection) or
        :class:`ProtocolError`. The credential is never in the message."""
        text = line.decode("ascii", "replace").rstrip("\r\n")
        f = text.split()
        if len(f) == 2 and f[0] == "H":
            return f[1]
        if f[:2] == ["E", "unauthenticated"]:
            raise Unauthenticated(f"{name} refused the credential")
        raise ProtocolError(f"unexpected reply to H from {name}: {text!r}")


class TlsPipe:
    """A client TLS session over memory buffers (``ssl.SSLObject``), sans
    I/O: the front sends what :meth:`encrypt` returns and feeds what it
    receives to :meth:`decrypt`. The threaded client's reader and writers
    share one session; an internal lock keeps OpenSSL from being entered
    twice at once. Records must leave in the order they were made: send
    what :meth:`encrypt` and :meth:`pending` return under one writer lock."""

    def __init__(self, context: ssl.SSLContext, server_hostname: str) -> None:
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        self._ssl = context.wrap_bio(self._in, self._out, server_side=False, server_hostname=server_hostname)
        self._lock = threading.Lock()

    def handshake(self, received: bytes = b"") -> Tuple[bool, bytes]:
        """Feeds ``received``; returns (done, bytes to send). Raises
        ``ssl.SSLError`` (a certificate refused, not TLS at all)."""
        with self._lock:
            if received:
                self._in.write(received)
            try:
                self._ssl.do_handshake()
                done = True
            except ssl.SSLWantReadError:
                done = False
            return done, self._out.read()

    def encrypt(self, plain: bytes) -> bytes:
        """``plain`` as records, after anything made earlier and not yet sent."""
        with self._lock:
            self._ssl.write(plain)
            return self._out.read()

    def has_pending(self) -> bool:
        return self._out.pending > 0

    def pending(self) -> bytes:
        """Records made while decrypting (e.g. a key update's answer)."""
        with self._lock:
            return self._out.read()

    def decrypt(self, cipher: bytes) -> Tuple[bytes, bool]:
        """Feeds received bytes (``b""``: the socket's EOF); returns the
        plaintext they complete and whether the session has ended (a
        close_notify or EOF). Raises ``ssl.SSLError`` on an alert or a bad
        record."""
        with self._lock:
            if cipher:
                self._in.write(cipher)
            else:
                self._in.write_eof()
            chunks = []
            ended = False
            while True:
                try:
                    chunk = self._ssl.read(64 * 1024)
                except ssl.SSLWantReadError:
                    break
                except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                    ended = True
                    break
                if not chunk:
                    ended = True
                    break
                chunks.append(chunk)
            return b"".join(chunks), ended


class ClientOptions:
    """The options :class:`lockd_client.Client` and
    :class:`lockd_client.aio.AsyncClient` share, set the same way; each
    adds its connection state in ``_init_connection``."""

    def __init__(
        self,
        addresses: Addresses = DEFAULT_ADDRESS,
        *,
        owner: Optional[str] = None,
        connect_timeout_s: float = 3.0,
        reply_timeout_s: float = 10.0,
        max_redirects: int = 3,
        no_leader_budget_s: float = 10.0,
        backoff_initial_s: float = 0.05,
        backoff_max_s: float = 1.0,
        rng: Optional[random.Random] = None,
        credential: Optional[str] = None,
        tls_ca: Optional[str] = None,
        tls_cert: Optional[str] = None,
        tls_key: Optional[str] = None,
        tls_server_name: Optional[str] = None,
        ssl_context: Optional[ssl.SSLContext] = None,
    ) -> None:
        self._nodes = Nodes(parse_addresses(addresses))
        self._security = Security(credential, ssl_context, tls_ca, tls_cert, tls_key, tls_server_name)
        #: The identity the server named in its reply to ``credential`` (``H``), or None.
        self.identity: Optional[str] = None
        self.owner = owner or default_owner()
        self.connect_timeout_s = connect_timeout_s
        self.reply_timeout_s = reply_timeout_s
        self.max_redirects = max_redirects
        self.no_leader_budget_s = no_leader_budget_s
        self.backoff_initial_s = backoff_initial_s
        self.backoff_max_s = backoff_max_s
        self._rng = rng or random.Random()
        self._init_connection()

    def _init_connection(self) -> None:
        raise NotImplementedError
