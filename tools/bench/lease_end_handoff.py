#!/usr/bin/env python3
# Usage: tools/bench/lease_end_handoff.py build/bin/lockd
# Hand-off at lease end: a holder takes k<i> with a lease of 100 + 2i ms
# and never releases; a waiter queues for each key; latency = the waiter's
# grant arrival - (the holder's A send + its lease). 200 keys, leases
# ending 2 ms apart.
# The reply leaves after the grant and the lease is counted from the
# holder's send, so this errs high, never low. (Single mode; see
# docs/architecture.md "Timers a client can see run on a timerfd".)
import re, socket, subprocess, sys, time
p = subprocess.Popen([sys.argv[1], "--listen", "127.0.0.1:0", "--admin", "off"], stderr=subprocess.PIPE, text=True)
for line in p.stderr:
    m = re.search(r'listening on 127\.0\.0\.1:(\d+)', line)
    if m: port = int(m.group(1)); break
holder = socket.create_connection(("127.0.0.1", port))
waiter = socket.create_connection(("127.0.0.1", port))
N = 200
due = {}
for i in range(N):
    L = 100 + 2 * i
    holder.send(f"A h k{i} {L}\n".encode())
    due[f"k{i}"] = time.monotonic() + L / 1000
time.sleep(0.02)
waiter.send("".join(f"A w k{i} 60000 10000\n" for i in range(N)).encode())
buf = b""; lat = []
waiter.settimeout(5)
while len(lat) < N:
    buf += waiter.recv(65536)
    while b"\n" in buf:
        line, buf = buf.split(b"\n", 1)
        now = time.monotonic(); f = line.split()
        if f[0] == b"A": lat.append((now - due[f[3].decode()]) * 1000)
p.kill(); lat.sort()
print(f"hand-offs {len(lat)} p50 {lat[len(lat)//2]:.2f} ms p99 {lat[int(len(lat)*0.99)-1]:.2f} ms max {lat[-1]:.2f} ms")
