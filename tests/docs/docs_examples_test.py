#!/usr/bin/env python3
"""The shell examples of README.md and docs/protocol.md, run as written
against real lockd processes (issue 25: one port layout; examples that run
on a stock Debian).

- README's "Cluster mode" block (verbatim but for ./build/bin -> this
  build and /tmp -> a scratch dir) next to a single-mode lockd on its
  default ports, as README's tools/run-single starts it: every node comes
  up, lockctl with README's LOCKD_ADDR/LOCKD_ADMIN sees the cluster, and
  lockctl with no address still reaches the single-mode lockd.
- README's /dev/tcp session and docs/protocol.md's worked session (two
  terminals) and Keep's session against that single-mode lockd, output compared line by line (tokens
  differ: the n-th token of the doc stands for the n-th token seen).

The README's ports are fixed, so everything runs in a private network
namespace (unshare -n as root, unshare -rn otherwise): nothing else on the
machine can hold them, and nothing here disturbs anything else.

Environment: LOCKD_SRC (the source tree), LOCKD_BIN_DIR (lockd, lockctl).
"""

import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest

SRC = os.environ.get("LOCKD_SRC", os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("LOCKD_BIN_DIR", os.path.join(SRC, "build", "bin"))
DEADLINE_S = 30

TOKEN = re.compile(r"^\d{10,20}$")


def read(path):
    with open(path, errors="replace") as f:
        return f.read()


def blocks(path, lang):
    """The fenced blocks of `lang` in a markdown file, each as (text before
    it since the previous block, its lines)."""
    out, before, inside, lines = [], [], None, []
    for line in read(path).splitlines():
        if inside is None and line.startswith("```"):
            inside = line[3:].strip()
            lines = []
        elif inside is not None and line.startswith("```"):
            if inside == lang:
                out.append(("\n".join(before), lines))
                before = []
            inside = None
        elif inside is not None:
            lines.append(line)
        else:
            before.append(line)
    return out


class Shell:
    """One bash process kept open (a terminal): commands run in order in
    it, so `exec 3<>/dev/tcp/...` carries over; stdout is read back per
    command, stderr goes to `log`."""

    def __init__(self, log, env=None):
        self.log = open(log, "ab")  # closed by close()
        self.proc = subprocess.Popen(["bash", "--norc", "--noprofile"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log, env=env, text=True,
                                     bufsize=1)
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.n = 0

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def send(self, command):
        """Starts `command`; collect() reads its output."""
        self.n += 1
        marker = "__lockd_docs_done_%d__" % self.n
        self.proc.stdin.write(command + "\nprintf '\\n%s %d\\n' " + marker + " $?\n")
        self.proc.stdin.flush()
        return marker

    def collect(self, marker, timeout=DEADLINE_S):
        out, end = [], time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, end - time.monotonic()))
            except queue.Empty:
                raise AssertionError("no end of command output in %d s; so far %r" % (timeout, out))
            if line is None:
                raise AssertionError("the shell exited; output %r" % out)
            if line.startswith(marker + " "):
                while out and out[-1] == "":
                    out.pop()
                return out, int(line.split()[1])
            out.append(line)

    def run(self, command, timeout=DEADLINE_S):
        return self.collect(self.send(command), timeout)

    def close(self):
        self.proc.stdin.write("kill $(jobs -p) 2>/dev/null; wait\nexit\n")
        self.proc.stdin.flush()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.proc.stdin.close()
        self.proc.stdout.close()
        self.log.close()


class Tokens:
    """The doc's tokens -> the ones this run got, in order of appearance."""

    def __init__(self):
        self.map = {}

    def command(self, text):
        for doc, real in self.map.items():
            text = text.replace(doc, real)
        return text

    def check(self, case, expected, actual, where):
        case.assertEqual(len(expected), len(actual), "%s: expected %r, got %r" % (where, expected, actual))
        for e, a in zip(expected, actual):
            ef, af = e.split(), a.split()
            case.assertEqual(len(ef), len(af), "%s: expected %r, got %r" % (where, e, a))
            for x, y in zip(ef, af):
                if TOKEN.match(x) and TOKEN.match(y) and x not in self.map and y not in self.map.values():
                    self.map[x] = y
                case.assertEqual(self.map.get(x, x), y, "%s: expected %r, got %r" % (where, e, a))


def session(lines):
    """A console block as [(command, [expected output lines])]."""
    out = []
    for line in lines:
        if line.startswith("$ "):
            out.append((line[2:], []))
        elif out:
            out[-1][1].append(line)
    return out


def run_session(case, shell, tokens, lines, where, pending_last=False):
    """Runs a console block in `shell`; with pending_last the last command's
    output is not in the block (it waits): returns its marker."""
    steps = session(lines)
    for i, (command, expected) in enumerate(steps):
        if pending_last and i == len(steps) - 1:
            case.assertEqual(expected, [], where)
            return shell.send(tokens.command(command))
        actual, _ = shell.run(tokens.command(command))
        tokens.check(case, expected, actual, "%s: $ %s" % (where, command))
    return None


def wait_listening(log, needle):
    end = time.monotonic() + DEADLINE_S
    while time.monotonic() < end:
        if needle in read(log):
            return True
        time.sleep(0.05)
    return False


