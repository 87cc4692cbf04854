"""The client side of lockd's text protocol, as pure code: requests to lines,
reply lines to values, and the :class:`Matcher` that pairs pipelined replies
with their requests by the echoed fields. No I/O; shared by the threaded and
the asyncio clients.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Deque, Dict, List, Optional

MAX_OWNER_BYTES = 64
MAX_KEY_BYTES = 250
#: Longest reply line accepted; longer is a protocol error, not more buffering.
MAX_REPLY_LINE_BYTES = 1024
MAX_TOKEN = 2**64 - 1
#: Largest ``limit`` of a shared acquire (0: no cap, a read lock).
MAX_LIMIT = 65535
#: The verbs that ask for a grant: they carry an owner, may wait, and are
#: answered by ``A``/``S``/``T``/``B`` echoing ``owner key``.
ACQUIRE_VERBS = ("A", "S")


def _visible(text: str, max_bytes: int) -> bool:
    return 0 < len(text) <= max_bytes and all(0x21 <= ord(c) <= 0x7E for c in text)


@dataclasses.dataclass(frozen=True)
class Request:
    """One request. ``verb`` is ``"A"``, ``"S"``, ``"R"`` or ``"K"``.

    For ``A`` and ``S``, ``lease_ms`` 0 means the server's default
    (``wait_ms`` must then be 0); ``K`` needs ``lease_ms`` >= 1. ``limit``
    is the shared acquire's cap (v1.2): 0 for a read lock, N for a
    semaphore of N permits.
    """

    verb: str
    key: str
    owner: str = ""
    token: int = 0
    lease_ms: int = 0
    wait_ms: int = 0
    limit: int = 0

    @property
    def is_acquire(self) -> bool:
        return self.verb in ACQUIRE_VERBS

    def validate(self) -> Optional[str]:
        """Why the protocol would refuse this request, or None if it is valid."""
        if self.verb not in ("A", "S", "R", "K"):
            return "verb must be A, S, R or K"
        if self.is_acquire and not _visible(self.owner, MAX_OWNER_BYTES):
            return "owner must be 1..64 visible ASCII characters without spaces"
        if not self.is_acquire and not 1 <= self.token <= MAX_TOKEN:
            return "token must be in 1..2^64-1"
        if not _visible(self.key, MAX_KEY_BYTES):
            return "key must be 1..250 visible ASCII characters without spaces"
        if self.verb == "S" and not 0 <= self.limit <= MAX_LIMIT:
            return "limit must be 0..65535 (0: no cap)"
        if self.lease_ms < 0 or self.wait_ms < 0:
            return "lease_ms and wait_ms must not be negative"
        if self.verb == "K" and self.lease_ms == 0:
            return "keep needs lease_ms >= 1"
        if self.is_acquire and self.lease_ms == 0 and self.wait_ms != 0:
            return "a wait needs an explicit lease_ms (the protocol puts lease before wait)"
        return None

    def line(self) -> bytes:
        """The request line, ending in ``\\n``."""
        if self.is_acquire:
            parts = [self.verb, self.owner, self.key]
            if self.verb == "S":
                parts.append(str(self.limit))
            if self.lease_ms:
                parts.append(str(self.lease_ms))
                if self.wait_ms:
                    parts.append(str(self.wait_ms))
        elif self.verb == "R":
            parts = ["R", str(self.token), self.key]
        else:
            parts = ["K", str(self.token), self.key, str(self.lease_ms)]
        return (" ".join(parts) + "\n").encode("ascii")

    def echo(self) -> str:
        """The echo its replies carry, tagged by kind (``A owner key`` / ``T token key``).
        ``A`` and ``S`` share one: their ``T``/``B`` replies look the same."""
        if self.is_acquire:
            return f"A {self.owner} {self.key}"
        return f"T {self.token} {self.key}"


@dataclasses.dataclass
class Reply:
    """One parsed reply line; which fields are set depends on ``kind``.

    ``M`` and ``E`` keep their echo raw (``echo_first``, ``key``): it is
    ``owner key`` for an acquire and ``token key`` for a release or keep.
    """

    kind: str
    token: int = 0
    owner: str = ""
    key: str = ""
    echo_first: str = ""
    leader: str = ""
    error_code: str = ""

    @property
    def is_grant(self) -> bool:
        """``A`` or ``S``: the server granted the key (and a token)."""
        return self.kind in ("A", "S")


def _token(text: str) -> Optional[int]:
    if not text.isdigit() or not text.isascii():
        return None
    value = int(text)
    return value if 1 <= value <= MAX_TOKEN else None


def parse_reply(line: str) -> Optional[Reply]:
    """Parses one reply line (without ``\\n``); None if it is not a protocol reply."""
    f = line.rstrip("\r").split()
    if not f or len(f[0]) != 1:
        return None
    kind = f[0]
    if kind in ("A", "S") and len(f) == 4:
        token = _token(f[1])
        return Reply(kind, token=token, owner=f[2], key=f[3]) if token else None
    if kind in ("T", "B") and len(f) == 3:
        return Reply(kind, owner=f[1], key=f[2])
    if kind in ("R", "N", "K") and len(f) == 3:
        token = _token(f[1])
        return Reply(kind, token=token, key=f[2]) if token else None
    if kind == "M" and len(f) == 4:
        return Reply("M", leader=f[1], echo_first=f[2], key=f[3])
    if kind == "E" and len(f) in (2, 4):
        r = Reply("E", error_code=f[1])
        if len(f) == 4:
            r.echo_first, r.key = f[2], f[3]
        return r
    return None


def parse_address(text: str) -> Optional[tuple]:
    """``host:port`` (IPv6 as ``[::1]:7070``) to ``(host, port)``; None if malformed."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        return None
    if host.startswith("["):
        if not host.endswith("]") or len(host) < 3:
            return None
        host = host[1:-1]
    return host, int(port)


