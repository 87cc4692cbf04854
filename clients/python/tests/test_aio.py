"""The asyncio client against a real lockd, against FakeNode, and against a
real cluster of three lockd nodes."""

import asyncio
import time
import unittest

from tests.support import FakeNode, Lockd, LockdCluster, eventually, is_free
from lockd_client import AsyncClient, Indeterminate, LockLost, LockTimeout, NoLeader, NotHeld


class AsyncWithLockd(unittest.IsolatedAsyncioTestCase):
    def setUp(self):
        self.lockd = Lockd()

    async def asyncSetUp(self):
        self.client = AsyncClient(self.lockd.address, reply_timeout_s=5)

    async def asyncTearDown(self):
        await self.client.close()

    def tearDown(self):
        self.lockd.stop()

    async def free(self, key):
        return await asyncio.to_thread(is_free, self.lockd, key)

    async def test_acquire_release_keep(self):
        lock = await self.client.acquire("orders/42", owner="alice", lease_ms=10_000)
        with self.assertRaises(TimeoutError):
            await self.client.acquire("orders/42", owner="bob", lease_ms=10_000)
        await lock.keep(20_000)
        await lock.release()
        with self.assertRaises(NotHeld):
            await self.client.release(lock.token, "orders/42")
        with self.assertRaises(NotHeld):
            await self.client.keep(lock.token, "orders/42", 1000)
        again = await self.client.acquire("orders/42", owner="bob", lease_ms=10_000)
        self.assertGreater(again.token, lock.token)

    async def test_wait_and_t_and_out_of_order_replies(self):
        holder = await self.client.acquire("k", owner="alice", lease_ms=10_000)
        start = time.monotonic()
        with self.assertRaises(LockTimeout):
            await self.client.acquire("k", owner="bob", lease_ms=10_000, wait_ms=200)
        self.assertGreaterEqual(time.monotonic() - start, 0.19)
        order = []

        async def waiter():
            lock = await self.client.acquire("k", owner="bob", lease_ms=10_000, wait_ms=5_000)
            order.append("waiter")
            return lock

        task = asyncio.create_task(waiter())
        for _ in range(1000):  # until bob's acquire is on the wire, waiting (10 s at most)
            if len(self.client._conn._wire) == 1:
                break
            await asyncio.sleep(0.01)
        self.assertEqual(len(self.client._conn._wire), 1)
        other = await self.client.acquire("other", owner="carol", lease_ms=10_000)
        order.append("other")
        await holder.release()
        bob = await task
        self.assertEqual(order, ["other", "waiter"])
        self.assertGreater(bob.token, other.token)

    async def test_async_with_releases_on_exception(self):
        with self.assertRaises(RuntimeError):
            async with self.client.lock("k", lease_ms=60_000) as lock:
                self.assertFalse(await self.free("k"))
                raise RuntimeError("work failed")
        self.assertTrue(lock.released)
        self.assertTrue(await self.free("k"))

    async def test_keeper_keeps_through_three_leases(self):
        async with self.client.lock("k", lease_ms=500) as lock:
            await asyncio.sleep(1.7)  # more than three leases
            self.assertFalse(lock.lost.is_set(), lock.lost_reason)
            self.assertGreaterEqual(lock.kept_count, 3)  # 10 if the machine is idle
            self.assertFalse(await self.free("k"))
        self.assertTrue(await self.free("k"))

    async def test_keeper_reports_loss_when_the_server_restarts(self):
        lost = []
        lock = await self.client.lock("k", lease_ms=600, on_lost=lost.append)
        await asyncio.sleep(0.3)
        self.assertFalse(lock.lost.is_set())
        port = self.lockd.port
        self.lockd.stop()
        self.lockd = await asyncio.to_thread(Lockd, port)
        await asyncio.wait_for(lock.lost.wait(), 5)
        self.assertIsInstance(lock.lost_reason, NotHeld)
        self.assertEqual(lost, [lock])
        with self.assertRaises(LockLost):
            lock.check()


def echo(f):
    return f"{f[1]} {f[2]}"


