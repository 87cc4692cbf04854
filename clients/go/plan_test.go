package lockd

// The shared client test plan (docs/client-test-plan.md), its wire cases:
// against a real lockd where the server's behaviour matters, against a
// scripted fake node for the exact interleavings (and, until the watch
// server is in this tree, for W/U/V/X).

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func inFlight(c *Client) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == nil {
		return 0
	}
	c.conn.mu.Lock()
	defer c.conn.mu.Unlock()
	return c.conn.m.inFlight()
}

// C01: a lock granted after a wait longer than its lease is kept.
func TestC01LongWaitThenKeep(t *testing.T) {
	d := single(t, "")
	c := newClient(t, d.addr())
	if _, err := c.Acquire(bg(), "kk", AcquireOptions{Owner: "first", Lease: 1500 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	l, err := c.Lock(bg(), "kk", LockOptions{Owner: "waiter", Lease: time.Second, Wait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if w := l.GrantedAt.Sub(l.SentAt); w < time.Second {
		t.Fatalf("granted after %v: the test needs a wait longer than the lease", w)
	}
	end := time.Now().Add(3 * time.Second)
	for time.Now().Before(end) {
		select {
		case <-l.Lost():
			t.Fatalf("lost %v after the grant: %v", time.Since(l.GrantedAt), l.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	if l.KeptCount() < 3 {
		t.Errorf("only %d extensions in 3 s of a 1 s lease", l.KeptCount())
	}
	if err := l.Release(bg()); err != nil {
		t.Fatalf("release after 3 s: %v (the lease ended?)", err)
	}
}

// C05: cancellation before the send sends nothing; cancellation while the
// acquire is queued at the server releases the late grant at once, also
// when nothing else is ever sent on that client again.
func TestC05CancellationAtEveryPointOfAnAcquire(t *testing.T) {
	n := newFake(t, func(l string) []string { return []string{"A 1 " + echo(l)} })
	ctx, cancel := context.WithCancel(bg())
	cancel()
	if _, err := newClient(t, n.addr()).Acquire(ctx, "k", AcquireOptions{Lease: time.Second}); !errors.Is(err, context.Canceled) || errors.Is(err, ErrIndeterminate) {
		t.Fatalf("before send: %v", err)
	}
	if len(n.lines()) != 0 {
		t.Fatalf("sent %v", n.lines())
	}

	// The grant arrives just after the caller gave up: released at once.
	late := newFake(t, func(l string) []string {
		if l[0] == 'R' {
			return []string{"R " + echo(l)}
		}
		return nil // the A is answered later, by push
	})
	lc := newClient(t, late.addr())
	ctx, cancel = context.WithTimeout(bg(), 200*time.Millisecond)
	defer cancel()
	if _, err := lc.Acquire(ctx, "k", AcquireOptions{Owner: "o", Lease: 5 * time.Second, Wait: 10 * time.Second}); !errors.Is(err, ErrIndeterminate) {
		t.Fatalf("given up: %v", err)
	}
	late.push("A 77 o k")
	if !eventually(t, 5*time.Second, func() bool { return late.saw("R 77 k") }) {
		t.Fatalf("the late grant was not released: %v", late.lines())
	}

	d := single(t, "")
	other := newClient(t, d.addr())
	holder, err := other.Acquire(bg(), "k", AcquireOptions{Owner: "alice", Lease: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	idle := newClient(t, d.addr())
	ctx, cancel = context.WithCancel(bg())
	done := make(chan error, 1)
	go func() {
		_, err := idle.Acquire(ctx, "k", AcquireOptions{Owner: "bob", Lease: 20 * time.Second, Wait: time.Minute})
		done <- err
	}()
	if !eventually(t, 5*time.Second, func() bool { return inFlight(idle) == 1 }) {
		t.Fatal("bob's acquire never went out")
	}
	cancel()
	if err := <-done; !errors.Is(err, ErrIndeterminate) {
		t.Fatalf("queued: %v", err)
	}
	if err := holder.Release(bg()); err != nil { // hands the key to bob's abandoned acquire
		t.Fatal(err)
	}
	start := time.Now()
	if !eventually(t, 5*time.Second, func() bool {
		return strings.HasPrefix(callOnce(d.addr(), "A probe k 1000", time.Second), "A ")
	}) {
		t.Fatal("the late grant was never released")
	}
	if e := time.Since(start); e > 5*time.Second {
		t.Fatalf("free only after %v", e)
	}
}

// C07: a redirect moves the client to another node; a wait in flight on
// the old connection is still answered there.
func TestC07NodeSwitchKeepsTheOldConnectionForCallersInFlight(t *testing.T) {
	n2 := newFake(t, func(l string) []string {
		if l[0] == 'R' {
			return []string{"R " + echo(l)}
		}
		return nil
	})
	n1 := newFake(t, func(l string) []string {
		if l[0] == 'R' {
			return []string{"M " + n2.addr() + " " + echo(l)}
		}
		return nil // the acquire waits
	})
	c := newClient(t, n1.addr(), n2.addr())
	got := make(chan error, 1)
	go func() {
		l, err := c.Acquire(bg(), "k", AcquireOptions{Owner: "w", Lease: time.Second, Wait: 10 * time.Second})
		if err == nil && l.Token != 5 {
			err = fmt.Errorf("token %d", l.Token)
		}
		got <- err
	}()
	if !eventually(t, 5*time.Second, func() bool { return n1.saw("A w k 1000 10000") }) {
		t.Fatal("the acquire never reached node 1")
	}
	if err := c.Release(bg(), 3, "other"); err != nil {
		t.Fatalf("release via the redirect: %v", err)
	}
	n1.push("A 5 w k") // the wait ends on the old connection
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("the waiting acquire on the old connection: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting acquire never got its grant")
	}
	// Then the old connection, idle, is closed.
	if !eventually(t, 5*time.Second, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, o := range c.old {
			if !o.isDead() {
				return false
			}
		}
		return true
	}) {
		t.Fatal("the retired connection stayed open")
	}
}

// C08: after Close, keepers stop and never reconnect or extend.
func TestC08CloseWithKeepersRunning(t *testing.T) {
	n := newFake(t, func(l string) []string {
		switch l[0] {
		case 'A':
			return []string{"A 4 " + echo(l)}
		case 'K':
			return []string{"K " + echo(l)}
		case 'W':
			return []string{"W w 1 free"}
		}
		return nil
	})
	c, _ := New(Options{Addresses: []string{n.addr()}})
	l, err := c.Lock(bg(), "k", LockOptions{Lease: 150 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.Watch(bg(), "w")
	if err != nil {
		t.Fatal(err)
	}
	<-w.States()
	if !eventually(t, 5*time.Second, func() bool { return l.KeptCount() >= 1 }) {
		t.Fatal("never kept")
	}
	c.Close()
	select {
	case <-l.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not stop the keeper")
	}
	if !errors.Is(l.Err(), ErrClosed) {
		t.Errorf("why: %v", l.Err())
	}
	select {
	case _, ok := <-w.States():
		if ok || !errors.Is(w.Err(), ErrClosed) {
			t.Errorf("the watch after Close: open %v, %v", ok, w.Err())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end the watch")
	}
	ks, conns := n.count("K "), n.connCount()
	deadline := time.Now().Add(5 * 150 * time.Millisecond) // five leases
	for time.Now().Before(deadline) {
		if n.count("K ") != ks || n.connCount() != conns {
			t.Fatalf("after Close: %d K (was %d), %d connections (was %d)", n.count("K "), ks, n.connCount(), conns)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// C09: a handle is released only once the server confirmed; a failed
// release is retried through the handle.
func TestC09ReleaseIsMarkedOnlyAfterTheServerConfirms(t *testing.T) {
	var refuse atomic.Bool
	refuse.Store(true)
	n := newFake(t, func(l string) []string {
		switch {
		case l[0] == 'A':
			return []string{"A 4 " + echo(l)}
		case l[0] == 'R' && refuse.Load():
			return []string{"E no_leader " + echo(l)}
		case l[0] == 'R':
			return []string{"R " + echo(l)}
		}
		return nil
	})
	c, _ := New(Options{Addresses: []string{n.addr()}, NoLeaderBudget: 100 * time.Millisecond})
	defer c.Close()
	l, err := c.Lock(bg(), "k", LockOptions{Lease: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(bg()); !errors.Is(err, ErrNoLeader) {
		t.Fatalf("first release: %v", err)
	}
	refuse.Store(false)
	before := n.count("R ")
	if err := l.Release(bg()); err != nil {
		t.Fatalf("retried release: %v", err)
	}
	if n.count("R ") != before+1 {
		t.Fatalf("the retry sent %d R", n.count("R ")-before)
	}
	if err := l.Release(bg()); err != nil || n.count("R ") != before+1 {
		t.Fatalf("a release after the confirmed one: %v, %d R", err, n.count("R ")-before)
	}
}

// C10: a second acquire of one owner and key on one connection waits in
// the client until the first is answered, then goes out with what is left
// of its own wait (its wait counts from the call, it does not restart).
func TestC10SecondAcquireOfTheSameOwnerAndKey(t *testing.T) {
	d := single(t, "")
	c := newClient(t, d.addr())
	if _, err := c.Acquire(bg(), "k", AcquireOptions{Owner: "alice", Lease: 30 * time.Second}); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	acquire := func(wait time.Duration) {
		_, err := c.Acquire(bg(), "k", AcquireOptions{Owner: "bob", Lease: time.Second, Wait: wait})
		errs <- err
	}
	go acquire(2 * time.Second) // waits at the server, answered T at 2 s
	if !eventually(t, 5*time.Second, func() bool { return inFlight(c) == 1 }) {
		t.Fatal("the first acquire never went out")
	}
	start := time.Now()
	go acquire(3 * time.Second) // waits in the client ~2 s, then at the server for the ~1 s left
	for i := 0; i < 2; i++ {
		if err := <-errs; !errors.Is(err, ErrTimedOut) {
			t.Fatalf("acquire %d: %v", i, err)
		}
	}
	if e := time.Since(start); e > 4*time.Second {
		t.Fatalf("the second answered after %v of its 3 s wait: its wait restarted", e)
	}
}

// C11: V and X pushes between pipelined replies are never taken as replies.
func TestC11PushesBetweenPipelinedRepliesAreNotReplies(t *testing.T) {
	n := newFake(t, func(l string) []string {
		switch l[0] {
		case 'A':
			return []string{"V k 5 free", "X 99 z", "A 7 " + echo(l), "V k 6 held o 7"}
		case 'R':
			return []string{"X 7 k", "R " + echo(l)}
		}
		return nil
	})
	c := newClient(t, n.addr())
	for i := 0; i < 20; i++ {
		l, err := c.Acquire(bg(), "k", AcquireOptions{Owner: fmt.Sprint("o", i), Lease: time.Second})
		if err != nil {
			t.Fatalf("acquire %d: %v", i, err)
		}
		if err := l.Release(bg()); err != nil {
			t.Fatalf("release %d: %v", i, err)
		}
	}
	if n.connCount() != 1 {
		t.Fatalf("%d connections: a push broke one", n.connCount())
	}
}

// C12: Watch yields states in rev order, drops older ones, and after the
// node goes away watches again elsewhere, dropping states not newer.
func TestC12WatchInRevOrderAcrossAReconnect(t *testing.T) {
	n2 := newFake(t, func(l string) []string {
		switch l[0] {
		case 'W':
			return []string{"W k 6 free"} // older than what was seen
		case 'U':
			return []string{"U k"}
		}
		return nil
	})
	n1 := newFake(t, func(l string) []string {
		switch l[0] {
		case 'W':
			return []string{"W k 5 held a 1"}
		case 'U':
			return []string{"U k"}
		}
		return nil
	})
	c, _ := New(Options{Addresses: []string{n1.addr(), n2.addr()}, BackoffInitial: 10 * time.Millisecond})
	defer c.Close()
	ctx, cancel := context.WithCancel(bg())
	defer cancel()
	w, err := c.Watch(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	next := func() KeyState {
		t.Helper()
		select {
		case st, ok := <-w.States():
			if !ok {
				t.Fatalf("closed: %v", w.Err())
			}
			return st
		case <-time.After(5 * time.Second):
			t.Fatal("no state")
		}
		return KeyState{}
	}
	if st := next(); st.Rev != 5 || st.Kind != "held" || st.Owner != "a" || st.Token != 1 {
		t.Fatalf("first: %+v", st)
	}
	n1.push("V k 7 free")
	n1.push("V k 6 held b 2") // older: dropped
	n1.push("V k 8 held c 3")
	if st := next(); st.Rev != 7 || st.Kind != "free" {
		t.Fatalf("%+v", st)
	}
	if st := next(); st.Rev != 8 || st.Owner != "c" {
		t.Fatalf("%+v", st)
	}
	n1.stop()
	if !eventually(t, 5*time.Second, func() bool { return n2.saw("W k") }) {
		t.Fatal("never watched again on node 2")
	}
	n2.push("V k 9 held d 4")
	if st := next(); st.Rev != 9 || st.Owner != "d" {
		t.Fatalf("after the reconnect: %+v (rev 6 must be dropped)", st)
	}
	w.Close()
	if _, ok := <-w.States(); ok {
		t.Fatal("States not closed")
	}
	if !eventually(t, 5*time.Second, func() bool { return n2.saw("U k") }) {
		t.Fatal("no U after Close")
	}
}

// C13: the keeper stops at X and reports the loss at once.
func TestC13KeeperStopsAtX(t *testing.T) {
	n := newFake(t, func(l string) []string {
		switch l[0] {
		case 'A':
			return []string{"A 4 " + echo(l)}
		case 'K':
			return []string{"K " + echo(l)}
		}
		return nil
	})
	c := newClient(t, n.addr())
	var calls atomic.Int32
	l, err := c.Lock(bg(), "k", LockOptions{Lease: 30 * time.Second, OnLost: func(*Lock, error) { calls.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	n.push("X 3 k") // another token: not ours
	n.push("X 4 k")
	select {
	case <-l.Lost():
	case <-time.After(2 * time.Second):
		t.Fatal("X did not stop the keeper")
	}
	if !errors.Is(l.Err(), ErrNotHeld) || !strings.Contains(l.Err().Error(), "X") {
		t.Fatalf("why: %v", l.Err())
	}
	if !eventually(t, 5*time.Second, func() bool { return calls.Load() == 1 }) {
		t.Fatal("OnLost not called")
	}
	if n.count("K ") != 0 {
		t.Fatalf("%d K sent", n.count("K "))
	}
}

// C14: Campaign waits and wins, Leader reads, Observe yields each change
// of leader once, Resign releases, X is a clear loss signal.
func TestC14Election(t *testing.T) {
	var grant atomic.Bool
	n := newFake(t, func(l string) []string {
		f := strings.Fields(l)
		switch f[0] {
		case "A":
			if grant.Load() {
				return []string{"A 12 " + echo(l)}
			}
			return []string{"T " + echo(l)} // the wait ran out: Campaign asks again
		case "K":
			return []string{"K " + echo(l)}
		case "R":
			return []string{"R " + echo(l)}
		case "W":
			return []string{"W leader/x 3 held node-a 11"}
		case "U":
			return []string{"U leader/x"}
		}
		return nil
	})
	c := newClient(t, n.addr())
	if ld, err := c.Leader(bg(), "leader/x"); err != nil || ld.Value != "node-a" || ld.Token != 11 {
		t.Fatalf("leader: %+v %v", ld, err)
	}
	ctx, cancel := context.WithCancel(bg())
	defer cancel()
	obs, err := c.Observe(ctx, "leader/x")
	if err != nil {
		t.Fatal(err)
	}
	if ld := <-obs; ld.Value != "node-a" {
		t.Fatalf("observe first: %+v", ld)
	}
	won := make(chan *Leadership, 1)
	go func() {
		l, err := c.Campaign(bg(), "leader/x", "node-b", CampaignOptions{Lease: 30 * time.Second})
		if err != nil {
			t.Error(err)
		}
		won <- l
	}()
	if !eventually(t, 5*time.Second, func() bool { return n.count("A node-b leader/x") >= 2 }) {
		t.Fatal("Campaign did not ask again after T")
	}
	grant.Store(true)
	n.push("V leader/x 4 free")
	n.push("V leader/x 5 held node-a 11") // a change again: free before
	n.push("V leader/x 6 held node-b 12")
	n.push("V leader/x 7 held node-b 12") // the same holder: not a change
	var l *Leadership
	select {
	case l = <-won:
	case <-time.After(10 * time.Second):
		t.Fatal("never won")
	}
	if l == nil || l.Token != 12 || l.Value != "node-b" {
		t.Fatalf("%+v", l)
	}
	var seen []string
	for len(seen) < 3 {
		select {
		case ld := <-obs:
			seen = append(seen, fmt.Sprintf("%s/%d", ld.Value, ld.Rev))
		case <-time.After(5 * time.Second):
			t.Fatalf("observed %v", seen)
		}
	}
	if strings.Join(seen, " ") != "/4 node-a/5 node-b/6" {
		t.Fatalf("observed %v", seen)
	}
	n.push("X 12 leader/x")
	select {
	case <-l.Lost():
	case <-time.After(2 * time.Second):
		t.Fatal("X was no loss signal")
	}
	if err := l.Resign(bg()); err != nil {
		t.Fatal(err)
	}
	if !n.saw("R 12 leader/x") {
		t.Fatal("Resign sent no R")
	}
}

// C04 against a real lockd without the v1.3 echo (this build's server,
// --max-wait-ms 3000): the E bad_wait of a wait above the maximum is not
// pinned on another goroutine's validly queued acquire.
func TestC04EchoLessRefusalAmongQueuedAcquiresOnARealLockd(t *testing.T) {
	d := startLockd(t, "--listen", "127.0.0.1:0", "--admin", "off", "--max-wait-ms", "3000")
	c := newClient(t, d.addr())
	holder, err := c.Acquire(bg(), "k", AcquireOptions{Owner: "alice", Lease: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// (1) The server already accepted a 2 s wait: only the 10 s one can
	// have drawn the E, whichever reply arrives first.
	if _, err := c.Acquire(bg(), "warm", AcquireOptions{Owner: "w", Lease: time.Second, Wait: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	queued := make(chan error, 1)
	go func() {
		l, err := c.Acquire(bg(), "k", AcquireOptions{Owner: "bob", Lease: 20 * time.Second, Wait: 2 * time.Second})
		if err == nil {
			err = l.Release(bg())
		}
		queued <- err
	}()
	if !eventually(t, 5*time.Second, func() bool { return inFlight(c) == 1 }) {
		t.Fatal("bob's acquire never went out")
	}
	var rejected *RejectedError
	if _, err := c.Acquire(bg(), "j", AcquireOptions{Owner: "carol", Lease: time.Second, Wait: 10 * time.Second}); !errors.As(err, &rejected) || rejected.Code != "bad_wait" {
		t.Fatalf("the refused acquire: %v", err)
	}
	if err := <-queued; !errors.Is(err, ErrTimedOut) {
		t.Fatalf("bob's queued acquire: %v (the E was pinned on it?)", err)
	}
	// (2) A fresh client knows no accepted wait. A pre-v1.3 server sends
	// no echo: two candidates, so the E is held back until bob's queued
	// acquire has its own answer (T when its wait runs out), then given to
	// carol's. A v1.3 server echoes it (C03): carol's at once, and bob is
	// handed the key when alice releases.
	echoes := callOnce(d.addr(), "A x y 1000 10000", time.Second) == "E bad_wait x y"
	c2 := newClient(t, d.addr())
	queued2 := make(chan error, 1)
	go func() {
		l, err := c2.Acquire(bg(), "k", AcquireOptions{Owner: "bob", Lease: 20 * time.Second, Wait: 2500 * time.Millisecond})
		if err == nil {
			err = l.Release(bg())
		}
		queued2 <- err
	}()
	if !eventually(t, 5*time.Second, func() bool { return inFlight(c2) == 1 }) {
		t.Fatal("bob's second acquire never went out")
	}
	if _, err := c2.Acquire(bg(), "j", AcquireOptions{Owner: "carol", Lease: time.Second, Wait: 10 * time.Second}); !errors.As(err, &rejected) || rejected.Code != "bad_wait" {
		t.Fatalf("the refused acquire (server echoes: %v): %v", echoes, err)
	}
	if err := holder.Release(bg()); err != nil {
		t.Fatal(err)
	}
	err = <-queued2
	if echoes && err != nil || !echoes && !errors.Is(err, ErrTimedOut) {
		t.Fatalf("the queued acquire (server echoes: %v): %v", echoes, err)
	}
	if !eventually(t, 5*time.Second, func() bool {
		return strings.HasPrefix(callOnce(d.addr(), "A probe k 1000", time.Second), "A ")
	}) {
		t.Fatal("bob's grant was never released")
	}
	// New requests go through (over a new connection after an ambiguity).
	if l, err := c2.Acquire(bg(), "other", AcquireOptions{Owner: "dave", Lease: time.Second}); err != nil {
		t.Fatal(err)
	} else if err := l.Release(bg()); err != nil {
		t.Fatal(err)
	}
}
