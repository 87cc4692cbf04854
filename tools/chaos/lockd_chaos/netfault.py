"""Network partitions between node addresses with iptables.

All rules live in one chain of our own, LOCKD_CHAOS_<octet> (the run's
address block), jumped to from OUTPUT (loopback packets pass OUTPUT once).
The chain is flushed at start, on every heal and on exit, and removed on
exit. Clients connect from 127.0.0.1, which no rule names, so only traffic
between nodes is cut.

TCP cannot be cut one way only: a one-way rule drops A's packets to B,
which stalls A->B data and B's connection to A alike (A's ACKs to B are
dropped too). What it does model is asymmetry at the packet level: B still
hears nothing new from A while A still receives B's retransmissions.
"""

import subprocess


class IptablesError(RuntimeError):
    pass


def _run(args, check=True):
    p = subprocess.run(["iptables", "-w"] + args, capture_output=True, text=True)
    if check and p.returncode != 0:
        raise IptablesError("iptables %s: %s" % (" ".join(args), p.stderr.strip()))
    return p.returncode == 0


def available():
    try:
        return _run(["-L", "OUTPUT", "-n"], check=False)
    except FileNotFoundError:
        return False


class Net:
    def __init__(self, octet):
        self.chain = "LOCKD_CHAOS_%d" % octet
        self.cuts = set()   # (src_ip, dst_ip) pairs dropped

    def setup(self):
        if not _run(["-N", self.chain], check=False):
            _run(["-F", self.chain])     # left over from a crashed run: flush it
        if not _run(["-C", "OUTPUT", "-j", self.chain], check=False):
            _run(["-I", "OUTPUT", "-j", self.chain])

    def cut(self, src, dst):
        """Drop packets from node address src to node address dst."""
        if (src, dst) not in self.cuts:
            _run(["-A", self.chain, "-s", src, "-d", dst, "-j", "DROP"])
            self.cuts.add((src, dst))

    def cut_both(self, a, b):
        self.cut(a, b)
        self.cut(b, a)

    def split(self, side_a, side_b):
        for a in side_a:
            for b in side_b:
                self.cut_both(a, b)

    def heal(self):
        _run(["-F", self.chain])
        self.cuts.clear()

    def teardown(self):
        _run(["-F", self.chain], check=False)
        while _run(["-D", "OUTPUT", "-j", self.chain], check=False):
            pass
        _run(["-X", self.chain], check=False)
