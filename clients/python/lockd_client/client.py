"""The threaded lockd client.

    client = Client("127.0.0.1:7070")
    with client.lock("orders/42", lease_ms=10_000, wait_ms=5_000) as lock:
        store.write(data, fencing_token=lock.token)   # kept alive meanwhile
    with client.read_lock("config") as reader:        # many readers at once
        load(path, fencing_token=reader.token)
    with client.semaphore("workers", 8).acquire(wait_ms=60_000) as permit:
        work()                                        # at most 8 at once

A :class:`Client` is safe to share between threads; their requests are
pipelined on one connection and a reader thread pairs each reply with its
request by the echoed fields. It follows ``M`` redirects, retries
``E no_leader`` with jittered backoff, and raises :class:`Indeterminate`
when a request may or may not have taken effect. Those decisions are the
sans-I/O core's (:mod:`._core`), shared with the asyncio client. Its
watches (``watch``, ``observe``) share one more connection, whatever their
number.
"""

from __future__ import annotations

import concurrent.futures
import queue
import socket
import ssl
import threading
import time
import weakref
from typing import Callable, Dict, Iterator, List, Optional, Tuple

from ._common import (
    DEFAULT_LOCK_LEASE_MS,
    KEEP_RETRY_PAUSE_S,
    acquire_outcome,
    token_outcome,
)
from ._core import (
    CallPlan,
    ClientOptions,
    HeldBase,
    KeepPlan,
    KeyState,
    Leader,
    LeaderFilter,
    Security,
    TlsPipe,
    WatchBook,
    WatchFilter,
    Wire,
    address_name,
    check_value,
    lease_start,
    leader_of,
    log,
    permits,
    requeued,
    w_overdue,
    watch_answer,
    watch_wait_s,
)
from .errors import Indeterminate, LockBusy, NotHeld, LockdError, LockTimeout, NoLeader, ProtocolError, Rejected, Unreachable
from .protocol import Reply, Request

#: Called on the reader thread with each push (``V``, ``X``); must not block.
OnPush = Callable[[Reply], None]

_READ_CHUNK = 64 * 1024
_MSG_DONTWAIT = getattr(socket, "MSG_DONTWAIT", 0)


class _NotSent(Exception):
    """The connection was already broken: the request never left, retry elsewhere."""


