"""The asyncio lockd client: the same concepts as :mod:`lockd_client.client`
in ``async`` form.

    client = AsyncClient("127.0.0.1:7070")
    async with client.lock("orders/42", lease_ms=10_000, wait_ms=5_000) as lock:
        await store.write(data, fencing_token=lock.token)   # kept alive by a task

One connection per client, one reader task pairing replies with requests
by their echo; any number of tasks may share the client. Its watches
(``watch``, ``observe``) share one more connection, whatever their number. Every protocol
decision is the sans-I/O core's (:mod:`._core`), shared with the threaded
client; this module only does the asyncio I/O.
"""

from __future__ import annotations

import asyncio
import ssl
import time
import weakref
from typing import AsyncIterator, Awaitable, Callable, Dict, List, Optional, Set, Tuple, Union

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
from .errors import Indeterminate, LockBusy, LockdError, LockTimeout, NoLeader, NotHeld, ProtocolError, Unreachable
from .protocol import Reply, Request

OnLost = Callable[["AsyncLock"], Union[None, Awaitable[None]]]


class _NotSent(Exception):
    pass


_READ_CHUNK = 64 * 1024


class _AsyncConnection:
    """One connection: a reader task feeding the shared :class:`~._core.Wire`.
    ``on_push`` gets each push (``V``, ``X``), ``on_fail`` the reason the
    connection ended (both on the loop, from the reader task)."""

    def __init__(self, address: Tuple[str, int], on_push: Optional[Callable[[Reply], None]] = None,
                 on_fail: Optional[Callable[[str], None]] = None) -> None:
        self.address = address
        self.name = address_name(address)
        self.broken: Optional[str] = None
        self._wire = Wire(self.name)
        self._futures: Dict[int, asyncio.Future] = {}
        self._changed = asyncio.Event()  # set whenever a reply is dispatched
        self._reader: Optional[asyncio.StreamReader] = None
        self._writer: Optional[asyncio.StreamWriter] = None
        self._task: Optional[asyncio.Task] = None
        #: Tasks this connection started (releases of late grants): kept
        #: here so they are never collected while they run.
        self._tasks: Set[asyncio.Task] = set()
        self._on_push = on_push
        self._on_fail = on_fail
        self.identity: Optional[str] = None

    async def open(self, timeout_s: float, security: Security) -> None:
        """Connects; with TLS, handshakes (asyncio's own TLS); with a
        credential, sends ``H`` and reads its reply before anything else."""
        tls = {}
        if security.ssl_context is not None:
            tls = {"ssl": security.ssl_context, "server_hostname": security.server_hostname(self.address)}
        try:
            self._reader, self._writer = await asyncio.wait_for(
                asyncio.open_connection(*self.address, **tls), timeout_s)
        except ssl.SSLError as e:
            raise Unreachable(f"TLS handshake with {self.name} failed: {e}") from None
        except (OSError, asyncio.TimeoutError) as e:
            raise Unreachable(f"cannot connect to {self.name}: {e or 'timed out'}") from None
        hello = security.hello()
        if hello is not None:
            try:
                self._writer.write(hello)
                line = await asyncio.wait_for(self._reader.readline(), timeout_s)
            except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError) as e:
                self._writer.close()
                raise Unreachable(f"no reply to H from {self.name}: {e or 'timed out'}") from None
            if not line.endswith(b"\n"):
                self._writer.close()
                raise Unreachable(f"no reply to H from {self.name}: connection closed")
            try:
                self.identity = Security.identity(line, self.name)
            except LockdError:
                self._writer.close()
                raise
        self._task = asyncio.get_running_loop().create_task(self._read_loop())

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            try:
                await self._writer.wait_closed()
            except OSError:
                pass
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
        self._fail(f"connection to {self.name} closed by the client")

    @property
    def retired(self) -> bool:
        return self._wire.retired

    def retire(self) -> None:
        """The client moved to another node: nothing new goes out here; the
        connection stays open while a caller still waits on it, then closes."""
        self._wire.retired = True
        self._close_if_idle()

    def _close_if_idle(self) -> None:
        if self._wire.retired and self._wire.idle() and not self._tasks and self._writer is not None:
            self._writer.close()

    async def queue_for(self, request: Request, queue_deadline: float) -> Request:
        """A second acquire of one owner and key waits for the first's reply,
        then goes out with the wait it has left."""
        queued = False
        while self._wire.busy(request) and self.broken is None:
            left = queue_deadline - time.monotonic()
            if left <= 0:
                raise LockTimeout("an acquire by this owner for this key was still in flight")
            queued = True
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except asyncio.TimeoutError:
                pass
        return requeued(request, queue_deadline, time.monotonic()) if queued else request

    def send(self, request: Request, undo: bool = False) -> Tuple[int, asyncio.Future]:
        """Writes ``request`` (no await: wire order, and a cancellation cannot
        fall between the write and the id being known)."""
        if self.broken is None and self._reader is not None and self._reader.at_eof():
            # The peer closed (a node killed or restarted a moment ago) and
            # the reader task has not run since: not sent, use a new connection.
            self._fail(f"connection closed by {self.name}")
        if self.broken is not None:
            raise _NotSent(self.broken)
        if self._wire.retired and not undo:
            raise _NotSent(f"the connection to {self.name} is retired")
        rid, line = self._wire.add(request)
        future = asyncio.get_running_loop().create_future()
        self._futures[rid] = future
        assert self._writer is not None
        self._writer.write(line)
        return rid, future

    def send_ignored(self, request: Request) -> None:
        """Writes ``request`` whose reply nobody waits for (a watch's ``U``):
        the reply is read and dropped."""
        rid, future = self.send(request)
        self._wire.abandon(rid)
        future.cancel()

    async def drain(self) -> None:
        assert self._writer is not None
        try:
            await self._writer.drain()
        except OSError as e:
            self._fail(f"sending to {self.name} failed: {e}")

    async def wait(self, rid: int, future: asyncio.Future, deadline: float) -> Reply:
        try:
            return await asyncio.wait_for(asyncio.shield(future), max(0.0, deadline - time.monotonic()))
        except asyncio.TimeoutError:
            if future.done():
                return future.result()
            self.gave_up(rid, future)
            raise Indeterminate(f"no reply from {self.name} in time (the request may have taken effect)") from None

    def gave_up(self, rid: int, future: asyncio.Future) -> None:
        """The caller of ``rid`` stopped waiting (its deadline, or it was
        cancelled: ``wait_for``, ``asyncio.timeout``, ``task.cancel()``,
        ``gather``): a grant that arrives later, or that arrived just as it
        was cancelled, is released at once (rule 4)."""
        if future.done():
            if not future.cancelled() and future.exception() is None:
                reply = future.result()
                if reply.is_grant:
                    self._spawn(self._undo(Request("R", reply.key, token=reply.token)))
            return
        self._wire.abandon(rid)
        self._close_if_idle()

    def _fail(self, why: str) -> None:
        first = self.broken is None
        if first:
            self.broken = why
        for rid, abandoned in self._wire.drain():
            f = self._futures.pop(rid, None)
            if f is None or f.done():
                continue
            if abandoned:
                f.cancel()  # nobody awaits it: no "exception never retrieved"
            else:
                f.set_exception(Indeterminate(f"connection lost before the reply (the request may have taken effect): {why}"))
        self._changed.set()
        if self._writer is not None:
            self._writer.close()
        if first and self._on_fail is not None:
            self._on_fail(why)

    def _receive(self, data: bytes) -> Optional[str]:
        deliveries, broken = self._wire.receive(data)
        for d in deliveries:
            if d.push:
                if self._on_push is not None:
                    self._on_push(d.reply)
                continue
            future = self._futures.pop(d.rid)
            if d.undo is not None:  # a grant nobody waits for any more: release it
                self._spawn(self._undo(d.undo))
            if not future.done():
                future.set_result(d.reply)
        self._changed.set()
        self._close_if_idle()
        return broken

    async def _undo(self, request: Request) -> None:
        try:
            rid, future = self.send(request, undo=True)
            self._wire.abandon(rid)
            future.cancel()
            await self.drain()
        except (LockdError, _NotSent):
            pass

    async def _read_loop(self) -> None:
        assert self._reader is not None
        why = f"connection closed by {self.name}"
        try:
            while True:
                data = await self._reader.read(_READ_CHUNK)
                if not data:
                    break
                broken = self._receive(data)
                if broken is not None:
                    why = broken
                    break
        except OSError as e:
            why = f"reading from {self.name} failed: {e}"
        self._fail(why)


