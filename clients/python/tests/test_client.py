"""The threaded client against a real lockd, against FakeNode for the
cluster answers a single lockd cannot give, and against a real cluster of
three lockd nodes (redirects, a killed leader, a paused node)."""

import os
import random
import shutil
import tempfile
import threading
import time
import unittest

from tests.support import FakeNode, Lockd, LockdCluster, eventually, is_free
from lockd_client import (
    Client,
    Indeterminate,
    LockLost,
    LockTimeout,
    NoLeader,
    NotHeld,
    Rejected,
    Request,
    Unreachable,
)
from fenced_store import FencedStore, StaleTokenError


class WithLockd(unittest.TestCase):
    def setUp(self):
        self.lockd = Lockd()
        self.client = Client(self.lockd.address, reply_timeout_s=5)

    def tearDown(self):
        self.client.close()
        self.lockd.stop()


class AcquireReleaseKeepTest(WithLockd):
    def test_acquire_release_keep(self):
        lock = self.client.acquire("orders/42", owner="alice", lease_ms=10_000)
        self.assertGreater(lock.token, 0)
        with self.assertRaises(LockTimeout):
            self.client.acquire("orders/42", owner="bob", lease_ms=10_000)
        with self.assertRaises(TimeoutError):  # LockTimeout is a TimeoutError
            self.client.acquire("orders/42", owner="bob", lease_ms=10_000)
        lock.keep(20_000)
        with self.assertRaises(NotHeld):
            self.client.keep(lock.token + 1, "orders/42", 1_000)
        lock.release()
        lock.release()  # second time: nothing
        with self.assertRaises(NotHeld):
            self.client.release(lock.token, "orders/42")
        with self.assertRaises(NotHeld):
            lock.keep()
        again = self.client.acquire("orders/42", owner="bob", lease_ms=10_000)
        self.assertGreater(again.token, lock.token)

    def test_bad_arguments_are_value_errors_and_never_sent(self):
        with self.assertRaises(ValueError):
            self.client.acquire("has space")
        with self.assertRaises(ValueError):
            self.client.keep(1, "k", 0)
        with self.assertRaises(Rejected) as cm:  # above the server's max lease
            self.client.acquire("k", lease_ms=4_000_000_000)
        self.assertEqual(cm.exception.code, "bad_lease")
        self.client.acquire("k", lease_ms=1_000)
        with self.assertRaises(ValueError):
            Client("nonsense")

    def test_wait_then_granted_and_wait_runs_out(self):
        holder = self.client.acquire("k", owner="alice", lease_ms=10_000)
        start = time.monotonic()
        with self.assertRaises(LockTimeout):
            self.client.acquire("k", owner="bob", lease_ms=10_000, wait_ms=200)
        self.assertGreaterEqual(time.monotonic() - start, 0.19)
        result = {}
        t = threading.Thread(target=lambda: result.update(lock=self.client.acquire(
            "k", owner="bob", lease_ms=10_000, wait_ms=5_000)))
        t.start()
        self.assertTrue(eventually(lambda: self.lockd.call("A carol k 1000") == "T carol k"))
        holder.release()  # same connection, while bob's acquire waits on it
        t.join()
        self.assertGreater(result["lock"].token, holder.token)

    def test_pipelined_replies_out_of_order(self):
        holder = self.client.acquire("k", owner="alice", lease_ms=10_000)
        done = []
        waiter = threading.Thread(target=lambda: done.append(
            ("waiter", self.client.acquire("k", owner="bob", lease_ms=10_000, wait_ms=5_000).token)))
        waiter.start()
        # bob's acquire is on the wire, waiting for the key.
        self.assertTrue(eventually(lambda: self.client._conn is not None and len(self.client._conn._wire) == 1))
        # Sent after bob's acquire on the same connection, answered before it.
        other = self.client.acquire("other", owner="dave", lease_ms=10_000)
        done.append(("other", other.token))
        holder.release()
        waiter.join()
        self.assertEqual([d[0] for d in done], ["other", "waiter"])
        self.assertGreater(done[1][1], done[0][1])

    def test_same_owner_and_key_queue_locally(self):
        holder = self.client.acquire("k", owner="alice", lease_ms=300)
        tokens = []
        threads = [threading.Thread(target=lambda: tokens.append(self.client.acquire(
            "k", owner="bob", lease_ms=200, wait_ms=5_000).token)) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(len(tokens), 2)  # one after the other, not mixed up
        self.assertGreater(min(tokens), holder.token)

    def test_a_queued_duplicate_acquire_does_not_hold_other_requests_back(self):
        holder = self.client.acquire("k", owner="alice", lease_ms=30_000)
        got = []
        threads = [threading.Thread(target=lambda: got.append(self.client.acquire(
            "k", owner="bob", lease_ms=30_000, wait_ms=10_000))) for _ in range(2)]
        for t in threads:
            t.start()
        # One of bob's acquires waits at the server, the other in the client.
        self.assertTrue(eventually(lambda: len(self.client._conn._wire) == 1))
        time.sleep(0.05)  # let the second one reach its local wait (the check below holds either way)
        start = time.monotonic()
        holder.release()  # must not wait behind bob's queued duplicate
        self.assertLess(time.monotonic() - start, 2.0)
        self.assertTrue(eventually(lambda: len(got) == 1, 5))
        got[0].release()
        for t in threads:
            t.join(10)
        self.assertEqual(len(got), 2)
        got[1].release()

    def test_many_threads_share_one_connection(self):
        ok = []

        def work(t):
            for i in range(30):
                lock = self.client.acquire(f"k{t}-{i}", owner=f"o{t}", lease_ms=10_000)
                lock.release()
                ok.append(1)

        threads = [threading.Thread(target=work, args=(t,)) for t in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(len(ok), 180)


class WithBlockTest(WithLockd):
    def test_with_block_releases_on_exception(self):
        with self.assertRaises(RuntimeError):
            with self.client.lock("k", lease_ms=60_000) as lock:
                self.assertFalse(is_free(self.lockd, "k"))
                raise RuntimeError("work failed")
        self.assertTrue(lock.released)
        self.assertTrue(is_free(self.lockd, "k"))

    def test_with_block_releases_normally(self):
        with self.client.lock("k", lease_ms=60_000, keep=False) as lock:
            self.assertGreater(lock.token, 0)
        self.assertTrue(is_free(self.lockd, "k"))

    def test_with_block_that_outlived_its_lease_raises_lock_lost(self):
        with self.assertRaises(LockLost):
            with self.client.lock("k", lease_ms=100, keep=False):
                time.sleep(0.3)
                self.lockd.call("A thief k 10000")  # takes over the expired lease


class KeeperTest(WithLockd):
    def test_keeps_a_lock_through_three_leases(self):
        lost = []
        with self.client.lock("k", lease_ms=500, on_lost=lost.append) as lock:
            time.sleep(1.7)  # more than three leases
            self.assertFalse(lock.lost.is_set(), lock.lost_reason)
            self.assertGreaterEqual(lock.kept_count, 3)  # 10 if the machine is idle
            self.assertFalse(is_free(self.lockd, "k"))
        self.assertEqual(lost, [])
        self.assertTrue(is_free(self.lockd, "k"))

    def test_reports_loss_when_the_server_restarts(self):
        lost = []
        lock = self.client.lock("k", lease_ms=600, on_lost=lost.append)
        time.sleep(0.3)
        self.assertFalse(lock.lost.is_set())
        port = self.lockd.port
        self.lockd.stop()
        self.lockd = Lockd(port)
        self.assertTrue(lock.lost.wait(5))
        self.assertIsInstance(lock.lost_reason, NotHeld)
        time.sleep(0.3)
        self.assertEqual(lost, [lock])  # reported once
        with self.assertRaises(LockLost):
            lock.check()
        with self.assertRaises(NotHeld):
            lock.release()

    def test_reports_loss_when_the_server_stays_down(self):
        lock = self.client.lock("k", lease_ms=400)
        start = time.monotonic()
        with self.assertLogs("lockd_client", "WARNING") as logs:
            self.lockd.stop()
            self.assertTrue(lock.lost.wait(5))
        self.assertLess(time.monotonic() - start, 1.5)
        # The application's log says so, with the key, token and why.
        self.assertIn(f"WARNING:lockd_client:lost the lock on k (token {lock.token}, owner ", "\n".join(logs.output))
        self.lockd = Lockd()  # for tearDown


class FencingTest(WithLockd):
    def test_a_paused_holder_is_fenced_off(self):
        directory = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, directory)
        store = FencedStore(directory)
        first = self.client.acquire("report", owner="alice", lease_ms=200)  # no keeper: alice "pauses"
        store.write("report", first.token, b"alice v1")
        time.sleep(0.3)
        second = self.client.acquire("report", owner="bob", lease_ms=10_000)
        store.write("report", second.token, b"bob v1")
        with self.assertRaises(StaleTokenError):
            store.write("report", first.token, b"alice v2 (late)")
        self.assertEqual(store.read("report"), b"bob v1")


def echo(f):
    return f"{f[1]} {f[2]}"


class ClusterTest(unittest.TestCase):
    def node(self, handler):
        n = FakeNode(handler)
        self.addCleanup(n.close)
        return n

    def client(self, *addresses, **kw):
        kw.setdefault("reply_timeout_s", 5)
        c = Client(list(addresses), **kw)
        self.addCleanup(c.close)
        return c

    def test_follows_a_redirect(self):
        leader = self.node(lambda l: [f"A 77 {echo(l.split())}"] if l[0] == "A" else [f"R {echo(l.split())}"])
        follower = self.node(lambda l: [f"M {leader.address} {echo(l.split())}"])
        c = self.client(follower.address)
        lock = c.acquire("k", owner="alice", lease_ms=1000)
        self.assertEqual(lock.token, 77)
        lock.release()
        self.assertEqual(follower.received, ["A alice k 1000"])
        self.assertEqual(leader.received, ["A alice k 1000", "R 77 k"])

    def test_redirect_loop_gives_up(self):
        holder = {}
        loop = self.node(lambda l: [f"M {holder['addr']} {echo(l.split())}"])
        holder["addr"] = loop.address
        with self.assertRaises(NoLeader):
            self.client(loop.address).acquire("k", lease_ms=1000)
        self.assertEqual(len(loop.received), 4)

    def test_no_leader_is_retried_with_backoff(self):
        calls = []

        def handler(line):
            calls.append(line)
            return [f"E no_leader {echo(line.split())}"] if len(calls) <= 3 else [f"A 5 {echo(line.split())}"]

        n = self.node(handler)
        start = time.monotonic()
        lock = self.client(n.address, backoff_initial_s=0.04).acquire("k", lease_ms=1000)
        self.assertEqual(lock.token, 5)
        self.assertEqual(len(calls), 4)
        self.assertGreaterEqual(time.monotonic() - start, 0.14)  # >= half of 40+80+160 ms

    def test_no_leader_until_the_budget_runs_out(self):
        n = self.node(lambda l: [f"E no_leader {echo(l.split())}"])
        start = time.monotonic()
        with self.assertRaises(NoLeader):
            self.client(n.address, no_leader_budget_s=0.4).acquire("k", lease_ms=1000)
        self.assertLess(time.monotonic() - start, 1.0)

    def test_no_leader_moves_to_another_node(self):
        lost = self.node(lambda l: [f"E no_leader {echo(l.split())}"])
        leader = self.node(lambda l: [f"A 9 {echo(l.split())}"])
        self.assertEqual(self.client(lost.address, leader.address).acquire("k", lease_ms=1000).token, 9)

    def test_unreachable(self):
        gone = FakeNode(lambda l: [])
        gone.close()
        leader = self.node(lambda l: [f"A 9 {echo(l.split())}"])
        self.assertEqual(self.client(gone.address, leader.address).acquire("k", lease_ms=1000).token, 9)
        with self.assertRaises(Unreachable):
            self.client(gone.address).acquire("k", lease_ms=1000)
        with self.assertRaises(ConnectionError):
            self.client(gone.address).acquire("k", lease_ms=1000)

    def test_indeterminate_is_raised_not_retried(self):
        n = self.node(lambda l: [f"E indeterminate {echo(l.split())}"])
        c = self.client(n.address)
        with self.assertRaises(Indeterminate):
            c.acquire("k", lease_ms=1000)
        with self.assertRaises(Indeterminate):
            c.release(5, "k")
        self.assertEqual(len(n.received), 2)

    def test_replies_reordered_by_the_server_still_match(self):
        held = []

        def handler(line):
            f = line.split()
            reply = f"A {100 + len(held)} {echo(f)}" if f[0] == "A" else f"K {echo(f)}"
            if len(held) < 2:
                held.append(reply)
                return []
            return [reply, held[1], held[0]]

        n = self.node(handler)
        c = self.client(n.address)
        results = {}
        threads = [threading.Thread(target=lambda: results.update(a=c.acquire("k1", owner="a", lease_ms=100).token)),
                   threading.Thread(target=lambda: results.update(b=c.acquire("k2", owner="b", lease_ms=100).token))]
        for t in threads:
            t.start()
        self.assertTrue(eventually(lambda: len(n.received) == 2))
        c.keep(5, "k3", 100)
        for t in threads:
            t.join()
        self.assertEqual(results, {"a": 100, "b": 101} if n.received[0].startswith("A a") else {"a": 101, "b": 100})

    def test_a_late_grant_nobody_waits_for_is_released(self):
        n = self.node(lambda l: [f"R {echo(l.split())}"] if l[0] == "R" else [])
        c = self.client(n.address, reply_timeout_s=0.2)
        with self.assertRaises(Indeterminate):
            c.acquire("k", owner="alice", lease_ms=1000)
        n.push("A 31 alice k")
        self.assertTrue(eventually(lambda: "R 31 k" in n.received, 5))

    def test_keeper_reports_loss_on_n(self):
        def handler(line):
            f = line.split()
            return [{"A": f"A 8 {echo(f)}", "K": f"N {echo(f)}", "R": f"R {echo(f)}"}[f[0]]]

        n = self.node(handler)
        # A long lease: the first K goes out at a third of it (2 s) and its
        # N is final; a keeper that retried it would report the loss only
        # near the lease's safe end (~6 s), when another may hold the key.
        start = time.monotonic()
        lock = self.client(n.address).lock("k", lease_ms=6000)
        self.assertTrue(lock.lost.wait(10))
        self.assertLess(time.monotonic() - start, 4.0, "loss reported long after the first N")
        self.assertIsInstance(lock.lost_reason, NotHeld)
        self.assertEqual(n.received[1], "K 8 k 6000")
        self.assertEqual(len(n.received), 2, "K retried after N")

    def test_keeper_gives_up_at_the_leases_end_not_at_the_retry_budget(self):
        n = self.node(lambda l: [f"A 8 {echo(l.split())}"] if l[0] == "A" else [f"E no_leader {echo(l.split())}"])
        start = time.monotonic()
        lock = self.client(n.address, no_leader_budget_s=30).lock("k", lease_ms=300)
        self.assertTrue(lock.lost.wait(5))
        self.assertLess(time.monotonic() - start, 1.0)
        lock._stop_keeper()


if __name__ == "__main__":
    unittest.main()


class RealClusterTest(unittest.TestCase):
    """The threaded client against three real ``lockd --mode cluster`` nodes."""

    def setUp(self):
        self.cluster = LockdCluster(3)
        self.addCleanup(self.cluster.close)
        self.leader = self.cluster.wait_leader()
        self.assertNotEqual(self.leader, 0)
        self.followers = [i for i in sorted(self.cluster.procs) if i != self.leader]
        for f in self.followers:
            self.assertTrue(eventually(lambda f=f: self.cluster.knows_leader(f, self.leader), 20.0))

    def client(self, *ids, **kw):
        kw.setdefault("rng", random.Random(1))
        c = Client([self.cluster.address(i) for i in ids], **kw)
        self.addCleanup(c.close)
        return c

    def test_follows_a_real_followers_redirect(self):
        # Both followers first: only following M reaches the leader at once.
        c = self.client(self.followers[0], self.followers[1], self.leader)
        lock = c.acquire("k1", owner="alice", lease_ms=30_000)
        self.assertEqual(self.cluster.call_leader("A bob k1"), "T bob k1")
        lock.release()
        self.assertEqual(self.cluster.call_leader(f"R {lock.token} k1"), f"N {lock.token} k1")
        # Given only a follower, the client reaches the leader by its M alone,
        # and logs the hop.
        with self.assertLogs("lockd_client", "INFO") as logs:
            via_m = self.client(self.followers[1]).acquire("k2", owner="carol", lease_ms=30_000)
        self.assertIn(f"INFO:lockd_client:{self.cluster.address(self.followers[1])} is not the leader: "
                      f"following M to {self.cluster.address(self.leader)}", logs.output)
        self.assertEqual(self.cluster.call_leader("A bob k2"), "T bob k2")
        via_m.release()
        self.assertEqual(self.cluster.call_leader(f"R {via_m.token} k2"), f"N {via_m.token} k2")

    def test_releases_at_the_new_leader_after_the_leader_is_killed(self):
        c = self.client(self.leader, *self.followers)
        lock = c.acquire("k1", owner="alice", lease_ms=60_000)
        other = c.acquire("k2", owner="alice", lease_ms=60_000)
        self.cluster.kill9(self.leader)
        # At once, same Client: the followers name the dead leader for a
        # moment, then none, then the new one, all within the budget. The
        # failover is in the log, naming the dead leader.
        with self.assertLogs("lockd_client", "INFO") as logs:
            lock.release()
        dead = self.cluster.address(self.leader)
        self.assertTrue(any(line.startswith("WARNING:lockd_client:") and dead in line for line in logs.output),
                        logs.output)
        self.assertNotIn(self.cluster.wait_leader(), (0, self.leader))
        self.assertEqual(self.cluster.call_leader("A bob k2"), "T bob k2")  # k2 survived
        taken = c.acquire("k1", owner="bob", lease_ms=60_000)
        self.assertGreater(taken.token, other.token)
        other.release()
        taken.release()

    def test_moves_on_from_a_paused_follower(self):
        paused = self.followers[0]
        self.cluster.pause(paused)  # accepts connections (the kernel does), never answers
        self.addCleanup(self.cluster.resume, paused)
        c = self.client(paused, self.leader, self.followers[1], reply_timeout_s=0.3)
        with self.assertRaises(Indeterminate):
            c.acquire("k1", owner="alice", lease_ms=30_000)
        # The next request goes to the next node, not to the silent one.
        lock = c.acquire("k1", owner="alice", lease_ms=30_000)
        lock.release()
