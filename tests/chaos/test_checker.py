"""Hand-written histories: each property broken (must be flagged) and kept
(must pass), including the unknown-operation cases both ways."""

import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools", "chaos"))

from lockd_chaos import checker  # noqa: E402
from lockd_chaos.history import History, Op  # noqa: E402

MS = 1_000_000


class H:
    """Builds a history in milliseconds."""

    def __init__(self, **meta):
        self.h = History()
        self.h.meta.update(meta)

    def op(self, f, key, t0, t1, code=None, token=None, lease=1000, wait=0, client="c1",
           enq=None, unknown=False, limit=None):
        op = Op(id=len(self.h.ops), client=client, f=f, key=key, token=token, lease_ms=lease,
                wait_ms=wait, invoke_ns=t0 * MS, complete_ns=None if t1 is None else t1 * MS,
                code=code, unknown=unknown, enq_ns=None if enq is None else enq * MS, limit=limit)
        self.h.ops.append(op)
        return op

    def grant(self, key, t0, t1, token, **kw):
        return self.op("A", key, t0, t1, code="A", token=token, **kw)

    def shared(self, key, t0, t1, token, limit=0, **kw):
        return self.op("S", key, t0, t1, code="S", token=token, limit=limit, **kw)

    def release(self, key, t0, t1, token, code="R", **kw):
        return self.op("R", key, t0, t1, code=code, token=token, **kw)

    def keep(self, key, t0, t1, token, lease, code="K", **kw):
        return self.op("K", key, t0, t1, code=code, token=token, lease=lease, **kw)


def json_line(op):
    import json
    return json.dumps(op.to_json())


def checks(h, name):
    violations, _ = checker.check(h.h)
    return [v for v in violations if v.check == name]


class TokenTest(unittest.TestCase):
    def test_increasing_tokens_pass(self):
        h = H()
        h.grant("a", 0, 1, 10)
        h.release("a", 2, 3, 10)
        h.grant("b", 4, 5, 11)
        self.assertEqual(checks(h, "tokens"), [])

    def test_duplicate_token_flagged(self):
        h = H()
        h.grant("a", 0, 1, 10)
        h.grant("b", 0, 1, 10)
        self.assertEqual(len(checks(h, "tokens")), 1)

    def test_smaller_token_after_completed_grant_flagged(self):
        h = H()
        h.grant("a", 0, 1, 10)
        h.release("a", 2, 3, 10)
        h.grant("a", 4, 5, 9)
        v = checks(h, "tokens")
        self.assertEqual(len(v), 1)
        self.assertIn("token 9", v[0].message)

    def test_across_keys_flagged(self):
        h = H()
        h.grant("a", 0, 1, 10)
        h.grant("b", 2, 3, 5)
        self.assertEqual(len(checks(h, "tokens")), 1)

    def test_concurrent_grants_any_order(self):
        h = H()
        h.grant("a", 0, 5, 11)
        h.grant("b", 1, 4, 10)   # overlapping in time: either order is fine
        self.assertEqual(checks(h, "tokens"), [])