class AsyncClusterTest(unittest.IsolatedAsyncioTestCase):
    def node(self, handler):
        n = FakeNode(handler)
        self.addCleanup(n.close)
        return n

    async def test_follows_a_redirect(self):
        leader = self.node(lambda l: [f"A 77 {echo(l.split())}"])
        follower = self.node(lambda l: [f"M {leader.address} {echo(l.split())}"])
        async with AsyncClient(follower.address) as c:
            lock = await c.acquire("k", owner="alice", lease_ms=1000)
        self.assertEqual(lock.token, 77)
        self.assertEqual(leader.received, ["A alice k 1000"])

    async def test_no_leader_retry_then_budget(self):
        calls = []

        def handler(line):
            calls.append(line)
            return [f"E no_leader {echo(line.split())}"] if len(calls) <= 2 else [f"A 5 {echo(line.split())}"]

        n = self.node(handler)
        async with AsyncClient(n.address, backoff_initial_s=0.02) as c:
            self.assertEqual((await c.acquire("k", lease_ms=1000)).token, 5)
        always = self.node(lambda l: [f"E no_leader {echo(l.split())}"])
        async with AsyncClient(always.address, no_leader_budget_s=0.3) as c:
            with self.assertRaises(NoLeader):
                await c.acquire("k", lease_ms=1000)

    async def test_indeterminate(self):
        n = self.node(lambda l: [f"E indeterminate {echo(l.split())}"])
        async with AsyncClient(n.address) as c:
            with self.assertRaises(Indeterminate):
                await c.acquire("k", lease_ms=1000)
        self.assertEqual(len(n.received), 1)

    async def test_keeper_reports_loss_on_n(self):
        def handler(line):
            f = line.split()
            return [{"A": f"A 8 {echo(f)}", "K": f"N {echo(f)}", "R": f"N {echo(f)}"}[f[0]]]

        n = self.node(handler)
        async with AsyncClient(n.address) as c:
            with self.assertRaises(LockLost):
                async with c.lock("k", lease_ms=300) as lock:
                    await asyncio.wait_for(lock.lost.wait(), 5)
            self.assertIsInstance(lock.lost_reason, NotHeld)


if __name__ == "__main__":
    unittest.main()


class AsyncRealClusterTest(unittest.IsolatedAsyncioTestCase):
    """The asyncio client against three real ``lockd --mode cluster`` nodes."""

    def setUp(self):
        self.cluster = LockdCluster(3)
        self.addCleanup(self.cluster.close)
        self.leader = self.cluster.wait_leader()
        self.assertNotEqual(self.leader, 0)
        self.followers = [i for i in sorted(self.cluster.procs) if i != self.leader]
        for f in self.followers:
            self.assertTrue(eventually(lambda f=f: self.cluster.knows_leader(f, self.leader), 20.0))

    async def test_releases_at_the_new_leader_after_the_leader_is_killed(self):
        async with AsyncClient([self.cluster.address(i) for i in (self.leader, *self.followers)]) as c:
            lock = await c.acquire("k1", owner="alice", lease_ms=60_000)
            await asyncio.to_thread(self.cluster.kill9, self.leader)
            await lock.release()  # at once: rides through the election
            taken = await c.acquire("k1", owner="bob", lease_ms=60_000)
            self.assertGreater(taken.token, lock.token)
            with self.assertRaises(LockTimeout):
                await c.acquire("k1", owner="carol", lease_ms=1000)
            await taken.release()

    async def test_moves_on_from_a_paused_follower(self):
        paused = self.followers[0]
        self.cluster.pause(paused)
        self.addCleanup(self.cluster.resume, paused)
        ids = (paused, self.leader, self.followers[1])
        async with AsyncClient([self.cluster.address(i) for i in ids], reply_timeout_s=0.3) as c:
            with self.assertRaises(Indeterminate):
                await c.acquire("k1", owner="alice", lease_ms=30_000)
            lock = await c.acquire("k1", owner="alice", lease_ms=30_000)
            await lock.release()
