"""Exceptions of the lockd client: one class per outcome a caller may act on.

Everything derives from :class:`LockdError`; the classes also derive from
the built-in exception that names the same idea, so ``except TimeoutError``
catches a ``T`` reply and ``except ConnectionError`` an unreachable server.
"""

from __future__ import annotations


class LockdError(Exception):
    """Base class of every error the client raises."""


class LockTimeout(LockdError, TimeoutError):
    """``T``: the key is held by someone else (wait 0), or the wait ran out."""


class LockBusy(LockdError):
    """``B``: the key's wait queue or a server-wide cap is full; not enqueued."""


class NotHeld(LockdError):
    """``N``: the token does not hold the key (lease ended, released, or moved on)."""


class LockLost(LockdError):
    """The keeper could not keep the lock: its token is dead, stop relying on it."""


class Indeterminate(LockdError):
    """The request may or may not have taken effect.

    ``E indeterminate`` (a cluster leader lost leadership before the request
    committed), the connection dropped after the request was sent, or no
    reply came in time. For an acquire: you do not hold a lock you can use
    (you have no token); if one was granted, it ends with its lease.
    """


class NoLeader(LockdError):
    """Cluster: no leader was found (``E no_leader`` or redirects) within the retry budget."""


class Unreachable(LockdError, ConnectionError):
    """No address could be connected to; the request was not sent."""


class Rejected(LockdError, ValueError):
    """The server refused the request as invalid (``E bad_lease`` ...).

    ``code`` holds the protocol's error code.
    """

    def __init__(self, code: str, message: str = "") -> None:
        super().__init__(message or f"the server answered E {code}")
        self.code = code


class LimitMismatch(Rejected):
    """``E limit_mismatch`` (v1.2): a shared acquire's limit differs from the
    one the key's shared holders and waiters carry. Every user of one
    semaphore must pass the same limit."""

    def __init__(self, message: str = "") -> None:
        super().__init__("limit_mismatch", message or "the key is shared with another limit")


class Unauthenticated(Rejected):
    """``E unauthenticated`` (protocol.md §11): the server runs with
    authentication and this connection has no identity, or the credential
    was refused (then it is not tried on other nodes: they share the
    credentials file). The credential never appears in the message."""

    def __init__(self, message: str = "") -> None:
        super().__init__("unauthenticated", message or "the server wants a credential (or refused the one given)")


class Forbidden(Rejected):
    """``E forbidden``: the ACL does not grant this identity the verb on the key."""

    def __init__(self, message: str = "") -> None:
        super().__init__("forbidden", message or "the ACL does not allow this request")


class ProtocolError(LockdError):
    """The server sent a line this client does not understand."""
