"""Hostile-client mode (issue 35, protocol.md §11a): strangers with no
credential attack every port while the checked workload runs with valid
credentials.

Setup (what `chaos.py run --hostile` adds to the nodes):
  --auth token with a credentials file (0600) and an ACL (identity `chaos`:
  every verb on every key, admin); --client-tls with a throw-away PKI made by
  tests/support/make-test-pki (--hostile-tls off: plain TCP); cluster mode
  keeps the run's peer secret. The workload's clients open every connection
  with TLS (if on) and `H <credential>` (AuthClient), the runner's admin
  calls carry `Authorization: Bearer <credential>`.

Load (one asyncio loop in one thread; no thread per connection), against
every node the run started:
  idle     IDLE connections per node on each of the client, admin and raft
           ports that never send a byte, from source addresses 127.66.x.y
           (at most 400 per address: under --max-connections-per-ip). A
           connection the node closes is opened again 0.5-2 s later; all
           opens share one rate limit (connect_rate a second, default 700).
  tls      TLS_RATE complete TLS handshakes a second on each node's client
           port (no certificate, no `H`: closed right after), when TLS is on.
  trickle  TRICKLE connections per node sending an admin request one byte a
           second (the first-request deadline must close them).
  forged   (cluster mode) a hello every 0.2 s to each node's raft port,
           claiming to be another member and saying "you were removed",
           without a proof; every fifth is garbage instead.
  csrf     every second to each node's admin port: the shapes a web page
           (or a DNS-rebinding page) can send: text/plain POSTs, a foreign
           Origin, a foreign Host, with and without the run's admin
           credential, on membership, leader transfer, init and the snapshot.

Checks (violations, with the checker's others):
  hostile_unanswered  a request of the checked workload that got no reply
           although the hostile load is the only thing going on. Precisely:
           an op that is unknown or failed (timeout, connection closed,
           a connection that could not be opened, TLS'd and authenticated
           within the op's time: AuthClient retries for op_timeout_ms), not
           cancelled by the client on purpose, and sent outside every
           nemesis fault window extended by the run's recovery bound (with
           `--faults none`: every op of the run).
  hostile_node_exit   a node not running at the end, or started more often
           than the nemesis restarted it (with no kill/wipe/upgrade/member
           faults: once).
  hostile_csrf_accepted  any CSRF-shaped or forged admin request answered 2xx.
"""

import asyncio
import collections
import hashlib
import os
import random
import resource
import secrets
import ssl
import subprocess
import threading
import time
import urllib.request

from .checker import Violation
from .client import Client, ConnectionLost, LineConn

NS_PER_MS = 1_000_000
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
IDENTITY = "chaos"


