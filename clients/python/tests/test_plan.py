"""The shared client test plan (docs/client-test-plan.md), scenarios C01-C14,
for the threaded client (``PlanSync``) and the asyncio client (``PlanAsync``).
Each test is named after its scenario id. A real lockd where the wire
matters; ``FakeNode`` for exact interleavings and for what a single lockd
cannot show. The pure rules (matcher, keeper, watch filters) are in
test_core.py and test_protocol.py under the same ids."""

import asyncio
import threading
import time
import unittest

from tests.support import FakeNode, Lockd, eventually, is_free
from lockd_client import (
    AsyncClient,
    Client,
    Indeterminate,
    LockLost,
    LockTimeout,
    NotHeld,
    Rejected,
    Request,
)


def echo(f):
    return f"{f[1]} {f[2]}"


class Base(unittest.TestCase):
    def node(self, handler):
        n = FakeNode(handler)
        self.addCleanup(n.close)
        return n

    def lockd(self):
        d = Lockd()
        self.addCleanup(d.stop)
        return d


class PlanSync(Base):
    def client(self, *addresses, **kw):
        kw.setdefault("reply_timeout_s", 5)
        c = Client(list(addresses), **kw)
        self.addCleanup(c.close)
        return c

    def test_c01_long_wait_then_keep(self):
        d = self.lockd()
        first = d.call("A first kk 1200").split()
        self.assertEqual(first[0], "A")
        c = self.client(d.address)
        with c.lock("kk", owner="waiter", lease_ms=800, wait_ms=5_000) as lock:   # granted after ~1.2 s
            time.sleep(2.0)                                                     # 2.5 leases
            self.assertFalse(lock.lost.is_set(), lock.lost_reason)
            self.assertGreaterEqual(lock.kept_count, 2)
            self.assertEqual(d.call("A probe kk 1000"), "T probe kk")

    def test_c03_error_with_echo_among_pipelined(self):
        n = self.node(lambda l: ["E bad_wait b k2"] if l.startswith("A b ") else [])
        c = self.client(n.address)
        got = {}
        t = threading.Thread(target=lambda: got.update(a=c.acquire("k1", owner="a", lease_ms=1000, wait_ms=5000)))
        t.start()
        self.assertTrue(eventually(lambda: len(n.received) == 1))
        with self.assertRaises(Rejected) as cm:
            c.acquire("k2", owner="b", lease_ms=1000, wait_ms=999_999)
        self.assertEqual(cm.exception.code, "bad_wait")
        n.push("A 7 a k1")
        t.join(5)
        self.assertEqual(got["a"].token, 7)

    def test_c04_error_without_echo_is_never_pinned_on_another_request(self):
        # A v1.2-style server answers a wait above its maximum with an
        # echo-less E bad_wait while another thread's valid wait is queued.
        d = self.lockd()
        holder = d.call("A holder k 30000").split()
        c = self.client(d.address)
        got = {}
        t = threading.Thread(target=lambda: got.update(a=c.acquire("k", owner="a", lease_ms=5000, wait_ms=10_000)))
        t.start()
        self.assertTrue(eventually(lambda: c._conn is not None and len(c._conn._wire) == 1))
        refused = {}

        def refused_acquire():
            try:
                c.acquire("j", owner="b", lease_ms=1000, wait_ms=400_000)  # above lockd's max wait
            except Exception as e:  # noqa: BLE001
                refused["e"] = e
        t2 = threading.Thread(target=refused_acquire)
        t2.start()
        time.sleep(0.3)
        self.assertTrue(t.is_alive())           # the queued wait was not told another's refusal
        self.assertEqual(d.call(f"R {holder[1]} k"), f"R {holder[1]} k")
        t.join(5)
        t2.join(5)
        self.assertIn("a", got)                 # granted, and held by its caller
        self.assertIsInstance(refused["e"], Rejected)
        self.assertEqual(refused["e"].code, "bad_wait")
        self.assertEqual(d.call("A probe k 1000"), "T probe k")
        got["a"].release()
        self.assertTrue(is_free(d, "k"))

    def test_c05_a_late_grant_is_released_by_the_reader_alone(self):
        d = self.lockd()
        holder = d.call("A holder k 30000").split()
        c = self.client(d.address)
        with self.assertRaises(Indeterminate):   # the caller gives up (its deadline) while queued
            c.call(Request("A", "k", owner="a", lease_ms=30_000, wait_ms=10_000), deadline=time.monotonic() + 0.3)
        # No other call on this client: the reader thread alone releases a late grant.
        self.assertEqual(d.call(f"R {holder[1]} k"), f"R {holder[1]} k")
        self.assertTrue(eventually(lambda: is_free(d, "k"), 5))

    def test_c06_release_from_the_lost_callback(self):
        n = self.node(lambda l: {"A": ["A 5 o k"], "K": ["N 5 k"], "R": ["N 5 k"]}[l[0]])
        c = self.client(n.address)
        done = threading.Event()

        def on_lost(lock):
            try:
                lock.release()
            except NotHeld:
                pass
            done.set()
        lock = c.lock("k", owner="o", lease_ms=300, on_lost=on_lost)
        self.assertTrue(done.wait(5))
        lock._keeper.join(5)
        self.assertFalse(lock._keeper.is_alive())
        self.assertTrue(lock.released)

    def test_c07_node_switch_keeps_the_old_connection_for_other_callers(self):
        leader = self.node(lambda l: [f"A 9 {echo(l.split())}"] if l[0] == "A" else [])
        slow = self.node(lambda l: [f"M {leader.address} {echo(l.split())}"] if l.startswith("A b ") else [])
        c = self.client(slow.address)
        got = {}
        t = threading.Thread(target=lambda: got.update(a=c.acquire("k", owner="a", lease_ms=1000, wait_ms=5000)))
        t.start()
        self.assertTrue(eventually(lambda: len(slow.received) == 1))
        self.assertEqual(c.acquire("j", owner="b", lease_ms=1000).token, 9)   # moved to the leader
        slow.push("A 4 a k")                       # the wait queued on the old node is answered
        t.join(5)
        self.assertEqual(got["a"].token, 4)

    def test_c08_close_stops_keepers_for_good(self):
        d = self.lockd()
        c = Client(d.address, reply_timeout_s=5)
        lock = c.lock("k", lease_ms=600)
        c.close()
        self.assertFalse(lock._keeper.is_alive())
        self.assertTrue(lock.lost.is_set())
        self.assertIsInstance(lock.lost_reason, LockLost)
        self.assertTrue(eventually(lambda: is_free(d, "k"), 5))   # never extended again

    def test_c09_released_only_after_the_server_confirms(self):
        answers = ["E indeterminate 5 k", "R 5 k"]
        n = self.node(lambda l: ["A 5 o k"] if l[0] == "A" else [answers.pop(0)])
        c = self.client(n.address)
        lock = c.acquire("k", owner="o", lease_ms=1000)
        with self.assertRaises(Indeterminate):
            lock.release()
        self.assertFalse(lock.released)
        lock.release()                                            # retried through the handle
        self.assertTrue(lock.released)
        self.assertEqual([l for l in n.received if l[0] == "R"], ["R 5 k", "R 5 k"])

    def test_c10_second_acquire_of_one_owner_and_key_keeps_its_wait(self):
        d = self.lockd()
        d.call("A holder k 30000")
        c = self.client(d.address)
        ends = []

        def acquire():
            start = time.monotonic()
            with self.assertRaises(LockTimeout):
                c.acquire("k", owner="o", lease_ms=1000, wait_ms=1000)
            ends.append(time.monotonic() - start)
        threads = [threading.Thread(target=acquire) for _ in range(2)]
        threads[0].start()
        time.sleep(0.3)            # the second is queued behind the first for 0.7 s of its 1 s
        threads[1].start()
        for t in threads:
            t.join(10)
        self.assertEqual(len(ends), 2)
        self.assertLess(max(ends), 1.6)     # the queued one did not restart its 1 s wait (2 s)

    def test_c11_pushes_between_pipelined_replies(self):
        n = self.node(lambda l: ["V k 3 held o 5", "X 99 zz", "A 5 o k", "V k 4 free"] if l[0] == "A"
                      else ["V k 5 held p 6", f"R {echo(l.split())}"])
        c = self.client(n.address)
        lock = c.acquire("k", owner="o", lease_ms=1000)
        self.assertEqual(lock.token, 5)
        lock.release()
        self.assertTrue(lock.released)
        self.assertIsNone(c._conn.broken)

    def test_c12_watch_in_rev_order_and_after_a_reconnect(self):
        watches = []

        def handler(line):
            if line[0] != "W":
                return []
            watches.append(line)
            return ["W k 5 free"] if len(watches) == 1 else ["W k 7 held a 9", "V k 6 free", "V k 8 free"]
        n = self.node(handler)
        c = self.client(n.address)
        with c.watch("k") as w:
            s = w.get(5)
            self.assertEqual((s.rev, s.state), (5, "free"))
            n.push("V k 7 held a 9")
            s = w.get(5)
            self.assertEqual((s.rev, s.state, s.owner, s.token), (7, "held", "a", 9))
            n.drop()                                              # the member goes away
            s = w.get(5)                                          # re-watched; 7 again and 6 dropped
            self.assertEqual((s.rev, s.state), (8, "free"))
        self.assertEqual(watches, ["W k", "W k"])

    def test_c13_keeper_stops_at_x(self):
        n = self.node(lambda l: ["A 5 o k"] if l[0] == "A" else ["K 5 k"])
        c = self.client(n.address)
        lock = c.lock("k", owner="o", lease_ms=30_000)
        start = time.monotonic()
        n.push("X 5 k")
        self.assertTrue(lock.lost.wait(5))
        self.assertLess(time.monotonic() - start, 1.0)
        self.assertIn("X", str(lock.lost_reason))
        self.assertFalse([l for l in n.received if l[0] == "K"])

    def test_c14_campaign_on_a_real_lockd(self):
        d = self.lockd()
        c = self.client(d.address)
        a = c.campaign("election/x", "node-a", lease_ms=1000)
        won = {}
        t = threading.Thread(target=lambda: won.update(b=c.campaign("election/x", "node-b", lease_ms=1000,
                                                                     round_wait_ms=300)))
        t.start()
        time.sleep(0.8)                   # more than two rounds: b still waits, a is kept alive
        self.assertNotIn("b", won)
        self.assertFalse(a.lost.is_set())
        a.resign()
        t.join(5)
        self.assertEqual(won["b"].value, "node-b")
        self.assertEqual(d.call("A probe election/x 1000"), "T probe election/x")
        won["b"].resign()
        with self.assertRaises(ValueError):
            c.campaign("election/x", "has space")

    def test_c14_leader_observe_and_loss(self):
        def handler(line):
            f = line.split()
            if f[0] == "W":
                return [f"W {f[1]} 1 held a 10"]
            if f[0] == "U":
                return [f"U {f[1]}"]
            if f[0] == "A":
                return [f"A 12 {echo(f)}"]
            return [f"K {echo(f)}"]
        n = self.node(handler)
        c = self.client(n.address)
        leader = c.leader("e")
        self.assertEqual((leader.value, leader.token), ("a", 10))
        with c.observe("e") as o:
            self.assertEqual(o.get(5).value, "a")
            n.push("V e 2 held a 10")     # the same holder: not a change
            n.push("V e 3 free")
            self.assertIsNone(o.get(5))
            n.push("V e 4 held b 12")
            b = o.get(5)
            self.assertEqual((b.value, b.token), ("b", 12))
        lost = threading.Event()
        me = c.campaign("e", "b", lease_ms=30_000, on_lost=lambda lock: lost.set())
        n.push("X 12 e")                  # the clear loss signal
        self.assertTrue(lost.wait(5))
        self.assertTrue(me.lost.is_set())


