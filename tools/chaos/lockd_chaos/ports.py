"""Free ports for processes the tools and tests start.

A port the kernel hands out for bind(port 0) lies in the ephemeral range,
which outgoing connections draw from too: between picking it and the
node binding it, a peer's or a client's connect() can take it, and the
node fails to listen. So ports come from below that range, like
free_port() in tests/support/lockd_cluster.cc; LOCKD_TEST_PORTS=LO-HI
narrows the choice (parallel CI jobs on one host).

A port handed out stays reserved for the rest of the process's life
against every other test process on the host: an exclusive lock on byte
`port` of one shared file, as the C++ and Go test helpers take. Checking
that a port binds says nothing a moment later: while a node is down its
port is free, and a parallel test could pick it and bind it first."""
import fcntl
import os
import random
import re
import socket

_handed_out = set()
_lock_file = None


def _reserve(port):
    """Locks byte `port` of the shared file for this process, or False if
    another process holds it. The file stays open: closing any descriptor
    of it would drop every lock this process holds on it."""
    global _lock_file
    if _lock_file is None:
        path = os.path.join(os.environ.get("TMPDIR") or "/tmp", "lockd-test-ports.lock")
        try:
            _lock_file = open(path, "a+b")
        except OSError:
            return True  # no shared file: the bind check alone
    try:
        fcntl.lockf(_lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, port, os.SEEK_SET)
        return True
    except OSError:
        return False


def _range():
    lo, hi = 10000, 32767
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            hi = int(f.read().split()[0]) - 1
    except (OSError, ValueError, IndexError):
        pass
    m = re.fullmatch(r"(\d+)-(\d+)", os.environ.get("LOCKD_TEST_PORTS", ""))
    if m and 0 < int(m.group(1)) < int(m.group(2)) <= 65535:
        lo, hi = int(m.group(1)), int(m.group(2))
    return lo, hi


def free_port(host="127.0.0.1"):
    """A port on `host` that was free a moment ago and that this process
    has not handed out before (a cluster picks every port before any node
    binds one)."""
    lo, hi = _range()
    for _ in range(200):
        if hi <= lo:
            break
        port = random.randrange(lo, hi)
        if port in _handed_out or not _reserve(port):
            continue
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((host, port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    # No room below the range: let the kernel choose.
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]
