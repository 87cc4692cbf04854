"""Test support: a real lockd on a free port, a real cluster of lockd
processes on loopback, and a scripted fake node.

``LOCKD_BIN`` names the lockd binary (default: build/bin/lockd of this tree).
``LOCKD_TEST_PORTS=LO-HI`` narrows the ports a cluster's nodes get (as in
the C++ test support).
"""

from __future__ import annotations

import os
import re
import select
import shutil
import json
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from typing import Callable, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.abspath(os.path.join(HERE, "..")))  # importable from the tree
sys.path.insert(0, os.path.join(ROOT, "examples", "fenced_store"))
sys.path.insert(0, os.path.join(ROOT, "tools", "chaos"))
from lockd_chaos.ports import free_port  # noqa: E402,F401  (reserved against parallel tests)
from lockd_chaos.cluster_init import init_cluster  # noqa: E402


def lockd_bin() -> str:
    return os.environ.get("LOCKD_BIN", os.path.join(ROOT, "build", "bin", "lockd"))


class Lockd:
    """A real lockd on 127.0.0.1 (port 0 unless given), killed on stop().
    With ``admin``, its admin API listens on a free port too (:meth:`status`,
    :meth:`metric`)."""

    def __init__(self, port: int = 0, *flags: str, admin: bool = False) -> None:
        self.admin_port = free_port() if admin else 0
        self._drainer: Optional[threading.Thread] = None
        self.proc = subprocess.Popen(
            [lockd_bin(), "--listen", f"127.0.0.1:{port}",
             "--admin", f"127.0.0.1:{self.admin_port}" if admin else "off", *flags],
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
                    self._drainer = threading.Thread(target=self._drain, daemon=True)
                    self._drainer.start()
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
        if self._drainer is not None:
            self._drainer.join(timeout=5)  # EOF once the process is gone
        assert self.proc.stderr is not None
        self.proc.stderr.close()

    def _admin(self, path: str) -> str:
        assert self.admin_port, "started without admin=True"
        with urllib.request.urlopen(f"http://127.0.0.1:{self.admin_port}{path}", timeout=5) as r:
            return r.read().decode()

    def status(self) -> dict:
        """``GET /v1/status`` (interfaces.md): ``connections``, ``watches``
        (keys watched, summed over connections), ``watchers`` (connections
        watching a key), ``replies`` by kind (``W``, ``U`` ...)."""
        return json.loads(self._admin("/v1/status"))

    def metric(self, name: str) -> float:
        """One unlabelled value of ``GET /metrics`` (e.g. ``lockd_connections_accepted_total``)."""
        for line in self._admin("/metrics").splitlines():
            f = line.split()
            if len(f) == 2 and f[0] == name:
                return float(f[1])
        raise KeyError(name)

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


def call_once(port: int, line: str, timeout_s: float = 3.0) -> str:
    """Sends ``line`` on a fresh connection and returns the first reply line
    (``<no connection>`` / ``<no reply>`` when there is none)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
            s.sendall(line.encode() + b"\n")
            buf = b""
            while not buf.endswith(b"\n"):
                chunk = s.recv(4096)
                if not chunk:
                    break
                buf += chunk
            return buf.decode().strip() or "<no reply>"
    except socket.timeout:
        return "<no reply>"
    except OSError:
        return "<no connection>"




class LockdCluster:
    """``n`` real ``lockd --mode cluster`` nodes (ids 1..n) on 127.0.0.1,
    each with its own data dir, short Raft timeouts (150 ms elections,
    30 ms heartbeats) and an admin port. The group is formed once, by
    ``POST /v1/cluster/init`` to node 1 (v1.3: a start never forms one).
    Can kill -9, pause and resume nodes. Waits poll against generous
    deadlines."""

    def __init__(self, n: int = 3) -> None:
        self.root = tempfile.mkdtemp(prefix="lockd-pycluster-")
        self.ports = {i: (free_port(), free_port()) for i in range(1, n + 1)}  # client, raft
        self.admin_ports = {i: free_port() for i in self.ports}
        self.procs: Dict[int, subprocess.Popen] = {}
        self._drains: Dict[int, threading.Thread] = {}
        try:
            for i in self.ports:
                self.start(i)
            self.init(1)
        except BaseException:
            self.close()
            raise

    def address(self, i: int) -> str:
        return f"127.0.0.1:{self.ports[i][0]}"

    def start(self, i: int) -> None:
        data = os.path.join(self.root, f"node{i}")
        os.makedirs(data, exist_ok=True)
        argv = [lockd_bin(), "--mode", "cluster", "--node-id", str(i), "--data-dir", data,
                "--admin", f"127.0.0.1:{self.admin_ports[i]}",
                "--election-timeout-ms", "150", "--heartbeat-ms", "30",
                "--insecure-peers"]  # loopback test nodes: no peer authentication
        for j, (client, raft) in self.ports.items():
            argv += ["--peer", f"{j}=127.0.0.1:{client}/127.0.0.1:{raft}"]
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)
        self.procs[i] = proc
        assert proc.stderr is not None
        deadline = time.monotonic() + 10
        seen = b""
        while time.monotonic() < deadline and b"listening on" not in seen:
            ready, _, _ = select.select([proc.stderr], [], [], 0.1)
            if ready:
                chunk = os.read(proc.stderr.fileno(), 4096)
                if not chunk:
                    break
                seen += chunk
        if b"listening on" not in seen:
            raise RuntimeError(f"lockd node {i} did not start: {seen.decode(errors='replace')}")
        # Keep draining stderr so the node never blocks on a full pipe.
        self._drains[i] = threading.Thread(target=self._drain, args=(proc,), daemon=True)
        self._drains[i].start()

    def init(self, i: int, timeout_s: float = 30.0) -> None:
        """Forms the group: ``POST /v1/cluster/init`` to node ``i``
        (tools/chaos/lockd_chaos/cluster_init.py)."""
        init_cluster(f"127.0.0.1:{self.admin_ports[i]}", timeout_s)

    @staticmethod
    def _drain(proc: subprocess.Popen) -> None:
        assert proc.stderr is not None
        while os.read(proc.stderr.fileno(), 4096):
            pass

    def kill9(self, i: int) -> None:
        proc = self.procs.pop(i, None)
        if proc is not None:
            proc.kill()
            proc.wait(timeout=10)
            drain = self._drains.pop(i, None)
            if drain is not None:
                drain.join(timeout=5)  # EOF once the node is gone
            assert proc.stderr is not None
            proc.stderr.close()

    def pause(self, i: int) -> None:
        self.procs[i].send_signal(signal.SIGSTOP)

    def resume(self, i: int) -> None:
        self.procs[i].send_signal(signal.SIGCONT)

    def close(self) -> None:
        for i in list(self.procs):
            self.kill9(i)
        shutil.rmtree(self.root, ignore_errors=True)

    def wait_leader(self, timeout_s: float = 10.0, except_: int = 0) -> int:
        """The id of the node that answers as a serving leader (``R 1
        lockd-probe`` gets ``N``), or 0 at the deadline."""
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            for i in sorted(self.procs):
                if i != except_ and call_once(self.ports[i][0], "R 1 lockd-probe", 0.5) == "N 1 lockd-probe":
                    return i
            time.sleep(0.02)
        return 0

    def knows_leader(self, i: int, leader: int) -> bool:
        """True once node ``i`` redirects to ``leader``."""
        return call_once(self.ports[i][0], "R 1 lockd-probe") == f"M {self.address(leader)} 1 lockd-probe"

    def call_leader(self, line: str, except_: int = 0) -> str:
        """``line`` sent to whichever node leads now; retried through
        redirects and elections (leadership may move on a loaded machine)."""
        reply = ""

        def answered() -> bool:
            nonlocal reply
            leader = self.wait_leader(except_=except_)
            if leader == 0:
                return False
            reply = call_once(self.ports[leader][0], line)
            return not reply.startswith(("M ", "E no_leader", "E indeterminate", "<no "))

        eventually(answered, 20.0)
        return reply


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
        #: Connections accepted so far.
        self.accepted = 0
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

    def drop(self) -> None:
        """Closes every open connection (a node restarted, a network cut)."""
        for c in list(self._conns):
            try:
                c.shutdown(socket.SHUT_RDWR)
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
                    self.accepted += 1
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


_PKI_DIR: Optional[str] = None


def pki_dir() -> str:
    """A throw-away PKI made by the tree's one test PKI script
    (tests/support/make-test-pki, openssl; file names in its header), once
    per test process, removed at exit."""
    global _PKI_DIR
    if _PKI_DIR is None:
        import atexit
        d = tempfile.mkdtemp(prefix="lockd-pki-")
        atexit.register(shutil.rmtree, d, True)
        subprocess.run([os.path.join(ROOT, "tests", "support", "make-test-pki"), d], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _PKI_DIR = d
    return _PKI_DIR


def credential_hash(credential: str) -> str:
    """The credentials file's form (interfaces.md "Security files"):
    ``sha256$`` + hex(salt) + ``$`` + hex(sha256(salt ++ credential))."""
    import hashlib
    salt = os.urandom(16)
    return f"sha256${salt.hex()}${hashlib.sha256(salt + credential.encode()).hexdigest()}"


def secure_lockd_flags(credentials: Dict[str, str], rules: Dict[str, str],
                       verbs: Tuple[str, ...] = ("A", "S", "R", "K")) -> List[str]:
    """Flags for a lockd with ``--client-tls --auth any`` (test_pki()'s
    server certificate), a credentials file of ``identity -> credential``
    and an ACL granting each ``identity -> prefix`` ``verbs`` (A, S, R, K;
    add ``W`` to let it watch)."""
    pki = pki_dir()
    d = tempfile.mkdtemp(prefix="lockd-auth-", dir=pki)
    creds, acl = os.path.join(d, "credentials.toml"), os.path.join(d, "acl.toml")
    # lockd refuses a credentials file that group or others may read (§11a).
    with open(os.open(creds, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        os.fchmod(f.fileno(), 0o600)
        for identity, credential in credentials.items():
            f.write(f'[[credential]]\nidentity = "{identity}"\nhash = "{credential_hash(credential)}"\n')
    with open(acl, "w") as f:
        for identity, prefix in rules.items():
            listed = ", ".join(f'"{v}"' for v in verbs)
            f.write(f'[[rule]]\nidentity = "{identity}"\nprefix = "{prefix}"\nverbs = [{listed}]\n')
    return ["--client-tls", "--tls-cert", os.path.join(pki, "server.pem"), "--tls-key", os.path.join(pki, "server.key"),
            "--tls-ca", os.path.join(pki, "ca.pem"), "--auth", "any", "--credentials", creds, "--acl", acl]