class Matcher:
    """Pairs replies with the pipelined requests they answer.

    Rules (docs/clients.md): ``A``/``S``/``T``/``B`` answer the acquire
    (``A`` or ``S``) with that owner and key, and only one such acquire may be in flight per
    connection (callers queue a second one until the first is answered);
    ``R``/``K``/``N`` answer the oldest release or keep with that token and
    key; ``M``/``E`` with an echo try the acquire reading, then the token
    one; an ``E`` without echo is answered at once, so it belongs to the
    oldest request that could have drawn it and cannot still be waiting.
    """

    def __init__(self) -> None:
        self._order: Dict[int, Request] = {}  # id -> request, in wire order
        self._by_echo: Dict[str, Deque[int]] = {}

    def __len__(self) -> int:
        return len(self._order)

    def busy(self, request: Request) -> bool:
        """True if an acquire with this owner and key is already in flight."""
        return request.is_acquire and request.echo() in self._by_echo

    def add(self, rid: int, request: Request) -> None:
        assert not self.busy(request), "caller must queue a duplicate acquire"
        self._order[rid] = request
        self._by_echo.setdefault(request.echo(), collections.deque()).append(rid)

    def _take(self, rid: int) -> int:
        request = self._order.pop(rid)
        ids = self._by_echo[request.echo()]
        ids.remove(rid)
        if not ids:
            del self._by_echo[request.echo()]
        return rid

    def _find(self, echo: str, prefer: Optional[str] = None) -> Optional[int]:
        ids = self._by_echo.get(echo)
        if not ids:
            return None
        if prefer:
            for rid in ids:
                if self._order[rid].verb == prefer:
                    return rid
        return ids[0]

    def match(self, reply: Reply) -> Optional[int]:
        """The id of the request ``reply`` answers, removed; None if none matches."""
        rid: Optional[int] = None
        if reply.kind in ("A", "S", "T", "B"):
            rid = self._find(f"A {reply.owner} {reply.key}")
        elif reply.kind in ("R", "K", "N"):
            rid = self._find(f"T {reply.token} {reply.key}", None if reply.kind == "N" else reply.kind)
        elif reply.key:  # M or E with echo
            rid = self._find(f"A {reply.echo_first} {reply.key}")
            if rid is None and _token(reply.echo_first):
                rid = self._find(f"T {int(reply.echo_first)} {reply.key}")
        else:  # E without echo
            def could_draw(r: Request) -> bool:
                if reply.error_code == "bad_wait":
                    return r.is_acquire and r.wait_ms > 0
                if reply.error_code == "bad_lease":
                    return r.verb == "K" or (r.is_acquire and r.lease_ms > 0)
                if reply.error_code == "bad_limit":
                    return r.verb == "S"
                return True

            candidates = [i for i, r in self._order.items() if could_draw(r)]
            settled = [i for i in candidates if not (self._order[i].is_acquire and self._order[i].wait_ms > 0)]
            rid = (settled or candidates or [None])[0]
        return None if rid is None else self._take(rid)

    def drain(self) -> List[int]:
        """Removes and returns every id in flight, oldest first."""
        ids = list(self._order)
        self._order.clear()
        self._by_echo.clear()
        return ids
