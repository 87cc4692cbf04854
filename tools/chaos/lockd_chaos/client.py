"""A lockd client that records every request in the history, and the
workload each client thread runs.

One blocking TCP connection per client, bound to 127.0.0.1 as its source
address so that partition rules between node addresses never cut clients
off. On a timeout or connection error the request is recorded as unknown
and the connection is closed (which also cancels any waiting acquire).
"""

import random
import socket
import time

from .history import Op

NS_PER_MS = 1_000_000

# Longest reply line we accept (the protocol's line limit).
MAX_LINE_BYTES = 1024


class ConnectionLost(Exception):
    pass


class LineConn:
    """A connected socket with line reads against a deadline."""

    def __init__(self, host, port, timeout_s):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(timeout_s)
        try:
            self.sock.connect((host, port))
        except OSError:
            self.sock.close()
            raise
        self.buf = b""
        self.pushes = 0
        self.on_lost_notice = None   # called with each `X` line read

    def send(self, data):
        self.sock.sendall(data.encode())

    def read_line(self, deadline_ns):
        """The next reply line. Push lines (`V`, `X`: protocol.md §5c, v1.3)
        can arrive between any two replies and are never replies: skipped
        (`X`, a lease ended by expiry, goes to on_lost_notice: the
        history records it and the checker bounds it by the lease)."""
        while True:
            line = self._read_any(deadline_ns)
            if not (line.startswith("X ") or line.startswith("V ")):
                return line
            self.pushes += 1
            if line.startswith("X ") and self.on_lost_notice is not None:
                self.on_lost_notice(line)

    def _read_any(self, deadline_ns):
        while b"\n" not in self.buf:
            left = (deadline_ns - time.monotonic_ns()) / 1e9
            if left <= 0:
                raise socket.timeout("deadline")
            self.sock.settimeout(left)
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionLost("closed by server")
            self.buf += chunk
            if len(self.buf) > 64 * MAX_LINE_BYTES and b"\n" not in self.buf:
                raise ConnectionLost("reply line too long")
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode(errors="replace").rstrip("\r")

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