class _Connection:
    """One TCP connection to one node: pipelined requests, a reader thread.
    Matching and undo decisions are the shared :class:`~._core.Wire`'s."""

    def __init__(self, address: Tuple[str, int], connect_timeout_s: float, security: Security,
                 on_push: Optional[OnPush] = None, on_fail: Optional[Callable[[str], None]] = None) -> None:
        self.address = address
        self._on_push = on_push
        self._on_fail = on_fail
        self.name = address_name(address)
        try:
            self._sock = socket.create_connection(address, timeout=connect_timeout_s)
        except OSError as e:
            raise Unreachable(f"cannot connect to {self.name}: {e}") from None
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # TLS, then H, before anything else (bounded by the connect timeout).
        self._tls: Optional[TlsPipe] = None
        self.identity: Optional[str] = None
        self._leftover = b""  # bytes read with the H reply: the reader's first
        try:
            if security.ssl_context is not None:
                self._tls = self._handshake(security)
            hello = security.hello()
            if hello is not None:
                self.identity = self._hello(hello)
        except BaseException:
            self._sock.close()
            raise
        self._sock.settimeout(None)
        self._write_lock = threading.Lock()  # held across Wire.add + send: wire order
        self._cond = threading.Condition()  # guards _wire, _futures, broken
        self._wire = Wire(self.name)
        self._futures: Dict[int, concurrent.futures.Future] = {}
        self.broken: Optional[str] = None
        self._reader = threading.Thread(target=self._read_loop, name=f"lockd-reader-{self.name}", daemon=True)
        self._reader.start()

    def _handshake(self, security: Security) -> TlsPipe:
        assert security.ssl_context is not None
        pipe = TlsPipe(security.ssl_context, security.server_hostname(self.address))
        received = b""
        try:
            while True:
                done, out = pipe.handshake(received)
                if out:
                    self._sock.sendall(out)
                if done:
                    return pipe
                received = self._sock.recv(_READ_CHUNK)
                if not received:
                    raise Unreachable(f"TLS handshake with {self.name} failed: connection closed")
        except OSError as e:  # ssl.SSLError too: another CA, another name, not TLS
            raise Unreachable(f"TLS handshake with {self.name} failed: {e}") from None

    def _hello(self, hello: bytes) -> str:
        """Sends ``H`` and reads its reply, nothing else in flight."""
        buf = b""
        try:
            self._sock.sendall(self._tls.encrypt(hello) if self._tls else hello)
            while b"\n" not in buf:
                chunk = self._sock.recv(_READ_CHUNK)
                if self._tls is not None:
                    chunk, ended = self._tls.decrypt(chunk)
                    if ended and b"\n" not in buf + chunk:
                        raise Unreachable(f"no reply to H from {self.name}: connection closed")
                elif not chunk:
                    raise Unreachable(f"no reply to H from {self.name}: connection closed")
                buf += chunk
        except OSError as e:
            raise Unreachable(f"no reply to H from {self.name}: {e}") from None
        line, _, self._leftover = buf.partition(b"\n")
        return Security.identity(line, self.name)

    def _send(self, data: bytes) -> None:
        """Sends request bytes; the caller holds the write lock (TLS records
        leave in the order they were made)."""
        self._sock.sendall(self._tls.encrypt(data) if self._tls is not None else data)

    def close(self) -> None:
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._reader.join(timeout=5)
        self._sock.close()

    def submit(self, request: Request, queue_deadline: float,
               undo: bool = False) -> Tuple[int, concurrent.futures.Future]:
        """Sends ``request``. A second acquire of one owner and key waits
        (until ``queue_deadline``) for the first to be answered: their
        replies could not be told apart; it then goes out with the wait it
        has left (:func:`~._core.requeued`). It waits without the write
        lock, so every other request (the release that ends the first one's
        wait, say) goes out meanwhile. A retired connection takes only the
        release of a late grant (``undo``)."""
        queued = False
        while True:
            with self._cond:
                while self._wire.busy(request) and self.broken is None:
                    left = queue_deadline - time.monotonic()
                    if left <= 0:
                        raise LockTimeout("an acquire by this owner for this key was still in flight")
                    queued = True
                    self._cond.wait(left)
            with self._write_lock:
                with self._cond:
                    if self._wire.busy(request) and self.broken is None:
                        continue  # another one went first meanwhile: wait again
                    if self.broken is None and self._peer_closed():
                        self._fail(f"connection closed by {self.name}")
                    if self.broken is not None:
                        raise _NotSent(self.broken)
                    if self._wire.retired and not undo:
                        raise _NotSent(f"the connection to {self.name} is retired")
                    if queued:
                        request = requeued(request, queue_deadline, time.monotonic())
                    rid, line = self._wire.add(request)
                    future: concurrent.futures.Future = concurrent.futures.Future()
                    self._futures[rid] = future
                try:
                    self._send(line)
                except OSError as e:  # ssl.SSLError too
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
                self._wire.abandon(rid)
                idle = self._wire.retired and self._wire.idle()
            if idle:
                self._shutdown()
            raise Indeterminate(f"no reply from {self.name} in time (the request may have taken effect)") from None

    def retire(self) -> None:
        """The client moved to another node: no new request goes out here;
        the connection stays open while a caller still waits for a reply on
        it (a wait queued at a healthy leader keeps its place), then closes."""
        with self._cond:
            self._wire.retired = True
            idle = self._wire.idle()
        if idle:
            self._shutdown()

    @property
    def retired(self) -> bool:
        return self._wire.retired

    def _shutdown(self) -> None:
        """Ends the connection; the reader thread sees EOF and fails what is left."""
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _fail(self, why: str) -> None:
        with self._cond:
            first = self.broken is None
            if first:
                self.broken = why
            for rid, _ in self._wire.drain():
                f = self._futures.pop(rid, None)
                if f is not None and not f.done():
                    f.set_exception(Indeterminate(f"connection lost before the reply (the request may have taken effect): {why}"))
            self._cond.notify_all()
        if first and self._on_fail is not None:
            self._on_fail(why)

    def _receive(self, data: bytes) -> Optional[str]:
        """Delivers the replies ``data`` completes and routes its pushes; why
        the connection broke, if it did."""
        undo = []
        pushes: List[Reply] = []
        with self._cond:
            deliveries, broken = self._wire.receive(data)
            for d in deliveries:
                if d.push:
                    pushes.append(d.reply)
                    continue
                future = self._futures.pop(d.rid)
                future.set_result(d.reply)
                if d.undo is not None:
                    undo.append(d.undo)
            self._cond.notify_all()
            idle = self._wire.retired and self._wire.idle() and not undo
        if self._on_push is not None:
            for push in pushes:
                self._on_push(push)
        if idle:
            self._shutdown()
        for request in undo:
            # A grant nobody waits for any more: release it (off this thread,
            # which must keep reading while the release is written).
            threading.Thread(target=self._undo, args=(request,), daemon=True).start()
        return broken

    def _undo(self, request: Request) -> None:
        try:
            rid, _ = self.submit(request, time.monotonic(), undo=True)
            with self._cond:
                self._wire.abandon(rid)
        except (LockdError, _NotSent):
            pass

    def _read_loop(self) -> None:
        why = f"connection closed by {self.name}"
        try:
            broken = self._receive(self._leftover) if self._leftover else None
            self._leftover = b""
            while broken is None:
                chunk = self._sock.recv(_READ_CHUNK)
                ended = not chunk
                if self._tls is not None:
                    chunk, ended = self._tls.decrypt(chunk)
                    if self._tls.has_pending():  # e.g. a key update's answer
                        with self._write_lock:
                            self._sock.sendall(self._tls.pending())
                if chunk:
                    broken = self._receive(chunk)
                if ended:
                    break
            if broken is not None:
                # Nothing we sent drew that line: no reply on this connection can be trusted.
                why = broken
        except OSError as e:  # ssl.SSLError too: an alert, a bad record
            why = f"reading from {self.name} failed: {e}"
        self._fail(why)
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        if self._wire.retired:
            self._sock.close()  # nobody else will: the client moved on


