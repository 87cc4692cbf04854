package lockd

// Authentication (H, protocol.md §11) against a real lockd run with
// --auth token, a credentials file and an ACL, written here exactly as
// interfaces.md ("Security files") gives them.

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// credentialHash is the credentials file's hash of a credential:
// "sha256$" + hex(salt) + "$" + hex(sha256(salt bytes ++ credential bytes)).
func credentialHash(t *testing.T, credential string) string {
	salt := make([]byte, 16)
	if _, err := rand.Read(salt); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(append(append([]byte(nil), salt...), credential...))
	return "sha256$" + hex.EncodeToString(salt) + "$" + hex.EncodeToString(sum[:])
}

// authLockd starts lockd with --auth token: identity "billing" (credential
// returned) may use billing/ only.
func authLockd(t *testing.T) (*proc, string) {
	dir := t.TempDir()
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		t.Fatal(err)
	}
	credential := hex.EncodeToString(secret)
	creds := filepath.Join(dir, "credentials.toml")
	acl := filepath.Join(dir, "acl.toml")
	if err := os.WriteFile(creds, []byte("[[credential]]\nidentity = \"billing\"\nhash = \""+credentialHash(t, credential)+"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(acl, []byte("admins = []\n[[rule]]\nidentity = \"billing\"\nprefix = \"billing/\"\nverbs = [\"A\", \"S\", \"R\", \"K\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return startLockd(t, "--listen", "127.0.0.1:0", "--admin", "off", "--auth", "token", "--credentials", creds, "--acl", acl), credential
}

func authClient(t *testing.T, credential string, addrs ...string) *Client {
	t.Helper()
	c, err := New(Options{Addresses: addrs, ReplyTimeout: 5 * time.Second, JitterSeed: 1, Credential: credential})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestCredentialAuthenticatesEveryConnection(t *testing.T) {
	p, credential := authLockd(t)

	// No credential: the server answers E unauthenticated.
	_, err := newClient(t, p.addr()).Acquire(bg(), "billing/a", AcquireOptions{Owner: "alice"})
	if !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("without a credential: %v", err)
	}

	c := authClient(t, credential, p.addr())
	l, err := c.Lock(bg(), "billing/a", LockOptions{Owner: "alice", Lease: 600 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if c.Identity() != "billing" {
		t.Errorf("identity %q", c.Identity())
	}
	// The keeper's K are authenticated too.
	if !eventually(t, 5*time.Second, func() bool { return l.KeptCount() >= 2 }) {
		t.Fatalf("kept %d times: %v", l.KeptCount(), l.Err())
	}
	select {
	case <-l.Lost():
		t.Fatalf("lost: %v", l.Err())
	default:
	}
	if err := l.Release(bg()); err != nil {
		t.Fatal(err)
	}
	// The ACL: billing may not touch other prefixes.
	_, err = c.Acquire(bg(), "payroll/a", AcquireOptions{Owner: "alice"})
	if !errors.Is(err, ErrForbidden) {
		t.Fatalf("outside its prefix: %v", err)
	}

	// A wrong credential: refused, and never printed.
	wrong := strings.Repeat("f", 64)
	_, err = authClient(t, wrong, p.addr()).Acquire(bg(), "billing/a", AcquireOptions{Owner: "alice"})
	if !errors.Is(err, ErrUnauthenticated) || strings.Contains(err.Error(), wrong) {
		t.Fatalf("wrong credential: %v", err)
	}

	// A credential that breaks protocol.md §2 never leaves the process.
	if _, err := New(Options{Credential: "has space"}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("bad credential: %v", err)
	}
}

// A redirect opens a new connection: it is authenticated before its first
// request, like the first one.
func TestRedirectedConnectionAuthenticatesToo(t *testing.T) {
	p, credential := authLockd(t)
	follower := newFake(t, func(l string) []string {
		if l[0] == 'H' {
			return []string{"H billing"}
		}
		return []string{"M " + p.addr() + " " + echo(l)}
	})
	c := authClient(t, credential, follower.addr())
	l, err := c.Acquire(bg(), "billing/b", AcquireOptions{Owner: "alice", Lease: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(bg()); err != nil {
		t.Fatal(err)
	}
	if got := follower.lines(); len(got) != 2 || got[0] != "H "+credential || !strings.HasPrefix(got[1], "A alice billing/b") {
		t.Errorf("follower got %v", got)
	}
}