class Client:
    """Sends requests to one node at a time and follows `M` redirects.

    addrs: the client addresses of every node ("host:port"); the client
    starts at addrs[index % n] and moves to the next one after a connection
    error, or to the named leader after an `M`. A list is shared, not
    copied: the runner appends the members that membership faults add.
    """

    def __init__(self, name, addrs, writer, index=0, op_timeout_ms=2000):
        self.name = name
        self.addrs = addrs if isinstance(addrs, list) else list(addrs)
        self.target = self.addrs[index % len(self.addrs)]
        self.writer = writer
        self.op_timeout_ms = op_timeout_ms
        self.conn = None
        self.probe_key = "probe/" + name

    def _connect(self):
        if self.conn is None:
            host, port = self.target.rsplit(":", 1)
            self.conn = LineConn(host, int(port), self.op_timeout_ms / 1000)
            self.conn.on_lost_notice = self._lost_notice

    def _lost_notice(self, line):
        """`X <token> <key>` (protocol.md §5c): recorded with when it was read."""
        f = line.split()
        rec = {"type": "lost_notice", "client": self.name, "node": self.target, "line": line,
               "time_ns": time.monotonic_ns()}
        if len(f) == 3 and f[1].isdigit():
            rec.update(token=int(f[1]), key=f[2])
        self.writer.write(rec)

    def _drop(self, rotate):
        if self.conn is not None:
            self.conn.close()
            self.conn = None
        if rotate and len(self.addrs) > 1:
            i = self.addrs.index(self.target) if self.target in self.addrs else -1
            self.target = self.addrs[(i + 1) % len(self.addrs)]

    def _finish(self, op, line):
        op.complete_ns = time.monotonic_ns()
        op.reply = line
        fields = line.split()
        op.code = fields[0] if fields else "?"
        if op.code == "E" and len(fields) > 1 and fields[1] == "indeterminate":
            op.unknown = True
            op.complete_ns = None
        elif op.code == "E" and len(fields) > 1 and fields[1] == "no_leader":
            self._drop(rotate=True)     # ask another node who leads
        elif op.code == "M" and len(fields) > 1:
            self.target = fields[1]
            self._drop(rotate=False)
        elif op.code == op.f and op.f in ("A", "S"):
            op.token = int(fields[1])

    def _fail(self, op, error, sent):
        op.error = error
        if sent:
            op.unknown = True   # it may have been applied
        else:
            op.complete_ns = time.monotonic_ns()  # never left us: definitely not applied
        self._drop(rotate=True)

    def call(self, f, key, token=None, owner=None, lease_ms=None, wait_ms=0, limit=None,
             give_up_ms=None):
        """One request; returns its recorded Op. f "S" takes `limit`.

        give_up_ms (an acquire with a wait): a client that stops waiting.
        If no answer came by then, the connection is closed (a departing
        client: the server must drop its waiter, or release a grant nobody
        heard of) and the op is recorded cancelled (and unknown)."""
        acquire = f in ("A", "S")
        op = Op(id=self.writer.next_id(), client=self.name, node=self.target, f=f, key=key,
                owner=owner, lease_ms=lease_ms, wait_ms=wait_ms if acquire else None,
                token=token if not acquire else None, limit=limit if f == "S" else None)
        if acquire:
            if f == "A":
                line = "A %s %s %d %d\n" % (owner, key, lease_ms, wait_ms)
            else:
                line = "S %s %s %d %d %d\n" % (owner, key, limit, lease_ms, wait_ms)
            probe = wait_ms > 0
            if probe:
                line += "R 1 %s\n" % self.probe_key
        elif f == "R":
            line, probe = "R %d %s\n" % (token, key), False
        else:
            line, probe = "K %d %s %d\n" % (token, key, lease_ms), False
        sent = False
        give_up = None
        try:
            self._connect()
            op.invoke_ns = time.monotonic_ns()
            self.conn.send(line)
            sent = True
            deadline = op.invoke_ns + ((wait_ms or 0) + self.op_timeout_ms) * NS_PER_MS
            if acquire and give_up_ms is not None and wait_ms:
                give_up = op.invoke_ns + give_up_ms * NS_PER_MS
                deadline = min(deadline, give_up)
            probe_pending = probe
            while True:
                reply = self.conn.read_line(deadline)
                fields = reply.split()
                if probe_pending and fields and fields[-1] == self.probe_key:
                    probe_pending = False
                    if fields[0] == "N":
                        op.enq_ns = time.monotonic_ns()
                    continue
                self._finish(op, reply)
                break
        except socket.timeout as e:
            if op.invoke_ns is None:
                op.invoke_ns = time.monotonic_ns()
            if give_up is not None and time.monotonic_ns() >= give_up:
                op.cancelled = True
                op.unknown = True
                op.error = "cancelled by the client after %d ms" % give_up_ms
                self._drop(rotate=False)
            else:
                self._fail(op, "%s: %s" % (type(e).__name__, e), sent)
            probe_pending = False
        except (OSError, ConnectionLost) as e:
            if op.invoke_ns is None:
                op.invoke_ns = time.monotonic_ns()
            self._fail(op, "%s: %s" % (type(e).__name__, e), sent)
            probe_pending = False
        self.writer.write(op)
        if probe_pending and self.conn is not None:
            # The probe's reply is still to come (it follows an immediate A
            # reply): read it so the next request starts clean. The acquire
            # is already decided; a failure here only drops the connection.
            try:
                self.conn.read_line(time.monotonic_ns() + self.op_timeout_ms * NS_PER_MS)
            except (OSError, ConnectionLost):
                self._drop(rotate=True)
        return op

    def close(self):
        self._drop(rotate=False)


