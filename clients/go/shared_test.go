package lockd

// Shared holds (S, protocol v1.2): RLock and Semaphore. Against a scripted
// node: the lines sent, each holder kept and released by its own token,
// the refusals as errors, a late S grant released.

import (
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// granting grants every S with the next token and answers R and K.
func granting(next *atomic.Uint64) func(string) []string {
	return func(l string) []string {
		switch l[0] {
		case 'S':
			return []string{"S " + strconv.FormatUint(next.Add(1), 10) + " " + echo(l)}
		case 'R', 'K':
			return []string{l[:1] + " " + echo(l)}
		}
		return []string{"E unknown_command"}
	}
}

func TestReadLocksSendLimitZeroAndReleaseTheirOwnTokens(t *testing.T) {
	var next atomic.Uint64
	next.Store(39)
	n := newFake(t, granting(&next))
	c := newClient(t, n.addr())
	a, err := c.RLock(bg(), "cfg", LockOptions{Owner: "alice", Lease: time.Second, NoKeep: true})
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.RLock(bg(), "cfg", LockOptions{Owner: "bob", Lease: time.Second, NoKeep: true})
	if err != nil {
		t.Fatal(err)
	}
	if a.Token != 40 || b.Token != 41 || !a.Shared || a.Limit != 0 {
		t.Fatalf("%+v %+v", a, b)
	}
	if err := b.Release(bg()); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(bg()); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(n.lines(), "|"); got != "S alice cfg 0 1000|S bob cfg 0 1000|R 41 cfg|R 40 cfg" {
		t.Fatalf("sent %s", got)
	}
}

func TestASemaphorePermitIsKeptByItsOwnToken(t *testing.T) {
	var next atomic.Uint64
	next.Store(6)
	n := newFake(t, granting(&next))
	c := newClient(t, n.addr())
	pool := c.Semaphore("workers", 8)
	p, err := pool.Acquire(bg(), LockOptions{Owner: "w1", Lease: 300 * time.Millisecond, Wait: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if !eventually(t, 5*time.Second, func() bool { return n.saw("K 7 workers 300") }) {
		t.Fatalf("no K: %v", n.lines())
	}
	if err := p.Release(bg()); err != nil {
		t.Fatal(err)
	}
	lines := n.lines()
	if lines[0] != "S w1 workers 8 300 2000" || lines[len(lines)-1] != "R 7 workers" {
		t.Fatalf("sent %v", lines)
	}
	if _, err := c.Semaphore("workers", 0).Acquire(bg(), LockOptions{}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatal(err)
	}
}

func TestSharedRefusalsAreErrors(t *testing.T) {
	n := newFake(t, func(l string) []string {
		f := strings.Fields(l)
		switch f[1] {
		case "t":
			return []string{"T " + echo(l)}
		case "b":
			return []string{"B " + echo(l)}
		case "m":
			return []string{"E limit_mismatch " + echo(l)}
		}
		return []string{"A 5 " + echo(l)} // the wrong grant for an S
	})
	c := newClient(t, n.addr())
	for owner, want := range map[string]error{"t": ErrTimedOut, "b": ErrBusy, "m": ErrLimitMismatch, "x": ErrProtocol} {
		if _, err := c.AcquireShared(bg(), "k", 3, AcquireOptions{Owner: owner, Lease: time.Second}); !errors.Is(err, want) {
			t.Errorf("%s: got %v, want %v", owner, err, want)
		}
	}
}

func TestALateSharedGrantNobodyWaitsForIsReleased(t *testing.T) {
	n := newFake(t, func(l string) []string {
		if l[0] == 'R' {
			return []string{"R " + echo(l)}
		}
		return nil
	})
	c, _ := New(Options{Addresses: []string{n.addr()}, ReplyTimeout: 200 * time.Millisecond})
	defer c.Close()
	if _, err := c.AcquireShared(bg(), "k", 2, AcquireOptions{Owner: "alice", Lease: time.Second}); !errors.Is(err, ErrIndeterminate) {
		t.Fatal(err)
	}
	n.push("S 33 alice k")
	if !eventually(t, 5*time.Second, func() bool { return n.saw("R 33 k") }) {
		t.Fatalf("not released: %v", n.lines())
	}
}

func TestReadersAndAWriterOnARealLockd(t *testing.T) {
	d := single(t, "")
	c := newClient(t, d.addr())
	r1, err := c.RLock(bg(), "cfg", LockOptions{Owner: "r1", Lease: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := c.RLock(bg(), "cfg", LockOptions{Owner: "r2", Lease: 10 * time.Second})
	if err != nil || r2.Token <= r1.Token {
		t.Fatalf("second reader: %v %v", r2, err)
	}
	if _, err := c.Acquire(bg(), "cfg", AcquireOptions{Owner: "w", Lease: time.Second}); !errors.Is(err, ErrTimedOut) {
		t.Fatalf("writer while read: %v", err)
	}
	got := make(chan *Lock, 1)
	go func() {
		w, err := c.Lock(bg(), "cfg", LockOptions{Owner: "w", Lease: 10 * time.Second, Wait: 10 * time.Second})
		if err != nil {
			t.Error(err)
		}
		got <- w
	}()
	// The writer's A is on the wire before the next reader's S: it waits first.
	if !eventually(t, 5*time.Second, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.conn == nil {
			return false
		}
		c.conn.mu.Lock()
		defer c.conn.mu.Unlock()
		return c.conn.m.inFlight() == 1
	}) {
		t.Fatal("the writer's acquire never went out")
	}
	if _, err := c.AcquireShared(bg(), "cfg", 0, AcquireOptions{Owner: "r3", Lease: time.Second}); !errors.Is(err, ErrTimedOut) {
		t.Fatalf("a reader after a queued writer: %v", err)
	}
	r1.Release(bg())
	r2.Release(bg())
	w := <-got
	if w == nil || w.Token <= r2.Token {
		t.Fatalf("writer: %+v", w)
	}
	if err := w.Release(bg()); err != nil {
		t.Fatal(err)
	}

	pool := c.Semaphore("pool", 2)
	p1, err1 := pool.Acquire(bg(), LockOptions{Owner: "p1", Lease: 10 * time.Second})
	p2, err2 := pool.Acquire(bg(), LockOptions{Owner: "p2", Lease: 10 * time.Second})
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if _, err := pool.Acquire(bg(), LockOptions{Owner: "p3"}); !errors.Is(err, ErrTimedOut) {
		t.Fatalf("third permit of two: %v", err)
	}
	if _, err := c.AcquireShared(bg(), "pool", 3, AcquireOptions{Owner: "x", Lease: time.Second}); !errors.Is(err, ErrLimitMismatch) {
		t.Fatalf("another limit: %v", err)
	}
	p1.Release(bg())
	p3, err := pool.Acquire(bg(), LockOptions{Owner: "p3", Lease: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	p2.Release(bg())
	p3.Release(bg())
}
