package lockd

// The shared client test plan's watch cases (C11-C14) against a real
// lockd that serves W/U/V/X (protocol v1.3 §5c).

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

func nextState(t *testing.T, w *Watch) KeyState {
	t.Helper()
	select {
	case st, ok := <-w.States():
		if !ok {
			t.Fatalf("States closed: %v", w.Err())
		}
		return st
	case <-time.After(10 * time.Second):
		t.Fatal("no state in 10 s")
	}
	return KeyState{}
}

// C11: V pushes for a watched key land between the pipelined replies of
// eight goroutines using that key on the same connection; none is taken
// for a reply, and the connection is never replaced.
func TestC11PushesBetweenPipelinedRepliesOnARealLockd(t *testing.T) {
	d := single(t, "")
	c := newClient(t, d.addr())
	w, err := c.Watch(bg(), "hot")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	c.mu.Lock()
	first := c.conn
	c.mu.Unlock()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 25; i++ {
				l, err := c.Acquire(bg(), "hot", AcquireOptions{Owner: fmt.Sprint("g", g), Lease: 10 * time.Second, Wait: 10 * time.Second})
				if err == nil {
					err = l.Release(bg())
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}(g)
	}
	var last uint64
	stop := make(chan struct{})
	drained := make(chan int)
	go func() {
		n := 0
		for {
			select {
			case st := <-w.States():
				if st.Rev <= last {
					t.Errorf("rev %d after %d", st.Rev, last)
				}
				last = st.Rev
				n++
			case <-stop:
				drained <- n
				return
			}
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	close(stop)
	if n := <-drained; n < 2 {
		t.Errorf("only %d states seen", n)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn != first || len(c.old) != 0 {
		t.Fatal("the connection was replaced: a push was taken for a reply")
	}
}

// C12: states in rev order; after the connection breaks the watch sends W
// again and goes on, never going back to an older rev.
func TestC12WatchOnARealLockd(t *testing.T) {
	d := single(t, "")
	c := newClient(t, d.addr())
	other := newClient(t, d.addr())
	w, err := c.Watch(bg(), "k")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if st := nextState(t, w); st.Kind != "free" {
		t.Fatalf("first: %+v", st)
	}
	l, err := other.Acquire(bg(), "k", AcquireOptions{Owner: "alice", Lease: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	st := nextState(t, w)
	if st.Kind != "held" || st.Owner != "alice" || st.Token != l.Token {
		t.Fatalf("held: %+v", st)
	}
	c.mu.Lock()
	_ = c.conn.nc.Close() // the connection breaks under the watch
	c.mu.Unlock()
	if err := l.Release(bg()); err != nil {
		t.Fatal(err)
	}
	// Re-watched: the free state comes (from the new W or a V), newer.
	st2 := nextState(t, w)
	if st2.Kind != "free" || st2.Rev <= st.Rev {
		t.Fatalf("after the reconnect: %+v (before: rev %d)", st2, st.Rev)
	}
	if _, err := other.Acquire(bg(), "k", AcquireOptions{Owner: "bob", Lease: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if st3 := nextState(t, w); st3.Owner != "bob" || st3.Rev <= st2.Rev {
		t.Fatalf("%+v", st3)
	}
}

// C13: the server's X stops the keeper at once. The keeper's K is made a
// no-op here (it believes every K confirmed), so the server's lease runs
// out and hands the key to a waiter.
func TestC13KeeperStopsAtXOnARealLockd(t *testing.T) {
	d := single(t, "")
	c := newClient(t, d.addr())
	l, err := c.Acquire(bg(), "k", AcquireOptions{Owner: "alice", Lease: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	l.keepFn = func(context.Context) error { return nil }
	lostAt := make(chan time.Time, 1)
	l.startKeeper(func(*Lock, error) { lostAt <- time.Now() })
	waiter := newClient(t, d.addr())
	next, err := waiter.Acquire(bg(), "k", AcquireOptions{Owner: "bob", Lease: 10 * time.Second, Wait: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case at := <-lostAt:
		if e := at.Sub(next.GrantedAt); e > time.Second || e < -time.Second {
			t.Errorf("lost %v from the hand-off", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("X never stopped the keeper")
	}
	if !errors.Is(l.Err(), ErrNotHeld) {
		t.Fatalf("why: %v", l.Err())
	}
}

// C14: two candidates on a real lockd: the first wins, the second waits;
// Leader and Observe see the change when the first resigns.
func TestC14ElectionOnARealLockd(t *testing.T) {
	d := single(t, "")
	a, b, watcher := newClient(t, d.addr()), newClient(t, d.addr()), newClient(t, d.addr())
	if ld, err := watcher.Leader(bg(), "leader/x"); err != nil || ld.Value != "" {
		t.Fatalf("nobody yet: %+v %v", ld, err)
	}
	la, err := a.Campaign(bg(), "leader/x", "node-a", CampaignOptions{Lease: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(bg())
	defer cancel()
	obs, err := watcher.Observe(ctx, "leader/x")
	if err != nil {
		t.Fatal(err)
	}
	if ld := <-obs; ld.Value != "node-a" || ld.Token != la.Token {
		t.Fatalf("observed %+v", ld)
	}
	won := make(chan *Leadership, 1)
	go func() {
		lb, err := b.Campaign(bg(), "leader/x", "node-b", CampaignOptions{Lease: 2 * time.Second})
		if err != nil {
			t.Error(err)
		}
		won <- lb
	}()
	// a leads through several leases (kept alive), b waits.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-won:
			t.Fatal("two leaders")
		case <-la.Lost():
			t.Fatalf("node-a lost: %v", la.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err := la.Resign(bg()); err != nil {
		t.Fatal(err)
	}
	var lb *Leadership
	select {
	case lb = <-won:
	case <-time.After(10 * time.Second):
		t.Fatal("node-b never won")
	}
	if lb == nil || lb.Token <= la.Token {
		t.Fatalf("%+v", lb)
	}
	ld := <-obs
	if ld.Value == "" { // nobody between the two, if the server showed it
		ld = <-obs
	}
	if ld.Value != "node-b" || ld.Token != lb.Token {
		t.Fatalf("observed %+v", ld)
	}
	if ld, err := watcher.Leader(bg(), "leader/x"); err != nil || ld.Value != "node-b" {
		t.Fatalf("leader: %+v %v", ld, err)
	}
	if err := lb.Resign(bg()); err != nil {
		t.Fatal(err)
	}
}

// C12 in a real cluster: a watch served by a follower moves to another
// member when that follower is killed, and never goes back in rev (rev is
// the log index in cluster mode).
func TestC12WatchMovesToAnotherClusterMember(t *testing.T) {
	cl := newCluster(t)
	leader := cl.leader(0)
	if leader == 0 {
		t.Fatal("no leader")
	}
	follower := leader%3 + 1
	third := 6 - leader - follower
	holder := newClient(t, cl.addr(leader), cl.addr(follower), cl.addr(third))
	watcher, _ := New(Options{Addresses: []string{cl.addr(follower), cl.addr(third), cl.addr(leader)},
		BackoffInitial: 20 * time.Millisecond, ReplyTimeout: 5 * time.Second})
	defer watcher.Close()
	w, err := watcher.Watch(bg(), "k")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if st := nextState(t, w); st.Kind != "free" {
		t.Fatalf("first: %+v", st)
	}
	l, err := holder.Acquire(bg(), "k", AcquireOptions{Owner: "alice", Lease: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	held := nextState(t, w) // applied on the follower, pushed from there
	if held.Kind != "held" || held.Token != l.Token {
		t.Fatalf("held: %+v", held)
	}
	cl.kill9(follower)
	if err := l.Release(bg()); err != nil {
		t.Fatal(err)
	}
	st := nextState(t, w) // re-watched on another member
	if st.Kind != "free" || st.Rev <= held.Rev {
		t.Fatalf("after the follower's kill: %+v (held was rev %d)", st, held.Rev)
	}
}