class DocsExamples(unittest.TestCase):
    def setUp(self):
        # Each test as a new user would start: a fresh single-mode lockd,
        # as tools/run-single runs it once it has built lockd.
        self.work = tempfile.mkdtemp(prefix="lockd-docs-")
        self.addCleanup(shutil.rmtree, self.work, True)
        self.single_log = os.path.join(self.work, "single.log")
        with open(self.single_log, "wb") as log:
            self.single = subprocess.Popen([os.path.join(BIN, "lockd"), "--mode=single"], stderr=log)
        self.addCleanup(self.stop_single)
        if not wait_listening(self.single_log, "admin listening on 127.0.0.1:7071"):
            raise AssertionError("single mode did not start: " + read(self.single_log))

    def stop_single(self):
        self.single.terminate()
        self.single.wait(timeout=20)

    def env(self):
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKD_")}
        env["PATH"] = BIN + os.pathsep + env.get("PATH", "")
        return env

    def test_readme_cluster_beside_single_mode(self):
        text = read(os.path.join(SRC, "README.md"))
        at = text.index("### Cluster mode")
        block = [b for b in blocks(os.path.join(SRC, "README.md"), "sh")
                 if text.find("\n".join(b[1]), at) != -1][0][1]
        # /tmp first: BIN itself may lie under /tmp (a fresh clone there).
        block = [line.replace("/tmp/", self.work + "/").replace("./build/bin/", BIN + "/") for line in block]
        first_ctl = next(i for i, line in enumerate(block) if line.startswith(BIN + "/lockctl"))
        shell = Shell(os.path.join(self.work, "cluster.log"), self.env())
        self.addCleanup(shell.close)
        _, rc = shell.run("\n".join(block[:first_ctl]))
        self.assertEqual(rc, 0)
        outputs = {}
        for line in block[first_ctl:]:
            command = line.split("#")[0].strip()
            end = time.monotonic() + DEADLINE_S
            while True:  # the group elects its leader meanwhile
                out, rc = shell.run(command)
                # The verb, not the whole line: the binary's path may hold
                # "cluster" too (a checkout named cluster-...).
                if rc == 0 and (command.split()[1] != "cluster" or
                                any(re.match(r"\d+\s+leader\s", l) for l in out)):
                    break
                self.assertLess(time.monotonic(), end, "%s: exit %d, %r; logs:\n%s" % (
                    command, rc, out, read(os.path.join(self.work, "cluster.log"))))
                time.sleep(0.1)
            outputs[command.split()[1]] = out
        members = "\n".join(outputs["cluster"])
        for port in ("7110", "7120", "7130"):
            self.assertIn("127.0.0.1:" + port, members)
        self.assertRegex(outputs["acquire"][0], r"^A \d+ alice orders/42$")
        # Side by side: single mode kept its ports, and lockctl without
        # LOCKD_ADDR/LOCKD_ADMIN (its defaults) still goes there.
        self.assertIsNone(self.single.poll(), read(self.single_log))
        status = subprocess.run([os.path.join(BIN, "lockctl"), "--json", "status"], env=self.env(),
                                capture_output=True, text=True, timeout=DEADLINE_S)
        self.assertEqual(status.returncode, 0, status.stderr)
        self.assertIn('"mode":"single"', status.stdout.replace(" ", ""))
        log = read(os.path.join(self.work, "cluster.log"))
        self.assertNotIn("in use", log)
        for node in (1, 2, 3):
            self.assertIn("listening on 127.0.0.1:71%d0 (mode=cluster" % node, log)

    def test_readme_session(self):
        _, lines = blocks(os.path.join(SRC, "README.md"), "console")[0]
        shell = Shell(os.path.join(self.work, "readme.log"), self.env())
        self.addCleanup(shell.close)
        run_session(self, shell, Tokens(), lines, "README.md")

    def test_protocol_sessions(self):
        path = os.path.join(SRC, "docs", "protocol.md")
        consoles = blocks(path, "console")
        self.assertGreaterEqual(len(consoles), 4, "docs/protocol.md's sessions moved: update this test")
        tokens = Tokens()
        # "A worked session": two terminals; bob's last acquire waits, and
        # its reply is the plain block after alice's release.
        t1 = Shell(os.path.join(self.work, "t1.log"), self.env())
        t2 = Shell(os.path.join(self.work, "t2.log"), self.env())
        self.addCleanup(t1.close)
        self.addCleanup(t2.close)
        self.assertIn("Terminal 1", consoles[0][0])
        run_session(self, t1, tokens, consoles[0][1], "protocol.md terminal 1")
        self.assertIn("Terminal 2", consoles[1][0])
        waiting = run_session(self, t2, tokens, consoles[1][1], "protocol.md terminal 2", pending_last=True)
        self.assertIn("Terminal 1", consoles[2][0])
        run_session(self, t1, tokens, consoles[2][1], "protocol.md terminal 1")
        arrived = [b for b in blocks(path, "") if "pending line arrives" in b[0]][0][1]
        actual, _ = t2.collect(waiting)
        tokens.check(self, arrived, actual, "protocol.md: bob's pending line")
        alice = re.search(r"^A (\d+) alice ", "\n".join(consoles[0][1]), re.M).group(1)
        self.assertGreater(int(actual[0].split()[1]), int(tokens.map[alice]))  # a larger token
        # Keep's session (found by its key, wherever it moves on the page).
        keep = [lines for _, lines in consoles if any("report/7" in line for line in lines)]
        self.assertEqual(len(keep), 1, "docs/protocol.md's keep session moved: update this test")
        shell = Shell(os.path.join(self.work, "keep.log"), self.env())
        self.addCleanup(shell.close)
        run_session(self, shell, Tokens(), keep[0], "protocol.md keep session")


def main():
    if os.environ.get("LOCKD_DOCS_NETNS") != "1":
        os.environ["LOCKD_DOCS_NETNS"] = "1"
        flags = "-n" if os.geteuid() == 0 else "-rn"
        os.execvp("unshare", ["unshare", flags, sys.executable] + sys.argv)
    ip = shutil.which("ip") or shutil.which("ip", path="/usr/sbin:/sbin")
    subprocess.run([ip, "link", "set", "lo", "up"], check=True)
    unittest.main()


if __name__ == "__main__":
    main()
