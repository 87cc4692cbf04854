"""Checks the watchers' histories (watchers.py) against the grant history
(protocol.md §5c). The rules, and why each is sound, are in docs/safety.md
("Watchers"); in short, for every key:

  watch-state    every state a watcher read is one the key could have had:
                 `held <owner> <token>`: a known exclusive grant of this key
                 to this owner with this token (or, for a token no reply
                 showed, an A of this owner on this key whose outcome is
                 unknown), invoked before the line was read; `shared
                 <limit> <count>`: the key's S limit, 1 <= count (<= limit
                 for a semaphore), S requests on the key invoked before;
                 `free`: always possible (every key starts free)
  watch-order    on one connection, every push of a key has a larger rev
                 than the W reply and every earlier push of that key
  watch-missed   on one connection, a W reply (the state at its rev) equals
                 the state of the connection's line with the largest rev
                 up to it: a change between them would have been pushed
  watch-history  all watchers (and the final reads) see one history per key:
                 one state per rev; in rev order a held token never goes
                 down and never comes back once the key moved on
  watch-time     a state is read after it was entered; a state after a
                 grant's own (in rev order) means that grant had ended: it
                 must not be read before the grant's exclusion could end
                 (the exclusion check's bound). And in single mode a W
                 reply, served at some moment between its request and its
                 reply, shows every grant surely held over that whole span
  watch-final    a watcher still connected when the run stops ends at each
                 key's final state (read on a fresh connection after the
                 workload stopped, twice, around stopping the watchers)
  lost-notice    an `X <token> <key>` a workload client read names a grant
                 of that key to that client (or an A of its with an unknown
                 outcome) and comes no earlier than the lease could end:
                 the grant's invocation + lease, or any acknowledged K's
                 invocation + lease, whichever is later
"""

import bisect
import collections

from .checker import Violation, _grants, exclusion_ends


def parse_state(words):
    """'free' | 'held OWNER TOKEN' | 'shared LIMIT COUNT' -> tuple, or None."""
    f = words.split()
    try:
        if f == ["free"]:
            return ("free",)
        if len(f) == 3 and f[0] == "held":
            return ("held", f[1], int(f[2]))
        if len(f) == 3 and f[0] == "shared":
            return ("shared", int(f[1]), int(f[2]))
    except ValueError:
        pass
    return None


def _v(check, msg, *recs):
    return Violation(check, msg, list(recs))


def observations(history):
    """Every W reply and V push read (watchers and final reads), parsed."""
    obs = []
    for d in history.watches:
        if d.get("kind") in ("W", "V"):
            obs.append(d)
    for d in history.watch_finals:
        obs.append({"w": "final", "conn": d.get("phase"), "kind": "W", "key": d["key"],
                    "rev": d["rev"], "state": d["state"], "time_ns": d["time_ns"],
                    "sent_ns": d.get("sent_ns")})
    return obs


def check_watches(history, locks_lost_on_restart=False, stats=None):
    violations = check_lost_notices(history, stats)
    if not history.watches and not history.watch_finals:
        if stats is not None:
            stats["watch"] = "no watchers in this history"
        return violations
    obs = observations(history)
    ends = exclusion_ends(history, locks_lost_on_restart)
    grants = _grants(history)
    by_token = {g.token: g for g in grants}
    grants_by_key = collections.defaultdict(list)
    for g in grants:
        grants_by_key[g.key].append(g)
    for lst in grants_by_key.values():
        lst.sort(key=lambda g: g.token)
    # Acquires whose outcome is unknown (a token nobody saw may be held).
    unsure = collections.defaultdict(list)     # (key, owner) -> invoke times of unknown A
    s_ops = collections.defaultdict(list)      # key -> S requests (granted or unknown)
    for op in history.ops:
        if op.f == "A" and (op.unknown or op.code is None):
            unsure[(op.key, op.owner)].append(op.invoke_ns)
        if op.f == "S" and (op.granted or op.unknown or op.code is None):
            s_ops[op.key].append(op)
    for v in unsure.values():
        v.sort()

    parsed = []
    for o in obs:
        st = parse_state(o["state"])
        if st is None:
            violations.append(_v("watch-state", "%s: key %s rev %d: unreadable state %r"
                                 % (o["w"], o["key"], o["rev"], o["state"]), o))
            continue
        o = dict(o)
        o["st"] = st
        parsed.append(o)
        violations += _real_state(o, st, by_token, unsure, s_ops)

    violations += _order_per_connection(parsed)
    violations += _missed(parsed)
    per_key = collections.defaultdict(list)
    for o in parsed:
        per_key[o["key"]].append(o)
    for key, lst in per_key.items():
        lst.sort(key=lambda o: (o["rev"], o["time_ns"]))
        violations += _one_history(key, lst)
        violations += _real_time(key, lst, grants_by_key.get(key, []), ends,
                                 history.meta.get("mode") == "single")
    fv, fstats = _final(history, per_key)
    violations += fv
    if stats is not None:
        stats["watch_lines"] = len(obs)
        stats["watch_pushes"] = sum(1 for o in obs if o["kind"] == "V")
        watchers = {d["w"] for d in history.watches}
        stats["watchers"] = len(watchers)
        stats["watch_reconnects"] = sum(1 for d in history.watches if d.get("kind") == "lost")
        stats["watch_dropped_not_newer"] = _dropped(history)
        stats.update(fstats)
    return violations


