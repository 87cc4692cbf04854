#!/usr/bin/env python3
"""A stand-in for `lockd --mode=cluster`, only to exercise the chaos runner's
cluster paths (flags, start/restart, leader discovery, redirects, faults)
before the real cluster mode exists. Node 1 always leads and keeps the lock
table in memory (so a restart of node 1 loses locks, as single mode does);
the other nodes answer `M <node 1's client addr> <echo>`. To stay safe
across its own restarts it keeps a token high-water mark in its data dir
and answers `E no_leader` for a grace period longer than any lease the
runner uses after it starts. Not a model of lockd's cluster semantics.

--bug=overlap makes the leader grant a held key anyway, to show the
runner and checker catch it end to end.

Watches (protocol.md §5c, `W`/`V` only, on the leader): `rev` is drawn
from the token counter at each change; a key is `held` by its last grant until released or
handed on (an expired holder stays, as in lockd until takeover).
--bug=stale-watch pushes every 5th change to the key's first watcher as
the state before it (the others get the right one), to show the watch
checker catches a server that tells a watcher a stale state."""

import argparse
import asyncio
import collections
import json
import os
import sys
import time

# Longer than the runner's leases (1000 ms): locks lost in a restart of
# node 1 have all ended before it grants again.
GRACE_S = 1.5
# Tokens reserved per write of the high-water file.
TOKEN_BATCH = 1000


def parse():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode")
    ap.add_argument("--node-id", type=int)
    ap.add_argument("--peer", action="append", default=[])
    ap.add_argument("--data-dir")
    ap.add_argument("--admin")
    ap.add_argument("--log-level")
    ap.add_argument("--election-timeout-ms")
    ap.add_argument("--heartbeat-ms")
    ap.add_argument("--peer-secret-file")
    ap.add_argument("--insecure-peers", action="store_true")
    ap.add_argument("--bug", default=None)
    return ap.parse_args()


class Table:
    def __init__(self, bug, data_dir):
        self.bug = bug
        self.path = os.path.join(data_dir, "fake-token")
        try:
            with open(self.path) as f:
                self.next_token = int(f.read())
        except (OSError, ValueError):
            self.next_token = 1
        self.reserved = self.next_token
        self.keys = {}                       # key -> [token, expiry_s, owner]
        self.rev = self.next_token       # above every rev before a restart (revs are drawn
                                         # from the token counter, whose high-water is stored)
        self.watchers = collections.defaultdict(dict)  # key -> writers watching it, in order
        self.changes = 0
        self.queues = collections.defaultdict(collections.deque)

    def token(self):
        self.next_token += 1
        if self.next_token >= self.reserved:
            self.reserved = self.next_token + TOKEN_BATCH
            with open(self.path + ".tmp", "w") as f:
                f.write(str(self.reserved))
                f.flush()
                os.fsync(f.fileno())
            os.replace(self.path + ".tmp", self.path)
        return self.next_token

    def held(self, key):
        k = self.keys.get(key)
        return k is not None and k[1] > time.monotonic()

    def grant(self, key, lease_ms, owner):
        t = self.token()
        before = self.state(key)
        self.keys[key] = [t, time.monotonic() + lease_ms / 1000, owner]
        self.changed(key, before)
        return t

    def state(self, key):
        k = self.keys.get(key)
        return "free" if k is None else "held %s %d" % (k[2], k[0])

    def changed(self, key, before):
        self.rev = self.token()
        self.changes += 1
        state = self.state(key)
        stale = self.bug == "stale-watch" and self.changes % 5 == 0
        for i, w in enumerate(list(self.watchers[key])):
            w.write(("V %s %d %s\n" % (key, self.rev, before if stale and i == 0 else state))
                    .encode())

    def hand_off(self, key):
        q = self.queues[key]
        while q:
            owner, lease_ms, fut = q.popleft()
            if not fut.done():
                fut.set_result("A %d %s %s" % (self.grant(key, lease_ms, owner), owner, key))
                return
        before = self.state(key)
        if self.keys.pop(key, None) is not None:
            self.changed(key, before)