class Lock(HeldBase):
    """A held lock — exclusive (``acquire``/``lock``) or shared
    (``read_lock``, a ``semaphore`` permit; then ``shared`` is set).
    ``token`` is the fencing token to hand to every resource the lock
    protects. Use as a context manager to release on exit.

    With a keeper (``keep=True``), the lease is extended every third of its
    length; ``lost`` is set (and ``on_lost`` called, on the keeper's
    thread) if that fails for good: the server answered ``N`` or pushed
    ``X`` (the lease ended by expiry), or no extension was confirmed before
    the lease's safe end. Check ``lost`` (or call :meth:`check`) before
    each step that relies on the lock. ``on_lost`` may call
    :meth:`release`.
    """

    def __init__(self, client: "Client", token: int, key: str, owner: str, lease_ms: int, sent_at: float,
                 shared: bool = False, limit: int = 0) -> None:
        super().__init__(client, token, key, owner, lease_ms, sent_at, shared, limit)
        self.lost = threading.Event()
        self._wake = threading.Event()  # stop, X, or the client closing
        self._stopped = False
        self._keeper: Optional[threading.Thread] = None
        self._on_lost: Optional[Callable[["Lock"], None]] = None

    def keep(self, lease_ms: Optional[int] = None) -> None:
        """Extends the lease now (``K``); raises NotHeld once it has ended."""
        self.client.keep(self.token, self.key, lease_ms or self.lease_ms)

    def release(self) -> None:
        """Stops the keeper and releases (``R``; for a shared hold, this
        holder only). ``released`` is set once the server confirmed it (or
        answered ``N``: the token holds nothing, raised as NotHeld); after
        a transient failure (Indeterminate, Unreachable, NoLeader) it stays
        unset and release() can be called again. A call after a confirmed
        release does nothing."""
        if self.released:
            return
        self._stop_keeper()
        try:
            self.client.release(self.token, self.key)
        except NotHeld:
            self._released()
            raise
        self._released()

    def _released(self) -> None:
        self.released = True
        self.client._held.pop((self.token, self.key), None)

    def __enter__(self) -> "Lock":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        error: Optional[LockdError] = None
        try:
            self.release()
        except LockdError as e:
            error = e  # unreachable or unknown: the lease ends the lock by itself
        self._exit_outcome(exc_type, error)

    # --- keeper -------------------------------------------------------------

    def _start_keeper(self, on_lost: Optional[Callable[["Lock"], None]]) -> None:
        self._on_lost = on_lost
        self._keeper = threading.Thread(target=self._keep_loop, name=f"lockd-keeper-{self.key}", daemon=True)
        self._keeper.start()

    def _stop_keeper(self) -> None:
        self._stopped = True
        self._wake.set()
        if self._keeper is not None and self._keeper is not threading.current_thread():
            self._keeper.join()

    def _pushed_expired(self) -> None:
        """``X`` for this token (on the reader thread): wake the keeper."""
        self._expired = True
        if self._keeper is None:
            self._declare_lost(KeepPlan.expired_notice(), call_back=False)
        self._wake.set()

    def _client_closed(self) -> None:
        """The client closed: the keeper stops for good (without a callback)."""
        if self._keeper is not None and not self.released and not self.lost.is_set():
            self._closing = True
            self._wake.set()

    def _declare_lost(self, why: LockdError, call_back: bool = True) -> None:
        if self.lost.is_set():
            return
        self._log_lost(why)
        self.lost_reason = why
        self.lost.set()
        if call_back and self._on_lost is not None:
            self._on_lost(self)

    def _keep_loop(self) -> None:
        plan = KeepPlan(self.lease_ms, self.sent_at)
        while True:
            self._wake.wait(plan.wait_s(time.monotonic()))
            if self._stopped:
                return
            if self._closing:
                self._declare_lost(KeepPlan.client_closed(), call_back=False)
                return
            lost = KeepPlan.expired_notice() if self._expired else plan.sending(time.monotonic())
            if lost is None:
                try:
                    reply = self.client.call(Request("K", self.key, token=self.token, lease_ms=self.lease_ms),
                                             deadline=plan.safe_end)
                    token_outcome(reply, "K")
                except (LockdError, ValueError) as e:
                    if self._stopped or self._closing:
                        continue
                    lost = plan.failed(e, time.monotonic())
                    if lost is None:
                        continue
                else:
                    self.kept_count += 1
                    plan.kept()
                    continue
            if self._stopped:
                return
            self._declare_lost(lost)
            return


class Leadership(Lock):
    """A won election (:meth:`Client.campaign`): the lock on the election's
    key, held under the candidate's ``value`` and kept alive. ``lost`` /
    ``on_lost`` say leadership is gone (``X``, ``N`` to a keep, or no keep
    confirmed before the lease's safe end: then another may lead);
    :meth:`resign` gives it up. ``token`` fences the leader's writes."""

    @property
    def value(self) -> str:
        return self.owner

    def resign(self) -> None:
        """Releases the election's key (the next candidate wins)."""
        self.release()


class _Closed(LockdError):
    """The watch was closed."""


#: In a watch's queue: wake up and look again (the connection broke, the
#: watch or the client closed).
_BROKEN = object()


