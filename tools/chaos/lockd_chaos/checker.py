"""Checks a history (see history.py) against what lockd promises.

Every check is sound in the Jepsen sense: it reports a violation only when
no way of resolving the unknown operations explains the history. An unknown
operation (timeout, connection error, `E indeterminate`) may or may not
have taken effect, so each check counts it whichever way makes the
violation it looks for harder to claim:
  - an unknown release may have freed the lock at its invocation;
  - an unknown keep may have moved the lease end to (its invocation +
    lease), earlier or later;
  - an unknown acquire may have been granted with a token nobody saw; it
    can neither be checked nor make another grant wrong.

The checks:
  tokens     every granted token is unique; a grant that completed before
             another was invoked has the smaller token (over all keys: the
             server's tokens grow globally, which implies the per-key rule)
  exclusion  for grants g1 < g2 of one key (by token), of which at least one
             is exclusive (A; an S grant is shared, protocol.md §5b), g2
             completes no earlier than the end of g1's exclusion: the
             earlier of g1's lease end (its invocation + lease_ms, moved by
             each acknowledged K to that K's invocation + lease_ms) and the
             invocation of g1's release. So no exclusive holder overlaps any
             other holder, shared or not. In single mode with locks lost on
             restart (meta "locks_lost_on_restart"), a kill -9 of the server
             also ends every exclusion (by design; such pairs are counted,
             not flagged)
  limit      for S grants of a semaphore (limit N > 0), never more than N
             held at once: N + 1 of them whose sure holding times overlap
             (each from its completion to the end of its exclusion, as
             above) are flagged
  fifo       on the release path: for a release R acknowledged for token t
             of key k, two waiters on k both proven queued before R was sent
             (enq_ns, see history.Op) and both granted later with tokens
             above t are served in the order they were queued
  liveness   once faults stop (the heal record), every operation invoked
             after heal + recovery_bound_ms gets an answer, every client
             gets at least one, and every key acquired in that window for
             longer than a lease plus a wait is granted at least once
  resource   the fenced resource: no access made inside the client's own
             view of its lease was rejected (that would be two holders at
             once, end to end); the final counter equals the accepted
             increments
  watch-*    the watchers' histories against the grant history
             (watch_check.py, protocol.md §5c)
"""

import bisect
import collections

NS_PER_MS = 1_000_000

# A waiter queued at a release is granted within its wait; grants whose
# invocation is later than the release's invocation + the largest wait in
# the history + this slack cannot be such a waiter (bounds the FIFO scan).
FIFO_SCAN_SLACK_NS = 10_000 * NS_PER_MS


class Violation:
    def __init__(self, check, message, ops=()):
        self.check = check
        self.message = message
        self.ops = list(ops)

    def to_json(self):
        return {"check": self.check, "message": self.message,
                "ops": [op.to_json() if hasattr(op, "to_json") else op for op in self.ops]}

    def __repr__(self):
        return "Violation(%s: %s)" % (self.check, self.message)


def _grants(history):
    return [op for op in history.ops if op.granted and op.complete_ns is not None]


def check_tokens(history):
    """Unique tokens; real-time order of grants implies token order."""
    violations = []
    grants = _grants(history)
    seen = {}
    for g in grants:
        if g.token in seen:
            violations.append(Violation(
                "tokens", "token %d granted twice (%s and %s)" % (g.token, seen[g.token].key, g.key),
                [seen[g.token], g]))
        else:
            seen[g.token] = g
    by_complete = sorted(grants, key=lambda g: g.complete_ns)
    by_invoke = sorted(grants, key=lambda g: g.invoke_ns)
    i = 0
    best = None  # the grant with the largest token among those completed so far
    for g2 in by_invoke:
        while i < len(by_complete) and by_complete[i].complete_ns < g2.invoke_ns:
            if best is None or by_complete[i].token > best.token:
                best = by_complete[i]
            i += 1
        if best is not None and best.token >= g2.token and best is not g2:
            violations.append(Violation(
                "tokens", "token %d (key %s) was granted after token %d (key %s) had completed"
                % (g2.token, g2.key, best.token, best.key), [best, g2]))
    return violations