def raise_fd_limit():
    """The soft descriptor limit up to the hard one (the load holds
    thousands of sockets); returns the limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        want = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
        except (ValueError, OSError):
            pass
    return soft


def _private_file(path, text):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


class Setup:
    """Credentials, ACL and (with TLS) a PKI in RUN_DIR/hostile; the flags
    every node gets; how clients and admin calls authenticate."""

    def __init__(self, run_dir, tls=True):
        self.dir = os.path.abspath(os.path.join(run_dir, "hostile"))
        os.makedirs(self.dir, exist_ok=True)
        self.credential = secrets.token_hex(32)
        salt = secrets.token_bytes(16)
        digest = hashlib.sha256(salt + self.credential.encode()).hexdigest()
        creds = os.path.join(self.dir, "credentials.toml")
        _private_file(creds, '[[credential]]\nidentity = "%s"\nhash = "sha256$%s$%s"\n'
                      % (IDENTITY, salt.hex(), digest))
        acl = os.path.join(self.dir, "acl.toml")
        _private_file(acl, 'admins = ["%s"]\n\n[[rule]]\nidentity = "%s"\nprefix = ""\n'
                      'verbs = ["A", "S", "R", "K", "W"]\n' % (IDENTITY, IDENTITY))
        self.args = ["--auth", "token", "--credentials", creds, "--acl", acl]
        self.tls = tls
        self.ssl_context = None
        if tls:
            pki = os.path.join(self.dir, "pki")
            subprocess.run([os.path.join(REPO, "tests", "support", "make-test-pki"), pki],
                           check=True, stdout=subprocess.DEVNULL)
            for name in os.listdir(pki):
                if name.endswith(".key"):
                    os.chmod(os.path.join(pki, name), 0o600)
            self.args += ["--client-tls", "--tls-cert", os.path.join(pki, "server.pem"),
                          "--tls-key", os.path.join(pki, "server.key")]
            ctx = ssl.create_default_context(cafile=os.path.join(pki, "ca.pem"))
            ctx.check_hostname = False   # members' client addresses are 127.77.x.y
            self.ssl_context = ctx
        self.admin_headers = {"Authorization": "Bearer " + self.credential}

    def client_factory(self):
        setup = self

        def make(*args, **kw):
            return AuthClient(setup, *args, **kw)
        return make


class AuthClient(Client):
    """Client whose every connection is TLS (when on) and starts with
    `H <credential>`. Opening one is retried until op_timeout_ms: a real
    client retries a refused connect; one that cannot get in within an op's
    time is that op's failure (hostile_unanswered)."""

    def __init__(self, setup, *args, **kw):
        super().__init__(*args, **kw)
        self.setup = setup
        self.connect_retries = 0

    def _connect(self):
        if self.conn is not None:
            return
        deadline = time.monotonic_ns() + self.op_timeout_ms * NS_PER_MS
        while True:
            try:
                self._open(deadline)
                return
            except (OSError, ConnectionLost):
                if self.conn is not None:
                    self.conn.close()
                    self.conn = None
                if time.monotonic_ns() + 50 * NS_PER_MS >= deadline:
                    raise
                self.connect_retries += 1
                time.sleep(0.05)

    def _open(self, deadline):
        host, port = self.target.rsplit(":", 1)
        self.conn = LineConn(host, int(port), self.op_timeout_ms / 1000)
        if self.setup.ssl_context is not None:
            self.conn.sock.settimeout(max(0.05, (deadline - time.monotonic_ns()) / 1e9))
            self.conn.sock = self.setup.ssl_context.wrap_socket(self.conn.sock)
        self.conn.send("H %s\n" % self.setup.credential)
        line = self.conn.read_line(deadline)
        if line != "H " + IDENTITY:
            raise ConnectionLost("H answered %r" % line)


# --- forged peer hellos (peer_handshake.h's frame, little-endian) -----------

def _crc32c_table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    return t


