"""Free ports for processes the tools and tests start.

A port the kernel hands out for bind(port 0) lies in the ephemeral range,
which outgoing connections draw from too: between picking it and the
node binding it, a peer's or a client's connect() can take it, and the
node fails to listen. So ports come from below that range, like
free_port() in tests/support/lockd_cluster.cc; LOCKD_TEST_PORTS=LO-HI
narrows the choice (parallel CI jobs on one host)."""
import os
import random
import re
import socket

_handed_out = set()


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
        if port in _handed_out:
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