def restart_token_stats(history):
    """For each kill -9: did the grants after it carry larger tokens than
    every grant before it? (The tokens check already flags it if not; this
    counts the restarts that had grants on both sides, as evidence.)"""
    grants = _grants(history)
    kills = _kill_times(history)
    both, grew = 0, 0
    for i, k in enumerate(kills):
        nxt = kills[i + 1] if i + 1 < len(kills) else None
        before = [g.token for g in grants if g.complete_ns < k]
        after = [g.token for g in grants if g.invoke_ns > k and (nxt is None or g.invoke_ns < nxt)]
        if before and after:
            both += 1
            grew += min(after) > max(before)
    return {"restarts": len(kills), "restarts_with_grants_both_sides": both,
            "restarts_tokens_grew": grew}


def _kill_times(history):
    return sorted(e["time_ns"] for e in history.nemesis
                  if e.get("fault") == "kill" and e.get("phase", "start") == "start")


def exclusion_ends(history, locks_lost_on_restart=False):
    """For each known grant: (end of exclusion, end ignoring restarts)."""
    by_holder = collections.defaultdict(list)  # (key, token) -> R/K ops
    for op in history.ops:
        if op.f in ("R", "K") and op.token is not None:
            by_holder[(op.key, op.token)].append(op)
    kills = _kill_times(history) if locks_lost_on_restart else []
    ends = {}
    for g in _grants(history):
        lease_end = g.invoke_ns + g.lease_ms * NS_PER_MS
        release = None
        for op in sorted(by_holder.get((g.key, g.token), ()), key=lambda o: o.invoke_ns):
            if op.f == "K":
                new_end = op.invoke_ns + op.lease_ms * NS_PER_MS
                if op.code == "K":
                    lease_end = new_end
                elif op.unknown:
                    lease_end = min(lease_end, new_end)
            elif op.f == "R" and (op.code == "R" or op.unknown):
                release = op.invoke_ns if release is None else min(release, op.invoke_ns)
        end = lease_end if release is None else min(lease_end, release)
        end_with_kill = end
        k = bisect.bisect_left(kills, g.invoke_ns)
        if k < len(kills):
            end_with_kill = min(end, kills[k])
        ends[g.id] = (end_with_kill, end)
    return ends


def check_exclusion(history, locks_lost_on_restart=False, stats=None):
    violations = []
    ends = exclusion_ends(history, locks_lost_on_restart)
    per_key = collections.defaultdict(list)
    for g in _grants(history):
        per_key[g.key].append(g)
    excused = 0
    max_overlap_ms = 0.0
    shared_pairs = 0
    for key, grants in per_key.items():
        grants.sort(key=lambda g: g.token)
        # Earlier grants whose exclusion ends last (index 0: with restarts,
        # 1: ignoring them): of every grant, and of the exclusive ones. An
        # exclusive grant conflicts with every earlier holder, a shared one
        # only with earlier exclusive holders (§5b).
        top_any = [None, None]
        top_excl = [None, None]
        for g2 in grants:
            tops = top_excl if g2.shared else top_any
            top, top_raw = tops
            if top is not None and g2.complete_ns < ends[top.id][0]:
                overlap_ms = (ends[top.id][0] - g2.complete_ns) / NS_PER_MS
                max_overlap_ms = max(max_overlap_ms, overlap_ms)
                violations.append(Violation(
                    "exclusion", "key %s: token %d (%s) granted (completed) %.1f ms before the "
                    "exclusion of token %d (%s) ended"
                    % (key, g2.token, _mode(g2), overlap_ms, top.token, _mode(top)),
                    [top, g2]))
            elif top_raw is not None and g2.complete_ns < ends[top_raw.id][1]:
                excused += 1
            elif g2.shared and top_any[0] is not None and g2.complete_ns < ends[top_any[0].id][0]:
                shared_pairs += 1   # readers (or permits) held together, as allowed
            for t in ([top_any] if g2.shared else [top_any, top_excl]):
                for i in (0, 1):
                    if t[i] is None or ends[g2.id][i] > ends[t[i].id][i]:
                        t[i] = g2
    if stats is not None:
        stats["exclusion_excused_by_restart"] = excused
        stats["exclusion_max_overlap_ms"] = round(max_overlap_ms, 1)
        stats["shared_grants_overlapping"] = shared_pairs
    return violations


def _mode(g):
    return "shared" if g.shared else "exclusive"


