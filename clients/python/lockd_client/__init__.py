"""lockd_client: the Python client of lockd (standard library only).

    from lockd_client import Client
    with Client("127.0.0.1:7070").lock("orders/42", lease_ms=10_000, wait_ms=5_000) as lock:
        use(lock.token)
    with Client().read_lock("config") as reader: ...          # many readers at once
    with Client().semaphore("workers", 8).acquire() as permit: ...  # at most 8 at once
    lead = Client().campaign("election/x", "node-a")                   # leader election
    for state in Client().watch("orders/42"): ...                       # every state (v1.3)

See docs/clients.md in the lockd tree for the rules it implements. It logs
redirects, retries, failovers and lost locks to the ``lockd_client`` logger.
"""

import logging

from ._core import KeyState, Leader
from .aio import AsyncClient, AsyncLeadership, AsyncLock, AsyncObserve, AsyncSemaphore, AsyncWatch
from .client import Client, Leadership, Lock, Observe, Semaphore, Watch
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
    "AsyncLeadership",
    "AsyncLock",
    "AsyncObserve",
    "AsyncSemaphore",
    "AsyncWatch",
    "Client",
    "KeyState",
    "Leader",
    "Leadership",
    "Lock",
    "Observe",
    "Semaphore",
    "Watch",
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
