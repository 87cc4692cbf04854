"""One chaos run: start the nodes, run the clients and the fault schedule,
heal, let the clients go on for a while, stop, check the history.

Writes into the run directory:
  history.jsonl   every operation, fault, heal and resource access
  schedule.txt    the fault schedule the seed gave
  report.json     the checker's verdict, counts and availability per fault
  node*/          each node's data dir and logs (one log per start)
"""

import collections
import json
import os
import random
import sys
import threading
import time

from . import checker, hostile, netfault
from .client import Client, Workload
from .history import History, HistoryWriter
from .nemesis import Nemesis
from .nodes import Group, cluster_mode_available
from .resource import FencedCounter
from .schedule import Fault, make_schedule
from .watchers import WatcherGroup, server_supports_watch

NS_PER_MS = 1_000_000

# How long clients get to finish their current cycle after being told to stop.
CLIENT_STOP_TIMEOUT_S = 20


class Options:
    mode = "single"
    nodes = 1
    seed = 1
    duration_s = 30.0
    faults = ("kill",)
    clients = 10
    keys = 3
    lease_ms = 1000
    waits_ms = (0, 0, 300, 1500)
    use_keep = True
    pause_prob = 0.02
    election_timeout_ms = 300
    heartbeat_ms = 50
    lockd = "build/bin/lockd"
    lockd_args = ()         # extra flags for every node
    faultfs = "build/bin/liblockd_faultfs.so"
    out = None
    fast_clock = None       # e.g. 2.0: clocks (monotonic too) run this much fast
    fast_clock_node = None  # only this node's (1-based); None: every node's
    expect_violations = False
    op_timeout_ms = 2000
    recovery_bound_ms = None
    tail_s = None
    upgrade_to = None       # a lockd binary: rolling upgrade to it during the run
    shared_prob = 0.0       # share of cycles that take the key with S (§5b) instead of A
    long_wait_prob = 0.0    # share of A cycles that wait up to 3 leases, then K at once
    cancel_prob = 0.0       # share of cycles whose A (3-lease wait) the client abandons
    watchers_per_node = 0   # watcher clients starting at each node (watchers.py, §5c)
    hostile = None          # a dict of hostile.Load options: hostile-client mode (hostile.py)
    hostile_tls = True      # hostile mode: --client-tls on, TLS handshakes flooded


def _log(msg):
    sys.stderr.write("[chaos %s] %s\n" % (time.strftime("%H:%M:%S"), msg))
    sys.stderr.flush()


def server_supports_keep(addr):
    """True if the server knows K (v1.1): a K for a token nobody holds gets
    `N`, a server without it `E unknown_command`."""
    from .client import LineConn
    host, port = addr.rsplit(":", 1)
    conn = LineConn(host, int(port), 5)
    try:
        conn.send("K 1 chaos/keep-probe 1000\n")
        line = conn.read_line(time.monotonic_ns() + 5_000 * NS_PER_MS)
        if line.startswith("M "):
            return server_supports_keep(line.split()[1])
        return not line.startswith("E unknown_command")
    finally:
        conn.close()


def server_supports_shared(addr):
    """True if the server knows S (v1.2): an S with an out-of-range limit
    gets `E bad_limit` (the parser's answer, on any node), a server
    without S `E unknown_command`."""
    from .client import LineConn
    host, port = addr.rsplit(":", 1)
    conn = LineConn(host, int(port), 5)
    try:
        conn.send("S chaos chaos/shared-probe 70000 1000\n")
        line = conn.read_line(time.monotonic_ns() + 5_000 * NS_PER_MS)
        return line.startswith("E bad_limit")
    finally:
        conn.close()


def shared_limits(keys):
    """The S limit each key is used with: the first a reader-writer lock
    (limit 0), the second a semaphore of 2 permits, the rest read locks."""
    return {k: (2 if i == 1 else 0) for i, k in enumerate(keys)}