class _WatchSession:
    """The one connection every :class:`Watch` of a :class:`Client` shares
    (§5c), apart from the request connection (any member serves watches: no
    redirect, no leader needed). Made at the client's first watch; it
    connects at the first :meth:`Watch.get`.

    Each new watch sends its own ``W`` (its first state is the reply); a
    ``V`` push goes to every watch of its key (each drops what is not newer
    by its own :class:`~._core.WatchFilter`); the last watch of a key to
    close sends ``U``. Which keys, and which ``U`` is due, is the
    :class:`~._core.WatchBook`'s. ``W`` and ``U`` go out under ``_lock`` in
    the order the book changed, so a ``U`` never overtakes a later ``W`` of
    its key. When the connection breaks, the first watch whose ``get``
    notices reconnects for all (under ``_lock``), watching every key again;
    the others find it connected. No thread of its own: the connection's
    reader routes pushes into the watches' queues, never blocking."""

    def __init__(self, client: "Client") -> None:
        self._client = client
        #: Held to connect, and to send W and U (in book order); across I/O.
        self._lock = threading.Lock()
        #: Guards _book, _conn, _closed and each watch's _registered, _asked
        #: and _early; never held across I/O (the reader takes it per push).
        self._book_lock = threading.Lock()
        self._book: WatchBook["Watch"] = WatchBook()
        self._conn: Optional[_Connection] = None
        #: A node the next connect moves on from (it knew no leader, or went silent).
        self._avoid: Optional[int] = None
        self._closed = False
        self._made: "weakref.WeakSet[Watch]" = weakref.WeakSet()  # every watch made, for close()

    def made(self, watch: "Watch") -> None:
        with self._book_lock:
            self._made.add(watch)

    # --- on a watch's thread --------------------------------------------------

    def ensure(self, watch: "Watch", deadline: Optional[float]) -> None:
        """Before ``watch`` waits for a state: the connection is up and
        ``watch`` is registered (its ``W`` sent; the answer comes to its
        queue). Reconnects, for every watch, if the connection is gone."""
        conn = self._conn
        if watch._registered and conn is not None and conn.broken is None:
            return
        left = -1.0 if deadline is None else max(0.0, deadline - time.monotonic())
        if not self._lock.acquire(timeout=left):
            raise TimeoutError(f"no change of {watch.key} in time")
        try:
            if self._closed:
                raise Unreachable("the client is closed")
            conn = self._conn
            if conn is None or conn.broken is not None:
                conn = self._reconnect(watch.key)
            if not watch._registered:
                with self._book_lock:
                    if watch._closed:
                        raise _Closed("the watch is closed")
                    self._book.add(watch.key, watch)
                    watch._registered = True
                    watch._asked = (conn, time.monotonic())  # pushes wait for its W's reply
                self._ask(conn, watch)
        finally:
            self._unlock()

    def remove(self, watch: "Watch") -> None:
        """``watch`` closed: nothing reaches its queue any more; ``U`` if it
        was its key's last watch (sent now, or by whoever holds ``_lock``:
        never blocks on a reconnect)."""
        with self._book_lock:
            if watch._registered:
                self._book.remove(watch.key, watch)
                watch._registered = False
            watch._asked = None
            watch._early.clear()
        if self._lock.acquire(blocking=False):
            self._unlock()

    def silent(self, conn: _Connection) -> None:
        """A ``W`` got no reply in time: the node is silent (paused, cut
        off). End the connection; the reconnect tries the next node."""
        with self._book_lock:
            current = conn is self._conn
        if current:
            self._avoid = self._client._nodes.index_of(conn.address)
            log.warning("no reply to W from %s in time: watching on another node", conn.name)
        conn._shutdown()

    def close(self) -> None:
        """The client closes: every watch ends (its ``get`` raises, its
        iteration stops) and the connection closes."""
        with self._book_lock:
            self._closed = True
            conn, self._conn = self._conn, None
            self._book.clear()
            watches = list(self._made)
            for w in watches:
                w._closed = True
                w._registered = False
                w._asked = None
                w._early.clear()
        for w in watches:
            w._queue.put(_BROKEN)
        if conn is not None:
            conn.close()

    # --- under _lock ----------------------------------------------------------

    def _ask(self, conn: _Connection, watch: "Watch") -> None:
        try:
            _, future = conn.submit(Request("W", watch.key), time.monotonic())
        except _NotSent:
            self._answered(conn, watch, None)  # the reconnect watches it again
            return
        future.add_done_callback(lambda f: self._answered(conn, watch, f))

    def _unlock(self) -> None:
        """Sends the ``U`` that are due, then releases ``_lock``; again if
        a watch closed meanwhile and nobody else holds it (so no ``U`` is
        left behind by a close that found the lock taken)."""
        while True:
            self._send_unwatch()
            self._lock.release()
            with self._book_lock:
                pending = self._book.pending
            if not pending or not self._lock.acquire(blocking=False):
                return

    def _send_unwatch(self) -> None:
        with self._book_lock:
            keys = self._book.unwatch()
            conn = self._conn
        if conn is None or conn.broken is not None:
            return  # a new connection watches only the keys that have watches
        for key in keys:
            try:
                conn.submit(Request("U", key), time.monotonic())  # its reply is read and dropped
            except _NotSent:
                return

    def _reconnect(self, key: str) -> _Connection:
        """Connects (from the client's current node on, or past the one to
        avoid; jittered backoff as :class:`~._core.CallPlan` says) and
        watches every key of the book again; each answer goes to every
        watch of its key. ``key`` names the attempt in the log."""
        c = self._client
        with self._book_lock:
            old, self._conn = self._conn, None
        if old is not None:
            old.close()
        plan = CallPlan(c._nodes, Request("W", key), c, None, time.monotonic())
        if self._avoid is not None:
            plan.target, self._avoid = c._nodes.after(self._avoid), None
        while True:
            if self._closed:
                raise Unreachable("the client is closed")
            try:
                conn = _Connection(c._nodes.address(plan.target), c.connect_timeout_s, c._security,
                                   on_push=self._route, on_fail=self._failed)
            except Unreachable as e:
                time.sleep(plan.unreachable(e, time.monotonic()))
                continue
            with self._book_lock:
                keys = self._book.rewatch()
            try:
                try:
                    sent = [conn.submit(Request("W", k), time.monotonic()) for k in keys]
                    by = plan.reply_by(time.monotonic())
                    replies = [(k, conn.wait(rid, future, by)) for k, (rid, future) in zip(keys, sent)]
                except (_NotSent, Indeterminate) as e:
                    silent = conn.broken is None
                    conn.close()
                    pause = plan.not_sent(str(e))
                    if silent:
                        plan.target = c._nodes.after(plan.target)
                    time.sleep(pause)
                    continue
                no_leader = next((r for _, r in replies if watch_answer(r) is None), None)
                if no_leader is not None:  # a member that has applied nothing yet: another one
                    conn.close()
                    time.sleep(plan.reply(no_leader, time.monotonic()))
                    continue
            except BaseException:  # out of budget, or interrupted: the attempt's connection goes
                conn.close()
                raise
            with self._book_lock:
                closed = self._closed
                if not closed:
                    self._conn = conn
                    for k, reply in replies:
                        answer = watch_answer(reply)
                        for w in self._book.watching(k):
                            if not isinstance(answer, KeyState):
                                self._book.remove(k, w, watched=False)
                                w._registered = False
                            w._queue.put(answer)
            if closed:
                conn.close()
                raise Unreachable("the client is closed")
            if keys:
                log.info("watching %d key(s) again on %s", len(keys), conn.name)
            return conn

    # --- on the connection's reader thread ----------------------------------

    def _answered(self, conn: _Connection, watch: "Watch", future: Optional[concurrent.futures.Future]) -> None:
        """The reply to a new watch's ``W`` (or None: it was not sent)."""
        reply = None
        if future is not None and future.exception() is None:
            reply = future.result()
        answer = watch_answer(reply) if reply is not None else None
        with self._book_lock:
            if watch._asked is None or watch._asked[0] is not conn:
                return  # closed meanwhile
            watch._asked = None
            early, watch._early = watch._early, []
            if isinstance(answer, LockdError):
                if self._book.remove(watch.key, watch, watched=False):
                    watch._registered = False
                    watch._queue.put(answer)
                return
            if isinstance(answer, KeyState):
                watch._queue.put(answer)
            for state in early:  # pushes that came before the reply: only newer ones pass
                watch._queue.put(state)
        if reply is not None and answer is None:  # E no_leader: the session moves on
            with self._book_lock:
                current = conn is self._conn
            if current:
                self._avoid = self._client._nodes.index_of(conn.address)
                log.info("%s knows no leader yet: watching on another node", conn.name)
            conn._shutdown()

    def _route(self, reply: Reply) -> None:
        """A push: a ``V`` goes to every watch of its key (queued, never blocking)."""
        if reply.kind != "V":
            return
        state = KeyState.of(reply)
        with self._book_lock:
            for w in self._book.watching(reply.key):
                if w._asked is not None:
                    w._early.append(state)  # its W is unanswered: after the reply
                else:
                    w._queue.put(state)

    def _failed(self, why: str) -> None:
        with self._book_lock:
            watches = self._book.watches()
        for w in watches:
            w._queue.put(_BROKEN)