class AsyncLock(HeldBase):
    """A held lock (asyncio), exclusive or shared. ``token`` is the fencing
    token. ``lost`` is an :class:`asyncio.Event` the keeper task sets if the
    lock is lost (``N``, an ``X`` push, or the safe end passing)."""

    def __init__(self, client: "AsyncClient", token: int, key: str, owner: str, lease_ms: int, sent_at: float,
                 shared: bool = False, limit: int = 0) -> None:
        super().__init__(client, token, key, owner, lease_ms, sent_at, shared, limit)
        self.lost = asyncio.Event()
        self._wake = asyncio.Event()  # stop, X, or the client closing
        self._keeper: Optional[asyncio.Task] = None
        self._on_lost: Optional[OnLost] = None
        # Checked by the keeper besides being cancelled: before Python 3.12
        # asyncio.wait_for() can swallow a cancellation that arrives as its
        # inner future completes (gh-86296), and the keeper would carry on.
        self._stopping = False

    async def keep(self, lease_ms: Optional[int] = None) -> None:
        await self.client.keep(self.token, self.key, lease_ms or self.lease_ms)

    async def release(self) -> None:
        """Stops the keeper and releases (this holder only, if shared).
        ``released`` is set once the server confirmed (or answered ``N``,
        raised as NotHeld); after a transient failure, call it again. A
        cancellation of the caller is never swallowed (it propagates; then
        the release may not have been sent: call it again)."""
        if self.released:
            return
        await self._stop_keeper()
        try:
            await self.client.release(self.token, self.key)
        except NotHeld:
            self._released()
            raise
        self._released()

    def _released(self) -> None:
        self.released = True
        self.client._held.pop((self.token, self.key), None)

    async def _stop_keeper(self) -> None:
        self._stopping = True
        self._wake.set()
        keeper = self._keeper
        if keeper is not None and keeper is not asyncio.current_task() and not keeper.done():
            keeper.cancel()
            # asyncio.wait() never raises the keeper's outcome, and a
            # cancellation of *this* task still propagates.
            await asyncio.wait([keeper])

    def _pushed_expired(self) -> None:
        self._expired = True
        if self._keeper is None:
            self._mark_lost(KeepPlan.expired_notice())
        self._wake.set()

    def _client_closed(self) -> None:
        if self._keeper is not None and not self.released and not self.lost.is_set():
            self._closing = True
            self._wake.set()

    async def __aenter__(self) -> "AsyncLock":
        return self

    async def __aexit__(self, exc_type, exc, tb) -> None:
        error: Optional[LockdError] = None
        try:
            await self.release()
        except LockdError as e:
            error = e
        self._exit_outcome(exc_type, error)

    def _mark_lost(self, why: LockdError) -> bool:
        if self.lost.is_set():
            return False
        self._log_lost(why)
        self.lost_reason = why
        self.lost.set()
        return True

    async def _declare_lost(self, why: LockdError) -> None:
        if self._mark_lost(why) and self._on_lost is not None:
            result = self._on_lost(self)
            if asyncio.iscoroutine(result):
                await result

    async def _keep_loop(self) -> None:
        plan = KeepPlan(self.lease_ms, self.sent_at)
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), plan.wait_s(time.monotonic()))
            except asyncio.TimeoutError:
                pass
            if self._stopping:
                return
            if self._closing:
                self._mark_lost(KeepPlan.client_closed())
                return
            lost = KeepPlan.expired_notice() if self._expired else plan.sending(time.monotonic())
            if lost is None:
                try:
                    reply = await self.client.call(
                        Request("K", self.key, token=self.token, lease_ms=self.lease_ms), deadline=plan.safe_end)
                    token_outcome(reply, "K")
                except (LockdError, ValueError) as e:
                    if self._stopping or self._closing:
                        continue
                    lost = plan.failed(e, time.monotonic())
                    if lost is None:
                        continue
                else:
                    self.kept_count += 1
                    plan.kept()
                    continue
            if self._stopping:
                return
            await self._declare_lost(lost)
            return


