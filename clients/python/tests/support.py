"""Test support: a real lockd on a free port, and a scripted fake node.

``LOCKD_BIN`` names the lockd binary (default: build/bin/lockd of this tree).
"""

from __future__ import annotations

import os
import re
import select
import socket
import subprocess
import sys
import threading
import time
from typing import Callable, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.abspath(os.path.join(HERE, "..")))  # importable from the tree
sys.path.insert(0, os.path.join(ROOT, "examples", "fenced_store"))


def lockd_bin() -> str:
    return os.environ.get("LOCKD_BIN", os.path.join(ROOT, "build", "bin", "lockd"))


class Lockd:
    """A real lockd on 127.0.0.1 (port 0 unless given), killed on stop()."""

    def __init__(self, port: int = 0, *flags: str) -> None:
        self.proc = subprocess.Popen(
            [lockd_bin(), "--listen", f"127.0.0.1:{port}", "--admin", "off", *flags],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 10
        seen = b""
        assert self.proc.stderr is not None
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stderr], [], [], 0.1)
            if ready:
                chunk = os.read(self.proc.stderr.fileno(), 4096)
                if not chunk:
                    break
                seen += chunk
                m = re.search(rb"listening on \S+:(\d+)", seen)
                if m:
                    self.port = int(m.group(1))
                    self.address = f"127.0.0.1:{self.port}"
                    # Keep draining stderr so lockd never blocks on a full pipe.
                    threading.Thread(target=self._drain, daemon=True).start()
                    return
        self.proc.kill()
        raise RuntimeError(f"lockd did not start: {seen.decode(errors='replace')}")

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        while os.read(self.proc.stderr.fileno(), 4096):
            pass

    def stop(self) -> None:
        """SIGKILL: the lock table is gone with it."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)

    def call(self, line: str) -> str:
        """One raw request, one reply line."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
            s.sendall(line.encode() + b"\n")
            buf = b""
            while not buf.endswith(b"\n"):
                chunk = s.recv(4096)
                if not chunk:
                    break
                buf += chunk
            return buf.decode().strip()


class FakeNode:
    """A scripted stand-in for a lockd node: ``handler(line)`` returns the
    reply lines for each request line (possibly none). For what a single
    lockd cannot show: ``M``, ``E no_leader``, ``E indeterminate``, replies
    in an order of the test's choosing."""

    def __init__(self, handler: Callable[[str], List[str]]) -> None:
        self.handler = handler
        self.received: List[str] = []
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self.port = self._listener.getsockname()[1]
        self.address = f"127.0.0.1:{self.port}"
        self._conns: List[socket.socket] = []
        self._stop = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def push(self, line: str) -> None:
        """Sends ``line`` on every open connection (a reply held back)."""
        for c in list(self._conns):
            try:
                c.sendall(line.encode() + b"\n")
            except OSError:
                pass

    def close(self) -> None:
        self._stop = True
        self._thread.join(timeout=5)
        self._listener.close()
        for c in self._conns:
            c.close()

    def _run(self) -> None:
        bufs = {}
        while not self._stop:
            ready, _, _ = select.select([self._listener, *self._conns], [], [], 0.05)
            for s in ready:
                if s is self._listener:
                    c, _ = s.accept()
                    self._conns.append(c)
                    bufs[c] = b""
                    continue
                try:
                    chunk = s.recv(4096)
                except OSError:
                    chunk = b""
                if not chunk:
                    self._conns.remove(s)
                    s.close()
                    continue
                bufs[s] += chunk
                *lines, bufs[s] = bufs[s].split(b"\n")
                for raw in lines:
                    line = raw.decode()
                    self.received.append(line)
                    for reply in self.handler(line):
                        s.sendall(reply.encode() + b"\n")


def eventually(cond: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.01)
    return cond()


def is_free(lockd: Lockd, key: str) -> bool:
    """True if ``key`` can be acquired at once (then releases it)."""
    f = lockd.call(f"A probe {key} 1000").split()
    if f[0] != "A":
        return False
    lockd.call(f"R {f[1]} {key}")
    return True