_CRC = _crc32c_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = _CRC[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def forged_hello(sender, receiver, raft_addr, status_removed=True, cluster_id=0):
    """A v2 hello from `sender` to `receiver`, without nonce or proof,
    saying the receiver was removed (MemberStatus 4)."""
    def tlv(tag, value):
        return tag.to_bytes(2, "little") + len(value).to_bytes(2, "little") + value
    body = (tlv(1, sender.to_bytes(8, "little")) + tlv(2, receiver.to_bytes(8, "little")) +
            tlv(3, cluster_id.to_bytes(8, "little")) +
            tlv(4, (2).to_bytes(2, "little") + (64).to_bytes(2, "little")) +
            tlv(5, b"") + tlv(6, raft_addr.encode()) + tlv(7, b"") + tlv(8, b"\x01"))
    if status_removed:
        body += tlv(11, b"\x04")
    head = b"LKDP" + (2).to_bytes(2, "little") + (1).to_bytes(2, "little") + \
        len(body).to_bytes(4, "little")
    frame = head + body
    return frame + crc32c(frame).to_bytes(4, "little")


# --- the load ---------------------------------------------------------------

class Bucket:
    """Token bucket: `rate` per second, bursts of rate/10."""

    def __init__(self, rate):
        self.rate = float(rate)
        self.tokens = 0.0
        self.last = time.monotonic()

    async def take(self):
        while True:
            now = time.monotonic()
            self.tokens = min(self.rate / 10, self.tokens + (now - self.last) * self.rate)
            self.last = now
            if self.tokens >= 1:
                self.tokens -= 1
                return
            await asyncio.sleep((1 - self.tokens) / self.rate)


async def _timeout(aw, seconds):
    """`aw` within `seconds` (asyncio.TimeoutError otherwise). asyncio.timeout
    where there is one: 3.11's wait_for around a connect can stay
    "cancelling" for good when the load is stopped."""
    if hasattr(asyncio, "timeout"):
        async with asyncio.timeout(seconds):
            return await aw
    return await asyncio.wait_for(aw, seconds)


def _split(addr):
    host, port = addr.rsplit(":", 1)
    return host, int(port)


class Load:
    """The hostile load against `group`'s nodes, in its own thread."""

    def __init__(self, group, setup, seed, log, idle=700, tls_rate=200, trickle=20,
                 connect_rate=700):
        self.group = group
        self.setup = setup
        self.rng = random.Random(seed * 7919 + 35)
        self.log = log
        self.idle, self.tls_rate, self.trickle = idle, tls_rate, trickle
        self.connect_rate = connect_rate
        self.counts = collections.Counter()
        self.held = collections.Counter()
        self.max_held = collections.Counter()
        self.admin_status = collections.Counter()
        self.csrf_accepted = []
        self.trickle_lifetimes = []
        self.nodes = list(group.nodes)
        self.loop = None
        self.thread = None
        self.started_ns = None
        self.stopped_ns = None
        self.cpu_s = None
        self.fd_limit = raise_fd_limit()

    # Thread plumbing.
    def start(self):
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()

        def main():
            asyncio.set_event_loop(self.loop)
            self.loop.call_soon(ready.set)
            self.loop.run_forever()
            self.cpu_s = time.thread_time() - self.cpu_start
            pending = asyncio.all_tasks(self.loop)
            for t in pending:
                t.cancel()
            if pending:
                _, left = self.loop.run_until_complete(asyncio.wait(pending, timeout=10))
                if left:
                    self.log("hostile: %d tasks still pending after cancel: %s" % (
                        len(left), collections.Counter(t.get_coro().__qualname__ for t in left)))
            self.loop.close()
        self.thread = threading.Thread(target=main, name="hostile", daemon=True)
        self.thread.start()
        ready.wait()
        self.started_ns = time.monotonic_ns()
        asyncio.run_coroutine_threadsafe(self._run(), self.loop)

    def stop(self):
        if self.loop is None or self.stopped_ns is not None:
            return
        self.stopped_ns = time.monotonic_ns()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(60)

    async def _run(self):
        self.bucket = Bucket(self.connect_rate)
        self.t0 = time.monotonic()
        self.cpu_start = time.thread_time()
        tasks = []
        for ni, node in enumerate(self.nodes):
            ports = [("client", lambda n=node: n.client_addr),
                     ("admin", lambda n=node: n.admin_addr)]
            if self.group.mode == "cluster":
                ports.append(("raft", lambda n=node: n.raft_addr))
            for pi, (kind, addr) in enumerate(ports):
                for i in range(self.idle):
                    src = "127.66.%d.%d" % (1 + (i // 400) % 250, 10 + 10 * pi + ni)
                    tasks.append(self._idle(kind, addr, src))
            for i in range(self.trickle):
                tasks.append(self._trickle(node, "127.67.%d.%d" % (1 + ni, 1 + i)))
            tasks.append(self._csrf(node))
            if self.setup.tls:
                tasks.append(self._tls_flood(node, ni))
            if self.group.mode == "cluster":
                tasks.append(self._forge(node))
        await asyncio.gather(*(asyncio.ensure_future(t) for t in tasks), return_exceptions=True)

    def _note_held(self, kind, d):
        self.held[kind] += d
        if self.held[kind] > self.max_held[kind]:
            self.max_held[kind] = self.held[kind]

    async def _idle(self, kind, addr, src):
        await asyncio.sleep(self.rng.uniform(0, 2.0))
        while True:
            await self.bucket.take()
            host, port = _split(addr())
            try:
                r, w = await _timeout(
                    asyncio.open_connection(host, port, local_addr=(src, 0)), 5)
            except (OSError, asyncio.TimeoutError):
                self.counts[kind + "_connect_failed"] += 1
                await asyncio.sleep(self.rng.uniform(0.5, 2.0))
                continue
            self.counts[kind + "_opened"] += 1
            self._note_held(kind, 1)
            try:
                while await r.read(65536):
                    pass
                self.counts[kind + "_closed_by_node"] += 1
            except OSError:
                self.counts[kind + "_closed_by_node"] += 1
            finally:
                self._note_held(kind, -1)
                w.close()
            await asyncio.sleep(self.rng.uniform(0.5, 2.0))

    async def _tls_flood(self, node, ni):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        gate = asyncio.Semaphore(256)
        n = 0

        async def one(src):
            try:
                host, port = _split(node.client_addr)
                _, w = await _timeout(asyncio.open_connection(
                    host, port, ssl=ctx, local_addr=(src, 0), ssl_handshake_timeout=5), 6)
                self.counts["tls_handshakes_done"] += 1
                w.transport.abort()
            except (OSError, asyncio.TimeoutError, ssl.SSLError):
                self.counts["tls_handshakes_refused"] += 1
            finally:
                gate.release()

        period = 1.0 / self.tls_rate
        nxt = time.monotonic()
        while True:
            await gate.acquire()
            src = "127.68.%d.%d" % (1 + (n // 400) % 250, 1 + ni)
            n += 1
            asyncio.ensure_future(one(src))
            nxt += period
            delay = nxt - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                nxt = time.monotonic()

    async def _trickle(self, node, src):
        req = ("GET /v1/status HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n\r\n"
               % (node.admin_addr, "0" * 64)).encode()
        await asyncio.sleep(self.rng.uniform(0, 2.0))
        while True:
            host, port = _split(node.admin_addr)
            try:
                r, w = await _timeout(
                    asyncio.open_connection(host, port, local_addr=(src, 0)), 5)
            except (OSError, asyncio.TimeoutError):
                self.counts["trickle_connect_failed"] += 1
                await asyncio.sleep(1.0)
                continue
            t0 = time.monotonic()
            self.counts["trickle_opened"] += 1
            try:
                for i in range(len(req)):
                    w.write(req[i:i + 1])
                    await w.drain()
                    try:
                        data = await _timeout(r.read(4096), 1.0)
                        if not data:
                            break
                        self.counts["trickle_answered"] += 1
                        break
                    except asyncio.TimeoutError:
                        pass
                else:
                    self.counts["trickle_sent_whole"] += 1
            except OSError:
                pass
            finally:
                w.close()
            self.trickle_lifetimes.append(time.monotonic() - t0)
            await asyncio.sleep(0.5)

    async def _http(self, node, method, path, headers, body=b""):
        """The HTTP status, trying again (up to 40 times, 50 ms apart) while the
        node closes the connection unanswered (its admin port full of idle
        sockets); 0 if it never answered."""
        for _ in range(40):
            status = await self._http_once(node, method, path, headers, body)
            if status:
                return status
            self.counts["csrf_retries"] += 1
            await asyncio.sleep(0.05)
        return 0

    async def _http_once(self, node, method, path, headers, body):
        host, port = _split(node.admin_addr)
        try:
            r, w = await _timeout(asyncio.open_connection(host, port), 5)
        except (OSError, asyncio.TimeoutError):
            return 0
        try:
            lines = ["%s %s HTTP/1.1" % (method, path)]
            lines += ["%s: %s" % kv for kv in headers.items()]
            lines += ["Content-Length: %d" % len(body), "Connection: close", "", ""]
            w.write("\r\n".join(lines).encode() + body)
            await w.drain()
            head = await _timeout(r.readline(), 10)
            parts = head.split()
            return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
        except (OSError, asyncio.TimeoutError, ValueError):
            return 0
        finally:
            w.close()

    async def _csrf(self, node):
        bearer = {"Authorization": "Bearer " + self.setup.credential}
        evil = {"Origin": "http://evil.example"}
        own = {"Host": node.admin_addr}
        shapes = [
            # (name, method, path, headers, body)
            ("members_text_plain", "POST", "/v1/cluster/members",
             {**own, **bearer, "Content-Type": "text/plain"},
             b'{"id": 99, "client": "127.0.0.1:1", "raft": "127.0.0.1:2"}'),
            ("leader_foreign_origin", "POST", "/v1/cluster/leader",
             {**own, **bearer, **evil, "Content-Type": "application/json"}, b'{"id": 2}'),
            ("leader_foreign_host", "POST", "/v1/cluster/leader",
             {"Host": "evil.example", **bearer, "Content-Type": "application/json"}, b'{"id": 2}'),
            ("snapshot_foreign_host", "GET", "/v1/snapshot",
             {"Host": "evil.example", **bearer}, b""),
            ("init_text_plain", "POST", "/v1/cluster/init",
             {**own, **bearer, "Content-Type": "text/plain"}, b"{}"),
            ("remove_no_credential", "DELETE", "/v1/cluster/members/2", {**own, **evil}, b""),
            ("members_no_credential", "POST", "/v1/cluster/members",
             {**own, "Content-Type": "application/json"}, b'{"id": 98}'),
        ]
        await asyncio.sleep(self.rng.uniform(0, 1.0))
        while True:
            for name, method, path, headers, body in shapes:
                status = await self._http(node, method, path, headers, body)
                self.admin_status["%s %d" % (name, status)] += 1
                if 200 <= status < 300:
                    self.csrf_accepted.append((node.id, name, status))
            await asyncio.sleep(1.0)

    async def _forge(self, node):
        others = [n for n in self.nodes if n is not node]
        k = 0
        await asyncio.sleep(self.rng.uniform(0, 0.2))
        while True:
            k += 1
            claim = others[k % len(others)] if others else node
            if k % 5 == 0:
                frame = bytes(self.rng.getrandbits(8) for _ in range(64))
                kind = "forged_garbage"
            else:
                frame = forged_hello(claim.id, node.id, claim.raft_addr)
                kind = "forged_hello"
            host, port = _split(node.raft_addr)
            try:
                r, w = await _timeout(asyncio.open_connection(host, port), 5)
                w.write(frame)
                await w.drain()
                try:
                    data = await _timeout(r.read(4096), 1.0)
                    self.counts[kind + ("_answered" if data else "_closed")] += 1
                except asyncio.TimeoutError:
                    self.counts[kind + "_no_answer"] += 1
                w.close()
            except (OSError, asyncio.TimeoutError):
                self.counts[kind + "_connect_failed"] += 1
            await asyncio.sleep(0.2)

    # The report and the checks.
    def report(self):
        secs = ((self.stopped_ns or time.monotonic_ns()) - self.started_ns) / 1e9
        lt = sorted(self.trickle_lifetimes)
        return {
            "seconds": round(secs, 1),
            "idle_per_port_per_node": self.idle,
            "tls_handshakes_per_s_per_node": self.tls_rate if self.setup.tls else 0,
            "counts": dict(sorted(self.counts.items())),
            "max_held": dict(self.max_held),
            "trickle_lifetime_s": {"n": len(lt), "max": round(lt[-1], 1) if lt else None,
                                   "p50": round(lt[len(lt) // 2], 1) if lt else None},
            "admin_status": dict(sorted(self.admin_status.items())),
            "generator_fd_limit": self.fd_limit,
            "generator_cpu_s": round(self.cpu_s, 1) if self.cpu_s is not None else None,
        }


def node_metrics(node, headers, prefixes=("lockd_client_connections_closed_total",
                                          "lockd_peer_refused_total",
                                          "lockd_admin_", "lockd_tls_")):
    """The refusal counters of one node (its /metrics, with the run's credential)."""
    req = urllib.request.Request("http://%s/metrics" % node.admin_addr, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            text = r.read().decode(errors="replace")
    except OSError as e:
        return {"error": str(e)}
    out = {}
    for line in text.splitlines():
        if line.startswith(prefixes) and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            try:
                if float(value):
                    out[name] = float(value)
            except ValueError:
                pass
    return out


RESTARTING_FAULTS = ("kill", "wipe", "upgrade", "member", "clock-restart")


def node_state(group, kinds):
    """Whether each started node still runs, and how often it started."""
    return {"node%d" % n.id: {"alive": n.alive(), "starts": n.starts}
            for n in group.nodes}, not any(k in RESTARTING_FAULTS for k in kinds)


def check(history, nodes, only_start, load, recovery_bound_ms):
    """hostile_unanswered, hostile_node_exit, hostile_csrf_accepted (module doc)."""
    violations = []
    windows = []
    open_ = {}
    for e in sorted(history.nemesis, key=lambda e: e["time_ns"]):
        k = (e["fault"], e.get("node"))
        if e.get("phase") == "start":
            open_[k] = e["time_ns"]
        elif e.get("phase") == "end" and k in open_:
            windows.append((open_.pop(k), e["time_ns"] + recovery_bound_ms * NS_PER_MS))
    for s in open_.values():
        windows.append((s, float("inf")))
    counted = unanswered = 0
    bad = []
    for op in history.ops:
        if op.cancelled or any(s <= op.invoke_ns < e for s, e in windows):
            continue
        counted += 1
        if op.unknown or op.error:
            unanswered += 1
            if len(bad) < 10:
                bad.append(op)
    if unanswered:
        violations.append(Violation("hostile_unanswered",
                                    "%d of %d requests sent with no fault on got no reply "
                                    "(timeout, closed, or no authenticated connection in time)"
                                    % (unanswered, counted), bad))
    for name, st in nodes.items():
        if not st["alive"] or (only_start and st["starts"] != 1):
            violations.append(Violation("hostile_node_exit", "%s: %s" % (name, st)))
    for node_id, name, status in load.csrf_accepted[:10]:
        violations.append(Violation("hostile_csrf_accepted",
                                    "node %d answered %s with %d" % (node_id, name, status)))
    return violations, {"requests_counted": counted, "unanswered": unanswered}
