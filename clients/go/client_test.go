package lockd

// The client against a real `lockd --mode single` over TCP, and against a
// scripted fake node for the cluster answers one lockd cannot give.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestAcquireReleaseKeep(t *testing.T) {
	d := single(t, "")
	c := newClient(t, d.addr())
	l, err := c.Acquire(bg(), "orders/42", AcquireOptions{Owner: "alice", Lease: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(bg(), "orders/42", AcquireOptions{Owner: "bob", Lease: time.Second}); !errors.Is(err, ErrTimedOut) {
		t.Fatalf("second acquire: %v", err)
	}
	if err := l.Keep(bg(), 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := c.Keep(bg(), l.Token+1, "orders/42", time.Second); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("keep with a wrong token: %v", err)
	}
	if err := l.Release(bg()); err != nil {
		t.Fatal(err)
	}
	if err := c.Release(bg(), l.Token, "orders/42"); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("second release: %v", err)
	}
	again, err := c.Acquire(bg(), "orders/42", AcquireOptions{Owner: "bob", Lease: time.Second})
	if err != nil || again.Token <= l.Token {
		t.Fatalf("after release: %v, token %v <= %d", err, again, l.Token)
	}
	if _, err := c.Acquire(bg(), "has space", AcquireOptions{}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("bad key: %v", err)
	}
	// Over the server's maximum lease: its E (no echo) still finds its request.
	var rejected *RejectedError
	if _, err := c.Acquire(bg(), "k", AcquireOptions{Lease: 4000000 * time.Second}); !errors.As(err, &rejected) || rejected.Code != "bad_lease" {
		t.Fatalf("huge lease: %v", err)
	}
}

func TestManyGoroutinesShareOneConnectionAndWaitersAreHandedTheKey(t *testing.T) {
	d := single(t, "")
	c := newClient(t, d.addr())
	holder, err := c.Acquire(bg(), "hot", AcquireOptions{Owner: "holder", Lease: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var ok atomic.Int32
	// 8 goroutines: unrelated keys pipelined past a waiting acquire.
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 25; i++ {
				l, err := c.Acquire(bg(), fmt.Sprintf("k%d-%d", g, i), AcquireOptions{Owner: fmt.Sprint("o", g), Lease: 10 * time.Second})
				if err == nil && l.Release(bg()) == nil {
					ok.Add(1)
				}
			}
		}(g)
	}
	waited := make(chan error, 1)
	go func() {
		l, err := c.Acquire(bg(), "hot", AcquireOptions{Owner: "waiter", Lease: 10 * time.Second, Wait: 10 * time.Second})
		if err == nil && l.Token <= holder.Token {
			err = fmt.Errorf("token %d not above %d", l.Token, holder.Token)
		}
		waited <- err
	}()
	wg.Wait()
	if ok.Load() != 200 {
		t.Errorf("%d of 200 acquire+release pairs", ok.Load())
	}
	if err := holder.Release(bg()); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
}

