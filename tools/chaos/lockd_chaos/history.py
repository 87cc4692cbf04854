"""The history file: one JSON object per line.

Every line has a "type":
  meta      the run's parameters (mode, seed, nodes, whether locks are lost
            on restart, the recovery bound the liveness check uses)
  op        one client request and its outcome (see Op below)
  nemesis   a fault injected or healed (time_ns, fault, node, detail)
  heal      all faults have stopped at time_ns (the liveness check starts
            its clock here)
  access    one access to the fenced resource (token, read/write, accepted)
  watch     one line a watcher read, or its connection lost/ended
  watch_final  a key's state read after the workload stopped (watchers.py)
  lost_notice  an `X <token> <key>` a workload client read (§5c)

All times are nanoseconds on the runner's one monotonic clock
(time.monotonic_ns), which every client thread shares, so invocations and
completions of different clients compare directly.
"""

import json
import threading

# Reply codes of the wire protocol, plus the checker's own "unknown".
CODES = ("A", "S", "T", "B", "R", "N", "K", "M", "E")


class Op:
    """One request on the wire and what became of it.

    f          'A' (acquire), 'S' (shared acquire, protocol.md §5b), 'R'
               (release) or 'K' (keep)
    key        the lock key
    owner      A and S
    token      R/K: the token sent; A/S: the token granted (None unless
               the reply is A, or S for an S)
    lease_ms   A, S and K
    wait_ms    A and S
    limit      S only: its limit (0: a read lock, N: one of N permits)
    invoke_ns  just before the request was written
    complete_ns when the reply was read; None when unknown
    code       first field of the reply, or None when unknown
    reply      the reply line
    unknown    True for a timeout, a connection error or `E indeterminate`:
               the request may or may not have taken effect
    enq_ns     A or S with wait > 0: when a request pipelined right behind it on
               the same connection was answered, proving the server had
               read the acquire (and, if the key was held, queued it) by
               then; None if not known
    cancelled  A or S the client gave up on: it closed its connection
               before the answer came (also unknown: it may have been
               granted, to nobody). No answer is owed for it; the server
               must take its waiter out of the queue, or release a grant
               nobody heard of (protocol.md §9)
    """

    __slots__ = ("id", "client", "node", "f", "key", "owner", "token", "lease_ms",
                 "wait_ms", "invoke_ns", "complete_ns", "code", "reply", "unknown",
                 "enq_ns", "error", "limit", "cancelled")

    def __init__(self, **kw):
        for name in self.__slots__:
            setattr(self, name, kw.get(name))
        if self.unknown is None:
            self.unknown = False

    def to_json(self):
        d = {"type": "op"}
        for name in self.__slots__:
            v = getattr(self, name)
            if v is not None and v is not False:
                d[name] = v
        return d

    @classmethod
    def from_json(cls, d):
        return cls(**{k: v for k, v in d.items() if k in cls.__slots__})

    @property
    def granted(self):
        """A definite grant (A or S) with a known token."""
        return self.f in ("A", "S") and self.code == self.f and self.token is not None

    @property
    def shared(self):
        return self.f == "S"

    def __repr__(self):
        return "Op(%s)" % json.dumps(self.to_json(), sort_keys=True)


class History:
    """A parsed history: ops, faults, heal time and run parameters."""

    def __init__(self):
        self.meta = {}
        self.ops = []
        self.nemesis = []
        self.heal_ns = None
        self.accesses = []
        self.watches = []
        self.watch_finals = []
        self.lost_notices = []

    @classmethod
    def load(cls, path):
        with open(path) as f:
            return cls.parse(f)

    @classmethod
    def parse(cls, lines):
        h = cls()
        for n, line in enumerate(lines, 1):
            line = line.strip()
            if not line:
                continue
            try:
                d = json.loads(line)
            except ValueError as e:
                raise ValueError("line %d: not JSON: %s" % (n, e))
            t = d.get("type")
            if t == "op":
                h.ops.append(Op.from_json(d))
            elif t == "meta":
                h.meta.update(d)
            elif t == "nemesis":
                h.nemesis.append(d)
            elif t == "heal":
                h.heal_ns = d["time_ns"]
            elif t == "access":
                h.accesses.append(d)
            elif t == "watch":
                h.watches.append(d)
            elif t == "watch_final":
                h.watch_finals.append(d)
            elif t == "lost_notice":
                h.lost_notices.append(d)
            else:
                raise ValueError("line %d: unknown type %r" % (n, t))
        for i, op in enumerate(h.ops):
            if op.id is None:
                op.id = i
        return h


class HistoryWriter:
    """Appends JSON lines from many threads; each line is written whole."""

    def __init__(self, path):
        self._f = open(path, "w", buffering=1 << 16)
        self._lock = threading.Lock()
        self._next_id = 0

    def next_id(self):
        with self._lock:
            self._next_id += 1
            return self._next_id

    def write(self, obj):
        if isinstance(obj, Op):
            obj = obj.to_json()
        line = json.dumps(obj, separators=(",", ":")) + "\n"
        with self._lock:
            self._f.write(line)

    def close(self):
        with self._lock:
            self._f.close()
