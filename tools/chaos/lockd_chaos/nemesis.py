"""Carries out a fault schedule against a Group, one fault at a time, and
records each injection and heal in the history (type "nemesis")."""

import os
import random
import shutil
import threading
import time

NS_PER_MS = 1_000_000

# A membership step (one change through the leader's admin API) is retried
# this long while leadership moves or a learner catches up.
MEMBER_STEP_TIMEOUT_S = 45
# How long a removed node may run on before it must have stopped by itself
# (docs/cluster.md "A removed node stops": within a redial, 1 s at most).
REMOVED_EXIT_TIMEOUT_S = 15

# How long a member restarted on a wiped data dir may run before it must
# have been refused (it learns it took part from its peers' handshakes).
WIPED_REFUSAL_TIMEOUT_S = 20


def wipe_data_dir(data_dir, shape):
    """Deletes what `shape` says from a (stopped) node's data dir; returns
    how many files went. "all": everything; "wal": the WAL segments;
    "all-but-identity": everything but IDENTITY."""
    lost = 0
    for name in sorted(os.listdir(data_dir)):
        path = os.path.join(data_dir, name)
        if shape == "wal" and not (name.startswith("wal-") and name.endswith(".log")):
            continue
        if shape == "all-but-identity" and name == "IDENTITY":
            continue
        if shape not in ("all", "wal", "all-but-identity"):
            raise ValueError("unknown wipe shape %r" % shape)
        if os.path.isdir(path):
            shutil.rmtree(path)
        else:
            os.remove(path)
        lost += 1
    return lost


# libfaketime caches its timestamp file for FAKETIME_CACHE_DURATION (1 s).
FAKETIME_REREAD_S = 1.2


