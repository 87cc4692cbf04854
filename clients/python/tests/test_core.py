"""The sans-I/O core both Python clients drive (lockd_client._core): the
call plan (redirects, no_leader backoff, unreachable nodes, outcomes), the
keeper's schedule and the connection's matching, with no socket and no
clock — time is passed in."""

import random
import re
import unittest

from lockd_client import (Forbidden, Indeterminate, LimitMismatch, LockBusy, NoLeader, NotHeld, ProtocolError, Rejected,
                          Request, Unauthenticated, Unreachable)
from lockd_client._core import (CallPlan, KeepPlan, KeyState, Leader, LeaderFilter, Nodes, WatchBook, WatchFilter, Wire,
                                 lease_start, requeued, w_overdue, watch_answer, watch_wait_s)
from lockd_client.protocol import parse_reply


class Options:
    max_redirects = 3
    no_leader_budget_s = 1.0
    reply_timeout_s = 5.0
    backoff_initial_s = 0.05
    backoff_max_s = 1.0
    _rng = random.Random(1)


def plan(nodes=None, request=None, deadline=None, now=0.0):
    nodes = nodes or Nodes([("a", 1), ("b", 2), ("c", 3)])
    return CallPlan(nodes, request or Request("S", "k", owner="o", limit=2, lease_ms=100), Options(), deadline, now)


class CallPlanTest(unittest.TestCase):
    def test_a_grant_is_the_answer(self):
        p = plan()
        self.assertIsNone(p.reply(parse_reply("S 5 o k"), 0.0))

    def test_redirects_go_to_the_named_leader_at_most_three_times(self):
        p = plan()
        for hop in range(3):
            self.assertEqual(p.reply(parse_reply("M c:3 o k"), 0.0), 0.0)
            self.assertEqual(p.target, 2)
        with self.assertRaises(NoLeader):
            p.reply(parse_reply("M c:3 o k"), 0.0)

    def test_a_new_leader_is_added_to_the_list(self):
        nodes = Nodes([("a", 1)])
        p = plan(nodes)
        p.reply(parse_reply("M d:4 o k"), 0.0)
        self.assertEqual(nodes.address(p.target), ("d", 4))

    def test_no_leader_backs_off_with_jitter_moves_on_and_ends_at_the_budget(self):
        p = plan()
        pauses = []
        now = 0.0
        with self.assertRaises(NoLeader):
            while True:
                pause = p.reply(parse_reply("E no_leader o k"), now)
                pauses.append((pause, p.target))
                now += pause
        self.assertGreaterEqual(len(pauses), 3)
        self.assertTrue(0.025 <= pauses[0][0] <= 0.05, pauses)   # [d/2, d]
        self.assertTrue(0.05 <= pauses[1][0] <= 0.1, pauses)
        self.assertEqual([t for _, t in pauses[:3]], [1, 2, 0])  # another node may know one
        self.assertLess(now, 1.0)  # within the budget

    def test_the_deadline_cuts_the_budget(self):
        p = plan(deadline=0.01)
        with self.assertRaises(NoLeader):
            p.reply(parse_reply("E no_leader o k"), 0.0)

    def test_unreachable_nodes_are_skipped_once_around(self):
        p = plan()
        self.assertEqual(p.unreachable(Unreachable("x"), 0.0), 0.0)
        self.assertEqual(p.unreachable(Unreachable("x"), 0.0), 0.0)
        with self.assertRaises(Unreachable):
            p.unreachable(Unreachable("x"), 0.0)

    def test_an_unreachable_leader_named_by_m_is_no_leader_not_a_hop(self):
        p = plan()
        p.reply(parse_reply("M c:3 o k"), 0.0)
        pause = p.unreachable(Unreachable("refused"), 0.0)
        self.assertGreater(pause, 0.0)
        self.assertEqual(p.redirects, 0)

    def test_outcomes_are_raised_not_retried(self):
        with self.assertRaises(Indeterminate):
            plan().reply(parse_reply("E indeterminate o k"), 0.0)
        with self.assertRaises(LimitMismatch) as e:
            plan().reply(parse_reply("E limit_mismatch o k"), 0.0)
        self.assertIsInstance(e.exception, Rejected)
        self.assertEqual(e.exception.code, "limit_mismatch")
        with self.assertRaises(Rejected):
            plan().reply(parse_reply("E bad_limit"), 0.0)

    def test_silence_moves_the_next_request_on(self):
        nodes = Nodes([("a", 1), ("b", 2)])
        p = plan(nodes)
        p.silent()
        self.assertEqual(nodes.current, 1)

    def test_redirects_retries_and_failovers_are_logged(self):
        with self.assertLogs("lockd_client", "INFO") as logs:
            p = plan()
            p.reply(parse_reply("M c:3 o k"), 0.0)             # a redirect: INFO
            p.unreachable(Unreachable("refused"), 0.0)         # its leader is down: WARNING
            p.reply(parse_reply("E no_leader o k"), 0.0)       # a retry: INFO
            p.unreachable(Unreachable("refused"), 0.0)         # a failover: WARNING
            p.silent()                                         # silence: WARNING
            with self.assertRaises(Indeterminate):
                p.reply(parse_reply("E indeterminate o k"), 0.0)
        pauses = [re.sub(r"in \d+\.\d\d s", "in P s", line) for line in logs.output]  # jittered
        self.assertEqual(pauses, [
            "INFO:lockd_client:a:1 is not the leader: following M to c:3",
            "WARNING:lockd_client:c:3: refused (the leader M named): a leader change? asking a:1 in P s",
            "INFO:lockd_client:a:1 knows no leader (an election?): asking b:2 in P s",
            "WARNING:lockd_client:b:2: refused: trying c:3",
            "WARNING:lockd_client:no reply from c:3 to S k (silent, or the connection was lost): indeterminate; "
            "the next request goes to another node",
            "INFO:lockd_client:c:3 lost leadership before S k committed: indeterminate",
        ])

    def test_invalid_requests_never_get_a_plan(self):
        with self.assertRaises(ValueError):
            plan(request=Request("S", "k", owner="o", limit=65536))


