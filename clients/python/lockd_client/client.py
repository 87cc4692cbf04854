"""The threaded lockd client.

    client = Client("127.0.0.1:7070")
    with client.lock("orders/42", lease_ms=10_000, wait_ms=5_000) as lock:
        store.write(data, fencing_token=lock.token)   # kept alive meanwhile

A :class:`Client` is safe to share between threads; their requests are
pipelined on one connection and a reader thread pairs each reply with its
request by the echoed fields. It follows ``M`` redirects, retries
``E no_leader`` with jittered backoff, and raises :class:`Indeterminate`
when a request may or may not have taken effect.
"""

from __future__ import annotations

import concurrent.futures
import random
import socket
import threading
import time
from typing import Callable, Dict, Optional, Set, Tuple

from ._common import (
    DEFAULT_ADDRESS,
    DEFAULT_LOCK_LEASE_MS,
    KEEP_RETRY_PAUSE_S,
    Addresses,
    Backoff,
    acquire_outcome,
    default_owner,
    parse_addresses,
    token_outcome,
)
from .errors import (
    Indeterminate,
    LockdError,
    LockLost,
    LockTimeout,
    NoLeader,
    NotHeld,
    ProtocolError,
    Rejected,
    Unreachable,
)
from .protocol import MAX_REPLY_LINE_BYTES, Matcher, Reply, Request, parse_address, parse_reply

_READ_CHUNK = 64 * 1024
_MSG_DONTWAIT = getattr(socket, "MSG_DONTWAIT", 0)


class _NotSent(Exception):
    """The connection was already broken: the request never left, retry elsewhere."""


class _Connection:
    """One TCP connection to one node: pipelined requests, a reader thread."""

    def __init__(self, address: Tuple[str, int], connect_timeout_s: float) -> None:
        self.address = address
        self.name = f"[{address[0]}]:{address[1]}" if ":" in address[0] else f"{address[0]}:{address[1]}"
        try:
            self._sock = socket.create_connection(address, timeout=connect_timeout_s)
        except OSError as e:
            raise Unreachable(f"cannot connect to {self.name}: {e}") from None
        self._sock.settimeout(None)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._write_lock = threading.Lock()  # held across Matcher.add + send: wire order
        self._cond = threading.Condition()
        self._matcher = Matcher()
        self._futures: Dict[int, concurrent.futures.Future] = {}
        self._abandoned: Set[int] = set()
        self._next_id = 1
        self.broken: Optional[str] = None
        self._reader = threading.Thread(target=self._read_loop, name=f"lockd-reader-{self.name}", daemon=True)
        self._reader.start()

    def close(self) -> None:
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._reader.join(timeout=5)
        self._sock.close()

    def submit(self, request: Request, queue_deadline: float) -> Tuple[int, concurrent.futures.Future]:
        """Sends ``request``. A second acquire of one owner and key waits
        (until ``queue_deadline``) for the first to be answered: their
        replies could not be told apart."""
        line = request.line()
        with self._write_lock:
            with self._cond:
                while self._matcher.busy(request) and self.broken is None:
                    left = queue_deadline - time.monotonic()
                    if left <= 0:
                        raise LockTimeout("an acquire by this owner for this key was still in flight")
                    self._cond.wait(left)
                if self.broken is None and self._peer_closed():
                    self._fail(f"connection closed by {self.name}")
                if self.broken is not None:
                    raise _NotSent(self.broken)
                rid = self._next_id
                self._next_id += 1
                future: concurrent.futures.Future = concurrent.futures.Future()
                self._matcher.add(rid, request)
                self._futures[rid] = future
            try:
                self._sock.sendall(line)
            except OSError as e:
                self._fail(f"sending to {self.name} failed: {e}")
        return rid, future

    def _peer_closed(self) -> bool:
        """True if the peer closed the connection (EOF with nothing before
        it) and the reader thread has not noticed yet: a node killed or
        restarted a moment ago. The request is not sent yet, so it can
        safely go over a new connection instead (the C++ client's peek)."""
        if not _MSG_DONTWAIT:
            return False  # no non-blocking peek here: the reader thread tells
        try:
            return self._sock.recv(1, socket.MSG_PEEK | _MSG_DONTWAIT) == b""
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            return True

    def wait(self, rid: int, future: concurrent.futures.Future, deadline: float) -> Reply:
        try:
            return future.result(timeout=max(0.0, deadline - time.monotonic()))
        except concurrent.futures.TimeoutError:
            with self._cond:
                if future.done():
                    return future.result()
                self._abandoned.add(rid)
            raise Indeterminate(f"no reply from {self.name} in time (the request may have taken effect)") from None

    def _fail(self, why: str) -> None:
        with self._cond:
            if self.broken is None:
                self.broken = why
            for rid in self._matcher.drain():
                f = self._futures.pop(rid, None)
                if f is not None and not f.done():
                    f.set_exception(Indeterminate(f"connection lost before the reply (the request may have taken effect): {why}"))
            self._abandoned.clear()
            self._cond.notify_all()

    def _dispatch(self, text: str) -> None:
        reply = parse_reply(text)
        with self._cond:
            rid = self._matcher.match(reply) if reply else None
            if rid is None:
                undo = None
            else:
                future = self._futures.pop(rid)
                undo = reply if rid in self._abandoned and reply.kind == "A" else None
                self._abandoned.discard(rid)
                future.set_result(reply)
            self._cond.notify_all()
        if rid is None:
            # Nothing we sent drew this line: no reply on this connection can be trusted.
            self._fail(f"unexpected reply from {self.name}: {text!r}")
            self._sock.shutdown(socket.SHUT_RDWR)
        elif undo is not None:
            # A grant nobody waits for any more: release it (off this thread,
            # which must keep reading while the release is written).
            threading.Thread(target=self._undo, args=(undo,), daemon=True).start()

    def _undo(self, reply: Reply) -> None:
        try:
            rid, _ = self.submit(Request("R", reply.key, token=reply.token), time.monotonic())
            with self._cond:
                self._abandoned.add(rid)
        except (LockdError, _NotSent):
            pass

    def _read_loop(self) -> None:
        buf = b""
        why = f"connection closed by {self.name}"
        try:
            while True:
                chunk = self._sock.recv(_READ_CHUNK)
                if not chunk:
                    break
                buf += chunk
                *lines, buf = buf.split(b"\n")
                for raw in lines:
                    self._dispatch(raw.decode("ascii", "replace"))
                if len(buf) > MAX_REPLY_LINE_BYTES:
                    why = f"reply line from {self.name} too long"
                    break
        except OSError as e:
            why = f"reading from {self.name} failed: {e}"
        self._fail(why)


