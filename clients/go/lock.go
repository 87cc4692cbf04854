package lockd

// Lock, its keeper, and the holding calls: Lock (exclusive), RLock (the
// read side of a reader-writer lock) and Semaphore (N permits).

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// keepRetryPause is the pause between tries of a K that failed for a
// transient reason (unreachable, no leader, unknown outcome).
const keepRetryPause = 100 * time.Millisecond

// Lock is a held lock, exclusive or shared. Token is the fencing token to
// hand to every resource the lock protects (a shared holder has its own).
type Lock struct {
	Token  uint64
	Key    string
	Owner  string
	Lease  time.Duration // as requested; 0 = the server's default
	SentAt time.Time     // when the acquire was sent
	// GrantedAt is when the grant arrived. The keeper dates the lease from
	// it when the acquire may have waited at the server (Wait > 0: the
	// lease started at the hand-off, later than SentAt), else from SentAt.
	GrantedAt time.Time
	Shared    bool   // held with S: a reader, or a semaphore permit
	Limit     uint32 // shared only: 0 for a read lock, N for a semaphore
	waited    bool   // the acquire carried a wait

	client   *Client
	conn     *conn         // the connection the grant came on (its X comes there)
	lost     chan struct{} // closed once the keeper finds the lock lost
	lostOnce sync.Once
	lostErr  atomic.Value // error
	kept     atomic.Uint64
	stop     chan struct{} // closed to stop the keeper; nil without one
	stopOnce sync.Once
	done     chan struct{} // closed when the keeper sends no more K
	doneOnce sync.Once
	xed      chan struct{} // closed when the server pushed X for the token
	xOnce    sync.Once
	relMu    sync.Mutex // one Release at a time
	released bool       // the server confirmed the release (R, or N: not held)
	safeEnd  atomic.Int64

	// For tests: the keeper's clock and its K (nil: the real ones).
	clk    clock
	keepFn func(ctx context.Context) error
}

// Lost is closed once the keeper found the lock lost: stop relying on it
// (or let the resource fence you). Never closed without a keeper.
func (l *Lock) Lost() <-chan struct{} { return l.lost }

// Err says why the lock was lost (wrapping ErrLost and the cause, e.g.
// ErrNotHeld), or nil while it is not.
func (l *Lock) Err() error {
	if v := l.lostErr.Load(); v != nil {
		return v.(error)
	}
	return nil
}

// KeptCount is the number of lease extensions the server confirmed.
func (l *Lock) KeptCount() uint64 { return l.kept.Load() }

