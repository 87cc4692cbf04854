"""The asyncio lockd client: the same concepts as :mod:`lockd_client.client`
in ``async`` form.

    client = AsyncClient("127.0.0.1:7070")
    async with client.lock("orders/42", lease_ms=10_000, wait_ms=5_000) as lock:
        await store.write(data, fencing_token=lock.token)   # kept alive by a task

One connection per client, one reader task pairing replies with requests
by their echo; any number of tasks may share the client.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Awaitable, Callable, Dict, Optional, Set, Tuple, Union

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

OnLost = Callable[["AsyncLock"], Union[None, Awaitable[None]]]


class _NotSent(Exception):
    pass


class _AsyncConnection:
    def __init__(self, address: Tuple[str, int]) -> None:
        self.address = address
        self.name = f"{address[0]}:{address[1]}"
        self.broken: Optional[str] = None
        self._matcher = Matcher()
        self._futures: Dict[int, asyncio.Future] = {}
        self._abandoned: Set[int] = set()
        self._next_id = 1
        self._changed = asyncio.Event()  # set whenever a reply is dispatched
        self._reader: Optional[asyncio.StreamReader] = None
        self._writer: Optional[asyncio.StreamWriter] = None
        self._task: Optional[asyncio.Task] = None

    async def open(self, timeout_s: float) -> None:
        try:
            self._reader, self._writer = await asyncio.wait_for(
                asyncio.open_connection(*self.address, limit=MAX_REPLY_LINE_BYTES * 2), timeout_s)
        except (OSError, asyncio.TimeoutError) as e:
            raise Unreachable(f"cannot connect to {self.name}: {e or 'timed out'}") from None
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
        while self._matcher.busy(request) and self.broken is None:
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
        rid = self._next_id
        self._next_id += 1
        future = asyncio.get_running_loop().create_future()
        self._matcher.add(rid, request)
        self._futures[rid] = future
        assert self._writer is not None
        self._writer.write(request.line())  # in wire order: no await before this
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
            self._abandoned.add(rid)
            raise Indeterminate(f"no reply from {self.name} in time (the request may have taken effect)") from None

    def _fail(self, why: str) -> None:
        if self.broken is None:
            self.broken = why
        for rid in self._matcher.drain():
            f = self._futures.pop(rid, None)
            if f is not None and not f.done() and rid in self._abandoned:
                f.cancel()  # nobody awaits it: no "exception never retrieved"
            elif f is not None and not f.done():
                f.set_exception(Indeterminate(f"connection lost before the reply (the request may have taken effect): {why}"))
        self._abandoned.clear()
        self._changed.set()
        if self._writer is not None:
            self._writer.close()

    def _dispatch(self, text: str) -> None:
        reply = parse_reply(text)
        rid = self._matcher.match(reply) if reply else None
        if rid is None:
            self._fail(f"unexpected reply from {self.name}: {text!r}")
            return
        future = self._futures.pop(rid)
        if rid in self._abandoned:
            self._abandoned.discard(rid)
            if reply.kind == "A":  # a grant nobody waits for any more: release it
                asyncio.get_running_loop().create_task(self._undo(reply))
        if not future.done():
            future.set_result(reply)
        self._changed.set()

    async def _undo(self, reply: Reply) -> None:
        try:
            rid, _ = await self.submit(Request("R", reply.key, token=reply.token), time.monotonic())
            self._abandoned.add(rid)
        except (LockdError, _NotSent):
            pass

    async def _read_loop(self) -> None:
        assert self._reader is not None
        why = f"connection closed by {self.name}"
        try:
            while True:
                line = await self._reader.readline()
                if not line.endswith(b"\n"):
                    break
                self._dispatch(line[:-1].decode("ascii", "replace"))
                if self.broken is not None:
                    return
        except (OSError, ValueError, asyncio.LimitOverrunError) as e:
            why = f"reading from {self.name} failed: {e}"
        self._fail(why)


class AsyncLock:
    """A held lock (asyncio). ``token`` is the fencing token. ``lost`` is an
    :class:`asyncio.Event` the keeper task sets if the lock is lost."""

    def __init__(self, client: "AsyncClient", token: int, key: str, owner: str, lease_ms: int, sent_at: float) -> None:
        self.client = client
        self.token = token
        self.key = key
        self.owner = owner
        self.lease_ms = lease_ms
        self.sent_at = sent_at
        self.lost = asyncio.Event()
        self.lost_reason: Optional[LockdError] = None
        self.kept_count = 0
        self.released = False
        self._keeper: Optional[asyncio.Task] = None
        self._on_lost: Optional[OnLost] = None

    def __repr__(self) -> str:
        return f"AsyncLock(key={self.key!r}, token={self.token}, owner={self.owner!r})"

    def check(self) -> None:
        """Raises :class:`LockLost` if the keeper found the lock lost."""
        if self.lost.is_set():
            raise LockLost(f"lost the lock on {self.key}: {self.lost_reason}") from self.lost_reason

    async def keep(self, lease_ms: Optional[int] = None) -> None:
        await self.client.keep(self.token, self.key, lease_ms or self.lease_ms)

    async def release(self) -> None:
        """Stops the keeper and releases. A second call does nothing."""
        if self.released:
            return
        self.released = True
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
        try:
            await self.release()
        except NotHeld as e:
            if exc_type is None:
                raise LockLost(f"the lock on {self.key} ended before the block finished: {e}") from e
        except LockdError:
            pass
        if exc_type is None and self.lost.is_set():
            self.check()

    async def _declare_lost(self, why: LockdError) -> None:
        self.lost_reason = why
        self.lost.set()
        if self._on_lost is not None:
            result = self._on_lost(self)
            if asyncio.iscoroutine(result):
                await result

    async def _keep_loop(self) -> None:
        lease_s = self.lease_ms / 1000
        interval = max(lease_s / 3, 0.001)
        safe_end = self.sent_at + lease_s
        next_at = self.sent_at + interval
        while True:
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            sent = time.monotonic()
            if sent >= safe_end:
                await self._declare_lost(NotHeld("the lease ended before an extension was confirmed"))
                return
            try:
                reply = await self.client.call(Request("K", self.key, token=self.token, lease_ms=self.lease_ms),
                                         deadline=safe_end)
                token_outcome(reply, "K")
            except (NotHeld, Rejected, ProtocolError) as e:
                await self._declare_lost(e)
                return
            except LockdError:
                next_at = min(time.monotonic() + min(KEEP_RETRY_PAUSE_S, interval), safe_end)
                continue
            self.kept_count += 1
            safe_end = sent + lease_s
            next_at = sent + interval


class _LockContext:
    """What ``AsyncClient.lock()`` returns: acquires on ``async with`` entry
    (or when awaited), releases on exit."""

    def __init__(self, client: "AsyncClient", key: str, kwargs: dict) -> None:
        self._client = client
        self._key = key
        self._kwargs = kwargs
        self._lock: Optional[AsyncLock] = None

    def __await__(self):
        return self._client._lock(self._key, **self._kwargs).__await__()

    async def __aenter__(self) -> AsyncLock:
        self._lock = await self._client._lock(self._key, **self._kwargs)
        return self._lock

    async def __aexit__(self, exc_type, exc, tb) -> None:
        assert self._lock is not None
        await self._lock.__aexit__(exc_type, exc, tb)


class AsyncClient:
    """The asyncio client; options as for :class:`lockd_client.Client`."""

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
        self._current = 0
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
            address = self._addresses[target]
            conn = self._conn
            if conn is not None and conn.broken is None and conn.address == address:
                return conn
            new = _AsyncConnection(address)
            await new.open(self.connect_timeout_s)
            self._conn, self._current = new, target
        if conn is not None:
            await conn.close()
        return new

    def _index_of(self, address: Tuple[str, int]) -> int:
        if address not in self._addresses:
            self._addresses.append(address)
        return self._addresses.index(address)

    async def call(self, request: Request, deadline: Optional[float] = None) -> Reply:
        """Sends any request, following redirects and retrying ``no_leader``.
        ``deadline`` (monotonic) cuts the retry budget and reply timeout short."""
        why = request.validate()
        if why:
            raise ValueError(why)
        deadline = deadline if deadline is not None else float("inf")
        budget_end = min(time.monotonic() + self.no_leader_budget_s, deadline)
        backoff = Backoff(self.backoff_initial_s, self.backoff_max_s, self._rng)
        target = self._current
        redirects = failures = stale = 0
        redirected = False  # ``target`` is the leader named by the last M
        while True:
            try:
                conn = await self._connection_to(target)
                rid, future = await conn.submit(request, time.monotonic() + request.wait_ms / 1000)
            except Unreachable as e:
                if redirected:
                    # The leader an M named is down: no leader for now (see Client.call).
                    redirected = False
                    pause = backoff.pause()
                    if time.monotonic() + pause >= budget_end:
                        raise NoLeader(f"the leader named by M cannot be reached ({e})") from None
                    await asyncio.sleep(pause)
                    target = (target + 1) % len(self._addresses)
                    redirects = 0
                    continue
                failures += 1
                if failures >= len(self._addresses):
                    raise
                target = (target + 1) % len(self._addresses)
                continue
            except _NotSent as e:
                stale += 1
                if stale > 3:
                    raise Unreachable(str(e)) from None
                continue
            reply_by = min(time.monotonic() + request.wait_ms / 1000 + self.reply_timeout_s, deadline)
            try:
                reply = await conn.wait(rid, future, reply_by)
            except Indeterminate:
                # No reply: not resent, but the next request goes to the next node.
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
                    await asyncio.sleep(pause)
                    target = (target + 1) % len(self._addresses)
                    redirects = 0
                    continue
                if reply.error_code == "indeterminate":
                    raise Indeterminate(
                        "the leader lost leadership before the request committed; it may or may not have taken effect")
                raise Rejected(reply.error_code)
            return reply

    async def acquire(self, key: str, *, owner: Optional[str] = None, lease_ms: int = 0, wait_ms: int = 0) -> AsyncLock:
        """``A``: the held lock (no keeper). Raises LockTimeout for ``T``."""
        owner = owner or self.owner
        sent_at = time.monotonic()
        reply = await self.call(Request("A", key, owner=owner, lease_ms=lease_ms, wait_ms=wait_ms))
        return AsyncLock(self, acquire_outcome(reply, wait_ms), key, owner, lease_ms, sent_at)

    def lock(self, key: str, *, owner: Optional[str] = None, lease_ms: int = DEFAULT_LOCK_LEASE_MS,
             wait_ms: int = 0, keep: bool = True, on_lost: Optional[OnLost] = None) -> _LockContext:
        """``async with client.lock(key, ...) as lock:`` acquires, keeps the
        lease alive in a task, and releases on exit. Also awaitable."""
        return _LockContext(self, key, dict(owner=owner, lease_ms=lease_ms, wait_ms=wait_ms, keep=keep, on_lost=on_lost))

    async def _lock(self, key: str, *, owner: Optional[str], lease_ms: int, wait_ms: int, keep: bool,
                    on_lost: Optional[OnLost]) -> AsyncLock:
        if lease_ms <= 0:
            raise ValueError("lock() needs lease_ms >= 1")
        lock = await self.acquire(key, owner=owner, lease_ms=lease_ms, wait_ms=wait_ms)
        if keep:
            lock._on_lost = on_lost
            lock._keeper = asyncio.get_running_loop().create_task(lock._keep_loop())
        return lock

    async def release(self, token: int, key: str) -> None:
        """``R``: raises NotHeld if the token does not hold the key."""
        token_outcome(await self.call(Request("R", key, token=token)), "R")

    async def keep(self, token: int, key: str, lease_ms: int) -> None:
        """``K``: extends the lease; raises NotHeld once it has ended."""
        token_outcome(await self.call(Request("K", key, token=token, lease_ms=lease_ms)), "K")
