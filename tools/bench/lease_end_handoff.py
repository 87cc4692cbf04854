#!/usr/bin/env python3
# Usage: tools/bench/lease_end_handoff.py build/bin/lockd [--cluster]
# Hand-off at lease end: a holder takes k<i> with a lease of BASE + STEP*i
# ms and never releases; a waiter queues for each key; latency = the
# waiter's grant arrival - (the holder's A send + its lease). The reply
# leaves after the grant and the lease is counted from the holder's send,
# so this errs high, never low. Single mode: 200 keys, leases 100 + 2i ms.
# --cluster: a 3-node group (--insecure-peers, formed by cluster init, fsync
# on as always), holder and waiter on the leader, whose `Expire` goes
# through the log: 100 keys, leases 300 + 5i ms. (docs/architecture.md
# "Timers a client can see run on a timerfd".)
import os
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "chaos"))
from lockd_chaos.cluster_init import init_cluster, wait_all_joined  # noqa: E402

lockd = sys.argv[1]
cluster = "--cluster" in sys.argv[2:]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def start_single():
    import re
    p = subprocess.Popen([lockd, "--listen", "127.0.0.1:0", "--admin", "off"], stderr=subprocess.PIPE, text=True)
    for line in p.stderr:
        m = re.search(r'listening on 127\.0\.0\.1:(\d+)', line)
        if m:
            return [p], int(m.group(1))
    raise RuntimeError("lockd did not log its address")


def start_cluster():
    root = tempfile.mkdtemp(prefix="handoff-")
    cp, rp, ap = ([free_port() for _ in range(3)] for _ in range(3))
    peers = []
    for k in range(3):
        peers += ["--peer", f"{k + 1}=127.0.0.1:{cp[k]}/127.0.0.1:{rp[k]}"]
    procs = []
    for k in range(3):
        d = os.path.join(root, f"n{k + 1}")
        os.makedirs(d)
        procs.append(subprocess.Popen(
            [lockd, "--mode", "cluster", "--node-id", str(k + 1), *peers, "--data-dir", d,
             "--admin", f"127.0.0.1:{ap[k]}", "--insecure-peers", "--log-level", "warn"],
            stdout=subprocess.DEVNULL, stderr=open(d + ".log", "w")))
    init_cluster(f"127.0.0.1:{ap[0]}")
    wait_all_joined([f"127.0.0.1:{a}" for a in ap])
    for _ in range(100):  # the leader answers a no-op R itself (N), a follower with M
        for k in range(3):
            with socket.create_connection(("127.0.0.1", cp[k])) as s:
                s.sendall(b"R 1 probe\n")
                if s.makefile("rb").readline().startswith(b"N"):
                    return procs, cp[k]
        time.sleep(0.1)
    raise RuntimeError("no leader")


procs, port = start_cluster() if cluster else start_single()
try:
    n, base, step = (100, 300, 5) if cluster else (200, 100, 2)
    holder = socket.create_connection(("127.0.0.1", port))
    waiter = socket.create_connection(("127.0.0.1", port))
    due = {}
    for i in range(n):
        lease = base + step * i
        holder.send(f"A h k{i} {lease}\n".encode())
        due[f"k{i}"] = time.monotonic() + lease / 1000
    time.sleep(0.05)
    waiter.send("".join(f"A w k{i} 60000 20000\n" for i in range(n)).encode())
    buf, lat = b"", []
    waiter.settimeout(10)
    while len(lat) < n:
        buf += waiter.recv(65536)
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            now = time.monotonic()
            f = line.split()
            if f[0] == b"A":
                lat.append((now - due[f[3].decode()]) * 1000)
finally:
    for p in procs:
        p.kill()
lat.sort()
print(f"{'cluster ' if cluster else ''}hand-offs {len(lat)} p50 {lat[len(lat) // 2]:.2f} ms "
      f"p99 {lat[int(len(lat) * 0.99) - 1]:.2f} ms max {lat[-1]:.2f} ms")
