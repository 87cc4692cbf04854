package lockd

// The client against three real `lockd --mode cluster` processes on
// loopback: a follower's real M, and the leader killed with -9 while the
// client holds a lock that its keeper extends. One cluster serves every
// check (CI time).

import (
	"errors"
	"testing"
	"time"
)

func TestRealCluster(t *testing.T) {
	c := newCluster(t)
	leader := c.leader(0)
	if leader == 0 {
		t.Fatal("no leader")
	}
	follower := leader%3 + 1

	// A follower's real M: the client starts at the follower and ends at
	// the leader, where later requests go straight away.
	cl := newClient(t, c.addr(follower), c.addr(leader), c.addr(6-leader-follower))
	l, err := cl.Acquire(bg(), "probe/redirect", AcquireOptions{Owner: "alice", Lease: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(bg()); err != nil {
		t.Fatal(err)
	}

	// A kept lock, a plain lock, and the leader killed.
	kept, err := cl.Lock(bg(), "jobs/kept", LockOptions{Owner: "alice", Lease: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := cl.Acquire(bg(), "jobs/plain", AcquireOptions{Owner: "alice", Lease: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	reader, err := cl.RLock(bg(), "cfg", LockOptions{Owner: "reader", Lease: 30 * time.Second, NoKeep: true})
	if err != nil {
		t.Fatal(err)
	}
	permit, err := cl.Semaphore("pool", 1).Acquire(bg(), LockOptions{Owner: "p1", Lease: 30 * time.Second, NoKeep: true})
	if err != nil {
		t.Fatal(err)
	}
	if !eventually(t, 10*time.Second, func() bool { return kept.KeptCount() >= 1 }) {
		t.Fatal("the keeper never extended the lease")
	}
	c.kill9(leader)
	before := kept.KeptCount()

	// The release right after the kill rides through the election (no_leader
	// retried, the dead leader skipped) and reaches the new leader, where
	// the lock survived.
	if err := plain.Release(bg()); err != nil {
		t.Fatalf("release after the leader's kill: %v", err)
	}
	newLeader := c.leader(leader)
	if newLeader == 0 || newLeader == leader {
		t.Fatalf("no new leader (%d)", newLeader)
	}
	// The keeper extends through the new leader; the lock is not lost.
	if !eventually(t, 10*time.Second, func() bool { return kept.KeptCount() >= before+2 }) {
		t.Fatalf("kept %d times after the kill (lost: %v)", kept.KeptCount()-before, kept.Err())
	}
	if kept.Err() != nil {
		t.Fatalf("lost: %v", kept.Err())
	}
	if _, err := cl.Acquire(bg(), "jobs/kept", AcquireOptions{Owner: "bob", Lease: time.Second}); !errors.Is(err, ErrTimedOut) {
		t.Fatalf("bob while alice keeps it: %v", err)
	}
	if err := kept.Release(bg()); err != nil {
		t.Fatal(err)
	}
	// The shared holders survived the kill, each with its own token.
	if _, err := cl.Acquire(bg(), "cfg", AcquireOptions{Owner: "w", Lease: time.Second}); !errors.Is(err, ErrTimedOut) {
		t.Fatalf("writer while the reader holds it: %v", err)
	}
	if _, err := cl.Semaphore("pool", 1).Acquire(bg(), LockOptions{Owner: "p2", Lease: time.Second}); !errors.Is(err, ErrTimedOut) {
		t.Fatalf("second permit of one: %v", err)
	}
	if err := reader.Release(bg()); err != nil {
		t.Fatal(err)
	}
	if err := permit.Release(bg()); err != nil {
		t.Fatal(err)
	}
	again, err := cl.Acquire(bg(), "jobs/kept", AcquireOptions{Owner: "bob", Lease: time.Second})
	if err != nil || again.Token <= kept.Token {
		t.Fatalf("after release: %v (token must exceed %d)", err, kept.Token)
	}
}
