"""Shared holds (``S``, v1.2) in both Python clients: ``read_lock`` and
``semaphore`` against a real lockd (readers share, a writer waits, a queued
writer holds later readers back, a pool never exceeds its limit) and
against FakeNode, a scripted node (the bytes sent, the replies understood,
the keeper of a shared holder, a late grant undone)."""

import asyncio
import threading
import time
import unittest

from tests.support import FakeNode, Lockd, eventually
from lockd_client import (
    AsyncClient,
    Client,
    LimitMismatch,
    LockLost,
    LockTimeout,
    NotHeld,
)


def granting(tokens):
    """Grants every S with the next token; answers R and K for any token."""
    def handler(line):
        f = line.split()
        if f[0] == "S":
            return [f"S {next(tokens)} {f[1]} {f[2]}"]
        if f[0] in ("R", "K"):
            return [f"{f[0]} {f[1]} {f[2]}"]
        return ["E unknown_command"]
    return handler


class SharedRealTest(unittest.TestCase):
    def setUp(self):
        self.lockd = Lockd()
        self.client = Client(self.lockd.address, reply_timeout_s=5)

    def tearDown(self):
        self.client.close()
        self.lockd.stop()

    def test_readers_share_a_writer_waits_and_later_readers_queue_behind_it(self):
        c = self.client
        r1 = c.read_lock("cfg", owner="r1", lease_ms=10_000)
        r2 = c.read_lock("cfg", owner="r2", lease_ms=10_000)
        self.assertGreater(r2.token, r1.token)
        got = {}
        writer = threading.Thread(target=lambda: got.setdefault(
            "w", c.acquire("cfg", owner="w", lease_ms=10_000, wait_ms=10_000)))
        writer.start()
        # The writer's S-blocking A is on the wire before the next reader's S.
        self.assertTrue(eventually(lambda: c._conn is not None and len(c._conn._wire) == 1))
        with self.assertRaises(LockTimeout):
            c.acquire_shared("cfg", 0, owner="r3", lease_ms=1000)   # someone is queued first
        r1.release()
        self.assertTrue(writer.is_alive())
        r2.release()
        writer.join(10)
        self.assertGreater(got["w"].token, r2.token)
        with self.assertRaises(LockTimeout):
            c.acquire_shared("cfg", 0, owner="r4", lease_ms=1000)
        got["w"].release()
        c.acquire_shared("cfg", 0, owner="r4", lease_ms=1000).release()

    def test_a_pool_of_workers_never_exceeds_its_limit(self):
        pool = self.client.semaphore("pool", 3)
        running, most, lock = [0], [0], threading.Lock()

        def worker(i):
            with pool.acquire(owner=f"w{i}", lease_ms=10_000, wait_ms=10_000):
                with lock:
                    running[0] += 1
                    most[0] = max(most[0], running[0])
                time.sleep(0.05)
                with lock:
                    running[0] -= 1

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(10)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(20)
        self.assertEqual(most[0], 3)
        with self.assertRaises(LimitMismatch):
            held = pool.acquire(owner="a", lease_ms=10_000)
            try:
                self.client.acquire_shared("pool", 4, owner="b", lease_ms=1000)
            finally:
                held.release()


class AsyncSharedRealTest(unittest.IsolatedAsyncioTestCase):
    async def test_read_lock_then_write_lock(self):
        lockd = Lockd()
        self.addCleanup(lockd.stop)
        async with AsyncClient(lockd.address) as c:
            async with c.read_lock("cfg", owner="r1", lease_ms=10_000) as r1:
                async with c.read_lock("cfg", owner="r2", lease_ms=10_000) as r2:
                    self.assertGreater(r2.token, r1.token)
                    with self.assertRaises(LockTimeout):
                        await c.acquire("cfg", owner="w", lease_ms=1000)
            async with c.lock("cfg", owner="w", lease_ms=10_000) as w:
                self.assertGreater(w.token, r2.token)
            async with c.semaphore("pool", 1).acquire(owner="p", lease_ms=10_000):
                with self.assertRaises(LockTimeout):
                    await c.acquire_shared("pool", 1, owner="q", lease_ms=1000)


