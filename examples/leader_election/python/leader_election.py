#!/usr/bin/env python3
"""Leader election with lockd (Python client): campaign, lead, resign.

    python3 examples/leader_election/python/leader_election.py \
        --address 127.0.0.1:7070 --key election/demo --name node-a --lead-for 5

Run it in two or three terminals with different ``--name``s: one leads,
the others wait; when the leader resigns (after ``--lead-for`` seconds, or
Ctrl-C) or dies (its lease ends), the next one is elected. Every candidate
prints each change of leader it observes (``W``/``V``, protocol v1.3).
The leader's fencing token goes with every write it makes, so a deposed
leader that still believes it leads is refused by the resource.
"""

import argparse
import os
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "clients", "python"))  # run from the tree

from lockd_client import Client, Rejected  # noqa: E402


def observe(client: Client, key: str, name: str, stop: threading.Event) -> None:
    try:
        with client.observe(key) as leaders:
            while not stop.is_set():
                try:
                    leader = leaders.get(timeout_s=0.2)
                except TimeoutError:
                    continue
                who = f"{leader.value} (token {leader.token})" if leader else "nobody"
                print(f"{name}: leader is now {who}", flush=True)
    except Rejected as e:  # a server before v1.3 has no watches
        print(f"{name}: cannot observe ({e}): the server has no watches", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--address", action="append", help="host:port of a lockd node (repeat for a cluster)")
    ap.add_argument("--key", default="election/demo")
    ap.add_argument("--name", required=True, help="this candidate's value: 1..64 visible ASCII characters")
    ap.add_argument("--lease-ms", type=int, default=3000)
    ap.add_argument("--lead-for", type=float, default=5.0, help="seconds to lead before resigning")
    args = ap.parse_args()

    client = Client(args.address or ["127.0.0.1:7070"])
    stop = threading.Event()
    watcher = threading.Thread(target=observe, args=(client, args.key, args.name, stop), daemon=True)
    watcher.start()
    lost = threading.Event()
    try:
        print(f"{args.name}: campaigning on {args.key}", flush=True)
        leadership = client.campaign(args.key, args.name, lease_ms=args.lease_ms,
                                     on_lost=lambda lock: lost.set())
        print(f"{args.name}: elected (token {leadership.token})", flush=True)
        if lost.wait(args.lead_for):   # the work a leader does goes here, fenced by leadership.token
            print(f"{args.name}: lost leadership: {leadership.lost_reason}", flush=True)
            return 1
        leadership.resign()
        print(f"{args.name}: resigned", flush=True)
        return 0
    except KeyboardInterrupt:
        return 130
    finally:
        stop.set()
        watcher.join(2)
        client.close()


if __name__ == "__main__":
    sys.exit(main())