class AsyncLeadership(AsyncLock):
    """A won election (asyncio), see :class:`lockd_client.client.Leadership`."""

    @property
    def value(self) -> str:
        return self.owner

    async def resign(self) -> None:
        await self.release()


class _Closed(LockdError):
    """The watch was closed."""


#: In a watch's queue: wake up and look again (the connection broke, the
#: watch or the client closed).
_BROKEN = object()


class _AsyncWatchSession:
    """The one connection every :class:`AsyncWatch` of an
    :class:`AsyncClient` shares (§5c), apart from the request connection;
    see :class:`lockd_client.client._WatchSession`. Made at the client's
    first watch; it connects at the first ``get``.

    Each new watch sends its own ``W``; a ``V`` push goes to every watch of
    its key; the last watch of a key to close sends ``U``
    (:class:`~._core.WatchBook`). ``W`` and ``U`` are written without an
    ``await`` between the book's change and the write, so they leave in
    the order the book changed: a ``U`` never overtakes a later ``W``. When
    the connection breaks, the first watch whose ``get`` notices reconnects
    for all (under ``_connecting``) and watches every key again."""

    def __init__(self, client: "AsyncClient") -> None:
        self._client = client
        self._connecting = asyncio.Lock()
        self._book: WatchBook["AsyncWatch"] = WatchBook()
        self._conn: Optional[_AsyncConnection] = None
        #: A node the next connect moves on from (it knew no leader, or went silent).
        self._avoid: Optional[int] = None
        self._closed = False
        self._made: "weakref.WeakSet[AsyncWatch]" = weakref.WeakSet()  # every watch made, for close()

    def _healthy(self) -> Optional[_AsyncConnection]:
        conn = self._conn
        return conn if conn is not None and conn.broken is None else None

    async def ensure(self, watch: "AsyncWatch") -> None:
        """Before ``watch`` waits for a state: the connection is up and
        ``watch`` registered (its ``W`` sent; the answer comes to its
        queue). Reconnects, for every watch, if the connection is gone."""
        if watch._registered and self._healthy() is not None:
            return
        if self._closed:
            raise Unreachable("the client is closed")
        if self._healthy() is None:
            async with self._connecting:
                if self._healthy() is None:
                    await self._reconnect(watch.key)
                    self._send_unwatch(reconnected=True)
        conn = self._healthy()
        if conn is None or watch._registered:
            return  # broken again already: the next round reconnects
        if watch._closed:
            raise _Closed("the watch is closed")
        # No await from here to the write: W leaves in book order.
        self._book.add(watch.key, watch)
        watch._registered = True
        watch._asked = (conn, time.monotonic())  # pushes wait for its W's reply
        try:
            _, future = conn.send(Request("W", watch.key))
        except _NotSent:
            self._answered(conn, watch, None)  # the reconnect watches it again
            return
        future.add_done_callback(lambda f: self._answered(conn, watch, f))
        await conn.drain()

    def remove(self, watch: "AsyncWatch") -> None:
        """``watch`` closed: nothing reaches its queue any more; ``U`` now
        if it was its key's last watch (during a reconnect: once it is done)."""
        if watch._registered:
            self._book.remove(watch.key, watch)
            watch._registered = False
        watch._asked = None
        watch._early.clear()
        self._send_unwatch()

    def silent(self, conn: _AsyncConnection) -> None:
        """A ``W`` got no reply in time: the node is silent. End the
        connection; the reconnect tries the next node."""
        if conn is self._conn:
            self._avoid = self._client._nodes.index_of(conn.address)
            log.warning("no reply to W from %s in time: watching on another node", conn.name)
        conn._fail(f"no reply to W from {conn.name} in time")

    async def close(self) -> None:
        """The client closes: every watch ends and the connection closes."""
        self._closed = True
        conn, self._conn = self._conn, None
        self._book.clear()
        for w in list(self._made):
            w._closed = True
            w._registered = False
            w._asked = None
            w._early.clear()
            w._queue.put_nowait(_BROKEN)
        if conn is not None:
            await conn.close()

    def _send_unwatch(self, reconnected: bool = False) -> None:
        """Sends the ``U`` that are due, unless a reconnect is under way
        (they go once the new connection watches its keys, ``reconnected``)."""
        if self._connecting.locked() and not reconnected:
            return
        keys = self._book.unwatch()
        conn = self._healthy()
        if conn is None:
            return  # a new connection watches only the keys that have watches
        for key in keys:
            try:
                conn.send_ignored(Request("U", key))
            except _NotSent:
                return

    async def _reconnect(self, key: str) -> None:
        """Under ``_connecting``: connects (from the client's current node
        on, or past the one to avoid; jittered backoff as
        :class:`~._core.CallPlan` says) and watches every key of the book
        again; each answer goes to every watch of its key."""
        c = self._client
        old, self._conn = self._conn, None
        if old is not None:
            await old.close()
        plan = CallPlan(c._nodes, Request("W", key), c, None, time.monotonic())
        if self._avoid is not None:
            plan.target, self._avoid = c._nodes.after(self._avoid), None
        while True:
            if self._closed:
                raise Unreachable("the client is closed")
            conn = _AsyncConnection(c._nodes.address(plan.target), on_push=self._route, on_fail=self._failed)
            try:
                await conn.open(c.connect_timeout_s, c._security)
            except Unreachable as e:
                await asyncio.sleep(plan.unreachable(e, time.monotonic()))
                continue
            keys = self._book.rewatch()
            sent: List[Tuple[int, asyncio.Future]] = []
            try:
                try:
                    for k in keys:
                        sent.append(conn.send(Request("W", k)))
                    await conn.drain()
                    by = plan.reply_by(time.monotonic())
                    replies = [(k, await conn.wait(rid, future, by)) for k, (rid, future) in zip(keys, sent)]
                except (_NotSent, Indeterminate) as e:
                    silent = conn.broken is None
                    for _, future in sent:
                        future.cancel()  # nobody reads them now
                    await conn.close()
                    pause = plan.not_sent(str(e))
                    if silent:
                        plan.target = c._nodes.after(plan.target)
                    await asyncio.sleep(pause)
                    continue
                no_leader = next((r for _, r in replies if watch_answer(r) is None), None)
                if no_leader is not None:  # a member that has applied nothing yet: another one
                    await conn.close()
                    await asyncio.sleep(plan.reply(no_leader, time.monotonic()))
                    continue
                if self._closed:
                    await conn.close()
                    raise Unreachable("the client is closed")
            except BaseException:  # a cancelled get: the attempt's connection goes with it
                for _, future in sent:
                    future.cancel()
                await conn.close()
                raise
            # No await from here on: the book cannot change under us.
            self._conn = conn
            for k, reply in replies:
                answer = watch_answer(reply)
                for w in self._book.watching(k):
                    if not isinstance(answer, KeyState):
                        self._book.remove(k, w, watched=False)
                        w._registered = False
                    w._queue.put_nowait(answer)
            if keys:
                log.info("watching %d key(s) again on %s", len(keys), conn.name)
            return

    # --- from the connection's reader task (on the loop) --------------------

    def _answered(self, conn: _AsyncConnection, watch: "AsyncWatch", future: Optional[asyncio.Future]) -> None:
        """The reply to a new watch's ``W`` (or None: it was not sent)."""
        reply = None
        if future is not None and not future.cancelled() and future.exception() is None:
            reply = future.result()
        if watch._asked is None or watch._asked[0] is not conn:
            return  # closed meanwhile
        watch._asked = None
        early, watch._early = watch._early, []
        answer = watch_answer(reply) if reply is not None else None
        if isinstance(answer, LockdError):
            if self._book.remove(watch.key, watch, watched=False):
                watch._registered = False
                watch._queue.put_nowait(answer)
            return
        if isinstance(answer, KeyState):
            watch._queue.put_nowait(answer)
        for state in early:  # pushes that came before the reply: only newer ones pass
            watch._queue.put_nowait(state)
        if reply is not None and answer is None:  # E no_leader: the session moves on
            if conn is self._conn:
                self._avoid = self._client._nodes.index_of(conn.address)
                log.info("%s knows no leader yet: watching on another node", conn.name)
            conn._fail(f"{conn.name} knows no leader yet")

    def _route(self, reply: Reply) -> None:
        """A push: a ``V`` goes to every watch of its key (queued)."""
        if reply.kind != "V":
            return
        state = KeyState.of(reply)
        for w in self._book.watching(reply.key):
            if w._asked is not None:
                w._early.append(state)  # its W is unanswered: after the reply
            else:
                w._queue.put_nowait(state)

    def _failed(self, why: str) -> None:
        for w in self._book.watches():
            w._queue.put_nowait(_BROKEN)