class Workload:
    """What one client thread does until told to stop: acquire a random
    key, read-modify-write the fenced counter under the lock (sometimes
    keeping the lease alive with K during longer work), release.

    A well-behaved client checks its own conservative lease deadline (the
    acquire's invocation + lease, moved by each acknowledged K) before each
    access and gives up if it has passed. With probability pause_prob it
    instead stalls for 1.5 leases between its read and its write, like a
    process in a long GC pause, and writes without looking: the resource's
    fencing must reject it when a newer holder came in between.

    With probability long_wait_prob an acquire waits up to 3 leases: a grant
    after a wait longer than the lease is then kept alive with a K sent at
    once (the lease counted from the acquire's invocation is over, the one
    the server started at the grant is not), and the work goes on under the
    K's lease (issue 36 item 1). With probability cancel_prob the client
    gives up on a waiting acquire after a random part of a lease and closes
    its connection, leaving its waiter (or a late grant) for the server to
    drop (issue 36 items 2 and 7).
    """

    def __init__(self, client, resource, rng, keys, lease_ms, waits_ms, use_keep,
                 pause_prob, stop_event, shared_prob=0.0, limits=None, long_wait_prob=0.0,
                 cancel_prob=0.0):
        self.c = client
        self.res = resource
        self.rng = rng
        self.keys = keys
        self.lease_ms = lease_ms
        self.waits_ms = waits_ms
        self.use_keep = use_keep
        self.pause_prob = pause_prob
        self.stop = stop_event
        self.shared_prob = shared_prob
        self.limits = limits or {}   # key -> S limit (0: a read lock)
        self.long_wait_prob = long_wait_prob
        self.cancel_prob = cancel_prob

    def run(self):
        while not self.stop.is_set():
            self.cycle()
        self.c.close()

    def cycle(self):
        key = self.rng.choice(self.keys)
        wait = self.rng.choice(self.waits_ms)
        if self.cancel_prob and self.rng.random() < self.cancel_prob:
            self.cancelled_acquire(key)
            return
        long_wait = bool(self.long_wait_prob) and self.rng.random() < self.long_wait_prob
        if long_wait:
            wait = 3 * self.lease_ms
        if self.shared_prob and not long_wait and self.rng.random() < self.shared_prob:
            self.shared_cycle(key, wait)
            return
        a = self.c.call("A", key, owner=self.c.name, lease_ms=self.lease_ms, wait_ms=wait)
        if a.code != "A":
            if a.code in ("M",):
                return
            # Back off a little after T/B/E/unknown so a dead node is not spun on.
            self.stop.wait(self.rng.uniform(0.01, 0.05 if a.code in ("T", "B") else 0.2))
            return
        token, granted_ns = a.token, a.invoke_ns
        lease_end = granted_ns + self.lease_ms * NS_PER_MS
        margin = self.lease_ms * NS_PER_MS // 5

        def alive():
            return time.monotonic_ns() < lease_end - margin

        if not alive() and self.use_keep:
            # Granted after a long wait: the lease counted from the invocation
            # is (nearly) over, the server's (from the grant) may not be. Ask.
            k = self.c.call("K", key, token=token, lease_ms=self.lease_ms)
            if k.code == "K":
                lease_end = k.invoke_ns + self.lease_ms * NS_PER_MS
        paused = self.rng.random() < self.pause_prob
        if not alive():
            # A waiter handed the key late may find its lease (counted, to
            # be safe, from when it asked) already nearly over.
            self.c.call("R", key, token=token)
            return
        ok, value, naive = self.res.read(key, token, self.c.name, granted_ns, lease_end)
        if ok:
            if paused:
                time.sleep(1.5 * self.lease_ms / 1000)
            else:
                long_work = self.use_keep and self.rng.random() < 0.3
                if long_work:
                    time.sleep(0.5 * self.lease_ms / 1000)
                    k = self.c.call("K", key, token=token, lease_ms=self.lease_ms)
                    if k.code == "K":
                        lease_end = k.invoke_ns + self.lease_ms * NS_PER_MS
                    elif k.code == "N":
                        lease_end = 0   # the server says the lease is over
                    time.sleep(0.3 * self.lease_ms / 1000)
                else:
                    time.sleep(self.rng.uniform(0, 0.2) * self.lease_ms / 1000)
            if paused or alive():
                self.res.write(key, token, self.c.name, granted_ns, lease_end, value + 1, naive + 1)
        else:
            # The resource has seen a newer token: this lock is stale.
            self.stop.wait(0.01)
        self.c.call("R", key, token=token)

    def cancelled_acquire(self, key):
        """An A with a long wait that the client abandons: it closes its
        connection after a random part of a lease. If the answer came first,
        a grant is released as usual."""
        a = self.c.call("A", key, owner=self.c.name, lease_ms=self.lease_ms,
                        wait_ms=3 * self.lease_ms,
                        give_up_ms=self.rng.uniform(0.05, 1.0) * self.lease_ms)
        if a.code == "A":
            self.c.call("R", key, token=a.token)
        elif not a.cancelled and a.code != "M":
            self.stop.wait(self.rng.uniform(0.01, 0.2))

    def shared_cycle(self, key, wait):
        """S on the key (a reader, or one of the key's permits), read the
        fenced counter as a reader, release. Readers never write: a writer's
        exclusion covers them (the checker's exclusion and limit checks)."""
        s = self.c.call("S", key, owner=self.c.name, lease_ms=self.lease_ms, wait_ms=wait,
                        limit=self.limits.get(key, 0))
        if s.code != "S":
            if s.code != "M":
                self.stop.wait(self.rng.uniform(0.01, 0.05 if s.code in ("T", "B") else 0.2))
            return
        token, granted_ns = s.token, s.invoke_ns
        lease_end = granted_ns + self.lease_ms * NS_PER_MS
        if time.monotonic_ns() < lease_end - self.lease_ms * NS_PER_MS // 5:
            self.res.read(key, token, self.c.name, granted_ns, lease_end, shared=True)
            time.sleep(self.rng.uniform(0, 0.2) * self.lease_ms / 1000)
        self.c.call("R", key, token=token)
