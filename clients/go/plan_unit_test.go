package lockd

// The shared client test plan (docs/client-test-plan.md), its pure cases:
// the matcher's and the keeper's rules, no sockets, no real clock.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// C03: a v1.3 server's E bad_lease/bad_wait/bad_limit carries the echo:
// it answers the request it names, whatever else is in flight.
func TestC03ErrorWithEchoAmongPipelined(t *testing.T) {
	m := newMatcher()
	m.add(1, Request{Verb: VerbAcquire, Owner: "a", Key: "k", LeaseMS: 1000, WaitMS: 400000})
	m.add(2, Request{Verb: VerbAcquire, Owner: "b", Key: "k", LeaseMS: 1000, WaitMS: 5000})
	m.add(3, Request{Verb: VerbKeep, Token: 7, Key: "k", LeaseMS: 9000000})
	m.add(4, Request{Verb: VerbShared, Owner: "c", Key: "s", Limit: 3, LeaseMS: 9000000})
	for _, c := range []struct {
		line string
		id   uint64
	}{{"E bad_wait a k", 1}, {"E bad_lease c s", 4}, {"E bad_lease 7 k", 3}, {"T b k", 2}} {
		if id, ok := matchOne(m, reply(t, c.line)); !ok || id != c.id {
			t.Errorf("%q: got %d %v, want %d", c.line, id, ok, c.id)
		}
	}
	if m.inFlight() != 0 {
		t.Errorf("%d left", m.inFlight())
	}
}

// matchOne: the one request a reply settles (false: none, or several).
func matchOne(m *matcher, r Reply) (uint64, bool) {
	out, ok := m.match(r)
	if !ok || len(out) != 1 {
		return 0, false
	}
	return out[0].id, true
}

func ids(out []delivery) string {
	var b []string
	for _, d := range out {
		b = append(b, fmt.Sprintf("%d:%c%s", d.id, d.reply.Kind, d.reply.Code))
	}
	return strings.Join(b, " ")
}

// C04: an echo-less E (a v1.2 server) is pinned on a request only when
// exactly one could have drawn it; otherwise it is held back until all
// candidates but one have their own replies, and goes to that one.
func TestC04ErrorWithoutEchoIsNeverPinnedOnAnotherRequest(t *testing.T) {
	m := newMatcher()
	m.add(1, Request{Verb: VerbAcquire, Owner: "a", Key: "k", LeaseMS: 1000, WaitMS: 5000})   // queued
	m.add(2, Request{Verb: VerbAcquire, Owner: "b", Key: "k", LeaseMS: 1000, WaitMS: 400000}) // over the max wait
	m.add(3, Request{Verb: VerbKeep, Token: 7, Key: "x", LeaseMS: 1000})
	// bad_wait: 1 and 2 both could have drawn it (the old matcher pinned it
	// on 1, the oldest, and 2's real reply later matched nothing).
	if out, ok := m.match(reply(t, "E bad_wait")); !ok || len(out) != 0 {
		t.Fatalf("got %s %v, want it held back", ids(out), ok)
	}
	// The keep cannot draw bad_wait and is matched as usual.
	if id, ok := matchOne(m, reply(t, "K 7 x")); !ok || id != 3 {
		t.Fatalf("keep: %d %v", id, ok)
	}
	// 1's grant comes: 1 gets it, and 2, the one left, the E.
	if out, ok := m.match(reply(t, "A 9 a k")); !ok || ids(out) != "1:A 2:Ebad_wait" {
		t.Fatalf("late grant: %s %v", ids(out), ok)
	}
	if m.inFlight() != 0 {
		t.Fatalf("%d left after the group's last reply", m.inFlight())
	}
	// Exactly one candidate: pinned on it, even among other requests.
	m.add(4, Request{Verb: VerbRelease, Token: 7, Key: "x"})
	m.add(5, Request{Verb: VerbAcquire, Owner: "c", Key: "k", LeaseMS: 1000, WaitMS: 400000})
	m.add(6, Request{Verb: VerbKeep, Token: 8, Key: "y", LeaseMS: 1000})
	if id, ok := matchOne(m, reply(t, "E bad_wait")); !ok || id != 5 {
		t.Fatalf("one candidate: %d %v", id, ok)
	}
	// A lease the server already accepted cannot draw bad_lease: the K
	// (lease 1000, seen accepted) is not a candidate, the acquire is.
	m.add(7, Request{Verb: VerbAcquire, Owner: "d", Key: "k", LeaseMS: 9000000})
	if id, ok := matchOne(m, reply(t, "E bad_lease")); !ok || id != 7 {
		t.Fatalf("learned lease: %d %v", id, ok)
	}
	// Two candidates both refused: the second E settles both.
	m.drain()
	m.add(8, Request{Verb: VerbAcquire, Owner: "e", Key: "k", LeaseMS: 1000, WaitMS: 400000})
	m.add(9, Request{Verb: VerbAcquire, Owner: "f", Key: "k", LeaseMS: 1000, WaitMS: 500000})
	if out, ok := m.match(reply(t, "E bad_wait")); !ok || len(out) != 0 {
		t.Fatalf("%s %v", ids(out), ok)
	}
	if out, ok := m.match(reply(t, "E bad_wait")); !ok || ids(out) != "8:Ebad_wait 9:Ebad_wait" || m.inFlight() != 0 {
		t.Fatalf("second E: %s %v, %d left", ids(out), ok, m.inFlight())
	}
}