class Watch:
    """``for state in client.watch(key):`` every state of ``key`` (§5c), as
    :class:`~._core.KeyState`, in ``rev`` order: the state now, then each
    change. All watches of a client share one connection of their own (any
    member serves them; no redirect), opened at the first :meth:`get`;
    each watch sends its own ``W``, and the last of a key to close sends
    ``U``. When that connection is lost, the first :meth:`get` to notice
    reconnects for all of them (to the next node if need be) and watches
    every key again; each watch drops the states whose ``rev`` is not
    newer than one it already yielded. Close it (``with`` or
    :meth:`close`) to stop; :meth:`Client.close` ends every watch."""

    def __init__(self, client: "Client", key: str) -> None:
        why = Request("W", key).validate()
        if why:
            raise ValueError(why)
        self.client = client
        self.key = key
        self._queue: "queue.Queue" = queue.Queue()
        self._filter = WatchFilter()
        self._closed = False
        # The session's, under its _book_lock:
        self._registered = False  # in the book (its W sent or about to be)
        self._asked: Optional[Tuple[_Connection, float]] = None  # its W awaiting the reply: (conn, sent at)
        self._early: List[KeyState] = []  # pushes that came while its W was unanswered
        self._session = client._watch_session()
        self._session.made(self)

    def __enter__(self) -> "Watch":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __iter__(self) -> Iterator[KeyState]:
        while not self._closed:
            try:
                yield self.get()
            except _Closed:
                return

    def close(self) -> None:
        """Stops the watch: no state reaches it any more once this returns
        (``U`` goes out if no other watch of the client watches the key)."""
        self._closed = True
        self._session.remove(self)
        self._queue.put(_BROKEN)

    def get(self, timeout_s: Optional[float] = None) -> KeyState:
        """The next state (blocking up to ``timeout_s``; raises
        ``TimeoutError`` then). Reconnects and watches again as needed: a
        reconnect under way runs to its end (the client's connect and reply
        timeouts, so a short ``timeout_s`` never makes a slow node look
        silent), so a ``get`` that makes one may take longer than
        ``timeout_s``."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            if self._closed:
                raise _Closed("the watch is closed")
            try:
                self._session.ensure(self, deadline)
            except LockdError:
                if self._closed:
                    raise _Closed("the watch is closed") from None
                raise
            asked = self._asked
            asked_at = None if asked is None else asked[1]
            left = watch_wait_s(time.monotonic(), deadline, asked_at, self.client.reply_timeout_s)
            try:
                item = self._queue.get(timeout=left)
            except queue.Empty:
                now = time.monotonic()
                if self._asked is asked and w_overdue(now, asked_at, self.client.reply_timeout_s):
                    self._session.silent(asked[0])
                    continue
                if deadline is not None and now >= deadline:
                    raise TimeoutError(f"no change of {self.key} in time") from None
                continue
            if self._closed:
                raise _Closed("the watch is closed")
            if item is _BROKEN:
                continue
            if isinstance(item, LockdError):
                raise item
            if self._filter.admit(item):
                return item


class Observe:
    """``for leader in client.observe(key):`` every change of the election's
    leader (a :class:`~._core.Leader`, or None while nobody leads), the
    same holder never twice in a row. Built on :class:`Watch` (so on the
    connection the client's watches share)."""

    def __init__(self, client: "Client", key: str) -> None:
        self._watch = Watch(client, key)
        self._filter = LeaderFilter()

    def __enter__(self) -> "Observe":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._watch.close()

    def get(self, timeout_s: Optional[float] = None) -> Optional[Leader]:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            changed, leader = self._filter.admit(self._watch.get(left))
            if changed:
                return leader

    def __iter__(self) -> Iterator[Optional[Leader]]:
        while not self._watch._closed:
            try:
                yield self.get()
            except _Closed:
                return


class Semaphore:
    """``limit`` permits on one key, counted by the server (``S owner key
    limit``). From :meth:`Client.semaphore`::

        pool = client.semaphore("workers/encode", 8)
        with pool.acquire(wait_ms=60_000) as permit:   # at most 8 at once
            encode(job, fencing_token=permit.token)

    Waiters are served in arrival order (one FIFO queue per key). Every
    user of one key must pass the same limit (else :class:`LimitMismatch`).
    """

    def __init__(self, client: "Client", key: str, limit: int) -> None:
        self.client = client
        self.key = key
        self.limit = permits(limit)

    def acquire(self, *, owner: Optional[str] = None, lease_ms: int = DEFAULT_LOCK_LEASE_MS, wait_ms: int = 0,
                keep: bool = True, on_lost: Optional[Callable[[Lock], None]] = None) -> Lock:
        """Takes one permit (kept alive by a keeper thread); use it in a
        ``with`` block. Raises :class:`LockTimeout` when none came free in time."""
        return self.client._hold("S", self.key, owner, lease_ms, wait_ms, keep, on_lost, self.limit)

    def __repr__(self) -> str:
        return f"Semaphore(key={self.key!r}, limit={self.limit})"


class Client(ClientOptions):
    """A lockd client for one node or a cluster (give every node's address).

    Options: ``owner`` is the default owner label (``HOST:PID``);
    ``reply_timeout_s`` how long a reply may take beyond the request's
    ``wait_ms``; ``max_redirects`` the ``M`` hops per request;
    ``no_leader_budget_s`` how long ``E no_leader`` is retried, with a
    backoff doubling from ``backoff_initial_s`` to ``backoff_max_s``.

    Security (protocol.md §11, docs/security.md): ``credential`` is sent as
    ``H`` on every new connection (the first, and each one a redirect or
    a reconnect opens) before its first request; ``tls_ca`` (and
    ``tls_cert``/``tls_key`` for a client certificate), or a ready
    ``ssl_context``, make every connection TLS. The server's certificate
    must name ``tls_server_name``, or else the host of the address
    dialled. A refused credential raises :class:`Unauthenticated` (not
    tried on other nodes), an ACL refusal :class:`Forbidden`.
    """

    def _init_connection(self) -> None:
        self._lock = threading.Lock()  # guards _conn, _retired and _closed
        self._conn: Optional[_Connection] = None
        self._retired: List[_Connection] = []  # kept open for their callers' replies
        self._closed = False
        #: Every lock this client granted and not yet released, by (token, key):
        #: ``X`` pushes find their keeper here, close() stops every keeper.
        self._held: "weakref.WeakValueDictionary[Tuple[int, str], Lock]" = weakref.WeakValueDictionary()
        #: The connection all watches share, made at the first watch.
        self._watches: Optional[_WatchSession] = None

    def _watch_session(self) -> _WatchSession:
        with self._lock:
            if self._watches is None:
                self._watches = _WatchSession(self)
                if self._closed:
                    self._watches._closed = True
            return self._watches

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Closes the connections and stops every keeper for good (their
        locks get ``lost`` with a LockLost reason, without ``on_lost``; the
        leases end by themselves) and every watch (its iteration ends, its
        ``get`` raises). Calls made afterwards raise Unreachable."""
        with self._lock:
            conns = [c for c in [self._conn, *self._retired] if c is not None]
            self._conn, self._retired, self._closed = None, [], True
            held = list(self._held.values())
            watches = self._watches
        for lock in held:
            lock._client_closed()
        if watches is not None:
            watches.close()
        for conn in conns:
            conn.close()
        for lock in held:
            if lock._keeper is not None and lock._keeper is not threading.current_thread():
                lock._keeper.join()

    def _push(self, reply: Reply) -> None:
        """A push on one of the client's request connections (reader thread)."""
        if reply.kind == "X":
            lock = self._held.get((reply.token, reply.key))
            if lock is not None:
                lock._pushed_expired()
        # V: only leader() watches on these connections, and it reads the W reply
        # (watches have a connection of their own, _WatchSession).

    def _connection_to(self, target: int) -> _Connection:
        with self._lock:
            if self._closed:
                raise Unreachable("the client is closed")
            address = self._nodes.address(target)
            conn = self._conn
            if conn is not None and conn.broken is None and not conn.retired and conn.address == address:
                return conn
            new = _Connection(address, self.connect_timeout_s, self._security, on_push=self._push)
            if new.identity is not None:
                self.identity = new.identity
            self._conn = new
            self._nodes.connected(target)
            self._retired = [c for c in self._retired if c.broken is None]
            if conn is not None and conn.broken is None:
                self._retired.append(conn)
        if conn is not None and conn.broken is None:
            # Other callers' requests in flight on it (a wait queued at a
            # healthy leader, a keeper's K) keep their connection (issue 36 #5).
            conn.retire()
        elif conn is not None:
            threading.Thread(target=conn.close, daemon=True).start()
        return new

    def call(self, request: Request, deadline: Optional[float] = None) -> Reply:
        """Sends any request, following redirects and retrying ``no_leader``.
        Returns the reply (``A``/``S``/``T``/``B``/``R``/``N``/``K``).
        ``deadline`` (monotonic) cuts the retry budget and the reply timeout
        short: the keeper passes its lease's safe end. The decisions are
        :class:`~._core.CallPlan`'s; this does the I/O."""
        plan = CallPlan(self._nodes, request, self, deadline, time.monotonic())
        while True:
            try:
                conn = self._connection_to(plan.target)
                rid, future = conn.submit(request, plan.queue_deadline(time.monotonic()))
            except Unreachable as e:
                time.sleep(plan.unreachable(e, time.monotonic()))
                continue
            except _NotSent as e:
                plan.not_sent(str(e))
                continue
            try:
                reply = conn.wait(rid, future, plan.reply_by(time.monotonic()))
            except Indeterminate:
                plan.silent()
                raise
            pause = plan.reply(reply, time.monotonic())
            if pause is None:
                return reply
            time.sleep(pause)

    def _grant(self, verb: str, key: str, owner: Optional[str], lease_ms: int, wait_ms: int, limit: int = 0,
               kind: type = Lock) -> Lock:
        owner = owner or self.owner
        sent_at = time.monotonic()
        reply = self.call(Request(verb, key, owner=owner, lease_ms=lease_ms, wait_ms=wait_ms, limit=limit))
        token = acquire_outcome(reply, wait_ms, verb)
        lock = kind(self, token, key, owner, lease_ms, lease_start(sent_at, time.monotonic(), wait_ms),
                    shared=verb == "S", limit=limit)
        self._held[(token, key)] = lock
        return lock

    def _hold(self, verb: str, key: str, owner: Optional[str], lease_ms: int, wait_ms: int, keep: bool,
              on_lost: Optional[Callable[[Lock], None]], limit: int = 0) -> Lock:
        if lease_ms <= 0:
            raise ValueError("a held lock needs lease_ms >= 1")
        lock = self._grant(verb, key, owner, lease_ms, wait_ms, limit)
        if keep:
            lock._start_keeper(on_lost)
        return lock

    def acquire(self, key: str, *, owner: Optional[str] = None, lease_ms: int = 0, wait_ms: int = 0) -> Lock:
        """``A``: returns the held :class:`Lock` (without a keeper).

        ``lease_ms`` 0 asks for the server's default lease. Raises
        :class:`LockTimeout` (a ``TimeoutError``) for ``T``,
        :class:`LockBusy` for ``B``, and the transport errors of :meth:`call`.
        """
        return self._grant("A", key, owner, lease_ms, wait_ms)

    def acquire_shared(self, key: str, limit: int = 0, *, owner: Optional[str] = None, lease_ms: int = 0,
                       wait_ms: int = 0) -> Lock:
        """``S`` (v1.2): a shared hold without a keeper. ``limit`` 0 is a
        reader of a reader-writer lock, N one of N permits. Raises as
        :meth:`acquire`, and :class:`LimitMismatch` when the key's holders
        and waiters carry another limit."""
        return self._grant("S", key, owner, lease_ms, wait_ms, limit)

    def lock(self, key: str, *, owner: Optional[str] = None, lease_ms: int = DEFAULT_LOCK_LEASE_MS,
             wait_ms: int = 0, keep: bool = True, on_lost: Optional[Callable[[Lock], None]] = None) -> Lock:
        """Acquires ``key`` exclusively (the write side, if others read it
        with :meth:`read_lock`) and, with ``keep``, keeps its lease alive in
        a background thread until released. Use it in a ``with`` block."""
        return self._hold("A", key, owner, lease_ms, wait_ms, keep, on_lost)

    def read_lock(self, key: str, *, owner: Optional[str] = None, lease_ms: int = DEFAULT_LOCK_LEASE_MS,
                  wait_ms: int = 0, keep: bool = True, on_lost: Optional[Callable[[Lock], None]] = None) -> Lock:
        """The read side of a reader-writer lock on ``key`` (``S key 0``):
        any number of readers hold it at once; :meth:`lock` (a writer)
        waits for all of them, and readers that come after a queued writer
        wait behind it. Kept alive and released like :meth:`lock`."""
        return self._hold("S", key, owner, lease_ms, wait_ms, keep, on_lost, 0)

    def semaphore(self, key: str, limit: int) -> Semaphore:
        """A :class:`Semaphore` of ``limit`` (1..65535) permits on ``key``."""
        return Semaphore(self, key, limit)

    def release(self, token: int, key: str) -> None:
        """``R``: raises :class:`NotHeld` if the token does not hold the key."""
        token_outcome(self.call(Request("R", key, token=token)), "R")

    def keep(self, token: int, key: str, lease_ms: int) -> None:
        """``K``: the lease now ends ``lease_ms`` from the server's now.
        Raises :class:`NotHeld` once the lease has ended."""
        token_outcome(self.call(Request("K", key, token=token, lease_ms=lease_ms)), "K")

    # --- watch and election (v1.3 §5c) ---------------------------------------

    def watch(self, key: str) -> Watch:
        """Every state of ``key``: ``for state in client.watch(key)`` (a
        :class:`Watch`; close it to stop). All watches of this client share
        one connection, apart from the one requests go over."""
        return Watch(self, key)

    def leader(self, key: str) -> Optional[Leader]:
        """Who leads the election on ``key`` now (``W`` then ``U``), or None."""
        reply = self.call(Request("W", key))
        try:
            if reply.kind == "B":
                raise LockBusy("the server's watch limit is reached")
            if reply.kind != "W":
                raise ProtocolError(f"unexpected reply {reply.kind} to W")
            return leader_of(KeyState.of(reply))
        finally:
            try:
                self.call(Request("U", key))
            except LockdError:
                pass  # the watch ends with the connection

    def observe(self, key: str) -> Observe:
        """Every change of the leader of ``key``: ``for leader in
        client.observe(key)`` yields a :class:`~._core.Leader` or None (no
        leader); the same holder never twice in a row."""
        return Observe(self, key)

    def campaign(self, key: str, value: str, *, lease_ms: int = 10_000, round_wait_ms: int = 60_000,
                 timeout_s: Optional[float] = None,
                 on_lost: Optional[Callable[[Lock], None]] = None) -> Leadership:
        """Waits until this candidate leads the election on ``key``, then
        keeps leadership alive (a keeper thread) and returns the
        :class:`Leadership`. ``value`` is the candidate's owner string
        (1..64 visible ASCII bytes), what :meth:`leader` and :meth:`observe`
        show. Waits in rounds of ``round_wait_ms`` (under the server's
        maximum wait); raises LockTimeout after ``timeout_s`` if given. A
        round with an unknown outcome (a failover) is simply retried: a
        grant it may have made ends with its lease."""
        check_value(value)
        if lease_ms <= 0 or round_wait_ms <= 0:
            raise ValueError("a campaign needs lease_ms >= 1 and round_wait_ms >= 1")
        end = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            wait_ms = round_wait_ms
            if end is not None:
                wait_ms = min(wait_ms, max(0, int((end - time.monotonic()) * 1000)))
            try:
                lock = self._grant("A", key, value, lease_ms, wait_ms, kind=Leadership)
            except LockTimeout:
                if end is not None and time.monotonic() >= end:
                    raise
                continue
            except (Indeterminate, NoLeader, LockBusy) as e:
                if end is not None and time.monotonic() >= end:
                    raise LockTimeout(f"not elected in time ({e})") from e
                time.sleep(KEEP_RETRY_PAUSE_S)
                continue
            lock._start_keeper(on_lost)
            assert isinstance(lock, Leadership)
            return lock
