"""Hostile-client mode's pure parts (tools/chaos/lockd_chaos/hostile.py): the
forged hello's frame and the checks' definitions."""

import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools", "chaos"))

from lockd_chaos import hostile  # noqa: E402
from lockd_chaos.history import History, Op  # noqa: E402

MS = 1_000_000


class ForgedHello(unittest.TestCase):
    def test_crc32c_check_value(self):
        self.assertEqual(hostile.crc32c(b"123456789"), 0xE3069283)

    def test_frame_layout(self):
        f = hostile.forged_hello(1, 3, "127.0.0.1:7001")
        self.assertEqual(f[:4], b"LKDP")
        self.assertEqual(int.from_bytes(f[4:6], "little"), 2)   # handshake version
        self.assertEqual(int.from_bytes(f[6:8], "little"), 1)   # hello
        body = int.from_bytes(f[8:12], "little")
        self.assertEqual(len(f), 12 + body + 4)
        self.assertEqual(int.from_bytes(f[-4:], "little"), hostile.crc32c(f[:-4]))
        tags, at = {}, 12
        while at < 12 + body:
            tag = int.from_bytes(f[at:at + 2], "little")
            n = int.from_bytes(f[at + 2:at + 4], "little")
            tags[tag] = f[at + 4:at + 4 + n]
            at += 4 + n
        self.assertEqual(int.from_bytes(tags[1], "little"), 1)   # sender
        self.assertEqual(int.from_bytes(tags[2], "little"), 3)   # receiver
        self.assertEqual(tags[11], b"\x04")                      # "you were removed"
        self.assertEqual(tags[6], b"127.0.0.1:7001")


class FakeLoad:
    def __init__(self, accepted=()):
        self.csrf_accepted = list(accepted)


def history(*ops, nemesis=()):
    h = History()
    for i, (t, unknown, error, cancelled) in enumerate(ops):
        h.ops.append(Op(id=i, client="c", f="A", key="k", invoke_ns=t * MS,
                        complete_ns=None if unknown else t * MS + 1, unknown=unknown,
                        error=error, cancelled=cancelled, code=None if unknown else "A"))
    h.nemesis.extend(nemesis)
    return h


ALIVE = {"node1": {"alive": True, "starts": 1}}


class Checks(unittest.TestCase):
    def test_every_answered_passes(self):
        v, r = hostile.check(history((10, False, None, None)), ALIVE, True, FakeLoad(), 1000)
        self.assertEqual(v, [])
        self.assertEqual(r, {"requests_counted": 1, "unanswered": 0})

    def test_a_timeout_or_a_refused_connection_is_unanswered(self):
        h = history((10, True, "timeout", None), (20, False, "ConnectionResetError", None))
        v, r = hostile.check(h, ALIVE, True, FakeLoad(), 1000)
        self.assertEqual([x.check for x in v], ["hostile_unanswered"])
        self.assertEqual(r["unanswered"], 2)

    def test_cancelled_and_fault_windows_are_not_counted(self):
        nem = [{"time_ns": 100 * MS, "fault": "kill", "node": "node1", "phase": "start"},
               {"time_ns": 200 * MS, "fault": "kill", "node": "node1", "phase": "end"}]
        h = history((10, True, "x", True), (150, True, "x", None), (1100, True, "x", None),
                    (1300, True, "x", None), nemesis=nem)
        v, r = hostile.check(h, ALIVE, False, FakeLoad(), 1000)
        # 150 is in the fault, 1100 within its recovery bound; 1300 counts.
        self.assertEqual(r, {"requests_counted": 1, "unanswered": 1})

    def test_a_node_that_exited_or_restarted_unasked(self):
        v, _ = hostile.check(history(), {"node1": {"alive": False, "starts": 1}}, True,
                             FakeLoad(), 1000)
        self.assertEqual([x.check for x in v], ["hostile_node_exit"])
        v, _ = hostile.check(history(), {"node1": {"alive": True, "starts": 2}}, True,
                             FakeLoad(), 1000)
        self.assertEqual([x.check for x in v], ["hostile_node_exit"])
        v, _ = hostile.check(history(), {"node1": {"alive": True, "starts": 2}}, False,
                             FakeLoad(), 1000)
        self.assertEqual(v, [])

    def test_an_accepted_csrf_request(self):
        v, _ = hostile.check(history(), ALIVE, True, FakeLoad([(1, "members_text_plain", 200)]),
                             1000)
        self.assertEqual([x.check for x in v], ["hostile_csrf_accepted"])


if __name__ == "__main__":
    unittest.main()