class Lock:
    """A held lock. ``token`` is the fencing token to hand to every resource
    the lock protects. Use as a context manager to release on exit.

    With a keeper (``Client.lock(keep=True)``), the lease is extended every
    third of its length; ``lost`` is set (and ``on_lost`` called, on the
    keeper's thread) if that fails for good: the server answered ``N``, or no
    extension was confirmed before the lease's safe end. Check ``lost`` (or
    call :meth:`check`) before each step that relies on the lock.
    """

    def __init__(self, client: "Client", token: int, key: str, owner: str, lease_ms: int, sent_at: float) -> None:
        self.client = client
        self.token = token
        self.key = key
        self.owner = owner
        self.lease_ms = lease_ms
        #: monotonic time the acquire was sent: the lease started no earlier.
        self.sent_at = sent_at
        self.lost = threading.Event()
        self.lost_reason: Optional[LockdError] = None
        self.kept_count = 0
        self.released = False
        self._stop = threading.Event()
        self._keeper: Optional[threading.Thread] = None
        self._on_lost: Optional[Callable[["Lock"], None]] = None

    def __repr__(self) -> str:
        return f"Lock(key={self.key!r}, token={self.token}, owner={self.owner!r})"

    def check(self) -> None:
        """Raises :class:`LockLost` if the keeper found the lock lost."""
        if self.lost.is_set():
            raise LockLost(f"lost the lock on {self.key}: {self.lost_reason}") from self.lost_reason

    def keep(self, lease_ms: Optional[int] = None) -> None:
        """Extends the lease now (``K``); raises NotHeld once it has ended."""
        self.client.keep(self.token, self.key, lease_ms or self.lease_ms)

    def release(self) -> None:
        """Stops the keeper and releases (``R``). A second call does nothing.
        Raises NotHeld if the lease had already ended."""
        if self.released:
            return
        self.released = True
        self._stop_keeper()
        self.client.release(self.token, self.key)

    def __enter__(self) -> "Lock":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            self.release()
        except NotHeld as e:
            if exc_type is None:
                # The block finished, but the lock had ended before it did.
                raise LockLost(f"the lock on {self.key} ended before the block finished: {e}") from e
        except LockdError:
            pass  # unreachable or unknown: the lease ends the lock by itself
        if exc_type is None and self.lost.is_set():
            self.check()

    # --- keeper -------------------------------------------------------------

    def _start_keeper(self, on_lost: Optional[Callable[["Lock"], None]]) -> None:
        self._on_lost = on_lost
        self._keeper = threading.Thread(target=self._keep_loop, name=f"lockd-keeper-{self.key}", daemon=True)
        self._keeper.start()

    def _stop_keeper(self) -> None:
        self._stop.set()
        if self._keeper is not None and self._keeper is not threading.current_thread():
            self._keeper.join()

    def _declare_lost(self, why: LockdError) -> None:
        self.lost_reason = why
        self.lost.set()
        if self._on_lost is not None:
            self._on_lost(self)

    def _keep_loop(self) -> None:
        lease_s = self.lease_ms / 1000
        interval = max(lease_s / 3, 0.001)
        safe_end = self.sent_at + lease_s
        next_at = self.sent_at + interval
        while not self._stop.wait(max(0.0, next_at - time.monotonic())):
            sent = time.monotonic()
            if sent >= safe_end:
                self._declare_lost(NotHeld("the lease ended before an extension was confirmed"))
                return
            try:
                reply = self.client.call(Request("K", self.key, token=self.token, lease_ms=self.lease_ms),
                                         deadline=safe_end)
                token_outcome(reply, "K")
            except (NotHeld, Rejected, ProtocolError, ValueError) as e:
                self._declare_lost(e if isinstance(e, LockdError) else Rejected("invalid", str(e)))
                return
            except LockdError:
                next_at = min(time.monotonic() + min(KEEP_RETRY_PAUSE_S, interval), safe_end)
                continue
            self.kept_count += 1
            safe_end = sent + lease_s
            next_at = sent + interval