class AsyncWatch:
    """``async for state in client.watch(key):`` every state of ``key``
    (§5c) in ``rev`` order. All watches of a client share one connection of
    their own (any member serves them), opened at the first :meth:`get`;
    when it is lost, the first watch to notice reconnects for all and
    watches every key again, and each drops the states whose ``rev`` is not
    newer. ``await watch.aclose()`` (or ``async with``) stops it;
    :meth:`AsyncClient.close` ends every watch."""

    def __init__(self, client: "AsyncClient", key: str) -> None:
        why = Request("W", key).validate()
        if why:
            raise ValueError(why)
        self.client = client
        self.key = key
        self._queue: "asyncio.Queue" = asyncio.Queue()
        self._filter = WatchFilter()
        self._closed = False
        # The session's:
        self._registered = False  # in the book (its W sent)
        self._asked: Optional[Tuple[_AsyncConnection, float]] = None  # its W awaiting the reply: (conn, sent at)
        self._early: List[KeyState] = []  # pushes that came while its W was unanswered
        self._session = client._watch_session()
        self._session._made.add(self)

    async def __aenter__(self) -> "AsyncWatch":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    def __aiter__(self) -> AsyncIterator[KeyState]:
        return self

    async def __anext__(self) -> KeyState:
        try:
            return await self.get()
        except _Closed:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        """Stops the watch: no state reaches it any more (``U`` goes out
        if no other watch of the client watches the key)."""
        self._closed = True
        self._session.remove(self)
        self._queue.put_nowait(_BROKEN)

    async def get(self, timeout_s: Optional[float] = None) -> KeyState:
        """The next state (raises ``TimeoutError`` after ``timeout_s``; a
        reconnect under way runs to its end, within the client's connect and
        reply timeouts, so a ``get`` that makes one may take longer)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            if self._closed:
                raise _Closed("the watch is closed")
            try:
                await self._session.ensure(self)
            except LockdError:
                if self._closed:
                    raise _Closed("the watch is closed") from None
                raise
            asked = self._asked
            asked_at = None if asked is None else asked[1]
            left = watch_wait_s(time.monotonic(), deadline, asked_at, self.client.reply_timeout_s)
            try:
                if self._queue.empty():
                    item = await asyncio.wait_for(self._queue.get(), left)
                else:  # at once, even with no time left (wait_for(..., 0) would time out)
                    item = self._queue.get_nowait()
            except asyncio.TimeoutError:
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


class AsyncObserve:
    """``async for leader in client.observe(key):`` every change of the
    election's leader (a :class:`~._core.Leader`, or None). Built on
    :class:`AsyncWatch` (so on the connection the client's watches share)."""

    def __init__(self, client: "AsyncClient", key: str) -> None:
        self._watch = AsyncWatch(client, key)
        self._filter = LeaderFilter()

    async def __aenter__(self) -> "AsyncObserve":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._watch.aclose()

    def __aiter__(self) -> "AsyncObserve":
        return self

    async def __anext__(self) -> Optional[Leader]:
        try:
            return await self.get()
        except _Closed:
            raise StopAsyncIteration from None

    async def get(self, timeout_s: Optional[float] = None) -> Optional[Leader]:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            changed, leader = self._filter.admit(await self._watch.get(left))
            if changed:
                return leader


class _LockContext:
    """What ``AsyncClient.lock()`` (and ``read_lock``, a semaphore's
    ``acquire``) returns: acquires on ``async with`` entry (or when
    awaited), releases on exit."""

    def __init__(self, client: "AsyncClient", verb: str, key: str, kwargs: dict) -> None:
        self._client = client
        self._verb = verb
        self._key = key
        self._kwargs = kwargs
        self._lock: Optional[AsyncLock] = None

    def __await__(self):
        return self._client._hold(self._verb, self._key, **self._kwargs).__await__()

    async def __aenter__(self) -> AsyncLock:
        self._lock = await self._client._hold(self._verb, self._key, **self._kwargs)
        return self._lock

    async def __aexit__(self, exc_type, exc, tb) -> None:
        assert self._lock is not None
        await self._lock.__aexit__(exc_type, exc, tb)


class AsyncSemaphore:
    """``limit`` permits on one key (asyncio); see :class:`lockd_client.Semaphore`::

        pool = client.semaphore("workers/encode", 8)
        async with pool.acquire(wait_ms=60_000) as permit:
            await encode(job, fencing_token=permit.token)
    """

    def __init__(self, client: "AsyncClient", key: str, limit: int) -> None:
        self.client = client
        self.key = key
        self.limit = permits(limit)

    def acquire(self, *, owner: Optional[str] = None, lease_ms: int = DEFAULT_LOCK_LEASE_MS, wait_ms: int = 0,
                keep: bool = True, on_lost: Optional[OnLost] = None) -> _LockContext:
        """One permit, kept alive by a task: ``async with`` it, or await it."""
        return _LockContext(self.client, "S", self.key, dict(
            owner=owner, lease_ms=lease_ms, wait_ms=wait_ms, keep=keep, on_lost=on_lost, limit=self.limit))

    def __repr__(self) -> str:
        return f"AsyncSemaphore(key={self.key!r}, limit={self.limit})"


class AsyncClient(ClientOptions):
    """The asyncio client; options as for :class:`lockd_client.Client`.
    Its watches share one connection of their own, whatever their number."""

    def _init_connection(self) -> None:
        self._conn: Optional[_AsyncConnection] = None
        self._retired: List[_AsyncConnection] = []  # kept open for their callers' replies
        self._connecting = asyncio.Lock()
        self._closed = False
        self._keepers: Set[asyncio.Task] = set()
        #: Locks granted and not yet released, by (token, key): for ``X`` and close().
        self._held: "weakref.WeakValueDictionary[Tuple[int, str], AsyncLock]" = weakref.WeakValueDictionary()
        #: The connection all watches share, made at the first watch.
        self._watches: Optional[_AsyncWatchSession] = None

    def _watch_session(self) -> _AsyncWatchSession:
        if self._watches is None:
            self._watches = _AsyncWatchSession(self)
            self._watches._closed = self._closed
        return self._watches

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def close(self) -> None:
        """Closes the connections and stops every keeper for good (their
        locks get ``lost`` with a LockLost reason, without ``on_lost``; the
        leases end by themselves) and every watch (its iteration ends);
        later calls raise Unreachable."""
        self._closed = True
        if self._watches is not None:
            await self._watches.close()
        conns = [c for c in [self._conn, *self._retired] if c is not None]
        self._conn, self._retired = None, []
        held = list(self._held.values())
        keepers = []
        for lock in held:
            lock._client_closed()
            keeper = lock._keeper
            if keeper is not None and keeper is not asyncio.current_task() and not keeper.done():
                lock._mark_lost(KeepPlan.client_closed())
                keeper.cancel()  # also one waiting for a K's reply
                keepers.append(keeper)
        if keepers:
            await asyncio.wait(keepers)
        for conn in conns:
            await conn.close()

    def _push(self, reply: Reply) -> None:
        if reply.kind == "X":
            lock = self._held.get((reply.token, reply.key))
            if lock is not None:
                lock._pushed_expired()

    async def _connection_to(self, target: int) -> _AsyncConnection:
        async with self._connecting:
            if self._closed:
                raise Unreachable("the client is closed")
            address = self._nodes.address(target)
            conn = self._conn
            if conn is not None and conn.broken is None and not conn.retired and conn.address == address:
                return conn
            new = _AsyncConnection(address, on_push=self._push)
            await new.open(self.connect_timeout_s, self._security)
            if self._closed:
                await new.close()
                raise Unreachable("the client is closed")
            if new.identity is not None:
                self.identity = new.identity
            self._conn = new
            self._nodes.connected(target)
            self._retired = [c for c in self._retired if c.broken is None]
            if conn is not None and conn.broken is None:
                self._retired.append(conn)
        if conn is not None and conn.broken is None:
            # Other tasks' requests in flight on it keep their connection (issue 36 #5).
            conn.retire()
        elif conn is not None:
            await conn.close()
        return new

    async def call(self, request: Request, deadline: Optional[float] = None) -> Reply:
        """Sends any request, following redirects and retrying ``no_leader``.
        ``deadline`` (monotonic) cuts the retry budget and reply timeout
        short. The decisions are :class:`~._core.CallPlan`'s (as in the
        threaded client); this does the I/O. A cancelled call (``wait_for``,
        ``asyncio.timeout``, ``task.cancel()``, ``gather``) gives its request
        up: a grant that arrives later, or arrived as it was cancelled, is
        released at once."""
        plan = CallPlan(self._nodes, request, self, deadline, time.monotonic())
        while True:
            try:
                conn = await self._connection_to(plan.target)
                sent = await conn.queue_for(request, plan.queue_deadline(time.monotonic()))
                rid, future = conn.send(sent)
            except Unreachable as e:
                await asyncio.sleep(plan.unreachable(e, time.monotonic()))
                continue
            except _NotSent as e:
                plan.not_sent(str(e))
                continue
            try:
                await conn.drain()
                reply = await conn.wait(rid, future, plan.reply_by(time.monotonic()))
            except Indeterminate:
                plan.silent()
                raise
            except asyncio.CancelledError:
                conn.gave_up(rid, future)
                raise
            pause = plan.reply(reply, time.monotonic())
            if pause is None:
                return reply
            await asyncio.sleep(pause)

    async def _grant(self, verb: str, key: str, owner: Optional[str], lease_ms: int, wait_ms: int,
                     limit: int = 0, kind: type = AsyncLock) -> AsyncLock:
        owner = owner or self.owner
        sent_at = time.monotonic()
        reply = await self.call(Request(verb, key, owner=owner, lease_ms=lease_ms, wait_ms=wait_ms, limit=limit))
        token = acquire_outcome(reply, wait_ms, verb)
        lock = kind(self, token, key, owner, lease_ms, lease_start(sent_at, time.monotonic(), wait_ms),
                    shared=verb == "S", limit=limit)
        self._held[(token, key)] = lock
        return lock

    async def _hold(self, verb: str, key: str, *, owner: Optional[str], lease_ms: int, wait_ms: int, keep: bool,
                    on_lost: Optional[OnLost], limit: int = 0) -> AsyncLock:
        if lease_ms <= 0:
            raise ValueError("a held lock needs lease_ms >= 1")
        lock = await self._grant(verb, key, owner, lease_ms, wait_ms, limit)
        if keep:
            self._start_keeper(lock, on_lost)
        return lock

    def _start_keeper(self, lock: AsyncLock, on_lost: Optional[OnLost]) -> None:
        lock._on_lost = on_lost
        lock._keeper = asyncio.get_running_loop().create_task(lock._keep_loop())
        # asyncio keeps only weak references to tasks: the client holds its
        # keepers until they end, so one is never collected mid-lease.
        self._keepers.add(lock._keeper)
        lock._keeper.add_done_callback(self._keepers.discard)

    async def acquire(self, key: str, *, owner: Optional[str] = None, lease_ms: int = 0, wait_ms: int = 0) -> AsyncLock:
        """``A``: the held lock (no keeper). Raises LockTimeout for ``T``."""
        return await self._grant("A", key, owner, lease_ms, wait_ms)

    async def acquire_shared(self, key: str, limit: int = 0, *, owner: Optional[str] = None, lease_ms: int = 0,
                             wait_ms: int = 0) -> AsyncLock:
        """``S`` (v1.2): a shared hold (no keeper); see ``Client.acquire_shared``."""
        return await self._grant("S", key, owner, lease_ms, wait_ms, limit)

    def lock(self, key: str, *, owner: Optional[str] = None, lease_ms: int = DEFAULT_LOCK_LEASE_MS,
             wait_ms: int = 0, keep: bool = True, on_lost: Optional[OnLost] = None) -> _LockContext:
        """``async with client.lock(key, ...) as lock:`` acquires, keeps the
        lease alive in a task, and releases on exit. Also awaitable."""
        return _LockContext(self, "A", key, dict(owner=owner, lease_ms=lease_ms, wait_ms=wait_ms, keep=keep,
                                                 on_lost=on_lost))

    def read_lock(self, key: str, *, owner: Optional[str] = None, lease_ms: int = DEFAULT_LOCK_LEASE_MS,
                  wait_ms: int = 0, keep: bool = True, on_lost: Optional[OnLost] = None) -> _LockContext:
        """The read side of a reader-writer lock (``S key 0``), as :meth:`lock`."""
        return _LockContext(self, "S", key, dict(owner=owner, lease_ms=lease_ms, wait_ms=wait_ms, keep=keep,
                                                 on_lost=on_lost, limit=0))

    def semaphore(self, key: str, limit: int) -> AsyncSemaphore:
        """An :class:`AsyncSemaphore` of ``limit`` (1..65535) permits on ``key``."""
        return AsyncSemaphore(self, key, limit)

    async def release(self, token: int, key: str) -> None:
        """``R``: raises NotHeld if the token does not hold the key."""
        token_outcome(await self.call(Request("R", key, token=token)), "R")

    async def keep(self, token: int, key: str, lease_ms: int) -> None:
        """``K``: extends the lease; raises NotHeld once it has ended."""
        token_outcome(await self.call(Request("K", key, token=token, lease_ms=lease_ms)), "K")

    # --- watch and election (v1.3 §5c) ---------------------------------------

    def watch(self, key: str) -> AsyncWatch:
        """Every state of ``key``: ``async for state in client.watch(key)``
        (an :class:`AsyncWatch`). All watches of this client share one
        connection, apart from the one requests go over."""
        return AsyncWatch(self, key)

    async def leader(self, key: str) -> Optional[Leader]:
        """Who leads the election on ``key`` now (``W`` then ``U``), or None."""
        reply = await self.call(Request("W", key))
        try:
            if reply.kind == "B":
                raise LockBusy("the server's watch limit is reached")
            if reply.kind != "W":
                raise ProtocolError(f"unexpected reply {reply.kind} to W")
            return leader_of(KeyState.of(reply))
        finally:
            try:
                await self.call(Request("U", key))
            except LockdError:
                pass

    def observe(self, key: str) -> AsyncObserve:
        """Every change of the leader of ``key`` (``async for``)."""
        return AsyncObserve(self, key)

    async def campaign(self, key: str, value: str, *, lease_ms: int = 10_000, round_wait_ms: int = 60_000,
                       timeout_s: Optional[float] = None, on_lost: Optional[OnLost] = None) -> AsyncLeadership:
        """Waits until this candidate leads the election on ``key``, then
        keeps leadership alive (a keeper task); see ``Client.campaign``.
        Cancelling it never leaves the key held by nobody."""
        check_value(value)
        if lease_ms <= 0 or round_wait_ms <= 0:
            raise ValueError("a campaign needs lease_ms >= 1 and round_wait_ms >= 1")
        end = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            wait_ms = round_wait_ms
            if end is not None:
                wait_ms = min(wait_ms, max(0, int((end - time.monotonic()) * 1000)))
            try:
                lock = await self._grant("A", key, value, lease_ms, wait_ms, kind=AsyncLeadership)
            except LockTimeout:
                if end is not None and time.monotonic() >= end:
                    raise
                continue
            except (Indeterminate, NoLeader, LockBusy) as e:
                if end is not None and time.monotonic() >= end:
                    raise LockTimeout(f"not elected in time ({e})") from e
                await asyncio.sleep(KEEP_RETRY_PAUSE_S)
                continue
            self._start_keeper(lock, on_lost)
            assert isinstance(lock, AsyncLeadership)
            return lock
