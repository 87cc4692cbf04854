"""The fault mechanisms themselves, without lockd: an iptables cut really
drops packets between two node addresses and leaves nothing behind, and
libfaketime moves the wall clock of a process but not its monotonic clock.
Needs root, iptables and libfaketime (tools/install-deps; CI runs as root)."""

import os
import socket
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools", "chaos"))

from lockd_chaos import netfault  # noqa: E402
from lockd_chaos.nodes import LIBFAKETIME, remove_faketime_shm  # noqa: E402

# An address block no chaos run uses (runs take 1..250 from their pid).
OCTET = 253


def connect(src, dst, port, timeout_s):
    s = socket.socket()
    s.bind((src, 0))
    s.settimeout(timeout_s)
    try:
        s.connect((dst, port))
        return True
    except OSError:
        return False
    finally:
        s.close()


class PartitionTest(unittest.TestCase):
    def test_cut_drops_and_heal_restores(self):
        self.assertTrue(netfault.available(), "iptables is missing or we are not root")
        a, b = "127.77.%d.1" % OCTET, "127.77.%d.2" % OCTET
        server = socket.socket()
        server.bind((b, 0))
        server.listen(8)
        port = server.getsockname()[1]
        net = netfault.Net(OCTET)
        try:
            net.setup()
            self.assertTrue(connect(a, b, port, 2))
            net.cut(a, b)
            self.assertFalse(connect(a, b, port, 0.5))
            self.assertTrue(connect("127.0.0.1", b, port, 2))   # clients are never cut
            net.heal()
            self.assertTrue(connect(a, b, port, 2))
        finally:
            net.teardown()
            server.close()
        out = subprocess.run(["iptables", "-w", "-S"], capture_output=True, text=True).stdout
        self.assertNotIn(net.chain, out)

    def test_setup_flushes_leftovers(self):
        net = netfault.Net(OCTET)
        try:
            net.setup()
            net.cut("127.77.%d.1" % OCTET, "127.77.%d.2" % OCTET)
            again = netfault.Net(OCTET)     # as after a crashed run
            again.setup()
            out = subprocess.run(["iptables", "-w", "-S", net.chain],
                                 capture_output=True, text=True).stdout
            self.assertNotIn("DROP", out)
            rules = subprocess.run(["iptables", "-w", "-S", "OUTPUT"],
                                   capture_output=True, text=True).stdout
            self.assertEqual(rules.count(net.chain), 1)
        finally:
            net.teardown()


class FaketimeTest(unittest.TestCase):
    def test_wall_clock_jumps_monotonic_does_not(self):
        self.assertTrue(os.path.exists(LIBFAKETIME), "libfaketime is missing")
        with tempfile.TemporaryDirectory(prefix="lockd-chaos-faketime-") as d:
            stamp = os.path.join(d, "timestamp")
            with open(stamp, "w") as f:
                f.write("-86400\n")
            env = dict(os.environ, LD_PRELOAD=LIBFAKETIME,
                       FAKETIME_TIMESTAMP_FILE=stamp,
                       FAKETIME_DONT_FAKE_MONOTONIC="1")
            before = time.monotonic()
            p = subprocess.Popen([sys.executable, "-c",
                                  "import time; print(time.time(), time.monotonic())"],
                                 env=env, stdout=subprocess.PIPE, text=True)
            out = p.communicate()[0]
            after = time.monotonic()
            remove_faketime_shm(p.pid)
            self.assertEqual(p.returncode, 0)
        wall, mono = map(float, out.split())
        self.assertAlmostEqual(wall, time.time() - 86400, delta=60)
        self.assertTrue(before - 1 <= mono <= after + 1)


if __name__ == "__main__":
    unittest.main()
