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
    """One request. ``verb`` is ``"A"``, ``"S"``, ``"R"``, ``"K"``, or
    ``"W"``/``"U"`` (v1.3 §5c: watch a key, stop watching; only ``key``).

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
        if self.verb not in ("A", "S", "R", "K", "W", "U"):
            return "verb must be A, S, R, K, W or U"
        if self.is_acquire and not _visible(self.owner, MAX_OWNER_BYTES):
            return "owner must be 1..64 visible ASCII characters without spaces"
        if self.verb in ("R", "K") and not 1 <= self.token <= MAX_TOKEN:
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
        elif self.verb in ("W", "U"):
            parts = [self.verb, self.key]
        else:
            parts = ["K", str(self.token), self.key, str(self.lease_ms)]
        return (" ".join(parts) + "\n").encode("ascii")

    def echo(self) -> str:
        """The echo its replies carry, tagged by kind (``A owner key`` / ``T token key``
        / ``W key``). ``A`` and ``S`` share one: their ``T``/``B`` replies look
        the same; ``W`` and ``U`` share one, answered in request order."""
        if self.is_acquire:
            return f"A {self.owner} {self.key}"
        if self.verb in ("W", "U"):
            return f"W {self.key}"
        return f"T {self.token} {self.key}"


@dataclasses.dataclass
class Reply:
    """One parsed reply line; which fields are set depends on ``kind``.

    ``M`` and ``E`` keep their echo raw (``echo_first``, ``key``): it is
    ``owner key`` for an acquire, ``token key`` for a release or keep, and
    ``key`` alone (``echo_first`` empty) for a watch.

    ``W`` (the reply to a watch) and the push ``V`` carry ``key``, ``rev``
    and the key's ``state``: ``"free"``, ``"held"`` (``owner``, ``token``)
    or ``"shared"`` (``limit``, ``count``). The push ``X`` (a lease ended
    by expiry) carries ``token`` and ``key``. ``V`` and ``X`` are pushes
    (``is_push``): never the reply to a request.
    """

    kind: str
    token: int = 0
    owner: str = ""
    key: str = ""
    echo_first: str = ""
    leader: str = ""
    error_code: str = ""
    rev: int = 0
    state: str = ""
    limit: int = 0
    count: int = 0

    @property
    def is_grant(self) -> bool:
        """``A`` or ``S``: the server granted the key (and a token)."""
        return self.kind in ("A", "S")

    @property
    def is_push(self) -> bool:
        """``V`` or ``X`` (v1.3 §5c): a push, routed before reply matching."""
        return self.kind in ("V", "X")


def _token(text: str) -> Optional[int]:
    if not text.isdigit() or not text.isascii():
        return None
    value = int(text)
    return value if 1 <= value <= MAX_TOKEN else None


def _count(text: str, low: int, high: int) -> Optional[int]:
    if not text.isdigit() or not text.isascii():
        return None
    value = int(text)
    return value if low <= value <= high else None


def _watch_state(kind: str, f: List[str]) -> Optional[Reply]:
    """``W``/``V`` ``key rev state...`` (§5c)."""
    rev = _count(f[2], 1, 2**64 - 1) if len(f) >= 4 else None
    if rev is None:
        return None
    r = Reply(kind, key=f[1], rev=rev, state=f[3])
    if f[3] == "free" and len(f) == 4:
        return r
    if f[3] == "held" and len(f) == 6 and _visible(f[4], MAX_OWNER_BYTES):
        r.owner, r.token = f[4], _token(f[5]) or 0
        return r if r.token else None
    if f[3] == "shared" and len(f) == 6:
        limit, count = _count(f[4], 0, MAX_LIMIT), _count(f[5], 1, 2**64 - 1)
        if limit is None or count is None:
            return None
        r.limit, r.count = limit, count
        return r
    return None


def parse_reply(line: str) -> Optional[Reply]:
    """Parses one reply or push line (without ``\\n``); None if it is neither."""
    f = line.rstrip("\r").split()
    if not f or len(f[0]) != 1:
        return None
    kind = f[0]
    if kind in ("W", "V"):
        return _watch_state(kind, f)
    if kind == "U" and len(f) == 2:
        return Reply("U", key=f[1])
    if kind == "X" and len(f) == 3:
        token = _token(f[1])
        return Reply("X", token=token, key=f[2]) if token else None
    if kind == "B" and len(f) == 2:  # a W refused by a watch limit: B <key>
        return Reply("B", key=f[1])
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
    if kind == "E" and len(f) in (2, 3, 4):
        r = Reply("E", error_code=f[1])
        if len(f) == 4:
            r.echo_first, r.key = f[2], f[3]
        elif len(f) == 3:  # a watch's echo: the key alone
            r.key = f[2]
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
    """Pairs replies with the pipelined requests they answer. The rules
    (docs/clients.md, "The rules a client must follow", 2-3) live here and
    only here:

    - ``A``/``S``/``T``/``B`` answer the acquire (``A`` or ``S``) with that
      owner and key; only one such acquire may be in flight per connection
      (callers queue a second one until the first is answered);
    - ``R``/``K``/``N`` answer the oldest release or keep with that token
      and key; ``W``/``U``/``B key`` the oldest watch request on that key;
    - ``M``/``E`` with an echo try the acquire reading, then the token one
      (v1.3 gives ``E bad_lease``/``bad_wait``/``bad_limit`` an echo);
    - an ``E`` without echo (a v1.2 server's range error) is pinned on a
      request only when exactly one request in flight could have drawn it.
      Otherwise it waits, unattributed, while the other candidates get
      their own replies (each has an echo): once one candidate is left, it
      is that one's. A caller whose request stays among several candidates
      times out as indeterminate; nobody is ever told another's refusal.
    - pushes (``V``, ``X``) are never replies: the connection routes them
      before calling :meth:`match`.
    """

    def __init__(self) -> None:
        self._order: Dict[int, Request] = {}  # id -> request, in wire order
        self._by_echo: Dict[str, Deque[int]] = {}
        #: Echo-less errors not yet attributable: [reply, candidate ids].
        self._unattributed: List[list] = []
        self._resolved: List[tuple] = []

    def __len__(self) -> int:
        return len(self._order)

    def busy(self, request: Request) -> bool:
        """True if an acquire with this owner and key is already in flight."""
        return request.is_acquire and request.echo() in self._by_echo

    def add(self, rid: int, request: Request) -> None:
        assert not self.busy(request), "caller must queue a duplicate acquire"
        self._order[rid] = request
        self._by_echo.setdefault(request.echo(), collections.deque()).append(rid)

    def request(self, rid: int) -> Optional[Request]:
        return self._order.get(rid)

    def _take(self, rid: int) -> int:
        request = self._order.pop(rid)
        ids = self._by_echo[request.echo()]
        ids.remove(rid)
        if not ids:
            del self._by_echo[request.echo()]
        self._narrow(rid)
        return rid

    def _narrow(self, answered: int) -> None:
        """``answered`` got its own reply: it drew no pending echo-less error.
        An error left with one candidate is that candidate's; ``k`` errors
        of one code sharing the same ``k`` candidates are theirs, in order."""
        for entry in self._unattributed:
            entry[1].discard(answered)
        changed = True
        while changed:
            changed = False
            for entry in list(self._unattributed):
                reply, candidates = entry
                if not candidates:  # cannot happen with a conforming server
                    self._unattributed.remove(entry)
                    continue
                same = [e for e in self._unattributed
                        if e[1] == candidates and e[0].error_code == reply.error_code]
                if len(same) == len(candidates):
                    for e, rid in zip(same, sorted(candidates)):
                        self._unattributed.remove(e)
                        self._resolved.append((self._take_quiet(rid), e[0]))
                    changed = True
                    break

    def _take_quiet(self, rid: int) -> int:
        request = self._order.pop(rid)
        ids = self._by_echo[request.echo()]
        ids.remove(rid)
        if not ids:
            del self._by_echo[request.echo()]
        for entry in self._unattributed:
            entry[1].discard(rid)
        return rid

    def take_resolved(self) -> List[tuple]:
        """Echo-less errors attributed since the last call, as ``(id, reply)``."""
        out, self._resolved = self._resolved, []
        return out

    def _find(self, echo: str, prefer: Optional[str] = None) -> Optional[int]:
        ids = self._by_echo.get(echo)
        if not ids:
            return None
        if prefer:
            for rid in ids:
                if self._order[rid].verb == prefer:
                    return rid
            if prefer in ("W", "U"):
                return None
        return ids[0]

    @staticmethod
    def could_draw(reply: Reply, r: Request) -> bool:
        """Whether request ``r`` can have drawn the echo-less error ``reply``."""
        if r.verb in ("W", "U"):  # not a range error; E unknown_command from a v1.2 server
            return reply.error_code not in ("bad_wait", "bad_lease", "bad_limit")
        if reply.error_code == "bad_wait":
            return r.is_acquire and r.wait_ms > 0
        if reply.error_code == "bad_lease":
            return r.verb == "K" or (r.is_acquire and r.lease_ms > 0)
        if reply.error_code == "bad_limit":
            return r.verb == "S"
        return True

    #: What :meth:`match` returns for an echo-less error kept unattributed.
    PENDING = -1

    def match(self, reply: Reply) -> Optional[int]:
        """The id of the request ``reply`` answers, removed; None if none
        matches; :data:`PENDING` for an echo-less error held back (see the
        class; :meth:`take_resolved` gives it out once attributable)."""
        rid: Optional[int] = None
        if reply.kind in ("A", "S", "T") or (reply.kind == "B" and reply.owner):
            rid = self._find(f"A {reply.owner} {reply.key}")
        elif reply.kind in ("R", "K", "N"):
            rid = self._find(f"T {reply.token} {reply.key}", None if reply.kind == "N" else reply.kind)
        elif reply.kind in ("W", "U"):
            rid = self._find(f"W {reply.key}", reply.kind)
        elif reply.kind == "B":  # B <key>: a watch refused by a limit
            rid = self._find(f"W {reply.key}", "W")
        elif reply.key and not reply.echo_first:  # E with a watch's echo
            rid = self._find(f"W {reply.key}")
        elif reply.key:  # M or E with echo
            rid = self._find(f"A {reply.echo_first} {reply.key}")
            if rid is None and _token(reply.echo_first):
                rid = self._find(f"T {int(reply.echo_first)} {reply.key}")
        else:  # E without echo
            candidates = {i for i, r in self._order.items() if self.could_draw(reply, r)}
            for entry in self._unattributed:  # already spoken for by an earlier error
                if len(entry[1]) == 1:
                    candidates -= entry[1]
            if len(candidates) == 1:
                rid = candidates.pop()
            elif not candidates:
                return None
            else:
                self._unattributed.append([reply, candidates])
                self._narrow(0)
                return self.PENDING
        return None if rid is None else self._take(rid)

    def drain(self) -> List[int]:
        """Removes and returns every id in flight, oldest first."""
        ids = list(self._order)
        self._order.clear()
        self._by_echo.clear()
        self._unattributed.clear()
        self._resolved.clear()
        return ids
