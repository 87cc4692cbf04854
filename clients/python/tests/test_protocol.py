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
        for bad in ("", "X 1 k", "A 0 o k", "A -1 o k", "A 1 o", "E", "A 18446744073709551616 o k", "A ١ o k"):
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
        self.assertEqual(m.match(parse_reply("E bad_lease")), 3)
        self.assertEqual(m.match(parse_reply("E no_leader 42 z")), 4)
        self.assertEqual(m.match(parse_reply("M h:1 42 z")), 5)
        self.assertEqual(m.match(parse_reply("E unknown_command")), 2)
        self.assertEqual(m.match(parse_reply("E bad_wait")), 1)
        self.assertEqual(m.drain(), [])


if __name__ == "__main__":
    unittest.main()
