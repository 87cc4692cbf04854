#!/usr/bin/env python3
# Usage: tools/bench/watch/watch_memory.py build/bin/lockd 9000   (needs ulimit -n above N)
# Memory per watch: RSS of lockd with N idle connections, then after each
# watches one key (and then 16 keys each).
import socket, subprocess, time, re, sys, resource
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
N=int(sys.argv[2])
p = subprocess.Popen([sys.argv[1],"--listen","127.0.0.1:0","--max-connections","100000","--admin","127.0.0.1:0"],stderr=subprocess.PIPE,text=True)
for line in p.stderr:
    m=re.search(r'listening on 127\.0\.0\.1:(\d+)',line)
    if m: port=int(m.group(1)); break
def rss():
    for l in open(f"/proc/{p.pid}/status"):
        if l.startswith("VmRSS"): return int(l.split()[1])*1024
conns=[socket.create_connection(("127.0.0.1",port)) for _ in range(N)]
for c in conns: c.sendall(b"U x\n")
for c in conns: c.recv(100)
time.sleep(0.5); base=rss()
for c in conns: c.sendall(b"W leader\n")
for c in conns: c.recv(100)
time.sleep(0.5); one=rss()
for c in conns: c.sendall(b"".join(b"W k%d\n"%i for i in range(16)))
for c in conns:
    got=b""
    while got.count(b"\n")<16: got+=c.recv(4096)
time.sleep(0.5); many=rss()
print(f"{N} connections: idle {base/1e6:.1f} MB; +1 watch each (one key): {(one-base)/N:.0f} B/watch; +16 keys each: {(many-one)/(16*N):.0f} B/watch")
p.kill()