class KeepPlanTest(unittest.TestCase):
    def test_keeps_every_third_and_moves_the_safe_end(self):
        k = KeepPlan(300, start=10.0)
        self.assertAlmostEqual(k.wait_s(10.0), 0.1)
        self.assertIsNone(k.sending(10.1))
        k.kept()
        self.assertAlmostEqual(k.safe_end, 10.4)
        self.assertAlmostEqual(k.next_at, 10.2)

    def test_transient_failures_retry_until_the_safe_end(self):
        k = KeepPlan(300, start=0.0)
        k.sending(0.1)
        self.assertIsNone(k.failed(NoLeader("x"), 0.15))
        self.assertAlmostEqual(k.next_at, 0.25)
        self.assertIsNone(k.failed(Indeterminate("x"), 0.28))
        self.assertAlmostEqual(k.next_at, 0.3)  # not past the safe end
        self.assertIsInstance(k.sending(0.3), NotHeld)

    def test_n_is_final(self):
        k = KeepPlan(300, start=0.0)
        k.sending(0.1)
        self.assertIsInstance(k.failed(NotHeld("n"), 0.1), NotHeld)


class KeeperRulesTest(unittest.TestCase):
    """The keeper's rules with an injected clock (issue 36 item 1; C01, C02, C13)."""

    def test_c01_a_lease_granted_after_a_long_wait_is_dated_from_the_grant(self):
        # Sent at 0 with a 1 s lease and a 5 s wait; granted at 3.2 s.
        start = lease_start(sent_at=0.0, arrived_at=3.2, wait_ms=5000)
        self.assertEqual(start, 3.2)
        k = KeepPlan(1000, start)
        self.assertAlmostEqual(k.safe_end, 4.2)
        self.assertIsNone(k.sending(3.2 + 1 / 3))   # asks the server instead of giving up
        # Without a wait the grant came at once: the send is the safe start.
        self.assertEqual(lease_start(sent_at=1.0, arrived_at=1.3, wait_ms=0), 1.0)

    def test_c02_the_safe_end_is_dated_from_when_k_was_sent_not_when_its_reply_came(self):
        k = KeepPlan(3000, start=0.0)
        self.assertIsNone(k.sending(1.0))   # K sent at 1.0 ...
        k.kept()                            # ... confirmed (say at 2.5: a slow reply)
        self.assertAlmostEqual(k.safe_end, 4.0)   # 1.0 + 3, not 2.5 + 3
        self.assertAlmostEqual(k.next_at, 2.0)
        self.assertIsInstance(k.sending(4.0), NotHeld)

    def test_c13_x_is_a_loss_at_once(self):
        self.assertIsInstance(KeepPlan.expired_notice(), NotHeld)
        self.assertIn("X", str(KeepPlan.expired_notice()))

    def test_c10_a_queued_second_acquire_keeps_only_the_wait_it_has_left(self):
        r = Request("A", "k", owner="o", lease_ms=100, wait_ms=5000)
        self.assertEqual(requeued(r, queue_deadline=5.0, now=2.0).wait_ms, 3000)
        self.assertEqual(requeued(r, queue_deadline=5.0, now=6.0).wait_ms, 0)
        self.assertEqual(requeued(Request("A", "k", owner="o"), 5.0, 2.0).wait_ms, 0)


