"""The runner's cluster paths end to end against fake_lockd.py (node 1
leads, the others redirect): start, leader discovery, redirects, K, kill -9
and restart, SIGSTOP, iptables partitions, clock jumps with restarts, heal,
check, watchers. A fake server that grants held keys, or pushes watchers a
stale state, must be caught."""

import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "chaos"))

from lockd_chaos import runner  # noqa: E402


def options(out, **kw):
    opt = runner.Options()
    opt.mode, opt.nodes = "cluster", 3
    opt.lockd = os.path.join(HERE, "fake_lockd.py")
    opt.out = out
    opt.clients = 6
    opt.recovery_bound_ms = 2000
    opt.tail_s = 6
    for k, v in kw.items():
        setattr(opt, k, v)
    return opt


class FakeClusterTest(unittest.TestCase):
    def test_faults_against_a_safe_fake(self):
        with tempfile.TemporaryDirectory() as d:
            # Seed 9 draws majority/minority and flapping partitions, a kill
            # and a wall-clock jump in 14 s.
            violations, report, _ = runner.run(options(
                d, seed=9, duration_s=14, faults=("kill", "pause", "partition", "clock"),
                watchers_per_node=1))
            self.assertEqual([v.message for v in violations], [])
            self.assertGreater(report["watch_pushes"], 20)       # watchers ran and were checked
            self.assertGreater(report["watch_final_checked"], 0)
            self.assertEqual(report["faults"], {"partition": 2, "kill": 1, "clock": 1})
            self.assertGreater(report["grants"], 20)
            self.assertGreater(report["codes"].get("M", 0), 0)   # redirects were followed
            self.assertGreater(report["codes"].get("K", 0), 0)   # K was sent and acknowledged

    def test_disk_faults_through_the_shim(self):
        shim = os.environ.get("LOCKD_FAULTFS_LIB", "")
        self.assertTrue(os.path.exists(shim), "set LOCKD_FAULTFS_LIB to liblockd_faultfs.so "
                        "(ctest does)")
        with tempfile.TemporaryDirectory() as d:
            # Seed 23: an isolated node, `fdatasync EIO` on one node, a kill.
            violations, report, _ = runner.run(options(
                d, seed=23, duration_s=14, faults=("kill", "pause", "partition", "clock", "disk"),
                faultfs=shim))
            self.assertEqual([v.message for v in violations], [])
            self.assertEqual(report["faults"].get("disk"), 1)
            with open(os.path.join(d, "history.jsonl")) as f:
                ends = [line for line in f if '"fault":"disk"' in line and '"end"' in line]
            self.assertIn('"restarted":true', ends[0])   # the fake stopped on EIO

    def test_overlapping_grants_caught(self):
        with tempfile.TemporaryDirectory() as d:
            violations, report, _ = runner.run(options(
                d, seed=1, duration_s=4, faults=(), lockd_args=("--bug=overlap",)))
            self.assertGreater(report["violations"].get("exclusion", 0), 0)

    def test_stale_watch_states_caught(self):
        with tempfile.TemporaryDirectory() as d:
            violations, report, _ = runner.run(options(
                d, seed=1, duration_s=4, faults=(), lockd_args=("--bug=stale-watch",),
                watchers_per_node=1))
            self.assertEqual(report["violations"].get("exclusion", 0), 0)
            self.assertGreater(sum(n for check, n in report["violations"].items()
                                   if check.startswith("watch")), 0)


if __name__ == "__main__":
    unittest.main()