def availability(history):
    """Per fault kind: requests sent while such a fault was on, the share
    answered definitely (A/T/B/R/N/K, not M/E/unknown) and grants per
    second; "none" is the time with no fault on."""
    windows = []
    open_ = {}
    for e in sorted(history.nemesis, key=lambda e: e["time_ns"]):
        k = (e["fault"], e.get("node"))
        if e.get("phase") == "start":
            open_[k] = e["time_ns"]
        elif e.get("phase") == "end" and k in open_:
            windows.append((open_.pop(k), e["time_ns"], e["fault"]))
    if not history.ops:
        return {}
    t_first = min(op.invoke_ns for op in history.ops)
    t_last = max(op.invoke_ns for op in history.ops)
    stats = collections.defaultdict(lambda: {"windows": 0, "seconds": 0.0, "ops": 0,
                                             "answered": 0, "grants": 0})
    for s, e, kind in windows:
        stats[kind]["windows"] += 1
        stats[kind]["seconds"] += (e - s) / 1e9
    covered = sum((e - s) for s, e, _ in windows)
    stats["none"]["seconds"] = max(0.0, (t_last - t_first - covered) / 1e9)
    starts = sorted(windows)
    for op in history.ops:
        kind = "none"
        for s, e, k in starts:
            if s <= op.invoke_ns < e:
                kind = k
                break
        st = stats[kind]
        st["ops"] += 1
        if not op.unknown and op.code in ("A", "S", "T", "B", "R", "N", "K"):
            st["answered"] += 1
        if op.granted:
            st["grants"] += 1
    out = {}
    for kind, st in stats.items():
        out[kind] = dict(st)
        out[kind]["answered_pct"] = round(100.0 * st["answered"] / st["ops"], 1) if st["ops"] else None
        out[kind]["grants_per_s"] = round(st["grants"] / st["seconds"], 1) if st["seconds"] else None
        out[kind]["seconds"] = round(st["seconds"], 1)
    return out


def recovery(history):
    """After the heal: time to the first answered request and the first grant."""
    if history.heal_ns is None:
        return {}
    after = [op for op in history.ops if op.invoke_ns >= history.heal_ns]
    answered = [op.complete_ns for op in after if not op.unknown and op.complete_ns
                and op.code in ("A", "S", "T", "B", "R", "N", "K")]
    grants = [op.complete_ns for op in after if op.granted]
    res = {}
    if answered:
        res["first_answer_ms"] = round((min(answered) - history.heal_ns) / NS_PER_MS, 1)
    if grants:
        res["first_grant_ms"] = round((min(grants) - history.heal_ns) / NS_PER_MS, 1)
    return res


def start_watchers(opt, group, addrs, keys, writer, meta):
    """Watchers of every workload key, opt.watchers_per_node starting at
    each node, if the server knows W (v1.3). Recorded in the history
    (watchers.py) and checked by watch_check.py."""
    if not opt.watchers_per_node:
        return None
    if opt.hostile:
        # The watchers speak plain text without H; a hostile run's nodes
        # want TLS and a credential.
        _log("hostile run: no watchers")
        writer.write({"type": "meta", "watchers_per_node": 0})
        return None
    if not server_supports_watch(_leader_addr(group, addrs)):
        _log("server does not answer W: no watchers")
        writer.write({"type": "meta", "watchers_per_node": 0})
        return None
    writer.write({"type": "meta", "watchers_per_node": opt.watchers_per_node})
    w = WatcherGroup(addrs, keys, writer, opt.watchers_per_node, opt.op_timeout_ms)
    w.start()
    return w


def _leader_addr(group, addrs):
    if group.mode == "single":
        return addrs[0]
    leader = group.leader()
    return leader.client_addr if leader is not None else addrs[0]


