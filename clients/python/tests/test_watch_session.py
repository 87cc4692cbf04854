"""All watches of one client share one connection of their own (the watch
session), for the threaded (``SessionSync``) and the asyncio client
(``SessionAsync``), against real lockd processes whose admin API counts
connections and watches, and FakeNode where the exact wire order matters:

- one connection and one server-side watch per key, whatever the number
  of watches; a push reaches every watch of its key and no other;
- ``U`` only when a key's last watch closes, never overtaking a later ``W``
  of the key (close-then-rewatch keeps the key watched);
- a watch limit (``B``) is the connection's, raised by that key's watches;
- after the node dies, one reconnect for all watches (one ``W`` per key);
- ``E no_leader`` moves the session to another node;
- with TLS and a credential: ``E forbidden`` is that key's watches' only,
  an identity refused is ``Unauthenticated``, a restart handshakes again;
- closing the client ends every watch."""

import asyncio
import os
import threading
import time
import unittest

from tests.support import FakeNode, Lockd, eventually, free_port, pki_dir, secure_lockd_flags
from lockd_client import AsyncClient, Client, Forbidden, LockBusy, LockdError, Unauthenticated

CREDENTIAL = "0123456789abcdef" * 4

KEYS = [f"k{i}" for i in range(10)]


def take(d: Lockd, key: str, owner: str) -> int:
    """Acquires ``key`` for ``owner`` over a raw connection of its own; the token."""
    f = d.call(f"A {owner} {key} 60000").split()
    assert f[0] == "A", f
    return int(f[1])


def watch_handler(line: str):
    """A member that serves watches: each ``W`` answers ``free`` at a new rev."""
    f = line.split()
    watch_handler.rev += 1
    if f[0] == "W":
        return [f"W {f[1]} {watch_handler.rev} free"]
    if f[0] == "U":
        return [f"U {f[1]}"]
    return []


watch_handler.rev = 100