// C11 (matcher side): W/U replies and B <key> pair with watches; V and X
// are not replies.
func TestC11WatchRepliesAreMatchedAndPushesAreNot(t *testing.T) {
	m := newMatcher()
	m.add(1, Request{Verb: VerbWatch, Key: "k"})
	m.add(2, Request{Verb: VerbAcquire, Owner: "o", Key: "k", LeaseMS: 1000})
	m.add(3, Request{Verb: VerbUnwatch, Key: "k"})
	m.add(4, Request{Verb: VerbWatch, Key: "j"})
	if r := reply(t, "V k 5 free"); !r.isPush() {
		t.Fatal("V is a push")
	}
	if r := reply(t, "X 3 k"); !r.isPush() {
		t.Fatal("X is a push")
	}
	for _, c := range []struct {
		line string
		id   uint64
	}{{"U k", 3}, {"A 4 o k", 2}, {"W k 4 free", 1}, {"B j", 4}} {
		if id, ok := matchOne(m, reply(t, c.line)); !ok || id != c.id {
			t.Errorf("%q: got %d %v, want %d", c.line, id, ok, c.id)
		}
	}
}

// fakeClock: time moves only when the test (or a fake K) moves it.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []fakeTimer
}

type fakeTimer struct {
	at time.Time
	ch chan time.Time
}

func (f *fakeClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fakeClock) After(d time.Duration) <-chan time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- f.now
	} else {
		f.waiters = append(f.waiters, fakeTimer{f.now.Add(d), ch})
	}
	return ch
}

func (f *fakeClock) advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	left := f.waiters[:0]
	for _, w := range f.waiters {
		if !w.at.After(f.now) {
			w.ch <- f.now
		} else {
			left = append(left, w)
		}
	}
	f.waiters = left
}

func (f *fakeClock) timers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.waiters)
}

