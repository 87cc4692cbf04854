"""The runner's parts that need no lockd: seeded schedules, the fenced
resource, and the client's recording against a scripted fake server."""

import os
import socket
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools", "chaos"))

from lockd_chaos import schedule  # noqa: E402
from lockd_chaos.nemesis import wipe_data_dir  # noqa: E402
from lockd_chaos.client import Client  # noqa: E402
from lockd_chaos.history import History, HistoryWriter  # noqa: E402
from lockd_chaos.resource import FencedCounter  # noqa: E402


class ScheduleTest(unittest.TestCase):
    def test_same_seed_same_schedule(self):
        a = schedule.make_schedule(7, 120, schedule.KINDS, 5)
        b = schedule.make_schedule(7, 120, schedule.KINDS, 5)
        self.assertEqual([f.to_json() for f in a], [f.to_json() for f in b])

    def test_other_seed_other_schedule(self):
        a = schedule.make_schedule(7, 120, schedule.KINDS, 5)
        b = schedule.make_schedule(8, 120, schedule.KINDS, 5)
        self.assertNotEqual([f.to_json() for f in a], [f.to_json() for f in b])

    def test_faults_do_not_overlap_and_fit(self):
        faults = schedule.make_schedule(3, 60, schedule.KINDS, 3)
        self.assertGreater(len(faults), 5)
        for f, g in zip(faults, faults[1:]):
            self.assertLess(f.start_s + f.duration_s, g.start_s)
        self.assertLessEqual(faults[-1].start_s + faults[-1].duration_s, 60)

    def test_pause_longer_than_election_timeout(self):
        faults = schedule.make_schedule(5, 300, ("pause",), 3, election_timeout_ms=300)
        self.assertTrue(all(f.duration_s >= 0.9 for f in faults))

    def test_every_kind_drawn(self):
        faults = schedule.make_schedule(1, 600, schedule.KINDS, 5)
        self.assertEqual({f.kind for f in faults}, set(schedule.KINDS))
        shapes = {f.detail for f in faults if f.kind == "partition"}
        self.assertEqual(shapes, set(schedule.PARTITION_SHAPES))
        changes = {(f.detail, f.target) for f in faults if f.kind == "member"}
        self.assertEqual({d for d, _ in changes}, set(schedule.MEMBER_CHANGES))
        self.assertIn(("replace", "leader"), changes)

    def test_ci_membership_seed(self):
        # tools/chaos/run-ci's cluster3-members: the leader replaced, then a learner.
        faults = schedule.make_schedule(2, 10, ("member",), 3)
        self.assertEqual([(f.target, f.detail) for f in faults],
                         [("leader", "replace"), ("follower", "learner")])


class WipeTest(unittest.TestCase):
    """The wipe nemesis loses exactly what its shape names."""

    def data_dir(self):
        d = tempfile.mkdtemp(prefix="lockd-wipe-test-")
        self.addCleanup(lambda: __import__("shutil").rmtree(d, ignore_errors=True))
        for name in ("IDENTITY", "LOCK", "wal-0000000000000001.log", "wal-0000000000000002.log",
                     "snap-0000000000000400.snap"):
            with open(os.path.join(d, name), "w") as f:
                f.write("x")
        return d

    def test_shapes(self):
        for shape, left in (("all", []),
                            ("wal", ["IDENTITY", "LOCK", "snap-0000000000000400.snap"]),
                            ("all-but-identity", ["IDENTITY"])):
            d = self.data_dir()
            lost = wipe_data_dir(d, shape)
            self.assertEqual(sorted(os.listdir(d)), left, shape)
            self.assertEqual(lost, 5 - len(left), shape)

    def test_wipe_is_opt_in_and_drawn_when_asked(self):
        self.assertNotIn("wipe", schedule.KINDS)  # existing seeds keep their schedules
        faults = schedule.make_schedule(3, 60, ("wipe",), 3)
        self.assertTrue(faults)
        self.assertTrue(all(f.detail in schedule.WIPE_SHAPES for f in faults))


class ResourceTest(unittest.TestCase):
    def test_fencing(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "h.jsonl")
            w = HistoryWriter(path)
            r = FencedCounter(w)
            far = time.monotonic_ns() + 10**12
            ok, v, n = r.read("k", 5, "a", 0, far)
            self.assertTrue(ok)
            ok2, v2, n2 = r.read("k", 6, "b", 0, far)   # a newer holder reads
            self.assertTrue(r.write("k", 6, "b", 0, far, v2 + 1, n2 + 1)[0])
            self.assertFalse(r.write("k", 5, "a", 0, 0, v + 1, n + 1)[0])  # stale: refused
            r.finish()
            w.close()
            h = History.load(path)
            final = [a for a in h.accesses if a.get("kind") == "final"][0]
            self.assertEqual(final["fenced_value"], 1)
            self.assertEqual(final["naive_lost"], 1)   # the naive counter lost b's increment
            self.assertFalse(h.accesses[3]["ok"])
            self.assertFalse(h.accesses[3]["in_lease"])


class FakeServer:
    """Answers each request line from a script: a function line -> list of
    (delay_s, reply) pairs, sent in order on that connection."""

    def __init__(self, script):
        self.script = script
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.addr = "127.0.0.1:%d" % self.sock.getsockname()[1]
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.handle, args=(conn,), daemon=True).start()

    def handle(self, conn):
        buf = b""
        try:
            while True:
                data = conn.recv(4096)
                if not data:
                    if getattr(self, "on_close", None):
                        self.on_close()
                    return
                buf += data
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    for delay, reply in self.script(line.decode()):
                        time.sleep(delay)
                        conn.sendall((reply + "\n").encode())
        except OSError:
            pass

    def close(self):
        self.sock.close()


class ClientTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "h.jsonl")
        self.w = HistoryWriter(self.path)
        self.clients = []

    def tearDown(self):
        for c in self.clients:
            c.close()
        self.w.close()
        self.dir.cleanup()

    def client(self, *args, **kw):
        c = Client(*args, **kw)
        self.clients.append(c)
        return c

    def test_waiting_acquire_with_probe(self):
        def script(line):
            f = line.split()
            if f[0] == "A":
                return []   # answered later, after the probe
            if f[0] == "R" and f[2].startswith("probe/"):
                return [(0, "N 1 %s" % f[2]), (0.05, "A 42 c1 k")]
            return []
        srv = FakeServer(script)
        c = self.client("c1", [srv.addr], self.w, op_timeout_ms=1000)
        op = c.call("A", "k", owner="c1", lease_ms=1000, wait_ms=500)
        self.assertEqual((op.code, op.token), ("A", 42))
        self.assertIsNotNone(op.enq_ns)
        self.assertLess(op.enq_ns, op.complete_ns)
        srv.close()

    def test_immediate_grant_then_probe(self):
        def script(line):
            f = line.split()
            if f[0] == "A":
                return [(0, "A 7 c1 k")]
            return [(0, "N 1 %s" % f[2])]
        srv = FakeServer(script)
        c = self.client("c1", [srv.addr], self.w, op_timeout_ms=1000)
        op = c.call("A", "k", owner="c1", lease_ms=1000, wait_ms=500)
        self.assertEqual(op.token, 7)
        self.assertIsNone(op.enq_ns)     # granted before the probe: never queued
        self.assertEqual(c.call("R", "k", token=7).code, "N")  # the stream stays in step
        srv.close()

    def test_give_up_closes_the_connection_and_records_cancelled(self):
        closed = threading.Event()

        def script(line):
            f = line.split()
            if f[0] == "R" and f[2].startswith("probe/"):
                return [(0, "N 1 %s" % f[2])]   # queued; the A is never answered
            return []
        srv = FakeServer(script)
        srv.on_close = closed.set
        c = self.client("c1", [srv.addr], self.w, op_timeout_ms=1000)
        op = c.call("A", "k", owner="c1", lease_ms=1000, wait_ms=3000, give_up_ms=100)
        self.assertTrue(op.cancelled)
        self.assertTrue(op.unknown)
        self.assertIsNotNone(op.enq_ns)
        self.assertLess(op.error.find("cancelled"), 5)
        self.assertTrue(closed.wait(5), "the client kept its connection open")
        self.assertEqual(c.target, srv.addr)   # not a node failure: same node next
        srv.close()

    def test_answer_before_give_up_is_kept(self):
        def script(line):
            f = line.split()
            if f[0] == "A":
                return [(0, "A 9 c1 k")]
            return [(0, "N 1 %s" % f[2])]
        srv = FakeServer(script)
        c = self.client("c1", [srv.addr], self.w, op_timeout_ms=1000)
        op = c.call("A", "k", owner="c1", lease_ms=1000, wait_ms=3000, give_up_ms=500)
        self.assertEqual((op.code, op.token), ("A", 9))
        self.assertFalse(op.cancelled)
        srv.close()

    def test_push_lines_are_not_replies(self):
        # v1.3 §5c: an `X` (lost notice) or `V` push may come before any
        # reply; taking it as the reply would pin every later reply on the
        # wrong request.
        def script(line):
            f = line.split()
            if f[0] == "K":
                return [(0, "X 5 k"), (0, "V 12 k free"), (0, "N 5 k")]
            return [(0, "R 6 k")]
        srv = FakeServer(script)
        c = self.client("c1", [srv.addr], self.w, op_timeout_ms=1000)
        self.assertEqual(c.call("K", "k", token=5, lease_ms=1000).code, "N")
        self.assertEqual(c.call("R", "k", token=6).reply, "R 6 k")
        srv.close()

    def test_timeout_is_unknown(self):
        srv = FakeServer(lambda line: [])
        c = self.client("c1", [srv.addr], self.w, op_timeout_ms=100)
        op = c.call("R", "k", token=5)
        self.assertTrue(op.unknown)
        self.assertIsNone(op.complete_ns)
        srv.close()

    def test_indeterminate_is_unknown(self):
        srv = FakeServer(lambda line: [(0, "E indeterminate 5 k")])
        c = self.client("c1", [srv.addr], self.w, op_timeout_ms=500)
        op = c.call("R", "k", token=5)
        self.assertEqual(op.code, "E")
        self.assertTrue(op.unknown)
        srv.close()

    def test_redirect_followed_by_next_request(self):
        leader = FakeServer(lambda line: [(0, "R 5 k")])
        follower = FakeServer(lambda line: [(0, "M %s 5 k" % leader.addr)])
        c = self.client("c1", [follower.addr, leader.addr], self.w, op_timeout_ms=500)
        first = c.call("R", "k", token=5)
        self.assertEqual(first.code, "M")
        self.assertFalse(first.unknown)
        second = c.call("R", "k", token=5)
        self.assertEqual((second.code, second.node), ("R", leader.addr))
        leader.close()
        follower.close()

    def test_refused_connection_is_definite(self):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        addr = "127.0.0.1:%d" % s.getsockname()[1]
        s.close()
        c = self.client("c1", [addr], self.w, op_timeout_ms=500)
        op = c.call("A", "k", owner="c1", lease_ms=1000, wait_ms=0)
        self.assertFalse(op.unknown)
        self.assertIsNone(op.code)
        self.assertIn("Refused", op.error)


if __name__ == "__main__":
    unittest.main()