class WatchRulesTest(unittest.TestCase):
    """C12, C14: states in rev order; the same leader never twice."""

    def test_c12_states_whose_rev_is_not_newer_are_dropped(self):
        f = WatchFilter()
        s = lambda rev, state="free": KeyState("k", rev, state)  # noqa: E731
        self.assertTrue(f.admit(s(5)))
        self.assertTrue(f.admit(s(7, "held")))
        self.assertFalse(f.admit(s(7, "held")))   # a re-watch answering the state already seen
        self.assertFalse(f.admit(s(6)))           # a lagging member
        self.assertTrue(f.admit(s(8)))

    def test_c14_observe_yields_each_change_of_leader_once(self):
        f = LeaderFilter()
        held = lambda owner, token, rev: KeyState("k", rev, "held", owner, token)  # noqa: E731
        self.assertEqual(f.admit(KeyState("k", 1, "free")), (True, None))
        self.assertEqual(f.admit(held("a", 10, 2)), (True, Leader("a", 10, 2)))
        self.assertFalse(f.admit(held("a", 10, 3))[0])                 # same holder, seen again
        self.assertEqual(f.admit(held("a", 11, 4)), (True, Leader("a", 11, 4)))   # a new term
        self.assertEqual(f.admit(KeyState("k", 5, "free")), (True, None))
        self.assertFalse(f.admit(KeyState("k", 6, "shared", limit=0, count=2))[0])  # still nobody leads


class WatchBookTest(unittest.TestCase):
    """The watches a client's one watch connection carries: one W per new
    watch, U only when a key's last watch leaves, never before a later W."""

    def test_a_key_is_unwatched_only_when_its_last_watch_leaves(self):
        b, w1, w2, w3 = WatchBook(), object(), object(), object()
        b.add("k", w1)
        b.add("k", w2)
        b.add("j", w3)
        self.assertEqual((len(b), b.keys(), b.watching("k"), b.watching("x")), (3, ["k", "j"], [w1, w2], []))
        self.assertTrue(b.remove("k", w1))
        self.assertFalse(b.remove("k", w1))             # already gone
        self.assertFalse(b.remove("j", w1))             # not j's
        self.assertFalse(b.pending)                     # k still has w2: no U
        self.assertEqual(b.unwatch(), [])
        self.assertTrue(b.remove("k", w2))
        self.assertTrue(b.pending)
        self.assertEqual(b.unwatch(), ["k"])            # the last one: U k
        self.assertEqual((b.pending, b.unwatch(), b.watches()), (False, [], [w3]))
        self.assertTrue(b.remove("j", w3, watched=False))  # its W was refused (B): nothing to unwatch
        self.assertEqual((b.pending, len(b)), (False, 0))

    def test_a_u_never_overtakes_a_later_w_of_its_key(self):
        b, w1, w2 = WatchBook(), object(), object()
        b.add("k", w1)
        b.remove("k", w1)                               # U k due, not sent yet (the send lock was taken)
        b.add("k", w2)                                  # a new watch of k: its W goes out first
        self.assertEqual(b.unwatch(), [])               # so no U follows it: k stays watched
        self.assertFalse(b.pending)
        b.remove("k", w2)
        self.assertEqual(b.unwatch(), ["k"])

    def test_a_new_connection_watches_every_key_again_and_owes_no_u(self):
        b, w1, w2, w3 = WatchBook(), object(), object(), object()
        b.add("k", w1)
        b.add("k", w2)
        b.add("j", w3)
        b.remove("j", w3)
        self.assertEqual(b.rewatch(), ["k"])            # one W per key, not per watch
        self.assertEqual((b.pending, b.unwatch()), (False, []))
        self.assertEqual(sorted(map(id, b.clear())), sorted(map(id, [w1, w2])))
        self.assertEqual((len(b), b.keys(), b.pending), (0, [], False))

    def test_what_a_w_reply_means(self):
        state = watch_answer(parse_reply("W k 7 held o 9"))
        self.assertEqual((state.key, state.rev, state.state, state.owner, state.token), ("k", 7, "held", "o", 9))
        self.assertIsInstance(watch_answer(parse_reply("B k")), LockBusy)
        self.assertIsNone(watch_answer(parse_reply("E no_leader k")))   # another node
        self.assertIsInstance(watch_answer(parse_reply("E forbidden k")), Forbidden)
        self.assertIsInstance(watch_answer(parse_reply("E unauthenticated k")), Unauthenticated)
        other = watch_answer(parse_reply("E unknown_command"))
        self.assertEqual((type(other), other.code), (Rejected, "unknown_command"))
        self.assertIsInstance(watch_answer(parse_reply("U k")), ProtocolError)

    def test_a_get_waits_until_its_deadline_and_no_longer_than_its_w_is_due(self):
        self.assertIsNone(watch_wait_s(100.0, None, None, 5.0))          # no deadline, W answered: for ever
        self.assertEqual(watch_wait_s(100.0, 103.0, None, 5.0), 3.0)     # the deadline
        self.assertEqual(watch_wait_s(100.0, 99.0, None, 5.0), 0.0)      # passed: not negative
        self.assertEqual(watch_wait_s(100.0, None, 98.0, 5.0), 3.0)      # W sent at 98: due at 103
        self.assertEqual(watch_wait_s(100.0, 110.0, 98.0, 5.0), 3.0)     # the earlier of the two
        self.assertEqual(watch_wait_s(100.0, 101.0, 98.0, 5.0), 1.0)
        self.assertFalse(w_overdue(102.9, 98.0, 5.0))
        self.assertTrue(w_overdue(103.0, 98.0, 5.0))                     # silent: watch elsewhere
        self.assertFalse(w_overdue(1e9, None, 5.0))                      # nothing asked


