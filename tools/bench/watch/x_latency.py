#!/usr/bin/env python3
# Usage: tools/bench/watch/x_latency.py build/bin/lockd
# X latency: 1,000 expiries on 50 connections, each A with lease 100 ms;
# latency = X arrival - (A reply arrival + lease). A reply arrives after the
# grant, so this over-estimates by the reply's trip; good enough as an upper bound.
import socket, subprocess, time, re, selectors, sys
p = subprocess.Popen([sys.argv[1],"--listen","127.0.0.1:0"],stderr=subprocess.PIPE,text=True)
for line in p.stderr:
    m=re.search(r'listening on 127\.0\.0\.1:(\d+)',line)
    if m: port=int(m.group(1)); break
N=50; PER=20; LEASE=100
conns=[socket.create_connection(("127.0.0.1",port)) for _ in range(N)]
sel=selectors.DefaultSelector()
bufs={}
for c in conns: c.setblocking(False); sel.register(c, selectors.EVENT_READ); bufs[c]=b""
due={}; lat=[]
import random
for r in range(PER):
    for i,c in enumerate(conns):
        c.send(f"A o k{r}-{i} {LEASE}\n".encode())
    t_end=time.monotonic()+0.013
    while time.monotonic()<t_end or (r==PER-1 and len(lat)<N*PER and time.monotonic()<t_end+5):
        for key,_ in sel.select(0.002):
            s=key.fileobj; bufs[s]+=s.recv(65536)
            while b"\n" in bufs[s]:
                line,bufs[s]=bufs[s].split(b"\n",1); now=time.monotonic(); f=line.split()
                if f[0]==b"A": due[f[1]]=now+LEASE/1000
                elif f[0]==b"X": lat.append((now-due.pop(f[1]))*1000)
        if r==PER-1 and len(lat)>=N*PER: break
lat.sort()
print(f"expiries {len(lat)} p50 {lat[len(lat)//2]:.2f} ms p99 {lat[int(len(lat)*0.99)-1]:.2f} ms max {lat[-1]:.2f} ms")
p.kill()
