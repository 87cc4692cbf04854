"""Forming a lockd group (v1.3, protocol.md §10 rule 1): a start never
forms one; ``POST /v1/cluster/init`` to one node does, once. Shared by every
Python starter of a cluster (chaos runner, bench tools, test supports)."""

import json
import time
import urllib.error
import urllib.request


def init_cluster(admin_addr, timeout_s=60.0, headers=None):
    """POST /v1/cluster/init to ``admin_addr`` (host:port), again while it
    answers 503/504 or not at all, until 200. A 409 after a 504 means that
    first init formed the group: done too. Raises RuntimeError otherwise."""
    deadline = time.monotonic() + timeout_s
    timed_out = False
    status, body = 0, ""
    while time.monotonic() < deadline:
        req = urllib.request.Request("http://%s/v1/cluster/init" % admin_addr, data=b"{}",
                                     headers={**(headers or {}), "Content-Type": "application/json"},
                                     method="POST")
        try:
            with urllib.request.urlopen(req, timeout=max(1.0, deadline - time.monotonic())) as r:
                status, body = r.status, r.read().decode(errors="replace")
        except urllib.error.HTTPError as e:
            status, body = e.code, e.read().decode(errors="replace")
        except (OSError, ValueError) as e:
            status, body = 0, str(e)
        if status == 200 or (status == 409 and timed_out):
            return json.loads(body) if status == 200 else None
        if status not in (0, 503, 504):
            raise RuntimeError("POST /v1/cluster/init to %s: HTTP %d %s" % (admin_addr, status, body))
        timed_out = timed_out or status == 504
        time.sleep(0.05)
    raise RuntimeError("POST /v1/cluster/init to %s: no answer in time (HTTP %d %s)"
                       % (admin_addr, status, body))


def _status(admin_addr, headers=None):
    req = urllib.request.Request("http://%s/v1/status" % admin_addr, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=1.0) as r:
            return json.loads(r.read())
    except (OSError, ValueError):
        return None


def wait_all_joined(admin_addrs, timeout_s=20.0, headers=None):
    """After init: waits until every node in ``admin_addrs`` knows the leader
    and has applied the group's first entries (the commit index seen once all
    knew the leader). Init answers once every founder acknowledged those
    entries, or 10 s after they committed if one did not (docs/cluster.md
    "Running a 3-node group"); this also waits for them to be applied and
    for the leader to be known everywhere, and holds a test up rather than
    let it kill a node while a founder is still at its start gate (one
    still waiting for the word of a member that is then killed cannot
    vote), as tests/support's LockdCluster does. Raises RuntimeError on
    timeout."""
    deadline = time.monotonic() + timeout_s

    def poll(ready):
        while time.monotonic() < deadline:
            states = [_status(a, headers) for a in admin_addrs]
            if all(st is not None and ready(st) for st in states):
                return states
            time.sleep(0.02)
        raise RuntimeError("cluster nodes %s did not all join in %.0f s" % (admin_addrs, timeout_s))

    states = poll(lambda st: bool(st.get("leader")))
    first = max(st.get("commit_index", 0) for st in states)
    poll(lambda st: st.get("applied_index", 0) >= first)