// C02: the keeper's safe end is dated from when K was sent, not from when
// its reply arrived: each fake K takes 2 s of fake time to be answered.
func TestC02KeeperSafeEndDatesFromWhenKWasSent(t *testing.T) {
	t0 := time.Unix(1000, 0)
	clk := &fakeClock{now: t0}
	c, _ := New(Options{Addresses: []string{"127.0.0.1:1"}})
	var sends []time.Time
	var mu sync.Mutex
	l := &Lock{client: c, Token: 1, Key: "k", Lease: 9 * time.Second, SentAt: t0, GrantedAt: t0,
		lost: make(chan struct{}), clk: clk}
	l.keepFn = func(ctx context.Context) error {
		mu.Lock()
		sends = append(sends, clk.Now())
		mu.Unlock()
		clk.advance(2 * time.Second) // the round trip
		return nil
	}
	l.startKeeper(nil)
	defer l.stopKeeper()
	waitTimer := func() {
		t.Helper()
		if !eventually(t, 5*time.Second, func() bool { return clk.timers() == 1 }) {
			t.Fatal("the keeper never waited")
		}
	}
	waitTimer()
	if got := l.SafeEnd(); !got.Equal(t0.Add(9 * time.Second)) {
		t.Fatalf("first safe end %v, want grant + lease", got.Sub(t0))
	}
	clk.advance(3 * time.Second) // a third of the lease: K at t0+3s, answered at t0+5s
	waitTimer()
	if !eventually(t, 5*time.Second, func() bool { return l.KeptCount() == 1 }) {
		t.Fatal("no K confirmed")
	}
	if got, want := l.SafeEnd(), t0.Add(3*time.Second+9*time.Second); !got.Equal(want) {
		t.Fatalf("safe end after a K sent at +3s and answered at +5s: +%v, want +%v (from the send)",
			got.Sub(t0), want.Sub(t0))
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sends) != 1 || !sends[0].Equal(t0.Add(3*time.Second)) {
		t.Fatalf("sends %v", sends)
	}
}

// C01 (rule): the lease of a grant that may have waited is dated from the
// grant's arrival, not from the acquire's send; without a wait, from the send.
func TestC01LeaseOfAWaitedGrantDatesFromItsArrival(t *testing.T) {
	sent, arrived := time.Unix(100, 0), time.Unix(105, 0)
	if got := leaseFrom(sent, arrived, true); !got.Equal(arrived) {
		t.Errorf("waited: %v", got)
	}
	if got := leaseFrom(sent, arrived, false); !got.Equal(sent) {
		t.Errorf("no wait: %v", got)
	}
	p := newKeepPlan(arrived, 3*time.Second)
	if p.expired(arrived.Add(time.Second)) || !p.next.Equal(arrived.Add(time.Second)) {
		t.Errorf("plan %+v", p)
	}
	p.failed(arrived.Add(2990 * time.Millisecond))
	if !p.next.Equal(p.safeEnd) {
		t.Errorf("a retry past the safe end: %v", p.next)
	}
}

// C06 (pure part): Release from inside OnLost returns (the keeper is done
// sending before OnLost runs) and the keeper goroutine ends.
func TestC06ReleaseInsideOnLostDoesNotDeadlock(t *testing.T) {
	clk := &fakeClock{now: time.Unix(0, 0)}
	n := newFake(t, func(l string) []string { return []string{"N " + echo(l)} })
	c := newClient(t, n.addr())
	l := &Lock{client: c, Token: 3, Key: "k", Lease: 3 * time.Second, SentAt: clk.now, lost: make(chan struct{}), clk: clk}
	l.keepFn = func(ctx context.Context) error { return fail(ErrNotHeld, "N") }
	released := make(chan error, 1)
	l.startKeeper(func(l *Lock, err error) { released <- l.Release(bg()) })
	if !eventually(t, 5*time.Second, func() bool { return clk.timers() == 1 }) {
		t.Fatal("the keeper never waited")
	}
	clk.advance(time.Second)
	select {
	case err := <-released:
		if err != nil && !errors.Is(err, ErrNotHeld) {
			t.Fatalf("release: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Release inside OnLost deadlocked")
	}
	select {
	case <-l.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the keeper goroutine leaked")
	}
	if !errors.Is(l.Err(), ErrNotHeld) || !errors.Is(l.Err(), ErrLost) {
		t.Fatalf("why: %v", l.Err())
	}
}
