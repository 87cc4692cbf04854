"""Watcher clients (protocol.md §5c) for the chaos workload, and the run's
final reading of every key.

A watcher is one thread on one connection at a time: it sends `W <key>` for
each of the workload's keys and records every line it gets back (the `W`
replies, the `V` pushes, anything else) in the history as a "watch" record,
with the time it was read (the runner's one monotonic clock). When its
connection fails (kill -9, a member removed, `E no_leader`), it records that
the connection was lost, moves to the next node and watches again: the
history keeps every raw line, and the checker (watch_check.py) applies the
client's rule itself (a state whose rev is not newer than one already seen
is dropped).

History records (type "watch"):
  w        the watcher's name ("w<node>.<i>")
  conn     its connection number (1, 2, ...; a new one after each loss)
  node     the client address it is connected to
  kind     "W" (a W reply), "V" (a push), "lost" (the connection failed or
           gave an error), "end" (still connected when the runner stopped it),
           "other" (any other line, e.g. `E no_leader`, `B`)
  key, rev, state   for W and V: the key, its rev and the state words
           ("free", "held <owner> <token>", "shared <limit> <count>")
  time_ns  when the line was read (or the loss seen)
  sent_ns  for W: when the W request was written (a watcher sends W for
           every key again every REWATCH_S on the same connection: each
           reply is the state then, after any push still pending)

and (type "watch_final") the state of every key after the workload stopped,
read twice on a fresh connection (phase 1 before the watchers are stopped,
phase 2 after): key, rev, state, time_ns, phase.
"""

import collections
import socket
import threading
import time

from .client import ConnectionLost, LineConn

NS_PER_MS = 1_000_000

# How long a watcher blocks in one read before looking at its stop flag.
READ_SLICE_S = 0.2
# How often a watcher sends `W` again for every key on its connection (the
# reply is the state now, after any pending push: §5c). Each reply anchors
# the connection's view: the checker's watch-missed rule.
REWATCH_S = 0.2


def parse_state_line(line):
    """'W key rev state...' or 'V key rev state...' -> (kind, key, rev, state)
    or None for any other line."""
    f = line.split()
    if len(f) < 4 or f[0] not in ("W", "V"):
        return None
    try:
        rev = int(f[2])
    except ValueError:
        return None
    return f[0], f[1], rev, " ".join(f[3:])


class Watcher:
    """Watches `keys` through the nodes in `addrs` (a list shared with the
    runner, which appends new members), starting at addrs[index]."""

    def __init__(self, name, addrs, index, keys, writer, stop, op_timeout_ms=2000):
        self.name = name
        self.addrs = addrs
        self.target = addrs[index % len(addrs)]
        self.keys = list(keys)
        self.writer = writer
        self.stop = stop
        self.op_timeout_ms = op_timeout_ms
        self.conn = None
        self.conn_no = 0
        # What this watcher accepted, by the client's rule: key -> (rev, state).
        self.seen = {}
        self.connected = False   # True once every key's W reply came back
        self.lines = 0
        self.w_sent = {}         # key -> send times of the W requests not yet answered
        self.next_rewatch = 0

    def _rec(self, kind, **kw):
        d = {"type": "watch", "w": self.name, "conn": self.conn_no, "node": self.target,
             "kind": kind, "time_ns": time.monotonic_ns()}
        d.update(kw)
        self.writer.write(d)

    def _rotate(self):
        if len(self.addrs) > 1:
            i = self.addrs.index(self.target) if self.target in self.addrs else -1
            self.target = self.addrs[(i + 1) % len(self.addrs)]

    def _lose(self, why):
        if self.conn is not None:
            self.conn.close()
            self.conn = None
            self._rec("lost", error=why)
        self.connected = False
        self._rotate()
        self.stop.wait(0.05)

    def _accept(self, key, rev, state):
        old = self.seen.get(key)
        if old is None or rev > old[0]:
            self.seen[key] = (rev, state)

    def _watch(self):
        """Connect and send W for every key; returns when every reply came."""
        host, port = self.target.rsplit(":", 1)
        self.conn = LineConn(host, int(port), self.op_timeout_ms / 1000)
        self.conn_no += 1
        self.w_sent = {k: collections.deque() for k in self.keys}
        sent = self._send_w()
        pending = set(self.keys)
        # A member with nothing applied waits up to an election timeout
        # before `E no_leader`: allow that, plus the op timeout.
        deadline = sent + (self.op_timeout_ms + 2000) * NS_PER_MS
        while pending:
            line = self.conn._read_any(deadline)
            if not self._line(line):
                raise ConnectionLost("W answered: %s" % line)
            p = parse_state_line(line)
            if p is not None and p[0] == "W":
                pending.discard(p[1])
        self.connected = True

    def _send_w(self):
        """W for every key on the connection; returns when it was written."""
        sent = time.monotonic_ns()
        self.conn.send("".join("W %s\n" % k for k in self.keys))
        for k in self.keys:
            self.w_sent[k].append(sent)
        self.next_rewatch = sent + int(REWATCH_S * 1e9)
        return sent

    def _line(self, line):
        """Records one line; False if it is neither a W reply nor a push."""
        self.lines += 1
        p = parse_state_line(line)
        if p is None:
            self._rec("other", line=line)
            return False
        kind, key, rev, state = p
        extra = {}
        if kind == "W" and self.w_sent.get(key):
            extra["sent_ns"] = self.w_sent[key].popleft()
        self._rec(kind, key=key, rev=rev, state=state, **extra)
        self._accept(key, rev, state)
        return True

    def run(self):
        while not self.stop.is_set():
            try:
                if self.conn is None:
                    self._watch()
                now = time.monotonic_ns()
                if now >= self.next_rewatch:
                    self._send_w()
                deadline = min(now + int(READ_SLICE_S * 1e9), self.next_rewatch)
                try:
                    line = self.conn._read_any(deadline)
                except socket.timeout:
                    continue
                if not self._line(line):
                    self._lose("unexpected line: %s" % line)
            except (OSError, ConnectionLost) as e:
                self._lose("%s: %s" % (type(e).__name__, e))
        if self.conn is not None:
            self._rec("end")
            self.conn.close()
            self.conn = None