def check_limit(history, locks_lost_on_restart=False, stats=None):
    """Never more than `limit` S holders of a semaphore at once (§5b).

    Each S grant surely holds from its completion (the server granted it
    before its reply) to the end of its exclusion (exclusion_ends: its
    lease counted from its invocation, moved by acknowledged keeps, cut by
    a release's invocation; with locks lost on restart, by a kill -9). A
    moment covered by more than `limit` such spans is a violation whatever
    the unknown operations did."""
    violations = []
    ends = exclusion_ends(history, locks_lost_on_restart)
    per_key = collections.defaultdict(list)
    for g in _grants(history):
        if g.shared and g.limit:
            per_key[(g.key, g.limit)].append(g)
    most = 0
    for (key, limit), grants in sorted(per_key.items()):
        events = []
        for g in grants:
            start, end = g.complete_ns, ends[g.id][0]
            if start < end:
                events.append((start, 1, g))
                events.append((end, 0, g))   # ends sort before starts at the same time
        events.sort(key=lambda e: (e[0], e[1], e[2].token))
        held = {}
        flagged = False
        for t, kind, g in events:
            if kind == 0:
                held.pop(g.id, None)
                continue
            held[g.id] = g
            most = max(most, len(held))
            if len(held) > limit and not flagged:
                flagged = True   # one violation per semaphore is enough to show it
                violations.append(Violation(
                    "limit", "key %s (limit %d): %d shared holders at once (tokens %s)"
                    % (key, limit, len(held), ", ".join(str(h.token) for h in
                                                        sorted(held.values(), key=lambda h: h.token))),
                    sorted(held.values(), key=lambda h: h.token)))
    if stats is not None:
        stats["limit_most_holders_seen"] = most
    return violations


def check_fifo(history, stats=None):
    violations = []
    waiters = collections.defaultdict(list)   # key -> known waiter grants, by token
    grants = collections.defaultdict(list)    # key -> all known grants, by token
    for g in _grants(history):
        grants[g.key].append(g)
        if g.wait_ms and g.enq_ns is not None:
            waiters[g.key].append(g)
    for lst in list(waiters.values()) + list(grants.values()):
        lst.sort(key=lambda g: g.token)
    waiter_tokens = {key: [w.token for w in ws] for key, ws in waiters.items()}
    max_wait_ns = max([op.wait_ms or 0 for op in history.ops] + [0]) * NS_PER_MS
    checked = 0
    flagged = set()
    for r in history.ops:
        if r.f != "R" or r.code != "R" or r.token is None:
            continue
        ws = waiters.get(r.key)
        if not ws:
            continue
        limit = r.invoke_ns + max_wait_ns + FIFO_SCAN_SLACK_NS
        start = bisect.bisect_right(waiter_tokens[r.key], r.token)
        queued = []
        for w in ws[start:]:
            if w.invoke_ns > limit:
                break
            if w.enq_ns < r.invoke_ns:
                queued.append(w)
        queued.sort(key=lambda w: w.enq_ns)
        for i, w1 in enumerate(queued):
            for w2 in queued[i + 1:]:
                if w1.enq_ns < w2.invoke_ns:
                    checked += 1
                    if w2.token < w1.token and (w1.id, w2.id) not in flagged:
                        flagged.add((w1.id, w2.id))
                        violations.append(Violation(
                            "fifo", "key %s: waiter %s (queued first) got token %d after waiter "
                            "%s got %d, both queued before release of %d"
                            % (r.key, w1.client, w1.token, w2.client, w2.token, r.token),
                            [r, w1, w2]))
    if stats is not None:
        stats["fifo_pairs_checked"] = checked
    return violations


ANSWERS = {"A", "S", "T", "B", "R", "N", "K", "M"}


