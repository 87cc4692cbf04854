"""Real lockd processes: start, kill -9, pause, restart from the data dir.

Each node gets its own loopback address (127.77.<run>.<id>) for its client,
raft and admin ports, so partition rules can name a node by address. The
ports are picked once (bind to port 0, read it, close) and kept across
restarts, so clients and peers find a restarted node where it was.
"""

import json
import os
import secrets
import re
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

from .cluster_init import init_cluster

from .ports import free_port

NS_PER_MS = 1_000_000

# How long a node may take from exec to its `listening` line.
START_TIMEOUT_S = 20

LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"


def remove_faketime_shm(pid):
    """libfaketime (0.9.10) leaves /dev/shm/faketime_shm_<pid> and
    /dev/shm/sem.faketime_sem_<pid> behind for every process it ran in,
    even one that exits normally: remove them once that process is gone."""
    for name in ("faketime_shm_%d" % pid, "sem.faketime_sem_%d" % pid):
        try:
            os.unlink(os.path.join("/dev/shm", name))
        except FileNotFoundError:
            pass


def cluster_mode_available(lockd, extra_args=()):
    """True unless this lockd build refuses --mode=cluster as not built yet.

    Starts lockd with a minimal one-member cluster config; a build without
    cluster mode exits 2 at once saying so. Anything else (it runs, or it
    fails for another reason) counts as available, so a broken cluster mode
    shows up as a failed run instead of a skipped one."""
    tmp = tempfile.mkdtemp(prefix="lockd-chaos-probe-")
    port, rport, aport = free_port("127.0.0.1"), free_port("127.0.0.1"), free_port("127.0.0.1")
    p = subprocess.Popen(
        [lockd, "--mode=cluster", "--node-id=1",
         "--peer", "1=127.0.0.1:%d/127.0.0.1:%d" % (port, rport),
         "--data-dir", tmp, "--admin", "127.0.0.1:%d" % aport, "--insecure-peers"]
        + [a.replace("{ID}", "1") for a in extra_args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _, err = p.communicate(timeout=3)
        return not (p.returncode == 2 and "not available in this build" in err)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        return True
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class Node:
    """One lockd process and everything needed to restart it the same way."""

    def __init__(self, lockd, node_id, host, run_dir, mode):
        self.lockd = lockd
        self.id = node_id
        self.host = host
        self.mode = mode
        self.client_port = free_port(host)
        self.raft_port = free_port(host)
        self.admin_port = free_port(host)
        # Absolute: the faultfs shim matches /proc/self/fd paths against it.
        self.dir = os.path.abspath(os.path.join(run_dir, "node%d" % node_id))
        self.data_dir = os.path.join(self.dir, "data")
        # A new node starts empty: a data dir left by an earlier run in the
        # same run directory would hold a formed group (init answers 409).
        shutil.rmtree(self.data_dir, ignore_errors=True)
        os.makedirs(self.data_dir, exist_ok=True)
        self.faketime_file = os.path.join(self.dir, "faketime")
        self.faultfs_control = os.path.join(self.dir, "faultfs")
        self.peers_args = []
        self.extra_args = []
        self.preload = []          # shared objects for LD_PRELOAD
        self.env = {}
        self.faketime_on = False
        self.faketime_base = "+0"   # what the faketime file holds when no fault is on
        self.faultfs_on = False
        self.proc = None
        self.starts = 0
        self.paused = False
        self.log = None
        self.admin_headers = {}    # e.g. a bearer credential (hostile runs: auth on)

    @property
    def client_addr(self):
        return "%s:%d" % (self.host, self.client_port)

    @property
    def raft_addr(self):
        return "%s:%d" % (self.host, self.raft_port)

    @property
    def admin_addr(self):
        return "%s:%d" % (self.host, self.admin_port)

    def args(self):
        a = [self.lockd, "--admin", self.admin_addr, "--log-level", "info"]
        if self.mode == "single":
            a += ["--listen", self.client_addr]
        else:
            a += ["--mode=cluster", "--node-id=%d" % self.id, "--data-dir", self.data_dir]
            a += self.peers_args
        return a + self.extra_args

    def start(self):
        """Starts the process and waits for its `listening` line."""
        self.spawn()
        self.wait_listening()

    def spawn(self):
        self.reaped()
        self.starts += 1
        log_path = os.path.join(self.dir, "lockd.%d.log" % self.starts)
        env = dict(os.environ)
        env.update(self.env)
        if self.preload:
            env["LD_PRELOAD"] = " ".join(self.preload)
        self.log = log_path
        with open(log_path, "w") as out:
            self.proc = subprocess.Popen(self.args(), stdout=out, stderr=subprocess.STDOUT,
                                         env=env, start_new_session=True)
        self.paused = False

    def wait_listening(self):
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            with open(self.log) as f:
                text = f.read()
            # The client listener's line, not the peer transport's or the
            # admin server's (they say `listening` too, with other ports).
            if re.search(r"listening.*(?<![\d.])%s(?!\d)" % re.escape(self.client_addr), text):
                return
            if self.proc.poll() is not None:
                raise RuntimeError("node %d exited with %d at start; log %s:\n%s"
                                   % (self.id, self.proc.returncode, self.log, text[-2000:]))
            time.sleep(0.02)
        raise RuntimeError("node %d: no `listening ... %s` line within %ds; log %s"
                           % (self.id, self.client_addr, START_TIMEOUT_S, self.log))

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def kill9(self):
        if self.alive():
            if self.paused:
                self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        self.paused = False
        self.reaped()

    def reaped(self):
        """Cleans up after a process that has exited (no-op otherwise)."""
        if self.proc is not None and self.proc.poll() is not None and self.faketime_on:
            remove_faketime_shm(self.proc.pid)

    def pause(self):
        if self.alive():
            self.proc.send_signal(signal.SIGSTOP)
            self.paused = True

    def resume(self):
        if self.alive() and self.paused:
            self.proc.send_signal(signal.SIGCONT)
        self.paused = False

    def terminate(self, timeout_s=10):
        """SIGTERM (graceful), then SIGKILL if it does not exit in time."""
        if not self.alive():
            self.reaped()
            return None
        self.resume()
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None
        finally:
            self.reaped()

    def admin(self, method, path, body=None, timeout_s=40):
        """One admin API call: (HTTP status, JSON body or None); (0, None)
        when the node does not answer."""
        data = None if body is None else json.dumps(body).encode()
        # The admin API refuses a changing request with a body that is not
        # application/json (protocol.md §11a); urllib's default is a form.
        headers = dict(self.admin_headers)
        if data is not None:
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request("http://%s%s" % (self.admin_addr, path), data=data,
                                     method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            try:
                return e.code, json.loads(e.read() or b"null")
            except ValueError:
                return e.code, None
        except (OSError, ValueError):
            return 0, None

    def status(self, timeout_s=0.5):
        """/v1/status as a dict, or None if it does not answer."""
        req = urllib.request.Request("http://%s/v1/status" % self.admin_addr,
                                     headers=self.admin_headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as r:
                return json.loads(r.read())
        except (OSError, ValueError):
            return None

    def set_faketime(self, spec):
        """libfaketime reads this file (FAKETIME_TIMESTAMP_FILE) again each second."""
        tmp = self.faketime_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(spec + "\n")
        os.replace(tmp, self.faketime_file)

    def set_faultfs(self, rule):
        """The storage shim re-reads this file on every call; "" means no fault."""
        tmp = self.faultfs_control + ".tmp"
        with open(tmp, "w") as f:
            f.write(rule + ("\n" if rule else ""))
        os.replace(tmp, self.faultfs_control)


def peer_auth_args(run_dir, extra_args):
    """Cluster mode needs peer authentication (protocol.md §11a): unless the
    run chose its own (--peer-tls, --peer-secret-file) or --insecure-peers,
    the nodes share a secret made here, readable by its owner only."""
    chosen = ("--peer-tls", "--peer-secret-file", "--insecure-peers")
    if any(a.split("=", 1)[0] in chosen for a in extra_args):
        return []
    os.makedirs(run_dir, exist_ok=True)
    path = os.path.join(run_dir, "peer-secret")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32) + "\n")
    return ["--peer-secret-file", path]


class Group:
    """The nodes of one run (1 in single mode, 3 or 5 in cluster mode)."""

    def __init__(self, lockd, mode, n, run_dir, net_octet, election_timeout_ms=300,
                 heartbeat_ms=50, extra_args=()):
        self.mode = mode
        if mode == "cluster":
            extra_args = tuple(extra_args) + tuple(peer_auth_args(run_dir, extra_args))
        self.nodes = [Node(lockd, i + 1, "127.77.%d.%d" % (net_octet, i + 1), run_dir, mode)
                      for i in range(n)]
        # Membership faults: nodes removed from the group (they stop by
        # themselves), what a new member is started like, and every client
        # address ever a member's (shared with the clients: they rotate
        # through it, and a removed node's refuses connections).
        self.retired = []
        self.lockd = lockd
        self.run_dir = run_dir
        self.net_octet = net_octet
        self.extra_args = tuple(extra_args)
        self.election_timeout_ms = election_timeout_ms
        self.heartbeat_ms = heartbeat_ms
        self.faketime_base = None
        self.faultfs_shim = None
        self.admin_headers = {}
        self.addrs = [node.client_addr for node in self.nodes]
        peers = []
        for node in self.nodes:
            peers += ["--peer", "%d=%s/%s" % (node.id, node.client_addr, node.raft_addr)]
        for node in self.nodes:
            node.peers_args = peers
            # "{ID}" in a flag names the node: per-node files such as
            # --tls-cert pki/node-{ID}.pem for --peer-tls runs.
            node.extra_args = [a.replace("{ID}", str(node.id)) for a in extra_args]
            if mode == "cluster":
                node.extra_args += ["--election-timeout-ms", str(election_timeout_ms),
                                    "--heartbeat-ms", str(heartbeat_ms)]

    def enable_faketime(self, nodes=None, fake_monotonic=False, base="+0"):
        """Preloads libfaketime on the nodes (default all), wall clock at
        `base` until a fault moves it. The monotonic clock stays real unless
        asked: the clock-rate measurement fakes it on purpose, with a base
        like "+0 x2" (every clock of that process runs twice as fast)."""
        for node in nodes or self.nodes:
            node.faketime_on = True
            node.faketime_base = base
            node.set_faketime(base)
            node.preload.append(LIBFAKETIME)
            node.env["FAKETIME_TIMESTAMP_FILE"] = node.faketime_file
            node.env["FAKETIME_CACHE_DURATION"] = "1"
            node.env["FAKETIME_DONT_FAKE_MONOTONIC"] = "0" if fake_monotonic else "1"
        if nodes is None:
            self.faketime_base = (base, fake_monotonic)

    def enable_faultfs(self, shim, nodes=None):
        self.faultfs_shim = shim
        for node in nodes or self.nodes:
            node.faultfs_on = True
            node.set_faultfs("")
            node.preload.append(shim)
            node.env["LOCKD_FAULTFS_CONTROL"] = node.faultfs_control
            node.env["LOCKD_FAULTFS_DIR"] = node.data_dir

    def start(self):
        # All processes first: a node may wait for its peers before it
        # says `listening`.
        for node in self.nodes:
            node.spawn()
        for node in self.nodes:
            node.wait_listening()
        if self.mode == "cluster":
            self.init()

    def init(self, timeout_s=60):
        """Forms the group once (v1.3: a start never forms one)."""
        init_cluster(self.nodes[0].admin_addr, timeout_s, self.admin_headers)

    def set_admin_headers(self, headers):
        """Headers for every admin call (and new members'): auth on."""
        self.admin_headers = dict(headers)
        for node in self.nodes:
            node.admin_headers = self.admin_headers

    def client_addrs(self):
        """Every client address ever a member's: one list, shared."""
        return self.addrs

    def new_node(self):
        """A node for a membership change: the next unused id (ids are never
        reused), an empty data dir (it waits until the leader adds it), the
        current members' --peer entries and its own; set up like the others
        (clock and disk shims). Not started, not yet in `nodes`."""
        nid = max(n.id for n in self.nodes + self.retired) + 1
        node = Node(self.lockd, nid, "127.77.%d.%d" % (self.net_octet, nid), self.run_dir,
                    self.mode)
        peers = []
        for n in self.nodes + [node]:
            peers += ["--peer", "%d=%s/%s" % (n.id, n.client_addr, n.raft_addr)]
        node.peers_args = peers
        node.admin_headers = self.admin_headers
        node.extra_args = [a.replace("{ID}", str(nid)) for a in self.extra_args]
        node.extra_args += ["--election-timeout-ms", str(self.election_timeout_ms),
                            "--heartbeat-ms", str(self.heartbeat_ms)]
        if self.faketime_base is not None:
            base, fake_monotonic = self.faketime_base
            self.enable_faketime(nodes=[node], fake_monotonic=fake_monotonic, base=base)
        if self.faultfs_shim is not None:
            self.enable_faultfs(self.faultfs_shim, nodes=[node])
        return node

    def leader(self, timeout_s=0.5):
        """The node that says it leads (single mode: the node), or None."""
        if self.mode == "single":
            return self.nodes[0]
        for node in self.nodes:
            if node.alive() and not node.paused:
                st = node.status(timeout_s)
                if st and st.get("role") == "leader":
                    return node
        return None

    def wait_leader(self, timeout_s):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            leader = self.leader()
            if leader is not None:
                return leader
            time.sleep(0.05)
        return None

    def stop(self):
        for node in self.nodes + self.retired:
            node.terminate()
