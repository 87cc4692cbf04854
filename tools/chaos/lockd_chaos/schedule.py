"""Fault schedules drawn from a seed: the same seed gives the same schedule.

A schedule is a list of faults that never overlap: each starts after a
quiet gap, lasts a while, and is healed before the next one. Targets are
named by role ("leader", "follower") or node number and resolved when the
fault is injected; the history records the node actually hit.
"""

import random

# Every fault kind the runner knows. "single" lists those that make sense
# against one single-mode node (no network between nodes, no disk).
KINDS = ("kill", "pause", "partition", "clock", "disk", "member")
SINGLE_KINDS = ("kill", "pause", "clock")
# Opt-in only, for single mode: restart the node while its wall clock is
# set back. Single-mode tokens start at the wall clock, so this breaks token
# order by design (docs/safety.md shows it); runs with it expect violations.
DEMO_KINDS = ("clock-restart",)
# Opt-in, for cluster mode (issue 37, protocol.md §10 "A node's
# lifecycle"): kill -9 a member, lose part or all of its data dir, restart
# it with the same flags (a unit that restarts it). It must be refused at
# start (exit 2): a member that took part never votes again under its id
# after losing data. The nemesis then replaces it (new id) so the group is
# whole again. Not in KINDS, so that the seeds of existing runs draw the
# same schedules.
LIFECYCLE_KINDS = ("wipe",)
ALL_KINDS = KINDS + DEMO_KINDS + LIFECYCLE_KINDS
# What is lost: everything; the WAL segments (IDENTITY and snapshots kept);
# everything but IDENTITY.
WIPE_SHAPES = ("all", "wal", "all-but-identity")

# Membership changes through the leader's admin API (docs/cluster.md
# "Membership"): "replace" adds a new member (new id, empty data dir) as a
# learner, promotes it once caught up and removes the target; "learner"
# adds a learner that stays one for the fault's length, then removes it.
MEMBER_CHANGES = ("replace", "replace", "learner")
PARTITION_SHAPES = ("isolate", "majority-minority", "bridge", "one-way", "flapping")
# The storage shim's rules (docs/storage.md, "Fault injection").
DISK_RULES = ("fdatasync delay_us=200000", "fdatasync EIO", "write ENOSPC", "fsync EIO")


class Fault:
    __slots__ = ("start_s", "duration_s", "kind", "target", "detail")

    def __init__(self, start_s, duration_s, kind, target, detail=None):
        self.start_s = start_s
        self.duration_s = duration_s
        self.kind = kind
        self.target = target
        self.detail = detail

    def to_json(self):
        return {"start_s": round(self.start_s, 3), "duration_s": round(self.duration_s, 3),
                "kind": self.kind, "target": self.target, "detail": self.detail}

    def __repr__(self):
        return "%7.2fs +%5.2fs %-9s %-8s %s" % (self.start_s, self.duration_s, self.kind,
                                                 self.target, self.detail or "")


def make_schedule(seed, duration_s, kinds, nodes, election_timeout_ms=300, mode="cluster"):
    """Faults filling duration_s, drawn from random.Random(seed)."""
    rng = random.Random(seed)
    faults = []
    t = rng.uniform(1.0, 2.0)
    pause_min_s = max(0.5, 3 * election_timeout_ms / 1000)  # longer than an election timeout
    while True:
        kind = rng.choice(kinds)
        target = rng.choice(("leader", "follower")) if mode == "cluster" else "node1"
        detail = None
        if kind == "kill":
            d = rng.uniform(0.05, 1.5)         # downtime before the restart
        elif kind == "pause":
            d = rng.uniform(pause_min_s, 2 * pause_min_s + 1.0)
        elif kind == "partition":
            shape = rng.choice(PARTITION_SHAPES if nodes >= 3 else ("isolate",))
            detail = shape
            d = rng.uniform(1.0, 4.0)
        elif kind == "clock":
            # Wall clock jumps far, either way; the monotonic clock does not.
            # In a cluster, half the jumps also kill -9 and restart the node
            # while its clock is off: a restarted node must not take its
            # tokens or leases from the wall clock either.
            detail = rng.choice(("-", "+")) + str(rng.choice((30, 600, 3600, 86400)))
            if mode == "cluster" and rng.random() < 0.5:
                detail += " restart"
            d = rng.uniform(1.5, 4.0)
        elif kind == "clock-restart":
            detail = "-%d restart" % rng.choice((600, 3600, 86400))
            d = rng.uniform(2.0, 3.0)
        elif kind == "disk":
            detail = rng.choice(DISK_RULES)
            d = rng.uniform(0.5, 2.5)
        elif kind == "member":
            detail = rng.choice(MEMBER_CHANGES)
            d = rng.uniform(2.0, 5.0)
        elif kind == "wipe":
            detail = rng.choice(WIPE_SHAPES)
            d = rng.uniform(2.0, 4.0)
        else:
            raise ValueError("unknown fault kind %r" % kind)
        if t + d > duration_s:
            break
        faults.append(Fault(t, d, kind, target, detail))
        t += d + rng.uniform(1.0, 3.0)
    return faults