class ExclusionTest(unittest.TestCase):
    def test_release_then_grant_passes(self):
        h = H()
        h.grant("k", 0, 1, 10)
        h.release("k", 50, 51, 10)
        h.grant("k", 40, 52, 11, wait=1000)
        self.assertEqual(checks(h, "exclusion"), [])

    def test_grant_while_held_flagged(self):
        h = H()
        h.grant("k", 0, 1, 10, lease=1000)
        h.grant("k", 100, 101, 11)
        v = checks(h, "exclusion")
        self.assertEqual(len(v), 1)
        self.assertIn("899.0 ms", v[0].message)

    def test_grant_after_lease_end_passes(self):
        h = H()
        h.grant("k", 0, 1, 10, lease=1000)
        h.grant("k", 1000, 1001, 11)
        self.assertEqual(checks(h, "exclusion"), [])

    def test_lease_counts_from_invocation(self):
        # The grant took 300 ms to complete; the lease may have started at
        # the invocation, so a grant at 1000 ms is fine.
        h = H()
        h.grant("k", 0, 300, 10, lease=1000)
        h.grant("k", 990, 1000, 11)
        self.assertEqual(checks(h, "exclusion"), [])

    def test_acknowledged_keep_extends(self):
        h = H()
        h.grant("k", 0, 1, 10, lease=1000)
        h.keep("k", 800, 801, 10, lease=1000)
        h.grant("k", 1200, 1201, 11)
        self.assertEqual(len(checks(h, "exclusion")), 1)

    def test_refused_keep_does_not_extend(self):
        h = H()
        h.grant("k", 0, 1, 10, lease=1000)
        h.keep("k", 800, 801, 10, lease=1000, code="N")
        h.grant("k", 1200, 1201, 11)
        self.assertEqual(checks(h, "exclusion"), [])

    def test_unknown_keep_may_not_have_extended(self):
        h = H()
        h.grant("k", 0, 1, 10, lease=1000)
        h.keep("k", 800, None, 10, lease=1000, code=None, unknown=True)
        h.grant("k", 1200, 1201, 11)
        self.assertEqual(checks(h, "exclusion"), [])

    def test_unknown_keep_may_have_shortened(self):
        h = H()
        h.grant("k", 0, 1, 10, lease=5000)
        h.keep("k", 100, None, 10, lease=100, code=None, unknown=True)
        h.grant("k", 300, 301, 11)
        self.assertEqual(checks(h, "exclusion"), [])

    def test_unknown_release_may_have_applied(self):
        h = H()
        h.grant("k", 0, 1, 10, lease=1000)
        h.release("k", 100, None, 10, code=None, unknown=True)
        h.grant("k", 150, 151, 11)
        self.assertEqual(checks(h, "exclusion"), [])

    def test_grant_before_release_invoked_flagged(self):
        h = H()
        h.grant("k", 0, 1, 10, lease=1000)
        h.release("k", 100, 120, 10)
        h.grant("k", 50, 90, 11)
        self.assertEqual(len(checks(h, "exclusion")), 1)

    def test_refused_release_does_not_end(self):
        h = H()
        h.grant("k", 0, 1, 10, lease=1000)
        h.release("k", 100, 101, 10, code="N")
        h.grant("k", 150, 151, 11)
        self.assertEqual(len(checks(h, "exclusion")), 1)

    def test_unknown_acquire_is_not_a_holder(self):
        h = H()
        h.op("A", "k", 0, None, unknown=True)
        h.grant("k", 10, 11, 11)
        self.assertEqual(checks(h, "exclusion"), [])

    def test_nonadjacent_tokens_checked(self):
        # g1 holds a long lease; g2 (short) and g3 both overlap g1.
        h = H()
        h.grant("k", 0, 1, 10, lease=10_000)
        h.grant("k", 100, 101, 11, lease=10)
        h.grant("k", 200, 201, 12)
        self.assertEqual(len(checks(h, "exclusion")), 2)

    def test_keys_are_independent(self):
        h = H()
        h.grant("a", 0, 1, 10)
        h.grant("b", 10, 11, 11)
        self.assertEqual(checks(h, "exclusion"), [])

    def test_restart_excuses_only_when_locks_lost_by_design(self):
        h = H()
        h.grant("k", 0, 1, 10, lease=1000)
        h.h.nemesis.append({"type": "nemesis", "fault": "kill", "time_ns": 100 * MS})
        h.grant("k", 200, 201, 11)
        self.assertEqual(len(checks(h, "exclusion")), 1)
        h.h.meta["locks_lost_on_restart"] = True
        self.assertEqual(checks(h, "exclusion"), [])
        _, report = checker.check(h.h)
        self.assertEqual(report["exclusion_excused_by_restart"], 1)

    def test_kill_before_grant_does_not_excuse(self):
        h = H(locks_lost_on_restart=True)
        h.h.nemesis.append({"type": "nemesis", "fault": "kill", "time_ns": 0})
        h.grant("k", 10, 11, 10, lease=1000)
        h.grant("k", 200, 201, 11)
        self.assertEqual(len(checks(h, "exclusion")), 1)