class PlanAsync(unittest.IsolatedAsyncioTestCase):
    def node(self, handler):
        n = FakeNode(handler)
        self.addCleanup(n.close)
        return n

    def lockd(self):
        d = Lockd()
        self.addCleanup(d.stop)
        return d

    async def client(self, *addresses, **kw):
        kw.setdefault("reply_timeout_s", 5)
        c = AsyncClient(list(addresses), **kw)
        self.addAsyncCleanup(c.close)
        return c

    async def free(self, d, key, timeout_s=5.0):
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if await asyncio.to_thread(is_free, d, key):
                return True
            await asyncio.sleep(0.02)
        return False

    async def until(self, cond, timeout_s=5.0):
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if cond():
                return True
            await asyncio.sleep(0.01)
        return cond()

    async def test_c01_long_wait_then_keep(self):
        d = self.lockd()
        self.assertTrue(d.call("A first kk 1200").startswith("A "))
        c = await self.client(d.address)
        async with c.lock("kk", owner="waiter", lease_ms=800, wait_ms=5_000) as lock:
            await asyncio.sleep(2.0)
            self.assertFalse(lock.lost.is_set(), lock.lost_reason)
            self.assertGreaterEqual(lock.kept_count, 2)
            self.assertEqual(await asyncio.to_thread(d.call, "A probe kk 1000"), "T probe kk")

    async def test_c03_error_with_echo_among_pipelined(self):
        n = self.node(lambda l: ["E bad_wait b k2"] if l.startswith("A b ") else [])
        c = await self.client(n.address)
        first = asyncio.ensure_future(c.acquire("k1", owner="a", lease_ms=1000, wait_ms=5000))
        self.assertTrue(await self.until(lambda: len(n.received) == 1))
        with self.assertRaises(Rejected) as cm:
            await c.acquire("k2", owner="b", lease_ms=1000, wait_ms=999_999)
        self.assertEqual(cm.exception.code, "bad_wait")
        n.push("A 7 a k1")
        self.assertEqual((await asyncio.wait_for(first, 5)).token, 7)

    async def test_c04_error_without_echo_is_never_pinned_on_another_request(self):
        d = self.lockd()
        holder = d.call("A holder k 30000").split()
        c = await self.client(d.address)
        first = asyncio.ensure_future(c.acquire("k", owner="a", lease_ms=5000, wait_ms=10_000))
        self.assertTrue(await self.until(lambda: c._conn is not None and len(c._conn._wire) == 1))
        refused = asyncio.ensure_future(c.acquire("j", owner="b", lease_ms=1000, wait_ms=400_000))
        await asyncio.sleep(0.3)
        self.assertFalse(first.done())
        self.assertEqual(await asyncio.to_thread(d.call, f"R {holder[1]} k"), f"R {holder[1]} k")
        lock = await asyncio.wait_for(first, 5)
        with self.assertRaises(Rejected) as cm:
            await asyncio.wait_for(refused, 5)
        self.assertEqual(cm.exception.code, "bad_wait")
        self.assertEqual(await asyncio.to_thread(d.call, "A probe k 1000"), "T probe k")
        await lock.release()

    async def _cancelled_waiter_leaves_no_lock(self, how):
        d = self.lockd()
        holder = d.call("A holder k 30000").split()
        c = await self.client(d.address)
        acquire = c.acquire("k", owner="a", lease_ms=30_000, wait_ms=10_000)
        if how == "wait_for":
            with self.assertRaises(asyncio.TimeoutError):
                await asyncio.wait_for(acquire, 0.3)
        elif how == "timeout":
            with self.assertRaises(TimeoutError):
                async with asyncio.timeout(0.3):
                    await acquire
        elif how == "cancel":
            task = asyncio.ensure_future(acquire)
            await asyncio.sleep(0.3)
            task.cancel()
            with self.assertRaises(asyncio.CancelledError):
                await task
        elif how == "gather":
            other = asyncio.ensure_future(asyncio.sleep(0.3))
            g = asyncio.gather(acquire, other)
            await other
            g.cancel()
            with self.assertRaises(asyncio.CancelledError):
                await g
        # The server grants to the abandoned waiter; the client (its reader
        # task alone: nothing else is called) releases it at once.
        self.assertEqual(await asyncio.to_thread(d.call, f"R {holder[1]} k"), f"R {holder[1]} k")
        self.assertTrue(await self.free(d, "k"))

    async def test_c05_cancelled_by_wait_for(self):
        await self._cancelled_waiter_leaves_no_lock("wait_for")

    async def test_c05_cancelled_by_asyncio_timeout(self):
        await self._cancelled_waiter_leaves_no_lock("timeout")

    async def test_c05_cancelled_by_task_cancel(self):
        await self._cancelled_waiter_leaves_no_lock("cancel")

    async def test_c05_cancelled_by_gather(self):
        await self._cancelled_waiter_leaves_no_lock("gather")

    async def test_c05_cancelled_before_send_and_as_the_grant_arrives(self):
        n = self.node(lambda l: [] if l[0] == "A" else [f"R {echo(l.split())}"])
        c = await self.client(n.address)
        task = asyncio.ensure_future(c.acquire("k", owner="a", lease_ms=1000))
        task.cancel()                                 # before anything was sent
        with self.assertRaises(asyncio.CancelledError):
            await task
        for token in range(10, 20):                   # the grant lands as the caller is cancelled
            task = asyncio.ensure_future(c.acquire("k", owner="a", lease_ms=1000))
            self.assertTrue(await self.until(lambda: any(l.startswith("A a k") for l in n.received)))
            n.received.clear()
            n.push(f"A {token} a k")
            conn = c._conn
            await self.until(lambda: not conn._futures, 5)   # the reply is read: cancel before the caller runs
            task.cancel()
            try:
                lock = await task
            except asyncio.CancelledError:
                self.assertTrue(await self.until(lambda: f"R {token} k" in n.received), token)
            else:
                await lock.release()                  # the caller got it (the cancellation came too late)
        self.assertIsNone(c._conn.broken)

    async def test_c06_release_from_the_lost_callback(self):
        n = self.node(lambda l: {"A": ["A 5 o k"], "K": ["N 5 k"], "R": ["N 5 k"]}[l[0]])
        c = await self.client(n.address)
        done = asyncio.Event()

        async def on_lost(lock):
            try:
                await lock.release()
            except NotHeld:
                pass
            done.set()
        lock = await c.lock("k", owner="o", lease_ms=300, on_lost=on_lost)
        await asyncio.wait_for(done.wait(), 5)
        await asyncio.wait_for(asyncio.wait([lock._keeper]), 5)
        self.assertTrue(lock.released)

    async def test_c07_node_switch_keeps_the_old_connection_for_other_callers(self):
        leader = self.node(lambda l: [f"A 9 {echo(l.split())}"] if l[0] == "A" else [])
        slow = self.node(lambda l: [f"M {leader.address} {echo(l.split())}"] if l.startswith("A b ") else [])
        c = await self.client(slow.address)
        first = asyncio.ensure_future(c.acquire("k", owner="a", lease_ms=1000, wait_ms=5000))
        self.assertTrue(await self.until(lambda: len(slow.received) == 1))
        self.assertEqual((await c.acquire("j", owner="b", lease_ms=1000)).token, 9)
        slow.push("A 4 a k")
        self.assertEqual((await asyncio.wait_for(first, 5)).token, 4)

    async def test_c08_close_stops_keepers_for_good(self):
        d = self.lockd()
        c = AsyncClient(d.address, reply_timeout_s=5)
        lock = await c.lock("k", lease_ms=600)
        await c.close()
        self.assertTrue(lock._keeper.done())
        self.assertIsInstance(lock.lost_reason, LockLost)
        self.assertTrue(await self.free(d, "k"))           # never extended again
        await asyncio.sleep(0.5)
        self.assertIsNone(c._conn)                         # and never reconnected

    async def test_c09_released_only_after_the_server_confirms(self):
        answers = ["E indeterminate 5 k", "R 5 k"]
        n = self.node(lambda l: ["A 5 o k"] if l[0] == "A" else [answers.pop(0)])
        c = await self.client(n.address)
        lock = await c.acquire("k", owner="o", lease_ms=1000)
        with self.assertRaises(Indeterminate):
            await lock.release()
        self.assertFalse(lock.released)
        await lock.release()
        self.assertTrue(lock.released)
        self.assertEqual([l for l in n.received if l[0] == "R"], ["R 5 k", "R 5 k"])

    async def test_c09_release_does_not_swallow_the_callers_cancellation(self):
        n = self.node(lambda l: ["A 5 o k"] if l[0] == "A" else (["K 5 k"] if l[0] == "K" else []))
        c = await self.client(n.address)
        lock = await c.lock("k", owner="o", lease_ms=30_000)
        task = asyncio.ensure_future(lock.release())       # R never answered
        self.assertTrue(await self.until(lambda: "R 5 k" in n.received))
        task.cancel()
        with self.assertRaises(asyncio.CancelledError):
            await task
        self.assertFalse(lock.released)

    async def test_c10_second_acquire_of_one_owner_and_key_keeps_its_wait(self):
        d = self.lockd()
        d.call("A holder k 30000")
        c = await self.client(d.address)

        async def acquire(delay):
            await asyncio.sleep(delay)     # the second is queued behind the first for 0.7 s of its 1 s
            start = time.monotonic()
            with self.assertRaises(LockTimeout):
                await c.acquire("k", owner="o", lease_ms=1000, wait_ms=1000)
            return time.monotonic() - start
        ends = await asyncio.gather(acquire(0), acquire(0.3))
        self.assertLess(max(ends), 1.6)

    async def test_c11_pushes_between_pipelined_replies(self):
        n = self.node(lambda l: ["V k 3 held o 5", "X 99 zz", "A 5 o k", "V k 4 free"] if l[0] == "A"
                      else ["V k 5 held p 6", f"R {echo(l.split())}"])
        c = await self.client(n.address)
        lock = await c.acquire("k", owner="o", lease_ms=1000)
        self.assertEqual(lock.token, 5)
        await lock.release()
        self.assertTrue(lock.released)
        self.assertIsNone(c._conn.broken)

    async def test_c12_watch_in_rev_order_and_after_a_reconnect(self):
        watches = []

        def handler(line):
            if line[0] != "W":
                return []
            watches.append(line)
            return ["W k 5 free"] if len(watches) == 1 else ["W k 7 held a 9", "V k 6 free", "V k 8 free"]
        n = self.node(handler)
        c = await self.client(n.address)
        seen = []
        async with c.watch("k") as w:
            async for s in w:
                seen.append((s.rev, s.state))
                if s.rev == 5:
                    n.push("V k 7 held a 9")
                elif s.rev == 7:
                    n.drop()
                else:
                    break
        self.assertEqual(seen, [(5, "free"), (7, "held"), (8, "free")])
        self.assertEqual(watches, ["W k", "W k"])

    async def test_c13_keeper_stops_at_x(self):
        n = self.node(lambda l: ["A 5 o k"] if l[0] == "A" else ["K 5 k"])
        c = await self.client(n.address)
        lock = await c.lock("k", owner="o", lease_ms=30_000)
        start = time.monotonic()
        n.push("X 5 k")
        await asyncio.wait_for(lock.lost.wait(), 5)
        self.assertLess(time.monotonic() - start, 1.0)
        self.assertIn("X", str(lock.lost_reason))
        self.assertFalse([l for l in n.received if l[0] == "K"])

    async def test_c14_campaign_on_a_real_lockd(self):
        d = self.lockd()
        c = await self.client(d.address)
        a = await c.campaign("election/x", "node-a", lease_ms=1000)
        b = asyncio.ensure_future(c.campaign("election/x", "node-b", lease_ms=1000, round_wait_ms=300))
        await asyncio.sleep(0.8)
        self.assertFalse(b.done())
        self.assertFalse(a.lost.is_set())
        await a.resign()
        lead = await asyncio.wait_for(b, 5)
        self.assertEqual(lead.value, "node-b")
        await lead.resign()

    async def test_c14_leader_observe_and_loss(self):
        def handler(line):
            f = line.split()
            if f[0] == "W":
                return [f"W {f[1]} 1 held a 10"]
            if f[0] == "U":
                return [f"U {f[1]}"]
            if f[0] == "A":
                return [f"A 12 {echo(f)}"]
            return [f"K {echo(f)}"]
        n = self.node(handler)
        c = await self.client(n.address)
        leader = await c.leader("e")
        self.assertEqual((leader.value, leader.token), ("a", 10))
        async with c.observe("e") as o:
            self.assertEqual((await o.get(5)).value, "a")
            n.push("V e 2 held a 10")
            n.push("V e 3 free")
            self.assertIsNone(await o.get(5))
            n.push("V e 4 held b 12")
            self.assertEqual((await o.get(5)).token, 12)
        lost = asyncio.Event()
        me = await c.campaign("e", "b", lease_ms=30_000, on_lost=lambda lock: lost.set())
        n.push("X 12 e")
        await asyncio.wait_for(lost.wait(), 5)
        self.assertTrue(me.lost.is_set())


if __name__ == "__main__":
    unittest.main()