class Client:
    """A lockd client for one node or a cluster (give every node's address).

    Options: ``owner`` is the default owner label (``HOST:PID``);
    ``reply_timeout_s`` how long a reply may take beyond the request's
    ``wait_ms``; ``max_redirects`` the ``M`` hops per request;
    ``no_leader_budget_s`` how long ``E no_leader`` is retried, with a
    backoff doubling from ``backoff_initial_s`` to ``backoff_max_s``.
    """

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
    ) -> None:
        self._addresses = parse_addresses(addresses)
        self.owner = owner or default_owner()
        self.connect_timeout_s = connect_timeout_s
        self.reply_timeout_s = reply_timeout_s
        self.max_redirects = max_redirects
        self.no_leader_budget_s = no_leader_budget_s
        self.backoff_initial_s = backoff_initial_s
        self.backoff_max_s = backoff_max_s
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._current = 0
        self._conn: Optional[_Connection] = None
        self._closed = False

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Closes the connection. Locks still held end with their leases."""
        with self._lock:
            conn, self._conn, self._closed = self._conn, None, True
        if conn is not None:
            conn.close()

    def _connection_to(self, target: int) -> _Connection:
        with self._lock:
            if self._closed:
                raise Unreachable("the client is closed")
            address = self._addresses[target]
            conn = self._conn
            if conn is not None and conn.broken is None and conn.address == address:
                return conn
            new = _Connection(address, self.connect_timeout_s)
            self._conn, self._current = new, target
        if conn is not None:
            threading.Thread(target=conn.close, daemon=True).start()
        return new

    def _index_of(self, address: Tuple[str, int]) -> int:
        with self._lock:
            if address not in self._addresses:
                self._addresses.append(address)
            return self._addresses.index(address)

    def call(self, request: Request, deadline: Optional[float] = None) -> Reply:
        """Sends any request, following redirects and retrying ``no_leader``.
        Returns the reply (``A``/``T``/``B``/``R``/``N``/``K``). ``deadline``
        (monotonic) cuts the retry budget and the reply timeout short: the
        keeper passes its lease's safe end."""
        why = request.validate()
        if why:
            raise ValueError(why)
        deadline = deadline if deadline is not None else float("inf")
        budget_end = min(time.monotonic() + self.no_leader_budget_s, deadline)
        backoff = Backoff(self.backoff_initial_s, self.backoff_max_s, self._rng)
        with self._lock:
            target = self._current
        redirects = 0
        redirected = False  # ``target`` is the leader named by the last M
        failures = 0
        stale = 0
        while True:
            try:
                conn = self._connection_to(target)
                rid, future = conn.submit(request, time.monotonic() + request.wait_ms / 1000)
            except Unreachable as e:
                if redirected:
                    # The leader an M named is down (killed a moment ago: its
                    # followers name it until their election timeout). That is
                    # no leader for now: back off within the budget, like
                    # ``E no_leader``, and ask another node.
                    redirected = False
                    pause = backoff.pause()
                    if time.monotonic() + pause >= budget_end:
                        raise NoLeader(f"the leader named by M cannot be reached ({e})") from None
                    time.sleep(pause)
                    target = (target + 1) % len(self._addresses)
                    redirects = 0
                    continue
                # Not sent: safe to try the next node, once around the list.
                failures += 1
                if failures >= len(self._addresses):
                    raise
                target = (target + 1) % len(self._addresses)
                continue
            except _NotSent as e:
                # The connection had broken (a restarted server): not sent, reconnect.
                stale += 1
                if stale > 3:
                    raise Unreachable(str(e)) from None
                continue
            reply_by = min(time.monotonic() + request.wait_ms / 1000 + self.reply_timeout_s, deadline)
            try:
                reply = conn.wait(rid, future, reply_by)
            except Indeterminate:
                # No reply (a paused, partitioned or dead node): not resent (it
                # may have taken effect), but the next request goes to the next
                # node rather than to the same silent one.
                with self._lock:
                    if self._current == target:
                        self._current = (target + 1) % len(self._addresses)
                raise
            failures = 0
            redirected = False
            if reply.kind == "M":
                leader = parse_address(reply.leader)
                if leader is None:
                    raise ProtocolError(f"M names a bad leader address: {reply.leader}")
                redirects += 1
                if redirects > self.max_redirects:
                    raise NoLeader(f"more than {self.max_redirects} redirects (last to {reply.leader})")
                target = self._index_of(leader)
                redirected = True
                continue
            if reply.kind == "E":
                if reply.error_code == "no_leader":
                    pause = backoff.pause()
                    if time.monotonic() + pause >= budget_end:
                        raise NoLeader(f"no leader known (retried for {self.no_leader_budget_s} s)")
                    time.sleep(pause)
                    target = (target + 1) % len(self._addresses)  # another node may know one
                    redirects = 0
                    continue
                if reply.error_code == "indeterminate":
                    raise Indeterminate(
                        "the leader lost leadership before the request committed; it may or may not have taken effect")
                raise Rejected(reply.error_code)
            return reply

    def acquire(self, key: str, *, owner: Optional[str] = None, lease_ms: int = 0, wait_ms: int = 0) -> Lock:
        """``A``: returns the held :class:`Lock` (without a keeper).

        ``lease_ms`` 0 asks for the server's default lease. Raises
        :class:`LockTimeout` (a ``TimeoutError``) for ``T``,
        :class:`LockBusy` for ``B``, and the transport errors of :meth:`call`.
        """
        owner = owner or self.owner
        sent_at = time.monotonic()
        reply = self.call(Request("A", key, owner=owner, lease_ms=lease_ms, wait_ms=wait_ms))
        return Lock(self, acquire_outcome(reply, wait_ms), key, owner, lease_ms, sent_at)

    def lock(self, key: str, *, owner: Optional[str] = None, lease_ms: int = DEFAULT_LOCK_LEASE_MS,
             wait_ms: int = 0, keep: bool = True, on_lost: Optional[Callable[[Lock], None]] = None) -> Lock:
        """Acquires ``key`` and, with ``keep``, keeps its lease alive in a
        background thread until released. Use it in a ``with`` block."""
        if lease_ms <= 0:
            raise ValueError("lock() needs lease_ms >= 1")
        lock = self.acquire(key, owner=owner, lease_ms=lease_ms, wait_ms=wait_ms)
        if keep:
            lock._start_keeper(on_lost)
        return lock

    def release(self, token: int, key: str) -> None:
        """``R``: raises :class:`NotHeld` if the token does not hold the key."""
        token_outcome(self.call(Request("R", key, token=token)), "R")

    def keep(self, token: int, key: str, lease_ms: int) -> None:
        """``K``: the lease now ends ``lease_ms`` from the server's now.
        Raises :class:`NotHeld` once the lease has ended."""
        token_outcome(self.call(Request("K", key, token=token, lease_ms=lease_ms)), "K")