class FifoTest(unittest.TestCase):
    def base(self, t1, t2):
        h = H()
        h.grant("k", 0, 1, 10, lease=5000)
        # w1 proven queued at 12, w2 invoked at 20 (after), queued at 22.
        h.grant("k", 10, 110, t1, wait=3000, client="w1", enq=12)
        h.grant("k", 20, 210, t2, wait=3000, client="w2", enq=22)
        h.release("k", 100, 101, 10)
        return h

    def test_fifo_order_passes(self):
        self.assertEqual(checks(self.base(11, 12), "fifo"), [])

    def test_later_waiter_served_first_flagged(self):
        v = checks(self.base(12, 11), "fifo")
        self.assertEqual(len(v), 1)
        self.assertIn("w1", v[0].message)

    def test_no_proof_of_queue_order_not_flagged(self):
        h = H()
        h.grant("k", 0, 1, 10, lease=5000)
        h.grant("k", 10, 210, 12, wait=3000, client="w1", enq=25)
        h.grant("k", 20, 110, 11, wait=3000, client="w2", enq=22)  # sent before w1 was proven queued
        h.release("k", 100, 101, 10)
        self.assertEqual(checks(h, "fifo"), [])

    def test_queued_after_release_not_checked(self):
        h = H()
        h.grant("k", 0, 1, 10, lease=5000)
        h.grant("k", 10, 210, 12, wait=3000, client="w1", enq=12)
        h.grant("k", 20, 110, 11, wait=3000, client="w2", enq=22)
        h.release("k", 15, 16, 10)   # w2 not yet queued at the release
        self.assertEqual(checks(h, "fifo"), [])

    def test_expiry_path_not_checked(self):
        # No release: the key expired; a newcomer may go first.
        h = H()
        h.grant("k", 0, 1, 10, lease=50)
        h.grant("k", 10, 110, 12, wait=3000, client="w1", enq=12)
        h.grant("k", 20, 60, 11, wait=3000, client="w2", enq=22)
        self.assertEqual(checks(h, "fifo"), [])


class LivenessTest(unittest.TestCase):
    def test_answers_after_heal_pass(self):
        h = H(recovery_bound_ms=1000)
        h.h.heal_ns = 1000 * MS
        h.op("A", "k", 500, None, unknown=True)       # during the fault: fine
        h.grant("k", 2500, 2501, 10)
        h.op("A", "k", 2600, 2601, code="T")
        self.assertEqual(checks(h, "liveness"), [])

    def test_unanswered_after_bound_flagged(self):
        h = H(recovery_bound_ms=1000)
        h.h.heal_ns = 1000 * MS
        h.grant("k", 2500, 2501, 10)
        h.op("R", "k", 2600, None, token=10, unknown=True)
        self.assertEqual(len(checks(h, "liveness")), 1)

    def test_no_leader_after_bound_flagged(self):
        h = H(recovery_bound_ms=1000)
        h.h.heal_ns = 0
        h.grant("k", 1500, 1501, 10)
        h.op("A", "k", 2000, 2001, code="E")
        self.assertEqual(len(checks(h, "liveness")), 1)

    def test_stuck_key_flagged(self):
        h = H(recovery_bound_ms=1000)
        h.h.heal_ns = 0
        for t in range(2000, 5000, 500):
            h.op("A", "k", t, t + 400, code="T", wait=400)
        v = checks(h, "liveness")
        self.assertEqual(len(v), 1)
        self.assertIn("stuck", v[0].message)

    def test_short_window_is_not_evidence_of_a_stuck_key(self):
        h = H(recovery_bound_ms=1000)
        h.h.heal_ns = 0
        h.grant("k", 500, 900, 10, lease=1000)
        h.op("A", "k", 1200, 1201, code="T", lease=1000)
        h.op("A", "k", 1300, 1301, code="T", lease=1000)
        self.assertEqual(checks(h, "liveness"), [])

    def test_grant_completing_in_window_counts(self):
        h = H(recovery_bound_ms=1000)
        h.h.heal_ns = 0
        h.grant("k", 900, 1100, 10, wait=1500)
        for t in range(1200, 4000, 400):
            h.op("A", "k", t, t + 1, code="T", lease=1000)
        self.assertEqual(checks(h, "liveness"), [])

    def test_silent_client_flagged(self):
        h = H(recovery_bound_ms=1000)
        h.h.heal_ns = 0
        h.op("A", "k", 500, None, unknown=True, client="c2")   # c2 never heard from again
        h.grant("k", 2000, 2001, 10, client="c1")
        v = checks(h, "liveness")
        self.assertEqual(len(v), 1)
        self.assertIn("c2", v[0].message)

    def test_cancelled_acquire_owes_no_answer(self):
        # The client closed its connection while waiting: no answer is owed
        # (an unknown acquire that was not cancelled still is, above).
        h = H(recovery_bound_ms=1000)
        h.h.heal_ns = 0
        h.grant("k", 1500, 1501, 10)
        op = h.op("A", "k", 2000, None, unknown=True, wait=3000)
        op.cancelled = True
        h.grant("k", 2600, 2601, 11)
        self.assertEqual(checks(h, "liveness"), [])
        op.cancelled = None
        self.assertEqual(len(checks(h, "liveness")), 1)

    def test_cancelled_round_trips_through_the_history_file(self):
        op = Op(id=1, client="c1", f="A", key="k", invoke_ns=5, unknown=True, cancelled=True)
        back = Op.from_json(op.to_json())
        self.assertTrue(back.cancelled)
        self.assertTrue(back.unknown)

    def test_without_heal_not_checked(self):
        h = H()
        h.op("A", "k", 0, None, unknown=True)
        self.assertEqual(checks(h, "liveness"), [])


