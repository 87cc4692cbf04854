"""Hand-written watcher histories (protocol.md §5c) against grant
histories: each watch rule broken (must be flagged) and kept (must pass)."""

import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools", "chaos"))
sys.path.insert(0, os.path.dirname(__file__))

from lockd_chaos import checker  # noqa: E402
from lockd_chaos.history import History  # noqa: E402
from lockd_chaos.watchers import parse_state_line  # noqa: E402
from test_checker import H, MS  # noqa: E402

KEY = "k"


class W(H):
    """H plus watcher lines, in milliseconds."""

    def line(self, w, conn, kind, rev, state, t, key=KEY, sent=None):
        d = {"type": "watch", "w": w, "conn": conn, "node": "n1", "kind": kind, "key": key,
             "rev": rev, "state": state, "time_ns": t * MS}
        if sent is not None:
            d["sent_ns"] = sent * MS
        self.h.watches.append(d)

    def W(self, rev, state, t, w="w1", conn=1, sent=None, key=KEY):
        self.line(w, conn, "W", rev, state, t, key, t if sent is None else sent)

    def V(self, rev, state, t, w="w1", conn=1, key=KEY):
        self.line(w, conn, "V", rev, state, t, key)

    def lost(self, t, w="w1", conn=1):
        self.h.watches.append({"type": "watch", "w": w, "conn": conn, "kind": "lost",
                               "time_ns": t * MS})

    def end(self, t, w="w1", conn=1):
        self.h.watches.append({"type": "watch", "w": w, "conn": conn, "kind": "end",
                               "time_ns": t * MS})

    def final(self, rev, state, t, phases=(1, 2), key=KEY):
        for p in phases:
            self.h.watch_finals.append({"type": "watch_final", "key": key, "rev": rev,
                                        "state": state, "sent_ns": t * MS, "time_ns": t * MS,
                                        "phase": p})

    def owned(self, key, t0, t1, token, owner="c1", **kw):
        op = self.grant(key, t0, t1, token, client=owner, **kw)
        op.owner = owner
        return op


def watch_violations(h):
    violations, report = checker.check(h.h)
    return [v for v in violations if v.check.startswith("watch") or v.check == "lost-notice"], \
        report


def names(vs):
    return sorted(v.check for v in vs)


def clean():
    """c1 holds token 10 from 0 ms to its release at 500 ms; a watcher sees
    free, held, free and is connected to the end."""
    h = W()
    h.owned(KEY, 0, 1, 10)
    h.release(KEY, 500, 501, 10)
    h.W(5, "free", 0)
    h.V(6, "held c1 10", 2)
    h.V(7, "free", 502)
    h.end(900)
    h.final(7, "free", 800)
    return h


class WatchStateTest(unittest.TestCase):
    def test_clean_history_passes(self):
        v, report = watch_violations(clean())
        self.assertEqual(v, [])
        self.assertEqual(report["watch_final_checked"], 1)
        self.assertEqual(report["watchers_connected_at_end"], 1)

    def test_parse_lines(self):
        self.assertEqual(parse_state_line("V a/b 7 held c1 10"), ("V", "a/b", 7, "held c1 10"))
        self.assertEqual(parse_state_line("W a 1 free"), ("W", "a", 1, "free"))
        self.assertIsNone(parse_state_line("E no_leader a"))

    def test_token_never_granted_flagged(self):
        h = clean()
        h.V(8, "held c2 99", 600)
        h.V(9, "free", 700)
        self.assertEqual(names(watch_violations(h)[0]), ["watch-state"])

    def test_token_of_an_unknown_acquire_passes(self):
        h = clean()
        h.op("A", KEY, 550, None, unknown=True, client="c2").owner = "c2"
        h.V(8, "held c2 99", 600)
        h.V(9, "free", 700)
        self.assertEqual(watch_violations(h)[0], [])

    def test_unknown_acquire_after_the_push_does_not_explain_it(self):
        h = clean()
        h.op("A", KEY, 650, None, unknown=True, client="c2").owner = "c2"
        h.V(8, "held c2 99", 600)
        h.V(9, "free", 700)
        self.assertEqual(names(watch_violations(h)[0]), ["watch-state"])

    def test_wrong_owner_flagged(self):
        h = W()
        h.owned(KEY, 0, 1, 10)
        h.release(KEY, 500, 501, 10)
        h.W(5, "free", 0)
        h.V(6, "held c9 10", 2)
        self.assertEqual(names(watch_violations(h)[0]), ["watch-state"])

    def test_state_read_before_the_grant_was_asked_flagged(self):
        h = W()
        h.owned(KEY, 10, 11, 10)
        h.W(5, "free", 0)
        h.V(6, "held c1 10", 5)
        self.assertIn("watch-state", names(watch_violations(h)[0]))

    def test_shared_states(self):
        h = W()
        h.shared(KEY, 0, 1, 10, limit=2)
        h.shared(KEY, 0, 1, 11, limit=2)
        h.release(KEY, 100, 101, 10)
        h.release(KEY, 100, 101, 11)
        h.W(5, "free", 0)
        h.V(6, "shared 2 2", 2)
        h.V(7, "free", 102)
        self.assertEqual(watch_violations(h)[0], [])
        h.V(8, "shared 2 3", 200)      # three holders of two permits
        h.V(9, "shared 0 1", 210)      # a limit this key is never used with
        self.assertEqual(names(watch_violations(h)[0]), ["watch-state", "watch-state"])