// SafeEnd is the keeper's lower bound of the lease's end: the lease
// surely lasts until then (zero without a keeper).
func (l *Lock) SafeEnd() time.Time {
	if n := l.safeEnd.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// Keep extends the lease now (K). ErrNotHeld once it has ended.
func (l *Lock) Keep(ctx context.Context, lease time.Duration) error {
	return l.client.Keep(ctx, l.Token, l.Key, lease)
}

// Release stops the keeper (for good) and sends R (for a shared hold: this
// holder only). The lock counts as released only once the server answered:
// R, or N (ErrNotHeld: its lease had already ended; nothing more to do).
// Any other error (ErrIndeterminate, ErrNoLeader, ErrUnreachable ...)
// leaves it unreleased, and calling Release again sends R again. Once
// released, Release does nothing and returns nil. Safe to call from
// OnLost and from several goroutines.
func (l *Lock) Release(ctx context.Context) error {
	l.relMu.Lock()
	defer l.relMu.Unlock()
	if l.released {
		return nil
	}
	l.stopKeeper()
	err := l.client.Release(ctx, l.Token, l.Key)
	if err == nil || errors.Is(err, ErrNotHeld) {
		l.released = true
		if l.conn != nil {
			l.conn.unlistenX(l.Token)
		}
	}
	return err
}

// stopKeeper stops the keeper and waits until it sends no more K (at once
// when called from OnLost: the keeper is done sending by then).
func (l *Lock) stopKeeper() {
	if l.stop == nil {
		return
	}
	l.stopOnce.Do(func() { close(l.stop) })
	<-l.done // no K may race the R
}

func (l *Lock) declareLost(why error) {
	l.lostOnce.Do(func() {
		l.lostErr.Store(&outcome{kind: ErrLost, reason: "lost the lock on " + l.Key, cause: why})
		close(l.lost)
	})
}

// clock is the keeper's view of time (a fake one in unit tests).
type clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// keepPlan is the keeper's schedule, as pure rules (docs/clients.md rule
// 5): the lease surely lasts until safeEnd, dated from the grant (see
// Lock.GrantedAt) and then from when each confirmed K was *sent* (the
// server extended it no earlier than that); the next K goes a third of
// the lease after that; a transient failure is retried every 100 ms
// until the safe end, which passing unconfirmed is a loss.
type keepPlan struct {
	lease, interval time.Duration
	safeEnd, next   time.Time
}

func newKeepPlan(leaseFrom time.Time, lease time.Duration) keepPlan {
	interval := lease / 3
	if interval < time.Millisecond {
		interval = time.Millisecond
	}
	return keepPlan{lease: lease, interval: interval, safeEnd: leaseFrom.Add(lease), next: leaseFrom.Add(interval)}
}

// leaseFrom: the start of the lease the keeper may count on.
func leaseFrom(sentAt, grantedAt time.Time, waited bool) time.Time {
	if waited {
		return grantedAt
	}
	return sentAt
}

// expired: at now (a K about to be sent) the lease may already have ended.
func (p *keepPlan) expired(now time.Time) bool { return !now.Before(p.safeEnd) }

// confirmed: a K sent at sentAt was answered K.
func (p *keepPlan) confirmed(sentAt time.Time) {
	p.safeEnd, p.next = sentAt.Add(p.lease), sentAt.Add(p.interval)
}

// failed: a K failed for a transient reason at now.
func (p *keepPlan) failed(now time.Time) {
	pause := keepRetryPause
	if pause > p.interval {
		pause = p.interval
	}
	if p.next = now.Add(pause); p.next.After(p.safeEnd) {
		p.next = p.safeEnd
	}
}

// final: err from K means the server said no, and asking again will not
// change it.
func final(err error) bool {
	var rejected *RejectedError
	return errors.Is(err, ErrNotHeld) || errors.Is(err, ErrProtocol) || errors.Is(err, ErrInvalidArgument) ||
		errors.Is(err, ErrClosed) || errors.Is(err, ErrUnauthenticated) || errors.As(err, &rejected)
}

// keep runs the keepPlan: K every third of the lease until stopped, the
// lock lost (N, a final refusal, the safe end passing unconfirmed) or the
// server's X. A loss is reported once: Lost closes, the keeper stops
// sending (so Release from OnLost returns at once), then OnLost runs.
func (l *Lock) keep(onLost func(*Lock, error)) {
	defer l.doneOnce.Do(func() { close(l.done) })
	defer l.client.track(l, false)
	if l.conn != nil {
		defer l.conn.unlistenX(l.Token)
	}
	clk := l.clk
	if clk == nil {
		clk = realClock{}
	}
	plan := newKeepPlan(leaseFrom(l.SentAt, l.GrantedAt, l.waited), l.Lease)
	l.safeEnd.Store(plan.safeEnd.UnixNano())
	lose := func(why error) {
		l.declareLost(why)
		l.doneOnce.Do(func() { close(l.done) })
		if onLost != nil {
			onLost(l, l.Err())
		}
	}
	xLost := func() error { return fail(ErrNotHeld, "the server pushed X: the lease ended") }
	for {
		select {
		case <-l.stop:
			return
		case <-l.xed:
			lose(xLost())
			return
		case <-clk.After(plan.next.Sub(clk.Now())):
		}
		sent := clk.Now()
		if plan.expired(sent) {
			lose(fail(ErrNotHeld, "the lease ended before an extension was confirmed"))
			return
		}
		// No point in retrying or waiting for a reply past the safe end;
		// a Release or an X stops the K at once.
		ctx, cancel := context.WithDeadline(context.Background(), plan.safeEnd)
		go func() {
			select {
			case <-l.stop:
			case <-l.xed:
			case <-ctx.Done():
			}
			cancel()
		}()
		var err error
		if l.keepFn != nil {
			err = l.keepFn(ctx)
		} else {
			err = l.client.Keep(ctx, l.Token, l.Key, l.Lease)
		}
		cancel()
		select {
		case <-l.stop:
			return
		case <-l.xed:
			lose(xLost())
			return
		default:
		}
		if err == nil {
			l.kept.Add(1)
			plan.confirmed(sent)
			l.safeEnd.Store(plan.safeEnd.UnixNano())
			continue
		}
		if final(err) {
			lose(err)
			return
		}
		plan.failed(clk.Now())
	}
}

// LockOptions are the fields of Lock, RLock and Semaphore.Acquire.
type LockOptions struct {
	Owner string        // default: the client's Options.Owner
	Lease time.Duration // default 30 s; kept alive every third of it
	Wait  time.Duration // how long the server may queue the request (cut to ctx's deadline)
	// NoKeep leaves the lease alone (it ends on its own unless released).
	NoKeep bool
	// OnLost is called once, on the keeper's goroutine, if the lock is lost.
	OnLost func(l *Lock, err error)
}

func (c *Client) hold(ctx context.Context, verb Verb, key string, limit uint32, o LockOptions) (*Lock, error) {
	if o.Lease <= 0 {
		o.Lease = 30 * time.Second
	}
	l, err := c.grant(ctx, verb, key, limit, AcquireOptions{Owner: o.Owner, Lease: o.Lease, Wait: o.Wait})
	if err != nil {
		return nil, err
	}
	if !o.NoKeep {
		l.startKeeper(o.OnLost)
	}
	return l, nil
}

func (l *Lock) startKeeper(onLost func(*Lock, error)) {
	l.stop, l.done, l.xed = make(chan struct{}), make(chan struct{}), make(chan struct{})
	if !l.client.track(l, true) { // closed meanwhile: never kept
		l.doneOnce.Do(func() { close(l.done) })
		l.declareLost(fail(ErrClosed, "the client was closed"))
		return
	}
	if l.conn != nil {
		l.conn.listenX(l.Token, func() { l.xOnce.Do(func() { close(l.xed) }) })
	}
	go l.keep(onLost)
}

// Lock acquires key exclusively (the write side, if others read it with
// RLock) and keeps its lease alive until Release.
func (c *Client) Lock(ctx context.Context, key string, o LockOptions) (*Lock, error) {
	return c.hold(ctx, VerbAcquire, key, 0, o)
}

// RLock acquires the read side of a reader-writer lock on key (S key 0):
// any number of readers hold it at once; Lock (a writer) waits for all of
// them, and readers that come after a queued writer wait behind it (one
// FIFO queue). Kept alive until Release.
func (c *Client) RLock(ctx context.Context, key string, o LockOptions) (*Lock, error) {
	return c.hold(ctx, VerbShared, key, 0, o)
}

// Semaphore is N permits on one key, counted by the server (S owner key N).
// Waiters are served in arrival order; a permit whose holder dies frees
// itself when its lease ends. Every user of a key must pass the same N.
type Semaphore struct {
	client  *Client
	Key     string
	Permits uint32
}

// Semaphore returns a semaphore of `permits` (1..65535) on key.
func (c *Client) Semaphore(key string, permits uint32) *Semaphore {
	return &Semaphore{client: c, Key: key, Permits: permits}
}

// Acquire takes one permit, kept alive until Release. ErrTimedOut when none
// came free within the wait; ErrLimitMismatch; the errors of Do.
func (s *Semaphore) Acquire(ctx context.Context, o LockOptions) (*Lock, error) {
	if s.Permits == 0 || s.Permits > MaxLimit {
		return nil, &invalidError{"a semaphore needs 1..65535 permits (0 would be a read lock)"}
	}
	return s.client.hold(ctx, VerbShared, s.Key, s.Permits, o)
}