class ResourceTest(unittest.TestCase):
    def test_counts_match(self):
        h = H()
        h.h.accesses = [
            {"key": "k", "op": "read", "token": 1, "ok": True, "in_lease": True},
            {"key": "k", "op": "write", "token": 1, "ok": True, "in_lease": True},
            {"key": "k", "op": "write", "token": 0, "ok": False, "in_lease": False},
            {"kind": "final", "key": "k", "fenced_value": 1}]
        violations, report = checker.check(h.h)
        self.assertEqual(violations, [])
        self.assertEqual(report["resource_stale_rejected"], 1)

    def test_rejection_inside_lease_flagged(self):
        h = H()
        h.h.accesses = [{"key": "k", "op": "write", "token": 1, "ok": False, "in_lease": True,
                         "granted_ns": 0, "time_ns": 10}]
        self.assertEqual(len(checks(h, "resource")), 1)

    def test_rejection_after_restart_excused_in_single_mode(self):
        h = H(locks_lost_on_restart=True)
        h.h.nemesis.append({"type": "nemesis", "fault": "kill", "time_ns": 50 * MS})
        h.h.accesses = [{"key": "k", "op": "write", "token": 1, "ok": False, "in_lease": True,
                         "granted_ns": 10 * MS, "time_ns": 100 * MS}]
        violations, report = checker.check(h.h)
        self.assertEqual(violations, [])
        self.assertEqual(report["resource_rejected_lock_lost_in_restart"], 1)
        h.h.meta["locks_lost_on_restart"] = False
        self.assertEqual(len(checks(h, "resource")), 1)

    def test_count_mismatch_flagged(self):
        h = H()
        h.h.accesses = [
            {"key": "k", "op": "write", "token": 1, "ok": True, "in_lease": True},
            {"kind": "final", "key": "k", "fenced_value": 2}]
        self.assertEqual(len(checks(h, "resource")), 1)