class WatchOrderTest(unittest.TestCase):
    def test_push_revs_out_of_order_flagged(self):
        h = clean()
        h.V(6, "held c1 10", 503)      # rev 6 again after rev 7, same connection
        v = watch_violations(h)[0]
        self.assertIn("watch-order", names(v))

    def test_push_not_above_the_w_reply_flagged(self):
        h = W()
        h.owned(KEY, 0, 1, 10)
        h.W(7, "held c1 10", 2)
        h.V(7, "held c1 10", 3)
        self.assertEqual(names(watch_violations(h)[0]), ["watch-order"])

    def test_rewatch_on_the_connection_passes(self):
        h = clean()
        h.W(9, "free", 600, sent=599)  # W again: the state now, revs of other keys moved on
        h.W(9, "free", 700, sent=699)
        self.assertEqual(watch_violations(h)[0], [])

    def test_rewatch_after_a_stale_push_flagged(self):
        # The push of rev 7 said the key was still held by token 10 (the
        # state before the release); the W reply at rev 9 says free, and no
        # push told this connection of a change in between.
        h = W()
        h.owned(KEY, 0, 1, 10)
        h.release(KEY, 500, 501, 10)
        h.W(5, "free", 0)
        h.V(6, "held c1 10", 2)
        h.V(7, "held c1 10", 502)
        h.W(9, "free", 600, sent=599)
        self.assertEqual(names(watch_violations(h)[0]), ["watch-missed"])

    def test_rewatch_after_a_skipped_push_flagged(self):
        h = W()
        h.owned(KEY, 0, 1, 10)
        h.release(KEY, 500, 501, 10)
        h.W(5, "free", 0)
        h.V(6, "held c1 10", 2)       # the push of the release (free) never came
        h.W(9, "free", 600, sent=599)
        self.assertEqual(names(watch_violations(h)[0]), ["watch-missed"])

    def test_push_read_after_a_rewatch_with_an_older_rev(self):
        # A push after a W reply must carry a larger rev (§5c): order, not
        # a missed change (the states agree).
        h = clean()
        h.owned(KEY, 600, 601, 11, owner="c2")
        h.W(9, "held c2 11", 610, sent=605)
        h.V(8, "held c2 11", 611)
        self.assertEqual(names(watch_violations(h)[0]), ["watch-order"])

    def test_lagging_member_after_a_reconnect_is_dropped_not_flagged(self):
        h = clean()
        h.lost(510)
        # Another member, behind: its W reply is at an older rev (the state
        # then), which the client drops; then it catches up.
        h.W(6, "held c1 10", 520, conn=2, sent=515)
        h.V(7, "free", 530, conn=2)
        v, report = watch_violations(h)
        self.assertEqual(v, [])
        # The W reply at rev 6 is dropped; rev 7 again is no news, not dropped.
        self.assertEqual(report["watch_dropped_not_newer"], 1)

    def test_stale_state_after_a_newer_one_flagged(self):
        h = W()
        h.owned(KEY, 0, 1, 10)
        h.release(KEY, 100, 101, 10)
        h.owned(KEY, 100, 102, 11, owner="c2")
        h.W(5, "free", 0)
        h.V(6, "held c1 10", 2)
        h.V(8, "held c2 11", 103)
        h.V(9, "held c1 10", 104)      # a higher rev, but token 10 is older than 11
        self.assertIn("watch-history", names(watch_violations(h)[0]))

    def test_two_states_at_one_rev_flagged(self):
        h = clean()
        h.W(7, "held c1 10", 600, w="w2")
        self.assertIn("watch-history", names(watch_violations(h)[0]))

    def test_a_token_back_after_the_key_moved_on_flagged(self):
        h = clean()
        h.V(9, "held c1 10", 600)
        self.assertIn("watch-history", names(watch_violations(h)[0]))


