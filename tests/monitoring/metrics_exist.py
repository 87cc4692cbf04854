#!/usr/bin/env python3
"""Every metric packaging/monitoring names exists in a real lockd's /metrics.

Starts a single-mode lockd and a 3-node cluster on free loopback ports,
scrapes /metrics of each (the cluster once it has a leader, so the
leader-only series are there), and checks that every `lockd_*` and
`process_*` name in the alert rules and in the dashboard's queries is the
name of a sample some node exports. Fails listing the missing names; also
fails if the files name no metric at all (a broken extraction).

usage: metrics_exist.py LOCKD RULES.yml DASHBOARD.json
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

DEADLINE_S = 20
NAME = re.compile(r"\b((?:lockd|process)_[a-z0-9_]+)\b")


# Ports below the kernel's ephemeral range (tools/chaos/lockd_chaos/ports.py).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "chaos"))
from lockd_chaos.ports import free_port  # noqa: E402
from lockd_chaos.cluster_init import init_cluster  # noqa: E402


def scrape(port):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            return r.read().decode()
    except OSError:
        return ""


def sample_names(text):
    names = set()
    for line in text.splitlines():
        if line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, 1)[0])
    return names


def wanted(rules_path, dashboard_path):
    names = {}
    # Rules: every name in an expression or an annotation.
    for n in NAME.findall(open(rules_path).read()):
        names.setdefault(n, rules_path)

    def walk(node):
        if isinstance(node, dict):
            for k, v in node.items():
                if k in ("expr", "query", "definition") and isinstance(v, str):
                    for n in NAME.findall(v):
                        names.setdefault(n, dashboard_path)
                else:
                    walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(json.load(open(dashboard_path)))
    return names


def main():
    lockd, rules, dashboard = sys.argv[1:4]
    names = wanted(rules, dashboard)
    if len(names) < 10:
        print(f"only {len(names)} metric names found in {rules} and {dashboard}: extraction broken?")
        return 1
    root = tempfile.mkdtemp(prefix="lockd_monitoring.")
    procs = []
    try:
        single_admin = free_port()
        procs.append(subprocess.Popen([lockd, "--listen", f"127.0.0.1:{free_port()}",
                                       "--admin", f"127.0.0.1:{single_admin}"],
                                      stderr=subprocess.DEVNULL))
        client = [free_port() for _ in range(3)]
        raft = [free_port() for _ in range(3)]
        admin = [free_port() for _ in range(3)]
        peers = []
        for i in range(3):
            peers += ["--peer", f"{i + 1}=127.0.0.1:{client[i]}/127.0.0.1:{raft[i]}"]
        for i in range(3):
            procs.append(subprocess.Popen(
                [lockd, "--mode", "cluster", "--node-id", str(i + 1), "--data-dir", f"{root}/n{i + 1}",
                 "--admin", f"127.0.0.1:{admin[i]}", "--election-timeout-ms", "150",
                 "--heartbeat-ms", "30", "--insecure-peers"] + peers, stderr=subprocess.DEVNULL))
        init_cluster(f"127.0.0.1:{admin[0]}")  # v1.3: formed once, explicitly
        have = set()
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            have = set()
            texts = [scrape(p) for p in [single_admin] + admin]
            for t in texts:
                have |= sample_names(t)
            # The cluster has a leader that sees both followers: leader-only series are in.
            if (any('lockd_raft_role{role="leader"} 1' in t for t in texts[1:])
                    and all(n in have for n in names)):
                break
            time.sleep(0.1)
        missing = sorted(n for n in names if n not in have)
        for n in missing:
            print(f"{names[n]}: {n} is not exported by lockd (single or cluster)")
        if missing:
            return 1
        print(f"all {len(names)} metrics named by the rules and the dashboard are exported")
        return 0
    finally:
        for p in procs:
            p.kill()
            p.wait()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