class SharedTest(unittest.TestCase):
    """Shared holders (S, protocol.md §5b): readers and permits may
    overlap each other, never an exclusive holder, never past the limit."""

    def test_readers_overlap(self):
        h = H()
        h.shared("a", 0, 1, 10)
        h.shared("a", 2, 3, 11)
        h.shared("a", 4, 5, 12)
        h.release("a", 500, 501, 10)
        h.release("a", 600, 601, 11)
        h.release("a", 700, 701, 12)
        self.assertEqual(checks(h, "exclusion"), [])
        self.assertEqual(checks(h, "limit"), [])
        self.assertEqual(checker.check(h.h)[1]["shared_grants"], 3)

    def test_writer_after_the_last_reader_passes(self):
        h = H()
        h.shared("a", 0, 1, 10)
        h.shared("a", 2, 3, 11)
        h.release("a", 100, 101, 10)
        h.release("a", 200, 201, 11)
        h.grant("a", 150, 202, 12, wait=500)   # queued, handed the key at 11's release
        self.assertEqual(checks(h, "exclusion"), [])

    def test_writer_beside_a_reader_flagged(self):
        h = H()
        h.shared("a", 0, 1, 10)
        h.shared("a", 2, 3, 11)
        h.release("a", 100, 101, 10)
        h.grant("a", 150, 160, 12)            # reader 11 still holds
        v = checks(h, "exclusion")
        self.assertEqual(len(v), 1)
        self.assertIn("token 12 (exclusive)", v[0].message)
        self.assertIn("token 11 (shared)", v[0].message)

    def test_reader_beside_a_writer_flagged(self):
        h = H()
        h.grant("a", 0, 1, 10)
        h.shared("a", 50, 60, 11)
        v = checks(h, "exclusion")
        self.assertEqual(len(v), 1)
        self.assertIn("token 11 (shared)", v[0].message)

    def test_reader_after_the_writers_lease_passes(self):
        h = H()
        h.grant("a", 0, 1, 10, lease=100)
        h.shared("a", 50, 101, 11)
        self.assertEqual(checks(h, "exclusion"), [])

    def test_unknown_release_of_the_writer_lets_readers_in(self):
        h = H()
        h.grant("a", 0, 1, 10)
        h.release("a", 20, None, 10, code=None, unknown=True)
        h.shared("a", 30, 31, 11)
        self.assertEqual(checks(h, "exclusion"), [])

    def test_semaphore_within_its_limit_passes(self):
        h = H()
        h.shared("s", 0, 1, 10, limit=2)
        h.shared("s", 2, 3, 11, limit=2)
        h.release("s", 100, 101, 10)
        h.shared("s", 90, 102, 12, limit=2, wait=500)   # the freed permit
        self.assertEqual(checks(h, "limit"), [])

    def test_semaphore_past_its_limit_flagged(self):
        h = H()
        h.shared("s", 0, 1, 10, limit=2)
        h.shared("s", 2, 3, 11, limit=2)
        h.shared("s", 4, 5, 12, limit=2)      # a third while both hold
        v = checks(h, "limit")
        self.assertEqual(len(v), 1)
        self.assertIn("3 shared holders", v[0].message)
        self.assertEqual(checks(h, "exclusion"), [])   # permits may overlap each other

    def test_semaphore_third_holder_after_an_unknown_release_passes(self):
        h = H()
        h.shared("s", 0, 1, 10, limit=2)
        h.shared("s", 2, 3, 11, limit=2)
        h.release("s", 4, None, 10, code=None, unknown=True)   # may have freed a permit
        h.shared("s", 5, 6, 12, limit=2)
        self.assertEqual(checks(h, "limit"), [])

    def test_semaphore_third_holder_after_an_expired_lease_passes(self):
        h = H()
        h.shared("s", 0, 1, 10, limit=2, lease=50)
        h.shared("s", 2, 3, 11, limit=2)
        h.shared("s", 60, 61, 12, limit=2)
        self.assertEqual(checks(h, "limit"), [])

    def test_read_lock_has_no_limit(self):
        h = H()
        for t in range(10, 20):
            h.shared("r", t, t + 1, t, limit=0)
        self.assertEqual(checks(h, "limit"), [])

    def test_shared_tokens_are_checked(self):
        h = H()
        h.shared("a", 0, 1, 10)
        h.shared("b", 2, 3, 10)                # the same token twice
        self.assertTrue(any("granted twice" in v.message for v in checks(h, "tokens")))

    def test_parse_keeps_the_limit(self):
        h = H()
        h.shared("s", 0, 1, 10, limit=3)
        lines = [json_line(op) for op in h.h.ops]
        back = History.parse(lines)
        self.assertEqual(back.ops[0].limit, 3)
        self.assertTrue(back.ops[0].granted and back.ops[0].shared)


class FileTest(unittest.TestCase):
    def test_parse_round_trip(self):
        lines = ['{"type":"meta","mode":"single"}',
                 '{"type":"op","id":1,"client":"c1","f":"A","key":"k","token":5,'
                 '"lease_ms":100,"wait_ms":0,"invoke_ns":1,"complete_ns":2,"code":"A"}',
                 '{"type":"heal","time_ns":3}', ""]
        h = History.parse(lines)
        self.assertEqual(h.meta["mode"], "single")
        self.assertTrue(h.ops[0].granted)
        self.assertEqual(h.heal_ns, 3)

    def test_bad_line_named(self):
        with self.assertRaisesRegex(ValueError, "line 2"):
            History.parse(['{"type":"meta"}', "nope"])


if __name__ == "__main__":
    unittest.main()