class WatchTimeTest(unittest.TestCase):
    def test_free_while_the_holder_surely_held_flagged(self):
        h = W()
        h.owned(KEY, 0, 1, 10)          # lease 1000 ms, never released
        h.W(5, "free", 0)
        h.V(6, "held c1 10", 2)
        h.V(7, "free", 300)
        v = watch_violations(h)[0]
        self.assertEqual(names(v), ["watch-time"])
        self.assertIn("700.0 ms before", v[0].message)

    def test_free_after_the_release_was_sent_passes(self):
        h = W()
        h.owned(KEY, 0, 1, 10)
        h.release(KEY, 200, None, 10, code=None, unknown=True)   # may have freed it at 200
        h.W(5, "free", 0)
        h.V(6, "held c1 10", 2)
        h.V(7, "free", 300)
        self.assertEqual(watch_violations(h)[0], [])

    def test_free_after_the_lease_passes(self):
        h = W()
        h.owned(KEY, 0, 1, 10)
        h.W(5, "free", 0)
        h.V(6, "held c1 10", 2)
        h.V(7, "free", 1001)
        self.assertEqual(watch_violations(h)[0], [])

    def test_new_holder_while_the_old_surely_held_flagged(self):
        h = W()
        h.owned(KEY, 0, 1, 10)
        h.op("A", KEY, 50, None, unknown=True, client="c2").owner = "c2"
        h.W(5, "free", 0)
        h.V(8, "held c2 11", 100)       # token 10's lease runs to 1000 ms
        self.assertEqual(names(watch_violations(h)[0]), ["watch-time"])

    def test_w_reply_must_show_a_grant_held_over_its_span(self):
        h = W(mode="single")
        h.owned(KEY, 0, 1, 10)
        h.W(5, "free", 101, sent=100)
        self.assertEqual(names(watch_violations(h)[0]), ["watch-time"])
        h = W(mode="single")
        h.owned(KEY, 0, 1, 10)
        h.W(6, "held c1 10", 101, sent=100)
        self.assertEqual(watch_violations(h)[0], [])

    def test_w_reply_of_a_lagging_member_passes(self):
        # Cluster mode: a follower that has not applied the grant yet
        # answers W with the state before it.
        h = W(mode="cluster")
        h.owned(KEY, 0, 1, 10)
        h.W(5, "free", 101, sent=100)
        self.assertEqual(watch_violations(h)[0], [])

    def test_locks_lost_in_a_restart_excused(self):
        h = W(locks_lost_on_restart=True, mode="single")
        h.owned(KEY, 0, 1, 10)
        h.h.nemesis.append({"type": "nemesis", "fault": "kill", "phase": "start",
                            "time_ns": 100 * MS})
        h.W(5, "held c1 10", 2)
        h.lost(100)
        h.W(900, "free", 200, conn=2, sent=150)
        self.assertEqual(watch_violations(h)[0], [])