async def disk_loop(data_dir):
    """Writes and syncs a file in the data dir every 50 ms, as a WAL would,
    and stops the process on an I/O error (fail-stop), so the runner's disk
    faults (through the faultfs shim) have something to hit."""
    path = os.path.join(data_dir, "fake-wal")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    while True:
        try:
            os.write(fd, b"x" * 64)
            os.fdatasync(fd)
            os.fsync(fd)
        except OSError as e:
            print("fake lockd: disk error, stopping: %s" % e, flush=True)
            os._exit(1)
        await asyncio.sleep(0.05)


async def expiry_loop(table):
    while True:
        await asyncio.sleep(0.005)
        now = time.monotonic()
        for key, (tok, exp) in list(table.keys.items()):
            if exp <= now and table.queues[key]:
                table.hand_off(key)


async def main():
    a = parse()
    me = a.node_id
    peers = {}
    for p in a.peer:
        i, rest = p.split("=", 1)
        client, _raft = rest.split("/")
        peers[int(i)] = client
    leader_addr = peers[1]
    table = Table(a.bug, a.data_dir)
    serve_from = time.monotonic() + GRACE_S

    async def handle(reader, writer):
        try:
            while True:
                line = await reader.readline()
                if not line:
                    return
                f = line.decode().split()
                if not f:
                    continue
                echo = " ".join(f[1:3]) if f[0] == "A" else " ".join(f[1:3])
                if me != 1:
                    writer.write(("M %s %s\n" % (leader_addr, echo)).encode())
                elif time.monotonic() < serve_from:
                    writer.write(("E no_leader %s\n" % echo).encode())
                elif f[0] == "A":
                    owner, key, lease, wait = f[1], f[2], int(f[3]), int(f[4])
                    if not table.held(key) or a.bug == "overlap":
                        writer.write(("A %d %s %s\n" % (table.grant(key, lease, owner), owner,
                                                         key)).encode())
                    elif wait == 0:
                        writer.write(("T %s %s\n" % (owner, key)).encode())
                    else:
                        fut = asyncio.get_running_loop().create_future()
                        table.queues[key].append((owner, lease, fut))

                        async def deliver(fut=fut, owner=owner, key=key, wait=wait):
                            try:
                                reply = await asyncio.wait_for(asyncio.shield(fut), wait / 1000)
                            except asyncio.TimeoutError:
                                if fut.done() and not fut.cancelled():
                                    # Handed the key as the wait ran out: a
                                    # grant, not T (the watchers caught this).
                                    reply = fut.result()
                                else:
                                    fut.cancel()
                                    reply = "T %s %s" % (owner, key)
                            writer.write((reply + "\n").encode())
                        asyncio.ensure_future(deliver())
                elif f[0] == "W" and len(f) == 2:
                    table.watchers[f[1]][writer] = True
                    writer.write(("W %s %d %s\n" % (f[1], table.rev, table.state(f[1]))).encode())
                elif f[0] in ("R", "K"):
                    tok, key = int(f[1]), f[2]
                    k = table.keys.get(key)
                    if k is None or k[0] != tok or (f[0] == "K" and k[1] <= time.monotonic()):
                        writer.write(("N %d %s\n" % (tok, key)).encode())
                    elif f[0] == "R":
                        table.hand_off(key)
                        writer.write(("R %d %s\n" % (tok, key)).encode())
                    else:
                        k[1] = time.monotonic() + int(f[3]) / 1000
                        writer.write(("K %d %s\n" % (tok, key)).encode())
                else:
                    writer.write(b"E unknown_command\n")
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            for ws in table.watchers.values():
                ws.pop(writer, None)
            writer.close()

    async def admin(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        body = json.dumps({"mode": "cluster", "node_id": me,
                           "role": "leader" if me == 1 else "follower",
                           "leader": leader_addr, "term": 1}).encode()
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                     + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)
        await writer.drain()
        writer.close()

    host, port = peers[me].rsplit(":", 1)
    server = await asyncio.start_server(handle, host, int(port), reuse_address=True)
    ahost, aport = a.admin.rsplit(":", 1)
    await asyncio.start_server(admin, ahost, int(aport), reuse_address=True)
    print("fake lockd listening on %s (mode=cluster)" % peers[me], flush=True)
    asyncio.ensure_future(expiry_loop(table))
    asyncio.ensure_future(disk_loop(a.data_dir))
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    if "--mode=cluster" not in sys.argv:
        sys.exit(2)
    asyncio.run(main())
