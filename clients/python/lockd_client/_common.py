"""Pieces the threaded and asyncio clients share: options, default owner,
backoff, and turning a reply into a value or an exception."""

from __future__ import annotations

import os
import random
import socket
from typing import Optional, Sequence, Union

from .errors import LockBusy, LockTimeout, NotHeld, ProtocolError
from .protocol import MAX_OWNER_BYTES, Reply, parse_address

Addresses = Union[str, Sequence[str]]

DEFAULT_ADDRESS = "127.0.0.1:7070"
#: lease of ``Client.lock()`` when none is given (lockd's own default).
DEFAULT_LOCK_LEASE_MS = 30_000
#: Pause between tries of a keep that failed for a transient reason.
KEEP_RETRY_PAUSE_S = 0.1


def default_owner() -> str:
    """``HOST:PID``, cut to the protocol's 64 bytes, spaces and controls replaced."""
    text = f"{socket.gethostname()}:{os.getpid()}"
    text = "".join(c if 0x21 <= ord(c) <= 0x7E else "_" for c in text)
    return text[-MAX_OWNER_BYTES:]


def parse_addresses(addresses: Addresses) -> list:
    names = [addresses] if isinstance(addresses, str) else list(addresses)
    if not names:
        raise ValueError("no address to connect to")
    parsed = []
    for name in names:
        a = parse_address(name)
        if a is None:
            raise ValueError(f"bad address {name!r} (want host:port)")
        parsed.append(a)
    return parsed


class Backoff:
    """Doubling backoff with "equal jitter": each pause is drawn from [d/2, d],
    so clients that failed together do not retry together."""

    def __init__(self, initial_s: float, max_s: float, rng: Optional[random.Random] = None) -> None:
        self._next = initial_s
        self._max = max_s
        self._rng = rng or random.Random()

    def pause(self) -> float:
        d = self._next
        self._next = min(self._next * 2, self._max)
        return self._rng.uniform(d / 2, d)


def acquire_outcome(reply: Reply, wait_ms: int, verb: str = "A") -> int:
    """The token of the grant (``A`` for an ``A``, ``S`` for an ``S``);
    raises for ``T`` and ``B``."""
    if reply.kind == verb:
        return reply.token
    if reply.kind == "T":
        if verb == "S":
            raise LockTimeout("held exclusively, full, or someone is queued first" if wait_ms == 0
                              else "not granted before the wait ran out")
        raise LockTimeout("held by someone else" if wait_ms == 0 else "still held when the wait ran out")
    if reply.kind == "B":
        raise LockBusy("the key's wait queue or a server cap is full")
    raise ProtocolError(f"unexpected reply {reply.kind} to {verb}")


def token_outcome(reply: Reply, verb: str) -> None:
    """Returns for ``R``/``K``; raises NotHeld for ``N``."""
    if reply.kind == verb:
        return
    if reply.kind == "N":
        if verb == "K":
            raise NotHeld("the lease already ended or the token no longer holds the key")
        raise NotHeld("the token does not hold the key (lease ended or released)")
    raise ProtocolError(f"unexpected reply {reply.kind} to {verb}")
