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
	SentAt time.Time     // when the acquire was sent: the lease started no earlier
	Shared bool          // held with S: a reader, or a semaphore permit
	Limit  uint32        // shared only: 0 for a read lock, N for a semaphore

	client   *Client
	lost     chan struct{} // closed once the keeper finds the lock lost
	lostOnce sync.Once
	lostErr  atomic.Value // error
	kept     atomic.Uint64
	stop     chan struct{} // closed to stop the keeper; nil without one
	done     chan struct{} // closed when the keeper has stopped
	released atomic.Bool
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

// Keep extends the lease now (K). ErrNotHeld once it has ended.
func (l *Lock) Keep(ctx context.Context, lease time.Duration) error {
	return l.client.Keep(ctx, l.Token, l.Key, lease)
}

// Release stops the keeper and sends R (for a shared hold: this holder
// only). ErrNotHeld if the lease had already ended. A second call does
// nothing and returns nil.
func (l *Lock) Release(ctx context.Context) error {
	if !l.released.CompareAndSwap(false, true) {
		return nil
	}
	if l.stop != nil {
		close(l.stop)
		<-l.done // no K may race the R
	}
	return l.client.Release(ctx, l.Token, l.Key)
}

func (l *Lock) declareLost(why error) {
	l.lostOnce.Do(func() {
		l.lostErr.Store(&outcome{kind: ErrLost, reason: "lost the lock on " + l.Key, cause: why})
		close(l.lost)
	})
}

// keep sends K every third of the lease. The lease surely lasts until
// safeEnd (the acquire's or the last confirmed K's send time + lease); a
// transient failure is retried every 100 ms until then; N, or safeEnd
// passing without a confirmed K, is a loss (reported once, never kept again).
func (l *Lock) keep(onLost func(*Lock, error)) {
	defer close(l.done)
	interval := l.Lease / 3
	if interval < time.Millisecond {
		interval = time.Millisecond
	}
	safeEnd := l.SentAt.Add(l.Lease)
	next := l.SentAt.Add(interval)
	lose := func(why error) {
		l.declareLost(why)
		if onLost != nil {
			onLost(l, l.Err())
		}
	}
	for {
		t := time.NewTimer(time.Until(next))
		select {
		case <-l.stop:
			t.Stop()
			return
		case <-t.C:
		}
		sent := time.Now()
		if !sent.Before(safeEnd) {
			lose(fail(ErrNotHeld, "the lease ended before an extension was confirmed"))
			return
		}
		// No point in retrying or waiting for a reply past the safe end;
		// a Release stops the K at once.
		ctx, cancel := context.WithDeadline(context.Background(), safeEnd)
		go func() {
			select {
			case <-l.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		err := l.client.Keep(ctx, l.Token, l.Key, l.Lease)
		cancel()
		select {
		case <-l.stop:
			return
		default:
		}
		if err == nil {
			l.kept.Add(1)
			safeEnd, next = sent.Add(l.Lease), sent.Add(interval)
			continue
		}
		var rejected *RejectedError
		if errors.Is(err, ErrNotHeld) || errors.Is(err, ErrProtocol) || errors.Is(err, ErrInvalidArgument) ||
			errors.Is(err, ErrClosed) || errors.Is(err, ErrUnauthenticated) || errors.As(err, &rejected) {
			lose(err) // the server says no, and asking again will not change it
			return
		}
		pause := keepRetryPause
		if pause > interval {
			pause = interval
		}
		if next = time.Now().Add(pause); next.After(safeEnd) {
			next = safeEnd
		}
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
		l.stop, l.done = make(chan struct{}), make(chan struct{})
		go l.keep(o.OnLost)
	}
	return l, nil
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
