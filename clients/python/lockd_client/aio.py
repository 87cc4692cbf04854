"""The asyncio lockd client: the same concepts as :mod:`lockd_client.client`
in ``async`` form.

    client = AsyncClient("127.0.0.1:7070")
    async with client.lock("orders/42", lease_ms=10_000, wait_ms=5_000) as lock:
        await store.write(data, fencing_token=lock.token)   # kept alive by a task

One connection per client, one reader task pairing replies with requests
by their echo; any number of tasks may share the client. Every protocol
decision is the sans-I/O core's (:mod:`._core`), shared with the threaded
client; this module only does the asyncio I/O.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from typing import Awaitable, Callable, Dict, Optional, Tuple, Union

from ._common import (
    DEFAULT_LOCK_LEASE_MS,
    acquire_outcome,
    token_outcome,
)
from ._core import CallPlan, ClientOptions, HeldBase, KeepPlan, Security, Wire, address_name, permits
from .errors import Indeterminate, LockdError, LockTimeout, Unreachable
from .protocol import Reply, Request

OnLost = Callable[["AsyncLock"], Union[None, Awaitable[None]]]


class _NotSent(Exception):
    pass


_READ_CHUNK = 64 * 1024


class _AsyncConnection:
    """One connection: a reader task feeding the shared :class:`~._core.Wire`."""

    def __init__(self, address: Tuple[str, int]) -> None:
        self.address = address
        self.name = address_name(address)
        self.broken: Optional[str] = None
        self._wire = Wire(self.name)
        self._futures: Dict[int, asyncio.Future] = {}
        self._changed = asyncio.Event()  # set whenever a reply is dispatched
        self._reader: Optional[asyncio.StreamReader] = None
        self._writer: Optional[asyncio.StreamWriter] = None
        self._task: Optional[asyncio.Task] = None
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

    async def submit(self, request: Request, queue_deadline: float) -> Tuple[int, asyncio.Future]:
        # A second acquire of one owner and key waits for the first's reply.
        while self._wire.busy(request) and self.broken is None:
            left = queue_deadline - time.monotonic()
            if left <= 0:
                raise LockTimeout("an acquire by this owner for this key was still in flight")
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except asyncio.TimeoutError:
                pass
        if self.broken is None and self._reader is not None and self._reader.at_eof():
            # The peer closed (a node killed or restarted a moment ago) and
            # the reader task has not run since: not sent, use a new connection.
            self._fail(f"connection closed by {self.name}")
        if self.broken is not None:
            raise _NotSent(self.broken)
        rid, line = self._wire.add(request)
        future = asyncio.get_running_loop().create_future()
        self._futures[rid] = future
        assert self._writer is not None
        self._writer.write(line)  # in wire order: no await before this
        try:
            await self._writer.drain()
        except OSError as e:
            self._fail(f"sending to {self.name} failed: {e}")
        return rid, future

    async def wait(self, rid: int, future: asyncio.Future, deadline: float) -> Reply:
        try:
            return await asyncio.wait_for(asyncio.shield(future), max(0.0, deadline - time.monotonic()))
        except asyncio.TimeoutError:
            if future.done():
                return future.result()
            self._wire.abandon(rid)
            raise Indeterminate(f"no reply from {self.name} in time (the request may have taken effect)") from None

    def _fail(self, why: str) -> None:
        if self.broken is None:
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

    def _receive(self, data: bytes) -> Optional[str]:
        deliveries, broken = self._wire.receive(data)
        for d in deliveries:
            future = self._futures.pop(d.rid)
            if d.undo is not None:  # a grant nobody waits for any more: release it
                asyncio.get_running_loop().create_task(self._undo(d.undo))
            if not future.done():
                future.set_result(d.reply)
        self._changed.set()
        return broken

    async def _undo(self, request: Request) -> None:
        try:
            rid, _ = await self.submit(request, time.monotonic())
            self._wire.abandon(rid)
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
    lock is lost."""

    def __init__(self, client: "AsyncClient", token: int, key: str, owner: str, lease_ms: int, sent_at: float,
                 shared: bool = False, limit: int = 0) -> None:
        super().__init__(client, token, key, owner, lease_ms, sent_at, shared, limit)
        self.lost = asyncio.Event()
        self._keeper: Optional[asyncio.Task] = None
        self._on_lost: Optional[OnLost] = None
        # Set by release() besides cancelling the keeper: before Python 3.12
        # asyncio.wait_for() can swallow a cancellation that arrives as its
        # inner future completes (gh-86296), and the keeper would carry on.
        self._stopping = False

    async def keep(self, lease_ms: Optional[int] = None) -> None:
        await self.client.keep(self.token, self.key, lease_ms or self.lease_ms)

    async def release(self) -> None:
        """Stops the keeper and releases (this holder only, if shared). A
        second call does nothing."""
        if self.released:
            return
        self.released = True
        self._stopping = True
        if self._keeper is not None and self._keeper is not asyncio.current_task():
            self._keeper.cancel()
            try:
                await self._keeper
            except asyncio.CancelledError:
                pass
        await self.client.release(self.token, self.key)

    async def __aenter__(self) -> "AsyncLock":
        return self

    async def __aexit__(self, exc_type, exc, tb) -> None:
        error: Optional[LockdError] = None
        try:
            await self.release()
        except LockdError as e:
            error = e
        self._exit_outcome(exc_type, error)

    async def _declare_lost(self, why: LockdError) -> None:
        self._log_lost(why)
        self.lost_reason = why
        self.lost.set()
        if self._on_lost is not None:
            result = self._on_lost(self)
            if asyncio.iscoroutine(result):
                await result

    async def _keep_loop(self) -> None:
        plan = KeepPlan(self.lease_ms, self.sent_at)
        while not self._stopping:
            await asyncio.sleep(plan.wait_s(time.monotonic()))
            if self._stopping:
                return
            lost = plan.sending(time.monotonic())
            if lost is None:
                try:
                    reply = await self.client.call(
                        Request("K", self.key, token=self.token, lease_ms=self.lease_ms), deadline=plan.safe_end)
                    token_outcome(reply, "K")
                except (LockdError, ValueError) as e:
                    lost = plan.failed(e, time.monotonic())
                    if lost is None:
                        continue
                else:
                    self.kept_count += 1
                    plan.kept()
                    continue
            await self._declare_lost(lost)
            return


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
    """The asyncio client; options as for :class:`lockd_client.Client`."""

    def _init_connection(self) -> None:
        self._conn: Optional[_AsyncConnection] = None
        self._connecting = asyncio.Lock()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()

    async def _connection_to(self, target: int) -> _AsyncConnection:
        async with self._connecting:
            address = self._nodes.address(target)
            conn = self._conn
            if conn is not None and conn.broken is None and conn.address == address:
                return conn
            new = _AsyncConnection(address)
            await new.open(self.connect_timeout_s, self._security)
            if new.identity is not None:
                self.identity = new.identity
            self._conn = new
            self._nodes.connected(target)
        if conn is not None:
            await conn.close()
        return new

    async def call(self, request: Request, deadline: Optional[float] = None) -> Reply:
        """Sends any request, following redirects and retrying ``no_leader``.
        ``deadline`` (monotonic) cuts the retry budget and reply timeout
        short. The decisions are :class:`~._core.CallPlan`'s (as in the
        threaded client); this does the I/O."""
        plan = CallPlan(self._nodes, request, self, deadline, time.monotonic())
        while True:
            try:
                conn = await self._connection_to(plan.target)
                rid, future = await conn.submit(request, plan.queue_deadline(time.monotonic()))
            except Unreachable as e:
                await asyncio.sleep(plan.unreachable(e, time.monotonic()))
                continue
            except _NotSent as e:
                plan.not_sent(str(e))
                continue
            try:
                reply = await conn.wait(rid, future, plan.reply_by(time.monotonic()))
            except Indeterminate:
                plan.silent()
                raise
            pause = plan.reply(reply, time.monotonic())
            if pause is None:
                return reply
            await asyncio.sleep(pause)

    async def _grant(self, verb: str, key: str, owner: Optional[str], lease_ms: int, wait_ms: int,
                     limit: int = 0) -> AsyncLock:
        owner = owner or self.owner
        sent_at = time.monotonic()
        reply = await self.call(Request(verb, key, owner=owner, lease_ms=lease_ms, wait_ms=wait_ms, limit=limit))
        return AsyncLock(self, acquire_outcome(reply, wait_ms, verb), key, owner, lease_ms, sent_at,
                         shared=verb == "S", limit=limit)

    async def _hold(self, verb: str, key: str, *, owner: Optional[str], lease_ms: int, wait_ms: int, keep: bool,
                    on_lost: Optional[OnLost], limit: int = 0) -> AsyncLock:
        if lease_ms <= 0:
            raise ValueError("a held lock needs lease_ms >= 1")
        lock = await self._grant(verb, key, owner, lease_ms, wait_ms, limit)
        if keep:
            lock._on_lost = on_lost
            lock._keeper = asyncio.get_running_loop().create_task(lock._keep_loop())
        return lock

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
