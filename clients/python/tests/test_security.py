"""TLS and credentials (protocol.md §11) in both clients, against a real
lockd with --client-tls --auth any and certificates from the tree's test
PKI script: a credential inside TLS, a client certificate as identity, the
refusals, and a reconnect that handshakes and sends H again."""

import asyncio
import time
import os
import threading
import unittest

from tests.support import Lockd, eventually, pki_dir, secure_lockd_flags
from lockd_client import AsyncClient, Client, Forbidden, Unauthenticated, Unreachable

CREDENTIAL = "0123456789abcdef" * 4


def pki(name):
    return os.path.join(pki_dir(), name)


class SecureLockd(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.flags = secure_lockd_flags({"billing": CREDENTIAL}, {"billing": "billing/", "ops": "ops/"})

    def setUp(self):
        self.lockd = Lockd(0, *self.flags)
        self.clients = []

    def tearDown(self):
        for c in self.clients:
            c.close()
        self.lockd.stop()

    def client(self, **kw):
        c = Client(self.lockd.address, reply_timeout_s=5, connect_timeout_s=3, no_leader_budget_s=1, **kw)
        self.clients.append(c)
        return c

    def test_credential_inside_tls(self):
        c = self.client(credential=CREDENTIAL, tls_ca=pki("ca.pem"))
        with c.lock("billing/a", owner="alice", lease_ms=600) as lock:
            self.assertEqual(c.identity, "billing")
            # The keeper's K and other threads' requests share the TLS session.
            def burst(i):
                for j in range(30):
                    c.acquire(f"billing/t{i}-{j}", owner=f"w{i}", lease_ms=10_000).release()
            threads = [threading.Thread(target=burst, args=(i,)) for i in range(6)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            self.assertTrue(eventually(lambda: lock.kept_count >= 2, 5), lock.kept_count)
            self.assertFalse(lock.lost.is_set())
        with self.assertRaises(Forbidden):
            c.acquire("ops/a", owner="alice")
        # A restart on the same port: the reconnect handshakes and sends H again.
        port = self.lockd.port
        self.lockd.stop()
        self.lockd = Lockd(port, *self.flags)
        c.identity = None
        c.acquire("billing/b", owner="alice", lease_ms=10_000).release()
        self.assertEqual(c.identity, "billing")

    def test_client_certificate_is_the_identity(self):
        c = self.client(tls_ca=pki("ca.pem"), tls_cert=pki("client-ops.pem"), tls_key=pki("client-ops.key"),
                        tls_server_name="localhost")
        c.acquire("ops/a", owner="bob", lease_ms=10_000).release()
        with self.assertRaises(Forbidden):
            c.acquire("billing/a", owner="bob")

    def test_refusals(self):
        with self.assertRaises(Unauthenticated):  # TLS alone is no identity
            self.client(tls_ca=pki("ca.pem")).acquire("billing/a", owner="eve")
        wrong = "f" * 64
        with self.assertRaises(Unauthenticated) as cm:
            self.client(credential=wrong, tls_ca=pki("ca.pem")).acquire("billing/a", owner="eve")
        self.assertNotIn(wrong, str(cm.exception))
        for kw in ({"tls_ca": pki("other-ca.pem")},                              # another CA
                   {"tls_ca": pki("ca.pem"), "tls_server_name": "lockd.example.net"},  # another name
                   {}):                                                          # no TLS at all
            with self.assertRaises(Unreachable, msg=str(kw)) as cm:
                self.client(credential=CREDENTIAL, **kw).acquire("billing/a", owner="eve")
            self.assertNotIn(CREDENTIAL, str(cm.exception))
        with self.assertRaises(ValueError):
            Client(self.lockd.address, credential="has space")


class SecureLockdAsync(unittest.IsolatedAsyncioTestCase):
    def setUp(self):
        self.flags = secure_lockd_flags({"billing": CREDENTIAL}, {"billing": "billing/", "ops": "ops/"})
        self.lockd = Lockd(0, *self.flags)

    def tearDown(self):
        self.lockd.stop()

    async def test_tls_credentials_and_reconnect(self):
        async with AsyncClient(self.lockd.address, credential=CREDENTIAL, tls_ca=pki("ca.pem"),
                               reply_timeout_s=5) as c:
            async with c.lock("billing/a", owner="alice", lease_ms=600) as lock:
                deadline = time.monotonic() + 10
                while lock.kept_count < 1 and time.monotonic() < deadline:
                    await asyncio.sleep(0.02)  # a poll: the keeper's first K is due at 200 ms
                self.assertGreaterEqual(lock.kept_count, 1)
            self.assertEqual(c.identity, "billing")
            with self.assertRaises(Forbidden):
                await c.acquire("ops/a", owner="alice")
            port = self.lockd.port
            await asyncio.to_thread(self.lockd.stop)  # the loop runs meanwhile: the reader sees the EOF
            self.lockd = await asyncio.to_thread(Lockd, port, *self.flags)
            c.identity = None
            await (await c.acquire("billing/b", owner="alice", lease_ms=10_000)).release()
            self.assertEqual(c.identity, "billing")
        async with AsyncClient(self.lockd.address, tls_ca=pki("ca.pem"), tls_cert=pki("client-ops.pem"),
                               tls_key=pki("client-ops.key"), reply_timeout_s=5) as ops:
            await (await ops.acquire("ops/a", owner="bob", lease_ms=10_000)).release()
        for kw in ({"credential": "f" * 64, "tls_ca": pki("ca.pem")}, {"tls_ca": pki("ca.pem")}):
            async with AsyncClient(self.lockd.address, reply_timeout_s=5, **kw) as c:
                with self.assertRaises(Unauthenticated):
                    await c.acquire("billing/a", owner="eve")
        async with AsyncClient(self.lockd.address, credential=CREDENTIAL, tls_ca=pki("other-ca.pem"),
                               no_leader_budget_s=1) as c:
            with self.assertRaises(Unreachable):
                await c.acquire("billing/a", owner="eve")


if __name__ == "__main__":
    unittest.main()
