"""The sans-I/O core both Python clients drive (lockd_client._core): the
call plan (redirects, no_leader backoff, unreachable nodes, outcomes), the
keeper's schedule and the connection's matching, with no socket and no
clock — time is passed in."""

import random
import re
import unittest

from lockd_client import Indeterminate, LimitMismatch, NoLeader, NotHeld, Rejected, Request, Unreachable
from lockd_client._core import CallPlan, KeepPlan, Nodes, Wire
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
        k = KeepPlan(300, sent_at=10.0)
        self.assertAlmostEqual(k.wait_s(10.0), 0.1)
        self.assertIsNone(k.sending(10.1))
        k.kept()
        self.assertAlmostEqual(k.safe_end, 10.4)
        self.assertAlmostEqual(k.next_at, 10.2)

    def test_transient_failures_retry_until_the_safe_end(self):
        k = KeepPlan(300, sent_at=0.0)
        k.sending(0.1)
        self.assertIsNone(k.failed(NoLeader("x"), 0.15))
        self.assertAlmostEqual(k.next_at, 0.25)
        self.assertIsNone(k.failed(Indeterminate("x"), 0.28))
        self.assertAlmostEqual(k.next_at, 0.3)  # not past the safe end
        self.assertIsInstance(k.sending(0.3), NotHeld)

    def test_n_is_final(self):
        k = KeepPlan(300, sent_at=0.0)
        k.sending(0.1)
        self.assertIsInstance(k.failed(NotHeld("n"), 0.1), NotHeld)


class WireTest(unittest.TestCase):
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
