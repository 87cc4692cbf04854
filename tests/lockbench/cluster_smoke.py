#!/usr/bin/env python3
"""lockbench's cluster target against a real 3-node lockd cluster.

Starts three `lockd --mode cluster` nodes on free loopback ports (own temp
data dirs, short Raft timeouts), runs `lockbench --cluster` listing a
follower first, kills the leader with SIGKILL once the leader has applied
the bench's first hundred requests (polled on its /v1/status), and
checks that lockbench found the leader, followed it to the new one
(reconnects >= 1), finished with exit 0, zero protocol errors, and kept
completing pairs after the kill. Never asserts speed.

usage: cluster_smoke.py LOCKD LOCKBENCH
"""
import json
import urllib.request
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

DEADLINE_S = 20  # generous: the machine may be busy


# Ports below the kernel's ephemeral range (tools/chaos/lockd_chaos/ports.py).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "chaos"))
from lockd_chaos.ports import free_port  # noqa: E402
from lockd_chaos.cluster_init import init_cluster, wait_all_joined  # noqa: E402


def ask(port, line, timeout=1.0):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout) as s:
            s.settimeout(timeout)
            s.sendall(line.encode() + b"\n")
            return s.makefile("rb").readline().decode().strip()
    except OSError:
        return ""


def applied_index(admin_port):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/v1/status", timeout=1.0) as r:
            return json.loads(r.read())["applied_index"]
    except (OSError, ValueError, KeyError):
        return -1


def main():
    lockd, lockbench = sys.argv[1], sys.argv[2]
    root = tempfile.mkdtemp(prefix="lockbench_cluster.")
    client = [free_port() for _ in range(3)]
    raft = [free_port() for _ in range(3)]
    admin = [free_port() for _ in range(3)]
    peers = []
    for i in range(3):
        peers += ["--peer", f"{i + 1}=127.0.0.1:{client[i]}/127.0.0.1:{raft[i]}"]
    procs = []
    try:
        for i in range(3):
            d = os.path.join(root, f"n{i + 1}")
            os.makedirs(d)
            procs.append(subprocess.Popen(
                [lockd, "--mode", "cluster", "--node-id", str(i + 1), *peers, "--data-dir", d,
                 "--admin", f"127.0.0.1:{admin[i]}", "--election-timeout-ms", "150", "--heartbeat-ms", "30",
                 "--insecure-peers"],
                stderr=open(d + ".log", "wb")))
        init_cluster(f"127.0.0.1:{admin[0]}")  # v1.3: formed once, explicitly
        # Every founder past its start gate before one is killed: one still
        # waiting for the leader's word could not vote once it is gone.
        wait_all_joined([f"127.0.0.1:{a}" for a in admin])
        leader = None
        deadline = time.monotonic() + DEADLINE_S
        while leader is None and time.monotonic() < deadline:
            for i in range(3):
                if ask(client[i], "R 1 smoke-probe").startswith("N "):
                    leader = i
            time.sleep(0.05)
        assert leader is not None, "no leader elected"
        follower = (leader + 1) % 3
        order = [follower] + [i for i in range(3) if i != follower]
        bench = subprocess.Popen(
            [lockbench, "--cluster", ",".join(f"127.0.0.1:{client[i]}" for i in order),
             "-w", "uncontended", "-c", "8", "-d", "4", "--json", "--quiet"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # Kill the leader only once the bench is committing through it: poll
        # its applied index rather than guess how long start-up takes.
        base = applied_index(admin[leader])
        deadline = time.monotonic() + DEADLINE_S
        while applied_index(admin[leader]) < base + 100 and time.monotonic() < deadline:
            assert bench.poll() is None, "lockbench ended before the kill"
            time.sleep(0.02)
        assert applied_index(admin[leader]) >= base + 100, "the bench never reached the leader"
        procs[leader].kill()
        out, err = bench.communicate(timeout=60)
        print(err, file=sys.stderr)
        print(out)
        assert bench.returncode == 0, f"lockbench exit {bench.returncode}"
        rep = json.loads(out)
        c = rep["cluster"]
        assert rep["counters"]["protocol_errors"] == 0
        assert c["reconnects"] >= 1, c
        assert c["leader"] != f"127.0.0.1:{client[leader]}", c  # moved off the dead leader
        assert rep["counters"]["released"] > 0
        print("cluster_smoke: ok")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
