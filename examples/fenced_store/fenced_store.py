"""A resource that checks fencing tokens: a tiny file store that refuses a
write carrying a lower token than the highest it has accepted for that file.

A holder that paused past its lease (GC, swap, a stopped VM) and wakes up
still "holding" the lock carries an old token; the store turns its late
write away. Same layout as fenced_store.h: ``DIR/NAME`` holds the data,
``DIR/NAME.token`` the highest token accepted, in decimal. The check and
the write happen under flock(2) on ``DIR/NAME.lock`` (never replaced,
unlike the files renamed into place), so they are atomic against every
other writer, in either language.
"""

from __future__ import annotations

import fcntl
import os
from typing import Optional


class StaleTokenError(Exception):
    """The write carried a token lower than one the store already accepted."""


class FencedStore:
    def __init__(self, directory: str) -> None:
        self.directory = directory

    def highest_token(self, name: str) -> int:
        """The highest token accepted for ``name`` (0 if none)."""
        try:
            with open(os.path.join(self.directory, name + ".token")) as f:
                text = f.read().strip()
                return int(text) if text else 0
        except FileNotFoundError:
            return 0

    def write(self, name: str, token: int, data: bytes) -> None:
        """Writes ``data`` to ``name`` unless ``token`` is stale.

        Raises StaleTokenError if a higher token was accepted before.
        """
        path = os.path.join(self.directory, name)
        fd = os.open(path + ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            highest = self.highest_token(name)
            if token < highest:
                raise StaleTokenError(f"token {token} < {highest} already accepted for {name}")
            with open(path + ".tmp", "wb") as f:
                f.write(data)
            with open(path + ".token.tmp", "w") as f:
                f.write(str(token))
            os.rename(path + ".tmp", path)
            os.rename(path + ".token.tmp", path + ".token")
        finally:
            os.close(fd)  # also drops the flock

    def read(self, name: str) -> Optional[bytes]:
        try:
            with open(os.path.join(self.directory, name), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None