def read_states(addr, keys, timeout_s=5):
    """{key: (rev, state)} from one fresh connection's W replies, and
    {None: when the W requests were written}."""
    host, port = addr.rsplit(":", 1)
    conn = LineConn(host, int(port), timeout_s)
    try:
        sent = time.monotonic_ns()
        conn.send("".join("W %s\n" % k for k in keys))
        out = {None: sent}
        deadline = time.monotonic_ns() + int(timeout_s * 1e9)
        while len(out) < len(keys) + 1:
            p = parse_state_line(conn._read_any(deadline))
            if p is not None and p[0] == "W":
                out[p[1]] = (p[2], p[3])
        return out
    finally:
        conn.close()


def server_supports_watch(addr, timeout_s=10):
    """True if the server knows W (v1.3): `W key` answers `W key rev state`,
    a server without it `E unknown_command`; anything else (`E no_leader`
    from a member with nothing applied yet) is asked again until timeout_s."""
    deadline = time.monotonic() + timeout_s
    while True:
        host, port = addr.rsplit(":", 1)
        try:
            conn = LineConn(host, int(port), 5)
            try:
                conn.send("W chaos/watch-probe\n")
                line = conn._read_any(time.monotonic_ns() + 5_000 * NS_PER_MS)
            finally:
                conn.close()
        except (OSError, ConnectionLost):
            line = ""
        if line.startswith("W "):
            return True
        if line.startswith("E unknown_command") or time.monotonic() > deadline:
            return False
        time.sleep(0.2)


class WatcherGroup:
    """The run's watchers: per_node of them starting at each node."""

    def __init__(self, addrs, keys, writer, per_node, op_timeout_ms=2000):
        self.stop = threading.Event()
        self.keys = keys
        self.writer = writer
        self.watchers = []
        self.threads = []
        n = len(addrs)
        for node in range(n):
            for i in range(per_node):
                self.watchers.append(Watcher("w%d.%d" % (node + 1, i), addrs, node, keys, writer,
                                             self.stop, op_timeout_ms))

    def start(self):
        for w in self.watchers:
            t = threading.Thread(target=w.run, name=w.name, daemon=True)
            t.start()
            self.threads.append(t)

    def finish(self, final_addr, settle_s=5.0, log=None):
        """After the workload stopped: read every key's state (phase 1), give
        the watchers up to settle_s to reach it, stop them, read it again
        (phase 2). The checker compares a watcher still connected at the end
        with the final state only where both phases agree."""
        try:
            first = read_states(final_addr(), self.keys)
        except (OSError, ConnectionLost, socket.timeout) as e:
            first = None
            if log:
                log("watchers: could not read the final states: %s" % e)
        if first is not None:
            self._write_final(first, 1)
            deadline = time.monotonic() + settle_s
            while time.monotonic() < deadline:
                if all(w.connected and all(w.seen.get(k, (0, None))[1] == first[k][1]
                                           for k in self.keys) for w in self.watchers):
                    break
                time.sleep(0.02)
        self.stop.set()
        for t in self.threads:
            t.join(10)
        try:
            self._write_final(read_states(final_addr(), self.keys), 2)
        except (OSError, ConnectionLost, socket.timeout) as e:
            if log:
                log("watchers: could not read the final states again: %s" % e)

    def _write_final(self, states, phase):
        now = time.monotonic_ns()
        for k in self.keys:
            rev, state = states[k]
            self.writer.write({"type": "watch_final", "key": k, "rev": rev, "state": state,
                               "sent_ns": states[None], "time_ns": now, "phase": phase})