def _real_state(o, st, by_token, unsure, s_ops):
    key, t = o["key"], o["time_ns"]
    where = "%s: key %s rev %d %r read at %.1f ms" % (o["w"], key, o["rev"], o["state"], t / 1e6)
    if st[0] == "held":
        owner, token = st[1], st[2]
        g = by_token.get(token)
        if g is not None:
            if g.key != key or g.owner != owner or g.f != "A":
                return [_v("watch-state", "%s: token %d was granted to %s on %s (%s), not this "
                           "holder" % (where, token, g.owner, g.key, g.f), o, g)]
            if t <= g.invoke_ns:
                return [_v("watch-state", "%s: before token %d was even asked for (%.1f ms)"
                           % (where, token, g.invoke_ns / 1e6), o, g)]
            return []
        times = unsure.get((key, owner), [])
        if not times or times[0] >= t:
            return [_v("watch-state", "%s: no grant of token %d to %s on this key, and no A of "
                       "theirs with an unknown outcome before it" % (where, token, owner), o)]
        return []
    if st[0] == "shared":
        limit, count = st[1], st[2]
        asked = [op for op in s_ops.get(key, ()) if op.invoke_ns < t]
        if not any(op.limit == limit for op in asked):
            return [_v("watch-state", "%s: no S request with limit %d on this key before it"
                       % (where, limit), o)]
        if count < 1 or (limit > 0 and count > limit) or count > len(asked):
            return [_v("watch-state", "%s: impossible count (limit %d, %d S requests before)"
                       % (where, limit, len(asked)), o)]
    return []


def _order_per_connection(parsed):
    """Per (watcher, connection, key): pushes above the W reply and rising."""
    out = []
    last = {}
    w_rev = {}
    for o in parsed:
        if o["w"] == "final":
            continue
        c = (o["w"], o["conn"], o["key"])
        if o["kind"] == "W":
            first = c not in w_rev
            w_rev[c] = o["rev"]
            # The first W reply and pushes of a change in the same turn may
            # arrive in either order: a push only needs a larger rev than
            # the reply. (Before a later W, pushes still pending come first,
            # with revs up to the reply's.)
            if first and c in last and last[c][0] <= o["rev"]:
                out.append(_v("watch-order", "%s conn %d: key %s: push rev %d is not above the "
                              "W reply's rev %d" % (o["w"], o["conn"], o["key"], last[c][0],
                                                    o["rev"]), last[c][1], o))
            continue
        prev = last.get(c)
        if prev is not None and o["rev"] <= prev[0]:
            out.append(_v("watch-order", "%s conn %d: key %s: push rev %d after rev %d"
                          % (o["w"], o["conn"], o["key"], o["rev"], prev[0]), prev[1], o))
        elif c in w_rev and o["rev"] <= w_rev[c]:
            out.append(_v("watch-order", "%s conn %d: key %s: push rev %d not above the W "
                          "reply's rev %d" % (o["w"], o["conn"], o["key"], o["rev"], w_rev[c]), o))
        if prev is None or o["rev"] > prev[0]:
            last[c] = (o["rev"], o)
    return out