class WireTest(unittest.TestCase):
    def test_c11_pushes_between_pipelined_replies_are_never_replies(self):
        w = Wire("n")
        r1, _ = w.add(Request("A", "k", owner="a", lease_ms=100))
        r2, _ = w.add(Request("R", "k", token=5))
        out, broken = w.receive(b"V k 3 held a 6\nX 5 k\nA 6 a k\nV k 4 free\nR 5 k\n")
        self.assertIsNone(broken)
        self.assertEqual([(d.rid, d.reply.kind) for d in out], [(0, "V"), (0, "X"), (r1, "A"), (0, "V"), (r2, "R")])
        self.assertEqual([d.push for d in out], [True, True, False, True, False])

    def test_c04_an_echo_less_error_is_delivered_once_attributable(self):
        w = Wire("n")
        r1, _ = w.add(Request("A", "k", owner="a", lease_ms=100, wait_ms=5000))
        r2, _ = w.add(Request("A", "k", owner="b", lease_ms=100, wait_ms=999_999_999))
        out, broken = w.receive(b"E bad_wait\n")
        self.assertEqual((out, broken), ([], None))   # neither caller is told yet
        out, broken = w.receive(b"T a k\n")
        self.assertIsNone(broken)
        self.assertEqual([(d.rid, d.reply.kind) for d in out], [(r1, "T"), (r2, "E")])

    def test_a_retired_connection_is_idle_once_no_caller_waits(self):
        w = Wire("n")
        r1, _ = w.add(Request("A", "k", owner="a", lease_ms=100, wait_ms=5000))
        w.retired = True
        self.assertFalse(w.idle())
        w.abandon(r1)
        self.assertTrue(w.idle())


    def test_matches_shared_and_exclusive_replies_by_echo(self):
        w = Wire("n")
        r1, line1 = w.add(Request("S", "k", owner="a", limit=0, lease_ms=100, wait_ms=50))
        self.assertEqual(line1, b"S a k 0 100 50\n")
        self.assertTrue(w.busy(Request("A", "k", owner="a")))  # one echo for A and S
        r2, _ = w.add(Request("A", "k", owner="b", lease_ms=100))
        out, broken = w.receive(b"T b k\nS 9 a")
        self.assertIsNone(broken)
        self.assertEqual([(d.rid, d.reply.kind) for d in out], [(r2, "T")])
        out, broken = w.receive(b" k\n")
        self.assertEqual([(d.rid, d.reply.token) for d in out], [(r1, 9)])

    def test_an_abandoned_shared_grant_is_undone(self):
        w = Wire("n")
        rid, _ = w.add(Request("S", "k", owner="a", limit=3, lease_ms=100))
        w.abandon(rid)
        (d,), _ = w.receive(b"S 12 a k\n")
        self.assertTrue(d.abandoned)
        self.assertEqual(d.undo, Request("R", "k", token=12))

    def test_a_line_nothing_drew_breaks_the_connection_after_the_good_ones(self):
        w = Wire("n")
        rid, _ = w.add(Request("A", "k", owner="a", lease_ms=100))
        out, broken = w.receive(b"A 1 a k\nA 2 x y\n")
        self.assertEqual([d.rid for d in out], [rid])
        self.assertIn("unexpected reply", broken)
        _, broken = Wire("n").receive(b"x" * 2000)
        self.assertIn("too long", broken)


if __name__ == "__main__":
    unittest.main()
