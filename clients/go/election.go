package lockd

// Leader election on one key (protocol.md §5c): the leader is the key's
// exclusive holder and its value is the holder's owner label.

import (
	"context"
	"errors"
	"time"
)

// Leader is who leads an election: Value is the leader's owner label
// (its Campaign value), Token its fencing token; Value "" means nobody
// leads (the key is free). Rev orders the states.
type Leader struct {
	Value string
	Token uint64
	Rev   uint64
}

func leaderOf(st KeyState) Leader {
	if st.Kind == "held" {
		return Leader{Value: st.Owner, Token: st.Token, Rev: st.Rev}
	}
	return Leader{Rev: st.Rev}
}

// Leadership is a won election: the lock on the key, kept alive until
// Resign. Lost closes (Err says why) when leadership is lost: the server
// pushed X (the lease ended), a K was answered N, or no K was confirmed
// before the lease's safe end (an unknown outcome counts as lost).
type Leadership struct {
	*Lock
	Value string
}

// Resign gives leadership up (R); the next candidate is handed the key.
func (l *Leadership) Resign(ctx context.Context) error { return l.Release(ctx) }

// CampaignOptions tune Campaign.
type CampaignOptions struct {
	// Lease of the leader's lock (default 10 s), kept every third of it:
	// how long a crashed leader blocks the next one.
	Lease time.Duration
	// OnLost is called once, on the keeper's goroutine, when leadership is lost.
	OnLost func(l *Lock, err error)
}

// campaignWait is the wait of one acquire of the campaign loop.
const campaignWait = time.Minute

// Campaign waits until it wins the election on key, with value as the
// leader's value (the owner label: 1..64 visible ASCII bytes), then keeps
// the leadership alive until Resign. It waits in a loop of acquires (a
// minute each) and rides out no leader, unreachable nodes and unknown
// outcomes with backoff; it returns when it won, when ctx ends (its
// error), or on a refusal that retrying would not change.
func (c *Client) Campaign(ctx context.Context, key, value string, o CampaignOptions) (*Leadership, error) {
	if o.Lease <= 0 {
		o.Lease = 10 * time.Second
	}
	if err := (Request{Verb: VerbAcquire, Owner: value, Key: key}).Validate(); err != nil {
		return nil, err
	}
	backoff := c.opts.BackoffInitial
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		l, err := c.Lock(ctx, key, LockOptions{Owner: value, Lease: o.Lease, Wait: campaignWait, OnLost: o.OnLost})
		if err == nil {
			return &Leadership{Lock: l, Value: value}, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, ErrTimedOut) {
			backoff = c.opts.BackoffInitial
			continue // another minute
		}
		if !(errors.Is(err, ErrIndeterminate) || errors.Is(err, ErrNoLeader) || errors.Is(err, ErrUnreachable) ||
			errors.Is(err, ErrBusy)) {
			return nil, err
		}
		if err := sleepCtx(ctx, c.jitter(backoff)); err != nil {
			return nil, err
		}
		if backoff *= 2; backoff > c.opts.BackoffMax {
			backoff = c.opts.BackoffMax
		}
	}
}

// Leader says who leads the election on key now (a W, then U): Value ""
// if nobody does.
func (c *Client) Leader(ctx context.Context, key string) (Leader, error) {
	w, err := c.Watch(ctx, key)
	if err != nil {
		return Leader{}, err
	}
	defer w.Close()
	select {
	case st, ok := <-w.States():
		if !ok {
			if err := w.Err(); err != nil {
				return Leader{}, err
			}
			return Leader{}, fail(ErrClosed, "the watch ended")
		}
		return leaderOf(st), nil
	case <-ctx.Done():
		return Leader{}, ctx.Err()
	}
}

// Observe yields the leader of key now and at every change of leader (a
// new holder, or nobody: Value ""), in rev order, each holding once. The
// channel closes when ctx ends or the watch ends (see Watch).
func (c *Client) Observe(ctx context.Context, key string) (<-chan Leader, error) {
	w, err := c.Watch(ctx, key)
	if err != nil {
		return nil, err
	}
	out := make(chan Leader)
	go func() {
		defer close(out)
		first, last := true, Leader{}
		for st := range w.States() {
			ld := leaderOf(st)
			if !first && ld.Value == last.Value && ld.Token == last.Token {
				continue // the same holder (or still nobody)
			}
			first, last = false, ld
			select {
			case out <- ld:
			case <-ctx.Done():
				w.Close()
				return
			}
		}
	}()
	return out, nil
}