def check_liveness(history, recovery_bound_ms=None, stats=None):
    """After heal + bound, every request is answered and no key is stuck."""
    if history.heal_ns is None:
        if stats is not None:
            stats["liveness"] = "not checked: no heal record"
        return []
    bound_ms = recovery_bound_ms if recovery_bound_ms is not None else \
        history.meta.get("recovery_bound_ms", 5000)
    start = history.heal_ns + bound_ms * NS_PER_MS
    violations = []
    acquired = collections.defaultdict(list)
    answered = 0
    for op in history.ops:
        if op.invoke_ns < start or op.cancelled:
            continue    # a cancelled acquire is owed no answer (its client left)
        if op.unknown or op.code not in ANSWERS:
            violations.append(Violation(
                "liveness", "%s: %s %s invoked %.0f ms after heal got no answer (%s)"
                % (op.client, op.f, op.key, (op.invoke_ns - history.heal_ns) / NS_PER_MS,
                   op.reply or op.error or "unknown"), [op]))
        else:
            answered += 1
        if op.f in ("A", "S"):
            acquired[op.key].append(op)
    clients = {op.client for op in history.ops if op.client}
    # A client busy in a long hold when the window opens answers later, so
    # this counts answers completed in the window, not requests sent in it.
    answering = {op.client for op in history.ops
                 if op.complete_ns is not None and op.complete_ns >= start
                 and not op.unknown and op.code in ANSWERS}
    end_ns = max((op.invoke_ns for op in history.ops), default=0)
    if end_ns > start:
        for client in sorted(clients - answering):
            violations.append(Violation(
                "liveness", "client %s got no answer at all after heal + %d ms (stuck "
                "connection or client)" % (client, bound_ms)))
    # A key is stuck if acquires kept coming for longer than a lease plus a
    # wait (time in which a healthy server must hand it to someone) and no
    # grant of it completed in the window.
    granted_in_window = {op.key for op in history.ops
                         if op.granted and op.complete_ns >= start}
    for key, ops in sorted(acquired.items()):
        span_ns = max(op.invoke_ns for op in ops) - min(op.invoke_ns for op in ops)
        enough_ns = max((op.lease_ms or 0) + (op.wait_ms or 0) for op in ops) * NS_PER_MS
        if key not in granted_in_window and span_ns > enough_ns:
            violations.append(Violation(
                "liveness", "key %s: %d acquires after heal + %d ms, none granted (stuck key)"
                % (key, len(ops), bound_ms), ops[:3]))
    if stats is not None:
        stats["liveness_window_answered"] = answered
        stats["liveness_keys"] = len(acquired)
    return violations


def check_resource(history, locks_lost_on_restart=False, stats=None):
    violations = []
    accepted_writes = collections.Counter()
    stale_rejected = 0
    lost_in_restart = 0
    kills = _kill_times(history) if locks_lost_on_restart else []
    for a in history.accesses:
        if a.get("kind") == "final":
            continue
        if not a["ok"]:
            k = bisect.bisect_left(kills, a.get("granted_ns", 0))
            if a.get("in_lease") and k < len(kills) and kills[k] < a["time_ns"]:
                # Single mode lost this client's lock in a restart (by
                # design); fencing is what stopped it.
                lost_in_restart += 1
            elif a.get("in_lease"):
                violations.append(Violation(
                    "resource", "key %s: %s with token %d rejected (a higher token had been "
                    "used) while its client still held the lease by its own clock"
                    % (a["key"], a["op"], a["token"]), [a]))
            else:
                stale_rejected += 1
        elif a["op"] == "write":
            accepted_writes[a["key"]] += 1
    naive_lost = 0
    for a in history.accesses:
        if a.get("kind") != "final":
            continue
        if a["fenced_value"] != accepted_writes[a["key"]]:
            violations.append(Violation(
                "resource", "key %s: counter is %d but %d increments were accepted"
                % (a["key"], a["fenced_value"], accepted_writes[a["key"]]), [a]))
        naive_lost += a.get("naive_lost", 0)
    if stats is not None:
        stats["resource_increments"] = sum(accepted_writes.values())
        stats["resource_stale_rejected"] = stale_rejected
        stats["resource_rejected_lock_lost_in_restart"] = lost_in_restart
        stats["resource_naive_lost_updates"] = naive_lost
    return violations


def summarize(history):
    codes = collections.Counter()
    for op in history.ops:
        codes["unknown" if op.unknown else (op.code or "none")] += 1
    faults = collections.Counter(e["fault"] for e in history.nemesis
                                 if e.get("phase", "start") == "start")
    return {"ops": len(history.ops), "codes": dict(codes), "faults": dict(faults)}


def check(history, locks_lost_on_restart=None, recovery_bound_ms=None):
    """Runs every check; returns (violations, report dict)."""
    if locks_lost_on_restart is None:
        locks_lost_on_restart = bool(history.meta.get("locks_lost_on_restart", False))
    stats = {}
    violations = []
    violations += check_tokens(history)
    violations += check_exclusion(history, locks_lost_on_restart, stats)
    violations += check_limit(history, locks_lost_on_restart, stats)
    violations += check_fifo(history, stats)
    violations += check_liveness(history, recovery_bound_ms, stats)
    violations += check_resource(history, locks_lost_on_restart, stats)
    from .watch_check import check_watches   # watchers' histories (watch_check.py)
    violations += check_watches(history, locks_lost_on_restart, stats)
    report = summarize(history)
    report.update(stats)
    report.update(restart_token_stats(history))
    report["grants"] = len(_grants(history))
    report["shared_grants"] = sum(1 for g in _grants(history) if g.shared)
    report["violations"] = collections.Counter(v.check for v in violations)
    report["violations_total"] = len(violations)
    return violations, report