class SessionSync(unittest.TestCase):
    def lockd(self, *flags, port=0):
        d = Lockd(port, *flags, admin=True)
        self.addCleanup(d.stop)
        return d

    def client(self, *addresses, **kw):
        kw.setdefault("reply_timeout_s", 5)
        c = Client(list(addresses), **kw)
        self.addCleanup(c.close)
        return c

    def node(self, handler):
        n = FakeNode(handler)
        self.addCleanup(n.close)
        return n

    def until_held(self, w, owner, timeout_s=10.0):
        """The watch's states until one held by ``owner`` (a re-watch may answer ``free`` first)."""
        end = time.monotonic() + timeout_s
        while True:
            s = w.get(max(0.0, end - time.monotonic()))
            if s.state == "held" and s.owner == owner:
                return s

    def test_200_watches_over_10_keys_share_one_connection(self):
        d = self.lockd()
        c = self.client(d.address)
        watches = [c.watch(KEYS[i % 10]) for i in range(200)]
        for w in watches:
            self.assertEqual(w.get(5).state, "free")
        st = d.status()
        self.assertEqual((st["connections"], st["watchers"], st["watches"]), (1, 1, 10))
        self.assertEqual(st["replies"]["W"], 200)  # every watch its own W: its first state
        self.assertEqual(d.metric("lockd_connections_accepted_total"), 1)
        token = take(d, "k3", "alice")
        for w in watches:
            if w.key == "k3":
                s = w.get(5)
                self.assertEqual((s.key, s.state, s.owner, s.token), ("k3", "held", "alice", token))
        others = {k: take(d, k, "bob") for k in KEYS if k != "k3"}
        for w in watches:
            if w.key != "k3":  # alice's k3 push reached none of these: bob's state comes first
                s = w.get(5)
                self.assertEqual((s.key, s.owner, s.token), (w.key, "bob", others[w.key]))
        d.call(f"R {token} k3")
        for w in watches:
            if w.key == "k3":  # and none of bob's reached k3's watches
                self.assertEqual(w.get(5).state, "free")

    def test_closing_one_of_two_watches_keeps_the_key_and_the_last_sends_u(self):
        d = self.lockd()
        c = self.client(d.address)
        a1, a2, b = c.watch("a"), c.watch("a"), c.watch("b")
        for w in (a1, a2, b):
            w.get(5)
        st = d.status()
        self.assertEqual((st["watchers"], st["watches"]), (1, 2))
        a1.close()
        self.assertEqual(list(a1), [])  # a closed watch yields nothing more
        token = take(d, "a", "alice")
        self.assertEqual((a2.get(5).owner, a1._queue.qsize()), ("alice", 1))  # a1: only its wake-up
        st = d.status()
        self.assertEqual((st["watches"], st["replies"]["U"]), (2, 0))  # a is still watched, no U went out
        a2.close()
        self.assertTrue(eventually(lambda: d.status()["replies"]["U"] == 1))
        st = d.status()
        self.assertEqual((st["watchers"], st["watches"]), (1, 1))
        d.call(f"R {token} a")
        take(d, "b", "carol")
        self.assertEqual(b.get(5).owner, "carol")

    def test_close_then_rewatch_in_quick_succession_keeps_the_key_watched(self):
        d = self.lockd()
        c = self.client(d.address)
        last = {}
        errors = []

        def churn(i):
            try:
                w = c.watch("k")
                w.get(5)
                for _ in range(40):
                    w.close()
                    w = c.watch("k")
                    w.get(5)
                last[i] = w
            except Exception as e:  # noqa: BLE001
                errors.append(e)
        threads = [threading.Thread(target=churn, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        self.assertEqual(errors, [])
        self.assertEqual(d.metric("lockd_connections_accepted_total"), 1)
        st = d.status()
        self.assertEqual((st["watchers"], st["watches"]), (1, 1))
        token = take(d, "k", "alice")
        for w in last.values():
            self.assertEqual(self.until_held(w, "alice", 5).token, token)

    def test_a_watch_limit_is_the_connections(self):
        d = self.lockd("--max-watches-per-connection", "2")
        c = self.client(d.address)
        a, b, x = c.watch("a"), c.watch("b"), c.watch("x")
        a.get(5)
        b.get(5)
        with self.assertRaises(LockBusy):
            x.get(5)
        a2 = c.watch("a")  # a key already watched takes no more room
        self.assertEqual(a2.get(5).state, "free")
        a.close()
        a2.close()  # U a: room for x
        self.assertEqual(x.get(5).state, "free")
        take(d, "x", "alice")
        self.assertEqual(x.get(5).owner, "alice")

    def test_the_node_dies_and_every_watch_goes_on_over_one_new_connection(self):
        d1 = self.lockd()
        port2 = free_port()
        c = self.client(d1.address, f"127.0.0.1:{port2}")
        keys = [f"f{i}" for i in range(5)]
        watches = [c.watch(keys[i % 5]) for i in range(20)]
        for w in watches:
            w.get(5)
        d2 = self.lockd(port=port2)  # started later: its revs are above d1's
        d1.stop()
        tokens = {k: take(d2, k, "bob") for k in keys}
        for w in watches:
            self.assertEqual(self.until_held(w, "bob").token, tokens[w.key])
        st = d2.status()
        self.assertEqual((st["watchers"], st["watches"]), (1, 5))
        self.assertEqual(st["replies"]["W"], 5)  # watched again once per key, not once per watch

    def test_client_close_ends_every_watch(self):
        d = self.lockd()
        c = self.client(d.address)
        watches = [c.watch(f"c{i % 3}") for i in range(6)]
        seen = []
        ended = []

        def iterate(w):
            for s in w:
                seen.append(s)
            ended.append(w)
        threads = [threading.Thread(target=iterate, args=(w,), daemon=True) for w in watches]
        for t in threads:
            t.start()
        self.assertTrue(eventually(lambda: len(seen) == 6))
        c.close()
        for t in threads:
            t.join(5)
        self.assertEqual(len(ended), 6)
        with self.assertRaises(LockdError):
            watches[0].get(1)
        self.assertTrue(eventually(lambda: d.status()["watchers"] == 0))

    def test_wire_order_and_one_reconnect_for_all(self):
        n = self.node(watch_handler)
        c = self.client(n.address)
        a1, a2, b = c.watch("a"), c.watch("a"), c.watch("b")
        for w in (a1, a2, b):
            w.get(5)
        a1.close()          # not the last of a: nothing sent
        a2.close()          # the last: U a
        a3 = c.watch("a")   # W a again, after the U
        first = a3.get(5)
        self.assertTrue(eventually(lambda: len(n.received) == 5))
        self.assertEqual(n.received, ["W a", "W a", "W b", "U a", "W a"])
        n.push(f"V a {first.rev + 1} held o 7")
        self.assertEqual(a3.get(5).token, 7)
        n.drop()            # the member goes away: one new connection, one W per key
        for w in (a3, b):
            self.assertGreater(w.get(5).rev, first.rev)
        self.assertEqual(sorted(n.received[5:]), ["W a", "W b"])
        self.assertEqual(n.accepted, 2)

    def test_no_leader_moves_the_session_to_another_node(self):
        empty = self.node(lambda l: [f"E no_leader {l.split()[1]}"] if l[0] == "W" else [])
        n = self.node(watch_handler)
        c = self.client(empty.address, n.address)
        w1, w2 = c.watch("a"), c.watch("b")
        self.assertEqual(w1.get(5).state, "free")
        self.assertEqual(w2.get(5).state, "free")
        self.assertEqual((empty.accepted, n.accepted), (1, 1))
        self.assertEqual(n.received, ["W a", "W b"])


class SessionAsync(unittest.IsolatedAsyncioTestCase):
    def lockd(self, *flags, port=0):
        d = Lockd(port, *flags, admin=True)
        self.addCleanup(d.stop)
        return d

    async def client(self, *addresses, **kw):
        kw.setdefault("reply_timeout_s", 5)
        c = AsyncClient(list(addresses), **kw)
        self.addAsyncCleanup(c.close)
        return c

    def node(self, handler):
        n = FakeNode(handler)
        self.addCleanup(n.close)
        return n

    async def until(self, cond, timeout_s=10.0):
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if await asyncio.to_thread(cond):
                return True
            await asyncio.sleep(0.01)
        return await asyncio.to_thread(cond)

    async def until_held(self, w, owner, timeout_s=10.0):
        end = time.monotonic() + timeout_s
        while True:
            s = await w.get(max(0.0, end - time.monotonic()))
            if s.state == "held" and s.owner == owner:
                return s

    async def test_200_watches_over_10_keys_share_one_connection(self):
        d = self.lockd()
        c = await self.client(d.address)
        watches = [c.watch(KEYS[i % 10]) for i in range(200)]
        firsts = await asyncio.gather(*(w.get(5) for w in watches))
        self.assertEqual({s.state for s in firsts}, {"free"})
        st = await asyncio.to_thread(d.status)
        self.assertEqual((st["connections"], st["watchers"], st["watches"]), (1, 1, 10))
        self.assertEqual(st["replies"]["W"], 200)
        self.assertEqual(await asyncio.to_thread(d.metric, "lockd_connections_accepted_total"), 1)
        token = await asyncio.to_thread(take, d, "k3", "alice")
        k3 = [w for w in watches if w.key == "k3"]
        for s in await asyncio.gather(*(w.get(5) for w in k3)):
            self.assertEqual((s.key, s.owner, s.token), ("k3", "alice", token))
        others = {k: await asyncio.to_thread(take, d, k, "bob") for k in KEYS if k != "k3"}
        rest = [w for w in watches if w.key != "k3"]
        for w, s in zip(rest, await asyncio.gather(*(w.get(5) for w in rest))):
            self.assertEqual((s.key, s.owner, s.token), (w.key, "bob", others[w.key]))
        await asyncio.to_thread(d.call, f"R {token} k3")
        for s in await asyncio.gather(*(w.get(5) for w in k3)):
            self.assertEqual(s.state, "free")

    async def test_closing_one_of_two_watches_keeps_the_key_and_the_last_sends_u(self):
        d = self.lockd()
        c = await self.client(d.address)
        a1, a2, b = c.watch("a"), c.watch("a"), c.watch("b")
        for w in (a1, a2, b):
            await w.get(5)
        st = await asyncio.to_thread(d.status)
        self.assertEqual((st["watchers"], st["watches"]), (1, 2))
        await a1.aclose()
        self.assertEqual([s async for s in a1], [])
        token = await asyncio.to_thread(take, d, "a", "alice")
        self.assertEqual((await a2.get(5)).owner, "alice")
        self.assertEqual(a1._queue.qsize(), 1)  # only its wake-up
        st = await asyncio.to_thread(d.status)
        self.assertEqual((st["watches"], st["replies"]["U"]), (2, 0))
        await a2.aclose()
        self.assertTrue(await self.until(lambda: d.status()["replies"]["U"] == 1))
        st = await asyncio.to_thread(d.status)
        self.assertEqual((st["watchers"], st["watches"]), (1, 1))
        await asyncio.to_thread(d.call, f"R {token} a")
        await asyncio.to_thread(take, d, "b", "carol")
        self.assertEqual((await b.get(5)).owner, "carol")

    async def test_close_then_rewatch_in_quick_succession_keeps_the_key_watched(self):
        d = self.lockd()
        c = await self.client(d.address)

        async def churn():
            w = c.watch("k")
            await w.get(5)
            for _ in range(40):
                await w.aclose()
                w = c.watch("k")
                await w.get(5)
            return w
        last = await asyncio.gather(*(churn() for _ in range(4)))
        self.assertEqual(await asyncio.to_thread(d.metric, "lockd_connections_accepted_total"), 1)
        st = await asyncio.to_thread(d.status)
        self.assertEqual((st["watchers"], st["watches"]), (1, 1))
        token = await asyncio.to_thread(take, d, "k", "alice")
        for w in last:
            self.assertEqual((await self.until_held(w, "alice", 5)).token, token)

    async def test_a_watch_limit_is_the_connections(self):
        d = self.lockd("--max-watches-per-connection", "2")
        c = await self.client(d.address)
        a, b, x = c.watch("a"), c.watch("b"), c.watch("x")
        await a.get(5)
        await b.get(5)
        with self.assertRaises(LockBusy):
            await x.get(5)
        a2 = c.watch("a")
        self.assertEqual((await a2.get(5)).state, "free")
        await a.aclose()
        await a2.aclose()
        self.assertEqual((await x.get(5)).state, "free")
        await asyncio.to_thread(take, d, "x", "alice")
        self.assertEqual((await x.get(5)).owner, "alice")

    async def test_the_node_dies_and_every_watch_goes_on_over_one_new_connection(self):
        d1 = self.lockd()
        port2 = free_port()
        c = await self.client(d1.address, f"127.0.0.1:{port2}")
        keys = [f"f{i}" for i in range(5)]
        watches = [c.watch(keys[i % 5]) for i in range(20)]
        await asyncio.gather(*(w.get(5) for w in watches))
        d2 = await asyncio.to_thread(self.lockd, port=port2)
        await asyncio.to_thread(d1.stop)
        tokens = {k: await asyncio.to_thread(take, d2, k, "bob") for k in keys}
        for w, s in zip(watches, await asyncio.gather(*(self.until_held(w, "bob") for w in watches))):
            self.assertEqual(s.token, tokens[w.key])
        st = await asyncio.to_thread(d2.status)
        self.assertEqual((st["watchers"], st["watches"]), (1, 5))
        self.assertEqual(st["replies"]["W"], 5)

    async def test_client_close_ends_every_watch(self):
        d = self.lockd()
        c = await self.client(d.address)
        watches = [c.watch(f"c{i % 3}") for i in range(6)]
        seen = []

        async def iterate(w):
            async for s in w:
                seen.append(s)
            return w
        tasks = [asyncio.ensure_future(iterate(w)) for w in watches]
        end = time.monotonic() + 10
        while len(seen) < 6 and time.monotonic() < end:
            await asyncio.sleep(0.01)
        self.assertEqual(len(seen), 6)
        await c.close()
        done, _ = await asyncio.wait(tasks, timeout=5)
        self.assertEqual(len(done), 6)
        with self.assertRaises(LockdError):
            await watches[0].get(1)
        self.assertTrue(await self.until(lambda: d.status()["watchers"] == 0))

    async def test_wire_order_and_one_reconnect_for_all(self):
        n = self.node(watch_handler)
        c = await self.client(n.address)
        a1, a2, b = c.watch("a"), c.watch("a"), c.watch("b")
        for w in (a1, a2, b):
            await w.get(5)
        await a1.aclose()
        await a2.aclose()
        a3 = c.watch("a")
        first = await a3.get(5)
        self.assertTrue(await self.until(lambda: len(n.received) == 5))
        self.assertEqual(n.received, ["W a", "W a", "W b", "U a", "W a"])
        n.push(f"V a {first.rev + 1} held o 7")
        self.assertEqual((await a3.get(5)).token, 7)
        n.drop()
        for w in (a3, b):
            self.assertGreater((await w.get(5)).rev, first.rev)
        self.assertEqual(sorted(n.received[5:]), ["W a", "W b"])
        self.assertEqual(n.accepted, 2)

    async def test_no_leader_moves_the_session_to_another_node(self):
        empty = self.node(lambda l: [f"E no_leader {l.split()[1]}"] if l[0] == "W" else [])
        n = self.node(watch_handler)
        c = await self.client(empty.address, n.address)
        w1, w2 = c.watch("a"), c.watch("b")
        self.assertEqual((await w1.get(5)).state, "free")
        self.assertEqual((await w2.get(5)).state, "free")
        self.assertEqual((empty.accepted, n.accepted), (1, 1))
        self.assertEqual(n.received, ["W a", "W b"])


class SessionSecure(unittest.TestCase):
    """The session connection shows the client's TLS and credential; a
    refusal of one key leaves the others watched."""

    @classmethod
    def setUpClass(cls):
        cls.flags = secure_lockd_flags({"billing": CREDENTIAL}, {"billing": "billing/"},
                                       verbs=("A", "S", "R", "K", "W"))

    def setUp(self):
        self.lockd = Lockd(0, *self.flags)
        self.addCleanup(lambda: self.lockd.stop())

    def client(self, **kw):
        c = Client(self.lockd.address, reply_timeout_s=5, **kw)
        self.addCleanup(c.close)
        return c

    def test_tls_credential_refusals_and_a_restart(self):
        ca = os.path.join(pki_dir(), "ca.pem")
        c = self.client(credential=CREDENTIAL, tls_ca=ca)
        w = c.watch("billing/a")
        self.assertEqual(w.get(5).state, "free")
        with self.assertRaises(Forbidden):      # the ACL grants W on billing/ only
            c.watch("ops/a").get(5)
        c.acquire("billing/a", owner="alice", lease_ms=10_000)
        self.assertEqual(w.get(5).owner, "alice")
        port = self.lockd.port
        self.lockd.stop()
        self.lockd = Lockd(port, *self.flags)   # the same port: TLS and H again, then W
        c.acquire("billing/a", owner="bob", lease_ms=10_000)
        end = time.monotonic() + 10
        while w.get(max(0.0, end - time.monotonic())).owner != "bob":
            pass
        for kw in ({"tls_ca": ca}, {"tls_ca": ca, "credential": "f" * 64}):  # no identity / refused
            with self.assertRaises(Unauthenticated, msg=str(kw)):
                self.client(**kw).watch("billing/a").get(5)


class SessionSecureAsync(unittest.IsolatedAsyncioTestCase):
    def setUp(self):
        self.flags = secure_lockd_flags({"billing": CREDENTIAL}, {"billing": "billing/"},
                                        verbs=("A", "S", "R", "K", "W"))
        self.lockd = Lockd(0, *self.flags)
        self.addCleanup(lambda: self.lockd.stop())

    async def test_tls_credential_refusals_and_a_restart(self):
        ca = os.path.join(pki_dir(), "ca.pem")
        async with AsyncClient(self.lockd.address, credential=CREDENTIAL, tls_ca=ca, reply_timeout_s=5) as c:
            w = c.watch("billing/a")
            self.assertEqual((await w.get(5)).state, "free")
            with self.assertRaises(Forbidden):
                await c.watch("ops/a").get(5)
            await c.acquire("billing/a", owner="alice", lease_ms=10_000)
            self.assertEqual((await w.get(5)).owner, "alice")
            port = self.lockd.port
            await asyncio.to_thread(self.lockd.stop)
            self.lockd = await asyncio.to_thread(Lockd, port, *self.flags)
            await c.acquire("billing/a", owner="bob", lease_ms=10_000)
            end = time.monotonic() + 10
            while (await w.get(max(0.0, end - time.monotonic()))).owner != "bob":
                pass
        for kw in ({"tls_ca": ca}, {"tls_ca": ca, "credential": "f" * 64}):
            async with AsyncClient(self.lockd.address, reply_timeout_s=5, **kw) as c:
                with self.assertRaises(Unauthenticated, msg=str(kw)):
                    await c.watch("billing/a").get(5)


if __name__ == "__main__":
    unittest.main()
