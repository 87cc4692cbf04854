#!/usr/bin/env python3
"""lockd chaos runner and checker.

  chaos.py run [options]        start real lockd processes, inject faults from
                                a seed, record and check the history
  chaos.py check HISTORY        check a saved history file
  chaos.py schedule [options]   print the fault schedule a seed gives
  chaos.py cluster-available    exit 0 if this lockd serves --mode=cluster

Exit status of run/check: 0 no violation, 1 violations (or, with
--expect-violations, none found), 2 usage or setup error.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from lockd_chaos import checker, runner, schedule  # noqa: E402
from lockd_chaos.history import History  # noqa: E402
from lockd_chaos.nodes import cluster_mode_available  # noqa: E402


def add_run_options(p):
    p.add_argument("--mode", choices=("single", "cluster"), default="single")
    p.add_argument("--nodes", type=int, default=None, help="cluster size (3 or 5)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--duration", type=float, default=30.0, help="seconds of faults")
    p.add_argument("--faults", default=None,
                   help="comma list of %s (default: all that apply to the mode); "
                        "'none' for a fault-free run; clock-restart (single mode) restarts "
                        "the node with its wall clock set back; wipe (cluster mode) loses part "
                        "or all of a member's data dir and restarts it: it must be refused "
                        "(exit 2), then it is replaced" % ",".join(schedule.KINDS))
    p.add_argument("--election-timeout-ms", type=int, default=300)
    p.add_argument("--heartbeat-ms", type=int, default=50)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    add_run_options(r)
    r.add_argument("--clients", type=int, default=10)
    r.add_argument("--keys", type=int, default=3)
    r.add_argument("--lease-ms", type=int, default=1000)
    r.add_argument("--no-keep", action="store_true", help="never send K")
    r.add_argument("--shared-prob", type=float, default=0.25,
                   help="share of cycles that take the key with S (read lock, or one of 2 permits "
                        "on the second key) and only read (default 0.25; 0: A only)")
    r.add_argument("--long-wait-prob", type=float, default=0.1,
                   help="share of A cycles that wait up to 3 leases and, granted after the lease, "
                        "keep it with K at once before working (default 0.1; needs K)")
    r.add_argument("--cancel-prob", type=float, default=0.05,
                   help="share of cycles whose waiting A the client abandons, closing its "
                        "connection after a random part of a lease (default 0.05)")
    r.add_argument("--watchers", type=int, default=2,
                   help="watcher clients starting at each node, watching every key through the "
                        "faults; their histories are checked (protocol.md §5c; default 2, 0: none)")
    r.add_argument("--pause-prob", type=float, default=0.02,
                   help="share of lock holds where the client stalls 1.5 leases before writing")
    r.add_argument("--lockd", default="build/bin/lockd")
    r.add_argument("--lockd-arg", action="append", default=[],
                   help="one more flag for every node (repeatable; {ID} is the node id)")
    r.add_argument("--faultfs", default="build/bin/liblockd_faultfs.so")
    r.add_argument("--out", default=None, help="run directory (default build/chaos/...)")
    r.add_argument("--fast-clock", type=float, default=None,
                   help="run the nodes' clocks (monotonic too) this many times too fast")
    r.add_argument("--fast-clock-node", type=int, default=None,
                   help="only this node's clock runs fast (default: every node's)")
    r.add_argument("--upgrade-to", default=None,
                   help="rolling upgrade: restart the nodes one at a time, evenly spread over the "
                        "run, with this lockd binary (e.g. build/bin/lockd-next) on their data dirs")
    r.add_argument("--expect-violations", action="store_true",
                   help="succeed only if the checker finds violations (the fast-clock measurement)")
    r.add_argument("--json", action="store_true", help="print the whole report")
    h = r.add_argument_group("hostile-client mode (lockd_chaos/hostile.py, issue 35)")
    h.add_argument("--hostile", action="store_true",
                   help="auth on (token, ACL), client TLS on; strangers hold idle connections on "
                        "every port, flood TLS handshakes, trickle admin requests, forge peer "
                        "hellos and CSRF-shaped admin requests; every request of the workload "
                        "must be answered and no node may exit")
    h.add_argument("--hostile-idle", type=int, default=700,
                   help="idle connections per node on each port (default 700)")
    h.add_argument("--hostile-tls-rate", type=int, default=200,
                   help="TLS handshakes a second per node's client port (default 200)")
    h.add_argument("--hostile-trickle", type=int, default=20,
                   help="byte-a-second admin requests per node (default 20)")
    h.add_argument("--hostile-connect-rate", type=int, default=700,
                   help="new idle connections a second over all ports (default 700)")
    h.add_argument("--hostile-no-tls", action="store_true", help="client port without TLS")
    c = sub.add_parser("check")
    c.add_argument("history")
    c.add_argument("--json", action="store_true")
    c.add_argument("--locks-lost-on-restart", action="store_true", default=None)
    c.add_argument("--recovery-bound-ms", type=int, default=None)
    s = sub.add_parser("schedule")
    add_run_options(s)
    m = sub.add_parser("summarize", help="markdown tables from run directories' report.json")
    m.add_argument("runs", nargs="+")
    a = sub.add_parser("cluster-available")
    a.add_argument("--lockd", default="build/bin/lockd")
    args = ap.parse_args(argv)

    if args.cmd == "summarize":
        print(summarize(args.runs))
        return 0

    if args.cmd == "cluster-available":
        ok = cluster_mode_available(args.lockd)
        print("cluster mode: %s" % ("available" if ok else "not in this build"))
        return 0 if ok else 1

    if args.cmd in ("run", "schedule"):
        nodes = args.nodes or (1 if args.mode == "single" else 3)
        if args.mode == "single" and nodes != 1:
            ap.error("single mode runs one node")
        if args.faults is None:
            kinds = schedule.SINGLE_KINDS if args.mode == "single" else schedule.KINDS
        elif args.faults == "none":
            kinds = ()
        else:
            kinds = tuple(k for k in args.faults.split(",") if k)
            bad = [k for k in kinds if k not in schedule.ALL_KINDS]
            if bad:
                ap.error("unknown fault kind(s): %s" % ",".join(bad))
        if args.cmd == "schedule":
            for f in schedule.make_schedule(args.seed, args.duration, kinds, nodes,
                                            args.election_timeout_ms, args.mode):
                print(repr(f))
            return 0
        opt = runner.Options()
        opt.mode, opt.nodes, opt.seed, opt.duration_s = args.mode, nodes, args.seed, args.duration
        opt.faults = kinds
        opt.clients, opt.keys, opt.lease_ms = args.clients, args.keys, args.lease_ms
        opt.use_keep = not args.no_keep
        opt.shared_prob = args.shared_prob
        opt.pause_prob = args.pause_prob
        opt.long_wait_prob, opt.cancel_prob = args.long_wait_prob, args.cancel_prob
        opt.election_timeout_ms, opt.heartbeat_ms = args.election_timeout_ms, args.heartbeat_ms
        opt.lockd, opt.faultfs, opt.out = args.lockd, args.faultfs, args.out
        opt.lockd_args = tuple(args.lockd_arg)
        opt.fast_clock = args.fast_clock
        opt.fast_clock_node = args.fast_clock_node
        opt.expect_violations = args.expect_violations
        opt.upgrade_to = args.upgrade_to
        opt.watchers_per_node = args.watchers
        if args.cmd == "run" and args.hostile:
            opt.hostile = {"idle": args.hostile_idle, "tls_rate": args.hostile_tls_rate,
                           "trickle": args.hostile_trickle,
                           "connect_rate": args.hostile_connect_rate}
            opt.hostile_tls = not args.hostile_no_tls
        violations, report, out = runner.run(opt)
        return finish(violations, report, args.json, args.expect_violations,
                      os.path.join(out, "history.jsonl"))

    history = History.load(args.history)
    violations, report = checker.check(history, args.locks_lost_on_restart,
                                       args.recovery_bound_ms)
    return finish(violations, report, args.json, False, args.history)


def summarize(run_dirs):
    """One row per run, then availability per fault kind over all runs."""
    rows = ["| run | seed | ops | grants | unknown | faults injected | kill -9s with grants on both "
            "sides: tokens grew | violations | first grant after heal (ms) |",
            "|---|---|---|---|---|---|---|---|---|"]
    avail = {}
    for d in run_dirs:
        with open(os.path.join(d, "report.json")) as f:
            r = json.load(f)
        faults = ", ".join("%s %d" % kv for kv in sorted(r.get("faults", {}).items())) or "none"
        rec = r.get("recovery_after_heal", {})
        rows.append("| %s | %s | %d | %d | %d | %s | %s/%s | %d%s | %s |" % (
            os.path.basename(d.rstrip("/")), r.get("seed"), r["ops"], r["grants"],
            r["codes"].get("unknown", 0), faults, r.get("restarts_tokens_grew", "-"),
            r.get("restarts_with_grants_both_sides", "-"), r["violations_total"],
            " (expected)" if r.get("expect_violations") else "",
            rec.get("first_grant_ms", "-")))
        for kind, a in r.get("availability", {}).items():
            t = avail.setdefault(kind, {"seconds": 0.0, "ops": 0, "answered": 0, "grants": 0,
                                        "windows": 0})
            for k in t:
                t[k] += a.get(k) or 0
    rows += ["", "| fault on | windows | seconds | requests | answered | grants/s |",
             "|---|---|---|---|---|---|"]
    for kind, t in sorted(avail.items()):
        rows.append("| %s | %d | %.1f | %d | %s | %s |" % (
            kind, t["windows"], t["seconds"], t["ops"],
            "%.1f%%" % (100.0 * t["answered"] / t["ops"]) if t["ops"] else "-",
            "%.1f" % (t["grants"] / t["seconds"]) if t["seconds"] else "-"))
    return "\n".join(rows)


def finish(violations, report, as_json, expect, history_path):
    for v in violations[:20]:
        print("VIOLATION %s: %s" % (v.check, v.message))
    if len(violations) > 20:
        print("... %d more" % (len(violations) - 20))
    if as_json:
        print(json.dumps(report, indent=1, sort_keys=True, default=str))
    else:
        short = {k: report[k] for k in ("ops", "grants", "codes", "faults") if k in report}
        print(json.dumps(short, sort_keys=True))
        for k in ("availability", "recovery_after_heal"):
            if k in report:
                print("%s: %s" % (k, json.dumps(report[k], sort_keys=True)))
        extras = {k: v for k, v in report.items() if k.startswith(("exclusion_", "fifo_",
                                                                     "liveness", "resource_",
                                                                     "watch", "lost_notices"))}
        if "hostile" in report:
            print("hostile: %s" % json.dumps(report["hostile"], sort_keys=True))
        print(json.dumps(extras, sort_keys=True))
    n = len(violations)
    print("%s: %d violation(s) in %s%s" % ("FAIL" if (n > 0) != expect else "OK", n, history_path,
                                          " (violations expected)" if expect else ""))
    return 0 if (n > 0) == expect else 1


if __name__ == "__main__":
    sys.exit(main())
