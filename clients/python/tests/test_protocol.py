"""The pure parts: request lines, reply parsing, the Matcher."""

import unittest

from tests import support  # noqa: F401  (puts the package on sys.path)
from lockd_client.protocol import Matcher, Request, parse_address, parse_reply


def A(owner, key, lease=0, wait=0):
    return Request("A", key, owner=owner, lease_ms=lease, wait_ms=wait)


class RequestTest(unittest.TestCase):
    def test_lines(self):
        self.assertEqual(A("o", "k").line(), b"A o k\n")
        self.assertEqual(A("o", "k", 100, 5).line(), b"A o k 100 5\n")
        self.assertEqual(Request("R", "k", token=7).line(), b"R 7 k\n")
        self.assertEqual(Request("K", "k", token=7, lease_ms=300).line(), b"K 7 k 300\n")

    def test_validation(self):
        self.assertIsNone(A("o", "k").validate())
        for bad in (A("", "k"), A("a b", "k"), A("o" * 65, "k"), A("o", "k" * 251), A("o", "k", 0, 10),
                    A("o", "ключ"), Request("R", "k", token=0), Request("R", "k", token=2**64),
                    Request("K", "k", token=1, lease_ms=0)):
            self.assertIsNotNone(bad.validate(), bad)


class ReplyTest(unittest.TestCase):
    def test_every_kind(self):
        a = parse_reply("A 18446744073709551615 o k\r")
        self.assertEqual((a.kind, a.token, a.owner, a.key), ("A", 2**64 - 1, "o", "k"))
        self.assertEqual(parse_reply("T o k").kind, "T")
        self.assertEqual(parse_reply("N 5 k").token, 5)
        m = parse_reply("M 10.0.0.2:7070 o k")
        self.assertEqual((m.leader, m.echo_first, m.key), ("10.0.0.2:7070", "o", "k"))
        self.assertEqual(parse_reply("E bad_lease").key, "")
        for bad in ("", "Z 1 k", "X 0 k", "V k 0 free", "V k 1 held o", "W k 1 shared 0 0", "A 0 o k", "A -1 o k", "A 1 o", "E", "A 18446744073709551616 o k", "A ١ o k"):
            self.assertIsNone(parse_reply(bad), bad)

    def test_addresses(self):
        self.assertEqual(parse_address("127.0.0.1:7070"), ("127.0.0.1", 7070))
        self.assertEqual(parse_address("[::1]:1"), ("::1", 1))
        for bad in ("", "host", ":80", "h:0", "h:65536", "h:x"):
            self.assertIsNone(parse_address(bad), bad)


