"""Watches, pushes and elections against a real lockd (protocol v1.3 §5c):
C11, C12, C13 and C14 of docs/client-test-plan.md on the wire, for the
threaded and the asyncio client. (The exact interleavings and a
reconnect are in test_plan.py against FakeNode.)"""

import asyncio
import threading
import time
import unittest

from tests.support import Lockd, eventually
from lockd_client import AsyncClient, Client, Request


class RealWatchSync(unittest.TestCase):
    def setUp(self):
        self.lockd = Lockd()
        self.addCleanup(self.lockd.stop)
        self.client = Client(self.lockd.address, reply_timeout_s=5)
        self.addCleanup(self.client.close)

    def test_c11_real_pushes_between_pipelined_replies(self):
        self.assertEqual(self.client.call(Request("W", "k")).kind, "W")   # pushes now come on this connection
        errors = []

        def churn(owner):
            try:
                for _ in range(30):
                    self.client.acquire("k", owner=owner, lease_ms=5000, wait_ms=5000).release()
            except Exception as e:  # noqa: BLE001
                errors.append(e)
        threads = [threading.Thread(target=churn, args=(f"o{i}",)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        self.assertEqual(errors, [])
        self.assertIsNone(self.client._conn.broken)

    def test_c12_real_watch_in_rev_order(self):
        other = Client(self.lockd.address)
        self.addCleanup(other.close)
        with self.client.watch("k") as w:
            first = w.get(5)
            self.assertEqual(first.state, "free")
            lock = other.acquire("k", owner="alice", lease_ms=5000)
            held = w.get(5)
            self.assertEqual((held.state, held.owner, held.token), ("held", "alice", lock.token))
            lock.release()
            free = w.get(5)
            self.assertEqual(free.state, "free")
            self.assertLess(first.rev, held.rev)
            self.assertLess(held.rev, free.rev)

    def test_c13_real_keeper_stops_at_x(self):
        lock = self.client.lock("k", lease_ms=30_000)
        self.client.keep(lock.token, "k", 50)   # the lease now ends in 50 ms; the keeper's next K is 10 s away
        self.assertTrue(lock.lost.wait(3))
        self.assertIn("X", str(lock.lost_reason))
        bare = self.client.acquire("j", lease_ms=50)   # no keeper: lost is set by X too
        self.assertTrue(eventually(lambda: bare.lost.is_set(), 3))

    def test_c14_real_election(self):
        other = Client(self.lockd.address)
        self.addCleanup(other.close)
        self.assertIsNone(self.client.leader("e"))
        with self.client.observe("e") as o:
            self.assertIsNone(o.get(5))
            a = other.campaign("e", "node-a", lease_ms=2000)
            self.assertEqual(o.get(5).value, "node-a")
            self.assertEqual(self.client.leader("e").value, "node-a")
            won = {}
            t = threading.Thread(target=lambda: won.update(b=self.client.campaign("e", "node-b", lease_ms=2000)))
            t.start()
            time.sleep(0.2)
            a.resign()
            t.join(5)
            seen = o.get(5)   # node-b (the hand-off is one change) or nobody first
            if seen is None:
                seen = o.get(5)
            self.assertEqual(seen.value, "node-b")
            self.assertEqual(won["b"].value, "node-b")
            won["b"].resign()


class RealWatchAsync(unittest.IsolatedAsyncioTestCase):
    def setUp(self):
        self.lockd = Lockd()
        self.addCleanup(self.lockd.stop)

    async def asyncSetUp(self):
        self.client = AsyncClient(self.lockd.address, reply_timeout_s=5)
        self.addAsyncCleanup(self.client.close)

    async def test_c12_real_watch_in_rev_order(self):
        other = AsyncClient(self.lockd.address)
        self.addAsyncCleanup(other.close)
        async with self.client.watch("k") as w:
            first = await w.get(5)
            lock = await other.acquire("k", owner="alice", lease_ms=5000)
            held = await w.get(5)
            await lock.release()
            free = await w.get(5)
        self.assertEqual([s.state for s in (first, held, free)], ["free", "held", "free"])
        self.assertEqual(held.token, lock.token)
        self.assertLess(first.rev, held.rev)
        self.assertLess(held.rev, free.rev)

    async def test_c13_real_keeper_stops_at_x(self):
        lock = await self.client.lock("k", lease_ms=30_000)
        await self.client.keep(lock.token, "k", 50)
        await asyncio.wait_for(lock.lost.wait(), 3)
        self.assertIn("X", str(lock.lost_reason))

    async def test_c14_real_election(self):
        other = AsyncClient(self.lockd.address)
        self.addAsyncCleanup(other.close)
        async with self.client.observe("e") as o:
            self.assertIsNone(await o.get(5))
            a = await other.campaign("e", "node-a", lease_ms=2000)
            self.assertEqual((await o.get(5)).value, "node-a")
            self.assertEqual((await self.client.leader("e")).value, "node-a")
            b = asyncio.ensure_future(self.client.campaign("e", "node-b", lease_ms=2000))
            await asyncio.sleep(0.2)
            await a.resign()
            lead = await asyncio.wait_for(b, 5)
            seen = await o.get(5)
            if seen is None:
                seen = await o.get(5)
            self.assertEqual(seen.value, "node-b")
            await lead.resign()


if __name__ == "__main__":
    unittest.main()