class SharedFakeTest(unittest.TestCase):
    def node(self, handler):
        n = FakeNode(handler)
        self.addCleanup(n.close)
        return n

    def client(self, node, **kw):
        c = Client(node.address, reply_timeout_s=5, **kw)
        self.addCleanup(c.close)
        return c

    def test_read_lock_sends_limit_zero_and_releases_its_own_token(self):
        n = self.node(granting(iter(range(40, 50))))
        c = self.client(n)
        with c.read_lock("cfg", owner="alice", lease_ms=1000, keep=False) as a:
            with c.read_lock("cfg", owner="bob", lease_ms=1000, keep=False) as b:
                self.assertEqual((a.token, b.token), (40, 41))
                self.assertTrue(a.shared)
                self.assertEqual(a.limit, 0)
        self.assertEqual(n.received, ["S alice cfg 0 1000", "S bob cfg 0 1000", "R 41 cfg", "R 40 cfg"])

    def test_a_semaphore_permit_is_kept_by_its_own_token(self):
        n = self.node(granting(iter(range(7, 10))))
        pool = self.client(n).semaphore("workers", 8)
        with pool.acquire(owner="w1", lease_ms=300, wait_ms=2000) as permit:
            self.assertEqual(permit.limit, 8)
            self.assertTrue(eventually(lambda: "K 7 workers 300" in n.received, 5))
        self.assertEqual(n.received[0], "S w1 workers 8 300 2000")
        self.assertEqual(n.received[-1], "R 7 workers")
        for bad in (0, 65536, -1):
            with self.assertRaises(ValueError):
                self.client(n).semaphore("workers", bad)

    def test_refusals(self):
        def handler(line):
            f = line.split()
            return [{"t": f"T {f[1]} {f[2]}", "m": f"E limit_mismatch {f[1]} {f[2]}"}[f[1]]]

        c = self.client(self.node(handler))
        with self.assertRaises(LockTimeout):
            c.acquire_shared("k", 0, owner="t", lease_ms=100)
        with self.assertRaises(LimitMismatch):
            c.acquire_shared("k", 3, owner="m", lease_ms=100)

    def test_a_late_shared_grant_nobody_waits_for_is_released(self):
        n = self.node(lambda l: [f"R {l.split()[1]} {l.split()[2]}"] if l[0] == "R" else [])
        c = self.client(n)
        c.reply_timeout_s = 0.2
        from lockd_client import Indeterminate
        with self.assertRaises(Indeterminate):
            c.acquire_shared("k", 2, owner="alice", lease_ms=1000)
        n.push("S 33 alice k")
        self.assertTrue(eventually(lambda: "R 33 k" in n.received, 5))

    def test_keeper_reports_the_loss_of_a_shared_hold(self):
        def handler(line):
            f = line.split()
            return [f"S 8 {f[1]} {f[2]}" if f[0] == "S" else f"N {f[1]} {f[2]}"]

        c = self.client(self.node(handler))
        with self.assertRaises(LockLost):
            with c.read_lock("k", lease_ms=300) as lock:
                self.assertTrue(lock.lost.wait(5))
        self.assertIsInstance(lock.lost_reason, NotHeld)


class AsyncSharedFakeTest(unittest.IsolatedAsyncioTestCase):
    def node(self, handler):
        n = FakeNode(handler)
        self.addCleanup(n.close)
        return n

    async def test_read_lock_and_semaphore(self):
        n = self.node(granting(iter(range(40, 50))))
        async with AsyncClient(n.address) as c:
            async with c.read_lock("cfg", owner="alice", lease_ms=1000, keep=False) as a:
                self.assertEqual((a.token, a.shared, a.limit), (40, True, 0))
            pool = c.semaphore("workers", 4)
            async with pool.acquire(owner="w", lease_ms=300) as permit:
                self.assertEqual(permit.limit, 4)
                for _ in range(500):
                    if "K 41 workers 300" in n.received:
                        break
                    await asyncio.sleep(0.01)
            with self.assertRaises(ValueError):
                c.semaphore("workers", 0)
        self.assertEqual(n.received[:3], ["S alice cfg 0 1000", "R 40 cfg", "S w workers 4 300"])
        self.assertIn("K 41 workers 300", n.received)
        self.assertEqual(n.received[-1], "R 41 workers")

    async def test_limit_mismatch(self):
        n = self.node(lambda l: [f"E limit_mismatch {l.split()[1]} {l.split()[2]}"])
        async with AsyncClient(n.address) as c:
            with self.assertRaises(LimitMismatch):
                await c.acquire_shared("k", 3, owner="o", lease_ms=100)


if __name__ == "__main__":
    unittest.main()
