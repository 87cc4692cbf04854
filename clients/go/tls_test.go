package lockd

// TLS (Options.TLS) against a real lockd --client-tls --auth any, with
// certificates made by the tree's one test PKI script
// (tests/support/make-test-pki, openssl), as the C++ and Python tests do.

import (
	"crypto/tls"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testPKI makes a throw-away PKI in a temporary directory (file names in
// the script's header).
func testPKI(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	script, err := filepath.Abs(filepath.Join("..", "..", "tests", "support", "make-test-pki"))
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(script, dir).CombinedOutput(); err != nil {
		t.Fatalf("make-test-pki: %v: %s", err, out)
	}
	return dir
}

func tlsFiles(t *testing.T, ca, cert, key, serverName string) *tls.Config {
	t.Helper()
	cfg, err := TLSFiles(ca, cert, key, serverName)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestTLSWithCredentialOrClientCertificate(t *testing.T) {
	pki := testPKI(t)
	f := func(name string) string { return filepath.Join(pki, name) }
	credential := strings.Repeat("c0ffee", 8)
	dir := t.TempDir()
	creds := filepath.Join(dir, "credentials.toml")
	acl := filepath.Join(dir, "acl.toml")
	if err := os.WriteFile(creds, []byte("[[credential]]\nidentity = \"billing\"\nhash = \""+credentialHash(t, credential)+"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(acl, []byte("[[rule]]\nidentity = \"billing\"\nprefix = \"billing/\"\nverbs = [\"A\", \"R\", \"K\"]\n"+
		"[[rule]]\nidentity = \"ops\"\nprefix = \"ops/\"\nverbs = [\"A\", \"R\", \"K\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"--admin", "off", "--client-tls", "--tls-cert", f("server.pem"), "--tls-key", f("server.key"),
		"--tls-ca", f("ca.pem"), "--auth", "any", "--credentials", creds, "--acl", acl}
	p := startLockd(t, append([]string{"--listen", "127.0.0.1:0"}, args...)...)
	client := func(cfg *tls.Config, cred string) *Client {
		c, err := New(Options{Addresses: []string{p.addr()}, ReplyTimeout: 5 * time.Second, ConnectTimeout: 3 * time.Second,
			NoLeaderBudget: time.Second, JitterSeed: 1, TLS: cfg, Credential: cred})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}

	// A credential inside TLS (the server's name checked: 127.0.0.1 is in its SAN).
	billing := client(tlsFiles(t, f("ca.pem"), "", "", ""), credential)
	if _, err := billing.Acquire(bg(), "billing/a", AcquireOptions{Owner: "alice", Lease: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if billing.Identity() != "billing" {
		t.Errorf("identity %q", billing.Identity())
	}
	if _, err := billing.Acquire(bg(), "ops/a", AcquireOptions{Owner: "alice"}); !errors.Is(err, ErrForbidden) {
		t.Fatalf("outside its prefix: %v", err)
	}

	// A client certificate (CN ops) and no credential: the certificate is the identity.
	ops := client(tlsFiles(t, f("ca.pem"), f("client-ops.pem"), f("client-ops.key"), "localhost"), "")
	if _, err := ops.Acquire(bg(), "ops/a", AcquireOptions{Owner: "bob"}); err != nil {
		t.Fatal(err)
	}
	if _, err := ops.Acquire(bg(), "billing/b", AcquireOptions{Owner: "bob"}); !errors.Is(err, ErrForbidden) {
		t.Fatalf("ops outside its prefix: %v", err)
	}

	// Neither: TLS alone is no identity.
	if _, err := client(tlsFiles(t, f("ca.pem"), "", "", ""), "").Acquire(bg(), "billing/c", AcquireOptions{Owner: "eve"}); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("no identity: %v", err)
	}
	// A server whose certificate does not chain to our CA, or does not
	// carry the name we expect, is not talked to; nor is plaintext.
	for name, cfg := range map[string]*tls.Config{
		"another CA": tlsFiles(t, f("other-ca.pem"), "", "", ""),
		"wrong name": tlsFiles(t, f("ca.pem"), "", "", "lockd.example.net"),
		"no TLS":     nil,
	} {
		_, err := client(cfg, credential).Acquire(bg(), "billing/d", AcquireOptions{Owner: "eve"})
		if err == nil || errors.Is(err, ErrForbidden) {
			t.Errorf("%s: %v", name, err)
		}
		if err != nil && strings.Contains(err.Error(), credential) {
			t.Errorf("%s: the credential is in the error", name)
		}
	}

	// A reconnect (the node restarted on its port) handshakes and sends H again.
	port := p.port
	p.kill()
	startLockd(t, append([]string{"--listen", "127.0.0.1:" + port}, args...)...)
	if _, err := billing.Acquire(bg(), "billing/a", AcquireOptions{Owner: "alice", Lease: 10 * time.Second}); err != nil {
		t.Fatalf("after the restart: %v", err)
	}
	if billing.Identity() != "billing" {
		t.Errorf("identity after the restart %q", billing.Identity())
	}
}