class Nemesis:
    def __init__(self, group, net, writer, schedule, seed, election_timeout_ms, log):
        self.group = group
        self.net = net
        self.writer = writer
        self.schedule = schedule
        self.rng = random.Random(seed * 7919 + 1)   # flapping timings; part of the seed
        self.election_timeout_ms = election_timeout_ms
        self.log = log
        self.stop = threading.Event()
        self.t0 = None
        self.heal_ns = None
        self.error = None

    def record(self, phase, fault, node=None, **extra):
        rec = {"type": "nemesis", "time_ns": time.monotonic_ns(), "phase": phase,
               "fault": fault.kind, "detail": fault.detail, "target": fault.target}
        if node is not None:
            rec["node"] = node.id
        rec.update(extra)
        self.writer.write(rec)
        self.log("%s %s %s node=%s %s" % (phase, fault.kind, fault.detail or "",
                                          node.id if node else "-",
                                          " ".join("%s=%s" % kv for kv in extra.items())))

    def resolve(self, target):
        nodes = self.group.nodes
        if self.group.mode == "single" or len(nodes) == 1:
            return nodes[0]
        leader = self.group.leader()
        if target == "leader" and leader is not None:
            return leader
        others = [n for n in nodes if n is not leader and n.alive()]
        return self.rng.choice(others or nodes)

    def sleep_until(self, t_s):
        while not self.stop.is_set():
            left = self.t0 + t_s - time.monotonic()
            if left <= 0:
                return
            self.stop.wait(min(left, 0.1))

    def run(self):
        try:
            self.t0 = time.monotonic()
            for fault in self.schedule:
                self.sleep_until(fault.start_s)
                if self.stop.is_set():
                    break
                self.inject(fault)
            self.heal_all()
        except Exception as e:  # recorded and re-raised by the runner
            self.error = e
            try:
                self.heal_all()
            except Exception:
                pass

    def inject(self, fault):
        end = fault.start_s + fault.duration_s
        if fault.kind == "upgrade":
            node = self.group.nodes[int(fault.target[len("node"):]) - 1]
            self.record("start", fault, node, binary=fault.detail)
            node.kill9()
            node.lockd = fault.detail
            self.sleep_until(end)
            node.start()
            self.record("end", fault, node)
            return
        node = self.resolve(fault.target)
        if fault.kind == "kill":
            self.record("start", fault, node)
            node.kill9()
            self.sleep_until(end)
            node.start()
            self.record("end", fault, node)
        elif fault.kind == "pause":
            self.record("start", fault, node)
            node.pause()
            self.sleep_until(end)
            node.resume()
            self.record("end", fault, node)
        elif fault.kind == "partition":
            self.partition(fault, node, end)
        elif fault.kind in ("clock", "clock-restart"):
            offset, restart = fault.detail.split()[0], "restart" in fault.detail
            self.record("start", fault, node, wall_offset_s=offset)
            node.set_faketime(offset)
            if restart:
                # libfaketime re-reads its file each second: let it, then
                # restart the node on the moved clock.
                self.stop.wait(FAKETIME_REREAD_S)
                node.kill9()
                node.start()
                self.record("restart", fault, node, log=node.log)
            self.sleep_until(end)
            node.set_faketime(node.faketime_base)
            self.record("end", fault, node)
        elif fault.kind == "member":
            self.member_change(fault, node, end)
        elif fault.kind == "wipe":
            self.wipe(fault, node, end)
        elif fault.kind == "disk":
            self.record("start", fault, node, rule=fault.detail)
            node.set_faultfs(fault.detail)
            self.sleep_until(end)
            node.set_faultfs("")
            died = not node.alive()
            if died:
                code = node.proc.returncode
                node.start()
                self.record("end", fault, node, exited=code, restarted=True)
            else:
                self.record("end", fault, node)

    def partition(self, fault, node, end):
        ips = [n.host for n in self.group.nodes]
        me = node.host
        rest = [ip for ip in ips if ip != me]
        shape = fault.detail
        if shape == "isolate":
            self.net.split([me], rest)
            sides = [[me], rest]
        elif shape == "majority-minority":
            minority = [me] + rest[: max(0, (len(ips) - 1) // 2 - 1)]
            majority = [ip for ip in ips if ip not in minority]
            self.net.split(minority, majority)
            sides = [minority, majority]
        elif shape == "bridge":
            half = len(rest) // 2
            a, b = rest[:half], rest[half:]
            self.net.split(a, b)     # `me` still talks to both halves
            sides = [a, b, "bridge=" + me]
        elif shape == "one-way":
            for ip in rest:
                self.net.cut(me, ip)
            sides = ["%s->%s dropped" % (me, ",".join(rest))]
        elif shape == "flapping":
            sides = [[me], rest]
        else:
            raise ValueError("unknown partition shape %r" % shape)
        self.record("start", fault, node, sides=sides)
        if shape == "flapping":
            flips = 0
            while not self.stop.is_set() and time.monotonic() < self.t0 + end:
                if flips % 2 == 0:
                    self.net.split([me], rest)
                else:
                    self.net.heal()
                flips += 1
                self.stop.wait(self.rng.uniform(0.2, 0.6))
            self.net.heal()
            self.record("end", fault, node, flips=flips)
            return
        self.sleep_until(end)
        self.net.heal()
        self.record("end", fault, node)

    def member_step(self, method, path, body=None, done_if=()):
        """One membership change, asked of whichever node leads until it is
        answered 200. Retried while there is no leader, a follower answers
        503, a change is in flight (409 change_in_progress), the learner is
        not caught up (409 not_caught_up), or the commit timed out (504: it
        may have taken effect). An error in `done_if` counts as done: the
        answer to a retry whose first attempt took effect (an add answered
        already_member, a removal not_found). Anything else is a finding."""
        deadline = time.monotonic() + MEMBER_STEP_TIMEOUT_S
        last = None
        while time.monotonic() < deadline:
            leader = self.group.wait_leader(5)
            if leader is None:
                continue
            status, reply = leader.admin(method, path, body)
            err = reply.get("error") if isinstance(reply, dict) else None
            last = (leader.id, status, reply)
            if status == 200 or err in done_if:
                return reply
            if status in (0, 503, 504) or err in ("change_in_progress", "not_caught_up"):
                self.stop.wait(0.1)
                continue
            raise RuntimeError("%s %s refused: %s" % (method, path, last))
        raise RuntimeError("%s %s not done in %ds; last answer %s"
                           % (method, path, MEMBER_STEP_TIMEOUT_S, last))

    def retire(self, node):
        """`node` was removed: it must stop by itself, with exit status 2."""
        deadline = time.monotonic() + REMOVED_EXIT_TIMEOUT_S
        node.resume()
        while node.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        code = node.proc.returncode if node.proc is not None else None
        if node in self.group.nodes:
            self.group.nodes.remove(node)
        self.group.retired.append(node)
        if node.alive():
            node.kill9()
            raise RuntimeError("node %d still running %ds after its removal committed (log %s)"
                               % (node.id, REMOVED_EXIT_TIMEOUT_S, node.log))
        if code != 2:
            raise RuntimeError("removed node %d exited with %s, not 2 (log %s)"
                               % (node.id, code, node.log))
        return code

    def add_member(self, new, promote):
        """Adds `new` (Group.new_node()) as a learner through the leader,
        starts it, gives its address to the clients, and (`promote`)
        promotes it once caught up."""
        self.member_step("POST", "/v1/cluster/members",
                         {"id": new.id, "client_addr": new.client_addr, "raft_addr": new.raft_addr},
                         done_if=("already_member",))
        new.start()
        self.group.nodes.append(new)
        self.group.addrs.append(new.client_addr)
        if promote:
            self.member_step("POST", "/v1/cluster/members/%d/promote" % new.id,
                             done_if=("not_learner",))

    def member_change(self, fault, node, end):
        """"replace": a new member is added as a learner, started empty,
        promoted once caught up; then `node` (leader or follower) is
        removed and must stop by itself. "learner": a learner is added,
        runs for the fault's length, and is removed."""
        new = self.group.new_node()
        self.record("start", fault, node if fault.detail == "replace" else None, added=new.id)
        self.add_member(new, promote=fault.detail == "replace")
        if fault.detail == "replace":
            self.record("promoted", fault, new)
            node.resume()
            self.member_step("DELETE", "/v1/cluster/members/%d" % node.id, done_if=("not_found",))
            self.record("removed", fault, node)
            code = self.retire(node)
            self.sleep_until(end)
            self.record("end", fault, node, added=new.id, removed_exit=code)
            return
        self.sleep_until(end)
        self.member_step("DELETE", "/v1/cluster/members/%d" % new.id, done_if=("not_found",))
        code = self.retire(new)
        self.record("end", fault, None, added=new.id, removed=new.id, removed_exit=code)

    def wipe(self, fault, node, end):
        """kill -9 `node`, lose part or all of its data dir (fault.detail,
        schedule.WIPE_SHAPES), restart it with the same flags: it took part
        in the group, so it must be refused at start (exit 2, one line) and
        never vote or serve under its id. Then it is replaced as an
        operator would: its id removed, a new member (new id) added,
        started empty and promoted."""
        self.record("start", fault, node)
        node.kill9()
        lost = wipe_data_dir(node.data_dir, fault.detail)
        node.spawn()
        deadline = time.monotonic() + WIPED_REFUSAL_TIMEOUT_S
        while node.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        if node.alive():
            node.kill9()
            raise RuntimeError("node %d, its data dir wiped (%s: %d files), still running %ds "
                               "after its restart: a member that lost data must be refused "
                               "(log %s)" % (node.id, fault.detail, lost,
                                             WIPED_REFUSAL_TIMEOUT_S, node.log))
        code = node.proc.returncode
        with open(node.log) as f:
            lines = [l for l in f.read().splitlines() if l.strip()]
        last = lines[-1] if lines else ""
        if code != 2:
            raise RuntimeError("node %d, its data dir wiped (%s), exited %s at restart, not 2 "
                               "(log %s)" % (node.id, fault.detail, code, node.log))
        self.record("refused", fault, node, lost_files=lost, exit=code, line=last[-300:])
        # The way back the refusal names: remove the id, add a new member.
        self.member_step("DELETE", "/v1/cluster/members/%d" % node.id, done_if=("not_found",))
        self.group.nodes.remove(node)
        self.group.retired.append(node)
        new = self.group.new_node()
        self.add_member(new, promote=True)
        self.sleep_until(end)
        self.record("end", fault, node, added=new.id, removed=node.id)

    def heal_all(self):
        if self.net is not None:
            self.net.heal()
        for node in self.group.nodes:
            if node.faketime_on:
                node.set_faketime(node.faketime_base)
            if node.faultfs_on:
                node.set_faultfs("")
            node.resume()
            if not node.alive():
                node.start()
        self.heal_ns = time.monotonic_ns()
        self.writer.write({"type": "heal", "time_ns": self.heal_ns})
        self.log("heal: all faults stopped, every node running")
