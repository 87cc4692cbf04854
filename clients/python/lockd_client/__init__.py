"""lockd_client: the Python client of lockd (standard library only).

    from lockd_client import Client
    with Client("127.0.0.1:7070").lock("orders/42", lease_ms=10_000, wait_ms=5_000) as lock:
        use(lock.token)
    with Client().read_lock("config") as reader: ...          # many readers at once
    with Client().semaphore("workers", 8).acquire() as permit: ...  # at most 8 at once

See docs/clients.md in the lockd tree for the rules it implements. It logs
redirects, retries, failovers and lost locks to the ``lockd_client`` logger.
"""

import logging

from .aio import AsyncClient, AsyncLock, AsyncSemaphore
from .client import Client, Lock, Semaphore
from .errors import (
    Indeterminate,
    LimitMismatch,
    LockBusy,
    LockdError,
    LockLost,
    LockTimeout,
    NoLeader,
    NotHeld,
    ProtocolError,
    Forbidden,
    Rejected,
    Unauthenticated,
    Unreachable,
)
from .protocol import Matcher, Reply, Request, parse_reply

__version__ = "0.1.0"

# A library adds no handler of its own: the application decides where
# (and whether) lockd_client's lines go.
logging.getLogger("lockd_client").addHandler(logging.NullHandler())

__all__ = [
    "AsyncClient",
    "AsyncLock",
    "AsyncSemaphore",
    "Client",
    "Lock",
    "Semaphore",
    "Indeterminate",
    "LimitMismatch",
    "LockBusy",
    "LockdError",
    "LockLost",
    "LockTimeout",
    "NoLeader",
    "NotHeld",
    "ProtocolError",
    "Rejected",
    "Forbidden",
    "Unauthenticated",
    "Unreachable",
    "Matcher",
    "Reply",
    "Request",
    "parse_reply",
]