class WatchFinalTest(unittest.TestCase):
    def test_connected_watcher_not_at_the_final_state_flagged(self):
        h = W()
        h.owned(KEY, 0, 1, 10)
        h.release(KEY, 500, 501, 10)
        h.W(5, "free", 0)
        h.V(6, "held c1 10", 2)        # the push of rev 7 (free) never came
        h.end(900)
        h.final(7, "free", 800)
        v = watch_violations(h)[0]
        self.assertEqual(names(v), ["watch-final"])

    def test_same_state_but_a_change_missed_flagged(self):
        h = W()
        h.owned(KEY, 0, 1, 10)
        h.release(KEY, 500, 501, 10)
        h.W(5, "free", 0)
        h.V(6, "held c1 10", 2, w="w2")
        h.V(7, "free", 502, w="w2")
        h.end(900)                      # w1 saw free at 5, missed held and free again
        h.end(900, w="w2")
        h.final(7, "free", 800)
        self.assertEqual(names(watch_violations(h)[0]), ["watch-final"])

    def test_watcher_not_connected_at_the_end_not_checked(self):
        h = W()
        h.owned(KEY, 0, 1, 10)
        h.release(KEY, 500, 501, 10)
        h.W(5, "free", 0)
        h.V(6, "held c1 10", 2)
        h.lost(600)
        h.final(7, "free", 800)
        self.assertEqual(watch_violations(h)[0], [])

    def test_key_changing_while_watchers_stop_not_checked(self):
        h = W()
        h.owned(KEY, 0, 1, 10)
        h.W(5, "free", 0)
        h.V(6, "held c1 10", 2)
        h.end(1200)
        h.final(6, "held c1 10", 1100, phases=(1,))
        h.final(7, "free", 1300, phases=(2,))
        v, report = watch_violations(h)
        self.assertEqual(v, [])
        self.assertEqual(report["watch_final_keys_settled"], 0)


class LostNoticeTest(unittest.TestCase):
    @staticmethod
    def x(h, token, t, client="c1", key=KEY):
        h.h.lost_notices.append({"type": "lost_notice", "client": client, "node": "n1",
                                 "token": token, "key": key, "line": "X %d %s" % (token, key),
                                 "time_ns": t * MS})

    def test_x_after_the_lease_passes(self):
        h = W()
        h.owned(KEY, 0, 1, 10)
        self.x(h, 10, 1001)
        v, report = watch_violations(h)
        self.assertEqual(v, [])
        self.assertEqual(report["lost_notices"], 1)

    def test_x_before_the_lease_could_end_flagged(self):
        h = W()
        h.owned(KEY, 0, 1, 10)
        self.x(h, 10, 900)
        self.assertEqual(names(watch_violations(h)[0]), ["lost-notice"])

    def test_x_before_an_acknowledged_keeps_lease_flagged(self):
        h = W()
        h.owned(KEY, 0, 1, 10)
        h.keep(KEY, 500, 501, 10, 1000)
        self.x(h, 10, 1200)             # the K moved the end to 1500 at the earliest
        self.assertEqual(names(watch_violations(h)[0]), ["lost-notice"])
        h = W()
        h.owned(KEY, 0, 1, 10)
        h.keep(KEY, 500, None, 10, 1000, code=None, unknown=True)
        self.x(h, 10, 1200)             # an unknown K may not have arrived
        self.assertEqual(watch_violations(h)[0], [])

    def test_x_for_another_clients_token_flagged(self):
        h = W()
        h.owned(KEY, 0, 1, 10, owner="c2")
        self.x(h, 10, 1500)
        self.assertEqual(names(watch_violations(h)[0]), ["lost-notice"])

    def test_x_for_an_unknown_acquire_passes(self):
        h = W()
        h.op("A", KEY, 0, None, unknown=True)
        self.x(h, 99, 1500)
        self.assertEqual(watch_violations(h)[0], [])
        h = W()
        self.x(h, 99, 1500)
        self.assertEqual(names(watch_violations(h)[0]), ["lost-notice"])


class NoWatchersTest(unittest.TestCase):
    def test_history_without_watchers(self):
        h = H()
        h.grant(KEY, 0, 1, 10)
        v, report = watch_violations(h)
        self.assertEqual(v, [])
        self.assertEqual(report["watch"], "no watchers in this history")

    def test_records_round_trip(self):
        lines = ['{"type":"watch","w":"w1","conn":1,"kind":"W","key":"k","rev":1,'
                 '"state":"free","time_ns":5,"sent_ns":1}',
                 '{"type":"watch_final","key":"k","rev":1,"state":"free","time_ns":9,'
                 '"sent_ns":8,"phase":1}']
        h = History.parse(lines)
        self.assertEqual(len(h.watches), 1)
        self.assertEqual(len(h.watch_finals), 1)


if __name__ == "__main__":
    unittest.main()
