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