class MatcherTest(unittest.TestCase):
    def test_out_of_order_by_echo(self):
        m = Matcher()
        m.add(1, A("a", "k1", 100, 5000))
        m.add(2, A("b", "k2", 100))
        m.add(3, Request("R", "k1", token=9))
        self.assertEqual(m.match(parse_reply("A 11 b k2")), 2)
        self.assertEqual(m.match(parse_reply("R 9 k1")), 3)
        self.assertEqual(m.match(parse_reply("A 12 a k1")), 1)
        self.assertIsNone(m.match(parse_reply("A 13 a k1")))

    def test_duplicate_acquire_is_busy(self):
        m = Matcher()
        m.add(1, A("a", "k", 100, 5000))
        self.assertTrue(m.busy(A("a", "k")))
        self.assertFalse(m.busy(A("b", "k")))
        m.match(parse_reply("T a k"))
        self.assertFalse(m.busy(A("a", "k")))

    def test_release_and_keep_by_verb(self):
        m = Matcher()
        m.add(1, Request("K", "k", token=5, lease_ms=100))
        m.add(2, Request("R", "k", token=5))
        m.add(3, Request("K", "k", token=5, lease_ms=100))
        self.assertEqual(m.match(parse_reply("R 5 k")), 2)
        self.assertEqual(m.match(parse_reply("N 5 k")), 1)
        self.assertEqual(m.match(parse_reply("K 5 k")), 3)

    def test_errors(self):
        m = Matcher()
        m.add(1, A("a", "k", 100, 5000))
        m.add(2, Request("R", "x", token=5))
        m.add(3, A("b", "k", 99999999))
        m.add(4, A("42", "z", 100))
        m.add(5, Request("R", "z", token=42))
        self.assertEqual(m.match(parse_reply("E bad_lease b k")), 3)     # v1.3: the echo names it
        self.assertEqual(m.match(parse_reply("E no_leader 42 z")), 4)
        self.assertEqual(m.match(parse_reply("M h:1 42 z")), 5)
        self.assertEqual(m.match(parse_reply("E bad_wait")), 1)          # the only one that can wait
        self.assertEqual(m.match(parse_reply("E unknown_command")), 2)   # the only one left
        self.assertEqual(m.drain(), [])

    def test_c03_error_with_echo_among_pipelined(self):
        m = Matcher()
        m.add(1, A("a", "k", 100, 5000))              # queued at the server
        m.add(2, A("b", "k", 100, 999_999_999))       # above the server's max wait
        m.add(3, Request("K", "k", token=7, lease_ms=999_999_999))
        m.add(4, Request("S", "s", owner="a", limit=70_000 - 5000, lease_ms=100))
        self.assertEqual(m.match(parse_reply("E bad_lease 7 k")), 3)   # the token reading
        self.assertEqual(m.match(parse_reply("E bad_wait b k")), 2)    # never the older waiting acquire
        self.assertEqual(m.match(parse_reply("E bad_limit a s")), 4)
        self.assertEqual(m.match(parse_reply("A 9 a k")), 1)

    def test_c04_error_without_echo_is_never_pinned_on_another_request(self):
        m = Matcher()
        m.add(1, A("a", "k", 100, 5000))              # a valid wait, queued at the server
        m.add(2, A("b", "k", 100, 999_999_999))       # refused by a v1.2 server: E bad_wait, no echo
        m.add(3, Request("K", "x", token=7, lease_ms=100))
        self.assertEqual(m.match(parse_reply("E bad_wait")), Matcher.PENDING)  # 1 or 2: unknown yet
        self.assertEqual(m.take_resolved(), [])
        self.assertEqual(m.match(parse_reply("K 7 x")), 3)       # a keep is never a candidate
        self.assertEqual(m.take_resolved(), [])
        self.assertEqual(m.match(parse_reply("A 9 a k")), 1)     # 1 got its own reply: the error was 2's
        (rid, error), = m.take_resolved()
        self.assertEqual((rid, error.error_code), (2, "bad_wait"))
        self.assertEqual(len(m), 0)

    def test_c04_as_many_errors_as_candidates_are_theirs(self):
        m = Matcher()
        m.add(1, A("a", "k", 100, 999_999_999))
        m.add(2, A("b", "k", 100, 999_999_999))
        self.assertEqual(m.match(parse_reply("E bad_wait")), Matcher.PENDING)
        self.assertEqual(m.match(parse_reply("E bad_wait")), Matcher.PENDING)
        self.assertEqual(sorted(rid for rid, _ in m.take_resolved()), [1, 2])
        self.assertEqual(len(m), 0)

    def test_c04_an_error_nothing_could_draw_matches_nothing(self):
        m = Matcher()
        m.add(1, Request("R", "k", token=1))
        self.assertIsNone(m.match(parse_reply("E bad_wait")))

    def test_watch_replies_and_pushes(self):
        w = parse_reply("W k 12 held o 99")
        self.assertEqual((w.kind, w.key, w.rev, w.state, w.owner, w.token), ("W", "k", 12, "held", "o", 99))
        v = parse_reply("V k 13 shared 3 2")
        self.assertEqual((v.kind, v.rev, v.state, v.limit, v.count, v.is_push), ("V", 13, "shared", 3, 2, True))
        self.assertEqual(parse_reply("V k 14 free").state, "free")
        x = parse_reply("X 99 k")
        self.assertEqual((x.kind, x.token, x.key, x.is_push), ("X", 99, "k", True))
        m = Matcher()
        m.add(1, Request("W", "k"))
        m.add(2, Request("U", "k"))
        m.add(3, Request("W", "j"))
        m.add(4, Request("W", "q"))
        self.assertEqual(Request("W", "k").line(), b"W k\n")
        self.assertEqual(m.match(parse_reply("W k 3 free")), 1)
        self.assertEqual(m.match(parse_reply("U k")), 2)
        self.assertEqual(m.match(parse_reply("B j")), 3)           # a watch limit
        self.assertEqual(m.match(parse_reply("E forbidden q")), 4)  # the key alone as echo


if __name__ == "__main__":
    unittest.main()
