"""lockd_client: the Python client of lockd (standard library only).

    from lockd_client import Client
    with Client("127.0.0.1:7070").lock("orders/42", lease_ms=10_000, wait_ms=5_000) as lock:
        use(lock.token)

See docs/clients.md in the lockd tree for the rules it implements.
"""

from .aio import AsyncClient, AsyncLock
from .client import Client, Lock
from .errors import (
    Indeterminate,
    LockBusy,
    LockdError,
    LockLost,
    LockTimeout,
    NoLeader,
    NotHeld,
    ProtocolError,
    Rejected,
    Unreachable,
)
from .protocol import Matcher, Reply, Request, parse_reply

__version__ = "0.1.0"

__all__ = [
    "AsyncClient",
    "AsyncLock",
    "Client",
    "Lock",
    "Indeterminate",
    "LockBusy",
    "LockdError",
    "LockLost",
    "LockTimeout",
    "NoLeader",
    "NotHeld",
    "ProtocolError",
    "Rejected",
    "Unreachable",
    "Matcher",
    "Reply",
    "Request",
    "parse_reply",
]