func TestContextDeadlineCutsTheWaitSoTheServerAnswersT(t *testing.T) {
	d := single(t, "")
	c := newClient(t, d.addr())
	if _, err := c.Acquire(bg(), "k", AcquireOptions{Owner: "alice", Lease: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(bg(), 400*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Acquire(ctx, "k", AcquireOptions{Owner: "bob", Lease: time.Second, Wait: time.Minute})
	if !errors.Is(err, ErrTimedOut) {
		t.Fatalf("got %v, want ErrTimedOut (T from the server)", err)
	}
	if e := time.Since(start); e < 300*time.Millisecond || e > 5*time.Second {
		t.Errorf("answered after %v", e)
	}
}

func TestCancelledWaitIsIndeterminateAndALateGrantIsReleased(t *testing.T) {
	d := single(t, "")
	c := newClient(t, d.addr())
	holder, err := c.Acquire(bg(), "k", AcquireOptions{Owner: "alice", Lease: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(bg())
	done := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, "k", AcquireOptions{Owner: "bob", Lease: 10 * time.Second, Wait: time.Minute})
		done <- err
	}()
	// Once bob's acquire is on the wire, alice's release (sent after it on
	// the same connection) reaches the server after bob queued.
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
		t.Fatal("bob's acquire never went out")
	}
	cancel()
	err = <-done
	if !errors.Is(err, ErrIndeterminate) || !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want ErrIndeterminate wrapping context.Canceled", err)
	}
	// alice releases: the key is handed to bob's abandoned acquire, and the
	// client releases that grant at once, so the key comes free.
	if err := holder.Release(bg()); err != nil {
		t.Fatal(err)
	}
	if !eventually(t, 5*time.Second, func() bool {
		return strings.HasPrefix(callOnce(d.addr(), "A probe k 1000", time.Second), "A ")
	}) {
		t.Fatal("the late grant to an abandoned acquire was never released")
	}
}

func TestKeeperKeepsThroughThreeLeasesAndReleases(t *testing.T) {
	d := single(t, "")
	c := newClient(t, d.addr())
	var lostCalls atomic.Int32
	l, err := c.Lock(bg(), "k", LockOptions{Owner: "alice", Lease: 450 * time.Millisecond,
		OnLost: func(*Lock, error) { lostCalls.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	if !eventually(t, 10*time.Second, func() bool { return l.KeptCount() >= 5 }) {
		t.Fatalf("kept %d times", l.KeptCount())
	}
	// More than three leases have passed since the acquire.
	if time.Since(l.SentAt) < 3*l.Lease {
		time.Sleep(3*l.Lease - time.Since(l.SentAt))
	}
	if got := callOnce(d.addr(), "A bob k 1000", time.Second); got != "T bob k" {
		t.Fatalf("someone else got %q", got)
	}
	if err := l.Release(bg()); err != nil {
		t.Fatal(err)
	}
	if l.Err() != nil || lostCalls.Load() != 0 {
		t.Fatalf("lost: %v", l.Err())
	}
}

func TestKeeperReportsLossWhenTheServerRestarts(t *testing.T) {
	d := single(t, "")
	c := newClient(t, d.addr())
	got := make(chan error, 2)
	l, err := c.Lock(bg(), "k", LockOptions{Owner: "alice", Lease: 600 * time.Millisecond,
		OnLost: func(_ *Lock, err error) { got <- err }})
	if err != nil {
		t.Fatal(err)
	}
	d.kill() // the lock table is gone with it
	single(t, d.addr())
	select {
	case err := <-got:
		if !errors.Is(err, ErrLost) || !errors.Is(err, ErrNotHeld) {
			t.Fatalf("lost with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("loss never reported")
	}
	<-l.Lost()
	if err := l.Release(bg()); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("release after loss: %v", err)
	}
}

// --- against a scripted node --------------------------------------------

func TestFollowsARedirectAndSendsLaterRequestsToTheLeader(t *testing.T) {
	leader := newFake(t, func(l string) []string {
		if l[0] == 'A' {
			return []string{"A 77 " + echo(l)}
		}
		return []string{"R " + echo(l)}
	})
	follower := newFake(t, func(l string) []string { return []string{"M " + leader.addr() + " " + echo(l)} })
	c := newClient(t, follower.addr())
	l, err := c.Acquire(bg(), "k", AcquireOptions{Owner: "alice", Lease: time.Second})
	if err != nil || l.Token != 77 {
		t.Fatalf("%v %v", l, err)
	}
	if err := l.Release(bg()); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(leader.lines(), "|"); got != "A alice k 1000|R 77 k" {
		t.Errorf("leader got %s", got)
	}
	if len(follower.lines()) != 1 {
		t.Errorf("follower got %v", follower.lines())
	}
}

func TestRedirectLoopEndsAsNoLeader(t *testing.T) {
	var self string
	loop := newFake(t, func(l string) []string { return []string{"M " + self + " " + echo(l)} })
	self = loop.addr()
	if _, err := newClient(t, loop.addr()).Acquire(bg(), "k", AcquireOptions{Lease: time.Second}); !errors.Is(err, ErrNoLeader) {
		t.Fatal(err)
	}
	if n := len(loop.lines()); n != 4 {
		t.Errorf("%d tries, want the first and 3 redirects", n)
	}
}

func TestNoLeaderIsRetriedWithJitteredBackoffThenGivenUp(t *testing.T) {
	var calls atomic.Int32
	n := newFake(t, func(l string) []string {
		if calls.Add(1) <= 3 {
			return []string{"E no_leader " + echo(l)}
		}
		return []string{"A 5 " + echo(l)}
	})
	c, _ := New(Options{Addresses: []string{n.addr()}, BackoffInitial: 40 * time.Millisecond, JitterSeed: 1})
	defer c.Close()
	start := time.Now()
	if _, err := c.Acquire(bg(), "k", AcquireOptions{Lease: time.Second}); err != nil {
		t.Fatal(err)
	}
	if e := time.Since(start); e < 140*time.Millisecond { // at least half of 40+80+160 ms
		t.Errorf("retried after %v", e)
	}
	always := newFake(t, func(l string) []string { return []string{"E no_leader " + echo(l)} })
	c2, _ := New(Options{Addresses: []string{always.addr()}, NoLeaderBudget: 300 * time.Millisecond})
	defer c2.Close()
	start = time.Now()
	if _, err := c2.Acquire(bg(), "k", AcquireOptions{Lease: time.Second}); !errors.Is(err, ErrNoLeader) {
		t.Fatal(err)
	}
	if e := time.Since(start); e > 2*time.Second {
		t.Errorf("gave up after %v", e)
	}
}

func TestUnreachableNodesAreSkipped(t *testing.T) {
	gone := newFake(t, func(string) []string { return nil })
	dead := gone.addr()
	gone.l.Close()
	leader := newFake(t, func(l string) []string { return []string{"A 9 " + echo(l)} })
	if _, err := newClient(t, dead, leader.addr()).Acquire(bg(), "k", AcquireOptions{Lease: time.Second}); err != nil {
		t.Fatal(err)
	}
	if _, err := newClient(t, dead).Acquire(bg(), "k", AcquireOptions{Lease: time.Second}); !errors.Is(err, ErrUnreachable) {
		t.Fatal(err)
	}
}

func TestIndeterminateIsAnOutcomeNeverResent(t *testing.T) {
	n := newFake(t, func(l string) []string { return []string{"E indeterminate " + echo(l)} })
	c := newClient(t, n.addr())
	if _, err := c.Acquire(bg(), "k", AcquireOptions{Lease: time.Second}); !errors.Is(err, ErrIndeterminate) {
		t.Fatal(err)
	}
	if err := c.Release(bg(), 5, "k"); !errors.Is(err, ErrIndeterminate) {
		t.Fatal(err)
	}
	if len(n.lines()) != 2 {
		t.Errorf("sent %v", n.lines())
	}
}

func TestAnUnknownReplyBreaksTheConnection(t *testing.T) {
	n := newFake(t, func(string) []string { return []string{"A 1 x y"} })
	if _, err := newClient(t, n.addr()).Acquire(bg(), "k", AcquireOptions{Lease: time.Second}); !errors.Is(err, ErrIndeterminate) {
		t.Fatal(err)
	}
}

func TestKeeperGivesUpAtTheLeasesSafeEnd(t *testing.T) {
	n := newFake(t, func(l string) []string {
		switch l[0] {
		case 'A':
			return []string{"A 8 " + echo(l)}
		case 'R':
			return []string{"N " + echo(l)}
		}
		return []string{"E no_leader " + echo(l)}
	})
	c, _ := New(Options{Addresses: []string{n.addr()}, NoLeaderBudget: 30 * time.Second})
	defer c.Close()
	l, err := c.Lock(bg(), "k", LockOptions{Lease: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("never lost")
	}
	if e := time.Since(l.SentAt); e > 1500*time.Millisecond {
		t.Errorf("lost after %v: the safe end was 300 ms", e)
	}
	if !errors.Is(l.Err(), ErrNotHeld) {
		t.Errorf("why: %v", l.Err())
	}
}

func TestAQueuedDuplicateAcquireDoesNotHoldOtherRequestsBack(t *testing.T) {
	d := single(t, "")
	c := newClient(t, d.addr())
	holder, err := c.Acquire(bg(), "k", AcquireOptions{Owner: "alice", Lease: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *Lock, 2)
	for i := 0; i < 2; i++ {
		go func() {
			l, err := c.Acquire(bg(), "k", AcquireOptions{Owner: "bob", Lease: 30 * time.Second, Wait: 10 * time.Second})
			if err != nil {
				t.Error(err)
			}
			got <- l
		}()
	}
	// One of bob's acquires waits at the server, the other in the client.
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
		t.Fatal("bob's acquire never went out")
	}
	start := time.Now()
	if err := holder.Release(bg()); err != nil { // must not wait behind bob's duplicate
		t.Fatal(err)
	}
	if e := time.Since(start); e > 2*time.Second {
		t.Fatalf("the release waited %v behind a queued duplicate acquire", e)
	}
	first := <-got
	first.Release(bg())
	second := <-got
	if first == nil || second == nil || second.Token <= first.Token {
		t.Fatalf("%v %v", first, second)
	}
	second.Release(bg())
}
