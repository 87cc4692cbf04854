"""examples/leader_election/python run exactly as docs/clients.md shows,
two candidates against a real lockd for about two seconds (C14)."""

import os
import subprocess
import sys
import time
import unittest

from tests.support import ROOT, Lockd

EXAMPLE = os.path.join(ROOT, "examples", "leader_election", "python", "leader_election.py")


class LeaderElectionExampleTest(unittest.TestCase):
    def test_two_candidates_lead_in_turn(self):
        d = Lockd()
        self.addCleanup(d.stop)
        run = [sys.executable, EXAMPLE, "--address", d.address, "--key", "election/demo", "--lease-ms", "1000"]
        a = subprocess.Popen(run + ["--name", "node-a", "--lead-for", "1.5"], stdout=subprocess.PIPE, text=True)
        self.addCleanup(a.kill)
        first = ""
        end = time.monotonic() + 10
        while "elected" not in first and time.monotonic() < end:
            first += a.stdout.readline()
        self.assertIn("node-a: elected", first)
        b = subprocess.Popen(run + ["--name", "node-b", "--lead-for", "0.2"], stdout=subprocess.PIPE, text=True)
        self.addCleanup(b.kill)
        out_a, _ = a.communicate(timeout=20)
        out_b, _ = b.communicate(timeout=20)
        self.assertEqual((a.returncode, b.returncode), (0, 0), first + out_a + out_b)
        self.assertIn("node-a: resigned", out_a)
        self.assertIn("node-b: elected", out_b)
        self.assertIn("node-b: resigned", out_b)
        self.assertIn("node-b: leader is now node-a", out_b)   # observed (W, V)
        self.assertIn("node-b: leader is now node-b", out_b)


if __name__ == "__main__":
    unittest.main()