def run(opt):
    if opt.mode == "cluster" and not cluster_mode_available(opt.lockd, opt.lockd_args):
        raise SystemExit("chaos: %s has no cluster mode yet (exits 2: not available in this "
                         "build)" % opt.lockd)
    out = opt.out or "build/chaos/%s-n%d-seed%d" % (opt.mode, opt.nodes, opt.seed)
    os.makedirs(out, exist_ok=True)
    for name in os.listdir(out):
        if name.endswith(".jsonl") or name in ("report.json", "schedule.txt"):
            os.unlink(os.path.join(out, name))
    kinds = tuple(opt.faults)
    schedule = make_schedule(opt.seed, opt.duration_s, kinds, opt.nodes,
                             opt.election_timeout_ms, opt.mode) if kinds else []
    if opt.upgrade_to:
        # One node at a time, evenly spread: kill -9, then start the new
        # binary on the same data dir a second later.
        for i in range(opt.nodes):
            start = opt.duration_s * (i + 1) / (opt.nodes + 1)
            schedule.append(Fault(start, 1.0, "upgrade", "node%d" % (i + 1), opt.upgrade_to))
        schedule.sort(key=lambda f: f.start_s)
    with open(os.path.join(out, "schedule.txt"), "w") as f:
        for fault in schedule:
            f.write(repr(fault) + "\n")
    octet = 1 + (os.getpid() % 250)
    if opt.recovery_bound_ms is None:
        opt.recovery_bound_ms = opt.lease_ms + (2000 if opt.mode == "single"
                                                else 10 * opt.election_timeout_ms + 3000)
    tail_s = opt.tail_s if opt.tail_s is not None else opt.recovery_bound_ms / 1000 + 5

    writer = HistoryWriter(os.path.join(out, "history.jsonl"))
    meta = {"type": "meta", "mode": opt.mode, "nodes": opt.nodes, "seed": opt.seed,
            "duration_s": opt.duration_s, "faults": list(kinds), "clients": opt.clients,
            "keys": opt.keys, "lease_ms": opt.lease_ms, "waits_ms": list(opt.waits_ms),
            "locks_lost_on_restart": opt.mode == "single",
            "recovery_bound_ms": opt.recovery_bound_ms, "fast_clock": opt.fast_clock,
            "fast_clock_node": opt.fast_clock_node,
            "election_timeout_ms": opt.election_timeout_ms,
            "schedule": [f.to_json() for f in schedule]}
    # Hostile-client mode: auth (and TLS) on; the workload authenticates.
    hsetup = hostile.Setup(out, opt.hostile_tls) if opt.hostile is not None else None
    group = Group(opt.lockd, opt.mode, opt.nodes, out, octet, opt.election_timeout_ms,
                  opt.heartbeat_ms, extra_args=tuple(opt.lockd_args) +
                  (tuple(hsetup.args) if hsetup else ()))
    if hsetup:
        group.set_admin_headers(hsetup.admin_headers)
        meta["hostile"] = dict(opt.hostile, tls=opt.hostile_tls)
    if "clock" in kinds or "clock-restart" in kinds:
        group.enable_faketime()
    if opt.fast_clock:
        # The leader's clock is what leases run on: in single mode that is
        # the one node; in a cluster every node runs fast unless
        # fast_clock_node names one (a fast follower only times out early).
        fast = group.nodes if opt.fast_clock_node is None else \
            [group.nodes[opt.fast_clock_node - 1]]
        group.enable_faketime(nodes=fast, fake_monotonic=True, base="+0 x%s" % opt.fast_clock)
    if "disk" in kinds:
        if not os.path.exists(opt.faultfs):
            raise SystemExit("chaos: disk faults need %s (target lockd_faultfs)" % opt.faultfs)
        group.enable_faultfs(os.path.abspath(opt.faultfs))
    net = None
    if opt.mode == "cluster" and "partition" in kinds:
        if not netfault.available():
            raise SystemExit("chaos: partitions need iptables (tools/install-deps) and root")
        net = netfault.Net(octet)
        net.setup()
    stop = threading.Event()
    threads = []
    nemesis = None
    watchers = None
    load = None
    hostile_nodes = None
    clients = []
    try:
        _log("%s, %d node(s), seed %d, %.0fs, faults %s, %d faults scheduled -> %s"
             % (opt.mode, opt.nodes, opt.seed, opt.duration_s, ",".join(kinds) or "none",
                len(schedule), out))
        group.start()
        if opt.mode == "cluster" and group.wait_leader(30) is None:
            raise RuntimeError("no leader within 30 s of start")
        addrs = group.client_addrs()
        # The probes speak without H; a hostile run's server is this tree's.
        use_keep = opt.use_keep and (hsetup is not None or server_supports_keep(
            addrs[0] if opt.mode == "single" else group.leader().client_addr))
        meta["keep"] = use_keep
        shared_prob = opt.shared_prob
        if shared_prob and hsetup is None and not server_supports_shared(
                addrs[0] if opt.mode == "single" else group.leader().client_addr):
            _log("server does not answer S with E bad_limit: workload runs without S")
            shared_prob = 0.0
        meta["shared_prob"] = shared_prob
        long_wait_prob = opt.long_wait_prob if use_keep else 0.0
        meta["long_wait_prob"] = long_wait_prob
        meta["cancel_prob"] = opt.cancel_prob
        keys = ["chaos/k%d" % i for i in range(opt.keys)]
        limits = shared_limits(keys)
        if shared_prob:
            meta["shared_limits"] = limits
        if opt.use_keep and not use_keep:
            _log("server answers K with E unknown_command: workload runs without K")
        writer.write(meta)
        resource = FencedCounter(writer)
        for i in range(opt.clients):
            c = (hsetup.client_factory() if hsetup else Client)(
                "c%d" % i, addrs, writer, index=i, op_timeout_ms=opt.op_timeout_ms)
            clients.append(c)
            w = Workload(c, resource, random.Random(opt.seed * 1000 + i), keys, opt.lease_ms,
                         opt.waits_ms, use_keep, opt.pause_prob, stop, shared_prob, limits,
                         long_wait_prob, opt.cancel_prob)
            t = threading.Thread(target=w.run, name=c.name, daemon=True)
            t.start()
            threads.append(t)
        watchers = start_watchers(opt, group, addrs, keys, writer, meta)
        if hsetup:
            load = hostile.Load(group, hsetup, opt.seed, _log, **opt.hostile)
            load.start()
        nemesis = Nemesis(group, net, writer, schedule, opt.seed, opt.election_timeout_ms, _log)
        nt = threading.Thread(target=nemesis.run, name="nemesis", daemon=True)
        nt.start()
        nt.join(opt.duration_s + 120)
        if nt.is_alive():
            nemesis.stop.set()
            nt.join(30)
        if nemesis.error is not None:
            raise nemesis.error
        if nemesis.heal_ns is None:
            raise RuntimeError("the nemesis did not finish")
        if load is not None:
            # The hostile load runs the whole duration (with no fault, the
            # nemesis is done at once), then through the tail.
            time.sleep(max(0.0, opt.duration_s - (time.monotonic_ns() - load.started_ns) / 1e9))
        time.sleep(tail_s)
        if load is not None:
            t0 = time.monotonic()
            load.stop()
            _log("hostile load stopped in %.1f s" % (time.monotonic() - t0))
            hostile_nodes = hostile.node_state(group, kinds)
            hostile_metrics = {"node%d" % n.id: hostile.node_metrics(n, hsetup.admin_headers)
                               for n in group.nodes}
        stop.set()
        for t in threads:
            t.join(CLIENT_STOP_TIMEOUT_S)
        stuck = [t.name for t in threads if t.is_alive()]
        if stuck:
            _log("clients still busy after stop: %s" % stuck)
        resource.finish()
        if watchers is not None:
            watchers.finish(lambda: _leader_addr(group, addrs), log=_log)
    finally:
        stop.set()
        if watchers is not None:
            watchers.stop.set()
        if load is not None:
            load.stop()
        if nemesis is not None:
            nemesis.stop.set()
        writer.close()
        group.stop()
        if net is not None:
            net.teardown()

    history = History.load(os.path.join(out, "history.jsonl"))
    violations, report = checker.check(history)
    if load is not None:
        hv, hr = hostile.check(history, *hostile_nodes, load, opt.recovery_bound_ms)
        violations += hv
        report["violations_total"] = report.get("violations_total", 0) + len(hv)
        report["hostile"] = dict(hr, load=load.report(), nodes=hostile_nodes[0],
                                 node_metrics=hostile_metrics,
                                 connect_retries=sum(getattr(t, "connect_retries", 0)
                                                     for t in clients))
    report["availability"] = availability(history)
    report["recovery_after_heal"] = recovery(history)
    report["seed"] = opt.seed
    report["mode"] = opt.mode
    report["nodes"] = opt.nodes
    report["expect_violations"] = opt.expect_violations
    report["violation_samples"] = [v.to_json() for v in violations[:20]]
    with open(os.path.join(out, "report.json"), "w") as f:
        json.dump(report, f, indent=1, sort_keys=True, default=str)
    return violations, report, out
