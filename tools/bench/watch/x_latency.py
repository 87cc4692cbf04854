#!/usr/bin/env python3
# Usage: tools/bench/watch/x_latency.py build/bin/lockd
# X latency (issue 34): 1,000 expiries on 50 connections. Every A is sent at
# the start (20 per connection, keys k0..k999), key k<i> with a lease of
# 100 + i/2 ms, so two leases end every half millisecond and the reader is
# idle in between (a burst of X would measure this script, not lockd).
# Latency = X arrival - (the A's send + lease): the grant comes after the
# send, so this errs high, never low (by the A's trip and wait, well under
# a millisecond: measuring from the A reply's arrival instead errs low by
# as much as this script takes to read 1,000 replies, ~2 ms).
import re
import selectors
import socket
import subprocess
import sys
import time

p = subprocess.Popen([sys.argv[1], "--listen", "127.0.0.1:0", "--admin", "off"],
                     stderr=subprocess.PIPE, text=True)
for line in p.stderr:
    m = re.search(r'listening on 127\.0\.0\.1:(\d+)', line)
    if m:
        port = int(m.group(1))
        break
N, PER = 50, 20
conns = [socket.create_connection(("127.0.0.1", port)) for _ in range(N)]
sel = selectors.DefaultSelector()
bufs = {}
for c in conns:
    c.setblocking(False)
    sel.register(c, selectors.EVENT_READ)
    bufs[c] = b""
due, lat = {}, []
for r in range(PER):
    for k, c in enumerate(conns):
        i = r * N + k
        c.send(f"A o k{i} {100 + i // 2}\n".encode())
        due[f"k{i}".encode()] = time.monotonic() + (100 + i // 2) / 1000
start = time.monotonic()
while len(lat) < N * PER and time.monotonic() < start + 5:
    for key, _ in sel.select(0.05):
        s = key.fileobj
        bufs[s] += s.recv(65536)
        while b"\n" in bufs[s]:
            line, bufs[s] = bufs[s].split(b"\n", 1)
            now = time.monotonic()
            f = line.split()
            if f[0] == b"X":
                lat.append((now - due.pop(f[2])) * 1000)
p.kill()
lat.sort()
print(f"expiries {len(lat)} p50 {lat[len(lat) // 2]:.2f} ms p99 {lat[int(len(lat) * 0.99) - 1]:.2f} ms "
      f"max {lat[-1]:.2f} ms")