def _missed(parsed):
    """Per (watcher, connection, key): a W reply (the state at its rev R)
    equals the state of the connection's line with the largest rev <= R
    (a push, or an earlier W reply), whatever order they arrived in: a
    state between them would have been pushed on this connection (§5c:
    a push at every change, possibly only the last of a batch)."""
    out = []
    groups = collections.defaultdict(list)
    for o in parsed:
        if o["w"] != "final":
            groups[(o["w"], o["conn"], o["key"])].append(o)
    for (w, conn, key), lst in groups.items():
        lst.sort(key=lambda o: (o["rev"], o["kind"] == "W", o["time_ns"]))
        prev = None
        for o in lst:
            if o["kind"] == "W" and prev is not None and prev["st"] != o["st"]:
                out.append(_v("watch-missed", "%s conn %d: key %s: W reply at rev %d says %r, but "
                              "the connection's last state by then was %r (rev %d, %s) and no "
                              "push told it of a change" % (w, conn, key, o["rev"], o["state"],
                                                            prev["state"], prev["rev"],
                                                            prev["kind"]), prev, o))
            prev = o
    return out


def _one_history(key, lst):
    """All observations of a key (sorted by rev) fit one sequence of states."""
    out = []
    prev = None           # (rev, st, obs) of the previous distinct rev
    max_held = None       # (token, obs) of the largest held token so far
    gone = {}             # token -> the first obs after the key moved on from it
    for o in lst:
        r, st = o["rev"], o["st"]
        if prev is not None and prev[0] == r:
            if prev[1] != st:
                out.append(_v("watch-history", "key %s rev %d: %s read %r, %s read %r"
                              % (key, r, prev[2]["w"], prev[2]["state"], o["w"], o["state"]),
                              prev[2], o))
            continue
        if prev is not None and prev[1][0] == "held" and st != prev[1]:
            gone.setdefault(prev[1][2], o)
        if st[0] == "held":
            tok = st[2]
            if max_held is not None and tok < max_held[0]:
                out.append(_v("watch-history", "key %s: rev %d (%s) shows token %d, older than "
                              "token %d at rev %d (%s)" % (key, r, o["w"], tok, max_held[0],
                                                           max_held[1]["rev"], max_held[1]["w"]),
                              max_held[1], o))
            elif tok in gone:
                out.append(_v("watch-history", "key %s: rev %d (%s) shows token %d again after "
                              "rev %d (%s) showed %r" % (key, r, o["w"], tok, gone[tok]["rev"],
                                                         gone[tok]["w"], gone[tok]["state"]),
                              gone[tok], o))
            if max_held is None or tok > max_held[0]:
                max_held = (tok, o)
        prev = (r, st, o)
    return out


def _real_time(key, lst, grants, ends, one_server):
    """A state after a grant's own (by rev) is read only after that grant
    could have ended; in single mode (one_server), a W reply shows every
    grant held over its span (in a cluster a member's applied state may lag
    the grants the leader answered)."""
    out = []
    tokens = [g.token for g in grants]
    # Prefix maxima of the exclusion ends, over all grants and over the
    # exclusive ones, by token.
    pm_all, pm_excl = [], []
    best_all = best_excl = None
    for g in grants:
        e = ends[g.id][0]
        if best_all is None or e > ends[best_all.id][0]:
            best_all = g
        if not g.shared and (best_excl is None or e > ends[best_excl.id][0]):
            best_excl = g
        pm_all.append(best_all)
        pm_excl.append(best_excl)
    maxtok = None
    flagged = set()
    for o in lst:
        st, t = o["st"], o["time_ns"]
        if st[0] == "held":
            maxtok = st[2] if maxtok is None else max(maxtok, st[2])
        g = None
        if st[0] == "held":
            i = bisect.bisect_left(tokens, st[2])          # grants with smaller tokens
            g = pm_all[i - 1] if i > 0 else None
        elif maxtok is not None:
            i = bisect.bisect_right(tokens, maxtok)        # grants up to the key's latest seen
            g = (pm_all if st[0] == "free" else pm_excl)[i - 1] if i > 0 else None
        if g is not None and t < ends[g.id][0] and (g.id, o["rev"]) not in flagged:
            flagged.add((g.id, o["rev"]))
            out.append(_v("watch-time", "%s: key %s rev %d %r read %.1f ms before the exclusion "
                          "of token %d (granted earlier, by rev) could end"
                          % (o["w"], key, o["rev"], o["state"], (ends[g.id][0] - t) / 1e6,
                             g.token), g, o))
        if one_server and o["kind"] == "W" and o.get("sent_ns") is not None:
            for g in grants:
                if g.complete_ns <= o["sent_ns"] and ends[g.id][0] >= t:
                    ok = (st[0] == "held" and st[2] == g.token) if not g.shared else \
                        st[0] == "shared"
                    if not ok:
                        out.append(_v("watch-time", "%s: key %s: W reply %r (rev %d) while token "
                                      "%d (%s) was surely held from before the W to after its "
                                      "reply" % (o["w"], key, o["state"], o["rev"], g.token,
                                                 "shared" if g.shared else "exclusive"), g, o))
                        break
    return out


