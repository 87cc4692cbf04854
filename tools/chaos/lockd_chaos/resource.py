"""A small fenced resource: one counter per key that refuses any access
carrying a token lower than the highest it has seen.

Clients read-modify-write it while holding the lock. Beside the fenced
counter it keeps a naive one that applies every write, as a resource that
trusts the lock alone would: the difference shows what fencing saved (a
client paused past its lease writing over a newer holder's increment).

Shared holders (S, protocol.md §5b) only read: a read under a shared lock
is refused only if an exclusive access with a higher token came before it
(readers hold together, in any order); an exclusive access is refused if
any access, shared or not, carried a higher token.

Every access is recorded (history type "access") with whether the client,
by its own conservative clock (lease counted from its acquire's
invocation), still believed it held the lock: a rejection of such an access
means two holders at once, end to end.
"""

import threading
import time


class _Cell:
    __slots__ = ("value", "max_token", "max_exclusive_token", "naive_value", "naive_writes")

    def __init__(self):
        self.value = 0
        self.max_token = 0
        self.max_exclusive_token = 0
        self.naive_value = 0
        self.naive_writes = 0


class FencedCounter:
    def __init__(self, writer):
        self._writer = writer
        self._lock = threading.Lock()
        self._cells = {}

    def _access(self, op, key, token, client, granted_ns, lease_end_ns, new=None, shared=False):
        with self._lock:
            cell = self._cells.setdefault(key, _Cell())
            now = time.monotonic_ns()
            ok = token >= (cell.max_exclusive_token if shared else cell.max_token)
            if ok:
                cell.max_token = max(cell.max_token, token)
                if not shared:
                    cell.max_exclusive_token = token
            if op == "write":
                new_value, naive_new = new
                cell.naive_writes += 1
                cell.naive_value = naive_new
                if ok:
                    cell.value = new_value
            record = {
                "type": "access", "key": key, "op": op, "token": token, "client": client,
                "ok": ok, "time_ns": now, "granted_ns": granted_ns,
                "in_lease": now < lease_end_ns, "value": cell.value}
            if shared:
                record["shared"] = True
            self._writer.write(record)
            return ok, cell.value, cell.naive_value

    def read(self, key, token, client, granted_ns, lease_end_ns, shared=False):
        """(accepted, fenced value, naive value). `shared`: under an S."""
        return self._access("read", key, token, client, granted_ns, lease_end_ns, shared=shared)

    def write(self, key, token, client, granted_ns, lease_end_ns, value, naive_value):
        return self._access("write", key, token, client, granted_ns, lease_end_ns,
                            (value, naive_value))

    def finish(self):
        """Writes one "final" access record per key."""
        with self._lock:
            for key, cell in sorted(self._cells.items()):
                self._writer.write({
                    "type": "access", "kind": "final", "key": key,
                    "fenced_value": cell.value, "naive_value": cell.naive_value,
                    "naive_writes": cell.naive_writes,
                    "naive_lost": cell.naive_writes - cell.naive_value})