def _accepted(records):
    """The client's rule over one watcher's records: key -> (rev, state, obs)."""
    seen = {}
    for d in records:
        if d.get("kind") in ("W", "V"):
            old = seen.get(d["key"])
            if old is None or d["rev"] > old[0]:
                seen[d["key"]] = (d["rev"], d["state"], d)
    return seen


def _dropped(history):
    n = 0
    best = {}
    for d in history.watches:
        if d.get("kind") in ("W", "V"):
            k = (d["w"], d["key"])
            if k in best and d["rev"] < best[k]:
                n += 1      # older than a state already seen (a W again at the same rev is not)
            else:
                best[k] = d["rev"]
    return n


def _final(history, per_key):
    out = []
    stats = {}
    finals = collections.defaultdict(dict)    # key -> phase -> record
    for d in history.watch_finals:
        finals[d["key"]][d.get("phase", 1)] = d
    by_w = collections.defaultdict(list)
    for d in history.watches:
        by_w[d["w"]].append(d)
    connected = [w for w, recs in by_w.items() if recs and recs[-1].get("kind") == "end"]
    stats["watchers_connected_at_end"] = len(connected)
    settled = 0
    checked = 0
    for key, ph in sorted(finals.items()):
        if 1 not in ph or 2 not in ph or ph[1]["state"] != ph[2]["state"]:
            continue    # the key changed while the watchers stopped: no fixed final state
        settled += 1
        fstate, frev = ph[2]["state"], ph[2]["rev"]
        fst = parse_state(fstate)
        # The last rev (up to the final read) at which anyone saw another state.
        other = [o["rev"] for o in per_key.get(key, ()) if o["rev"] <= frev and o["st"] != fst]
        floor = max(other) if other else 0
        for w in connected:
            acc = _accepted(by_w[w]).get(key)
            checked += 1
            if acc is None or parse_state(acc[1]) != fst or acc[0] <= floor:
                got = "nothing" if acc is None else "%r at rev %d" % (acc[1], acc[0])
                out.append(_v("watch-final", "%s (connected to the end): key %s ends at %s, the "
                              "key's final state is %r (rev %d; another state was seen at rev "
                              "%d)" % (w, key, got, fstate, frev, floor), ph[2],
                              *([acc[2]] if acc else [])))
    stats["watch_final_keys_settled"] = settled
    stats["watch_final_checked"] = checked
    return out, stats


def check_lost_notices(history, stats=None):
    """`X` read by a workload client: its own grant, not before the lease end."""
    if not history.lost_notices:
        return []
    out = []
    grants = {g.token: g for g in _grants(history)}
    acked_k = collections.defaultdict(list)
    unsure = collections.defaultdict(list)
    for op in history.ops:
        if op.f == "K" and op.code == "K":
            acked_k[op.token].append(op)
        if op.f == "A" and (op.unknown or op.code is None):
            unsure[(op.key, op.client)].append(op.invoke_ns)
    for x in history.lost_notices:
        t = x["time_ns"]
        if "token" not in x:
            out.append(_v("lost-notice", "%s: unreadable %r" % (x["client"], x.get("line")), x))
            continue
        g = grants.get(x["token"])
        where = "%s: X %d %s read at %.1f ms" % (x["client"], x["token"], x["key"], t / 1e6)
        if g is None:
            if not any(i < t for i in unsure.get((x["key"], x["client"]), ())):
                out.append(_v("lost-notice", "%s: no grant of that token to this client" % where,
                              x))
            continue
        if g.key != x["key"] or g.client != x["client"]:
            out.append(_v("lost-notice", "%s: token %d was granted to %s on %s" % (
                where, g.token, g.client, g.key), g, x))
            continue
        end = g.invoke_ns + g.lease_ms * 1_000_000
        for k in acked_k.get(g.token, ()):
            if k.key == g.key and k.invoke_ns < t:
                end = max(end, k.invoke_ns + k.lease_ms * 1_000_000)
        if t < end:
            out.append(_v("lost-notice", "%s: %.1f ms before its lease could end" % (
                where, (end - t) / 1e6), g, x))
    if stats is not None:
        stats["lost_notices"] = len(history.lost_notices)
    return out
