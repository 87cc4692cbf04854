package lockd

// Watch (protocol.md §5c, v1.3): who holds a key, now and at every change,
// as a channel of states in rev order, re-watched after a reconnect or on
// another member.

import (
	"context"
	"errors"
	"sync"
)

// maxWatchBacklog bounds the states a Watch queues for a consumer that
// does not read (beyond the watchBuffer already in States()); past it the
// oldest are dropped (the newest state always arrives, as the server itself
// may coalesce changes).
const maxWatchBacklog = 4096

// Watch is one watch of one key. States delivers the key's state when the
// watch starts and at every change, in rev order: a state whose rev is not
// above one already delivered (an older member, a replay after a
// reconnect) is dropped. The channel closes when the context ends, Close
// is called, the client is closed, or the server refuses the watch on a
// reconnect (Err says why; nil after a context end or Close).
type Watch struct {
	Key string

	c      *Client
	ch     chan KeyState
	cancel context.CancelFunc
	ended  chan struct{}

	mu       sync.Mutex
	queue    []KeyState
	inFlight bool // the pump holds a state it took from queue and has not sent yet
	done     bool // ch is closed (or about to be): nothing more goes in
	lastRev  uint64
	wake     chan struct{}
	err      error
}

// watchBuffer is the room in States() itself: a state goes straight into
// the channel while the consumer keeps up (one goroutine hop, which is most
// of a delivery's cost when a client has thousands of watches); behind
// that, the pump feeds it from the queue, in order.
const watchBuffer = 16

// States is the channel of states (see Watch).
func (w *Watch) States() <-chan KeyState { return w.ch }

// Err says why States closed early, or nil.
func (w *Watch) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Close stops the watch (U is sent if no other Watch of this client
// watches the key) and closes States.
func (w *Watch) Close() {
	w.cancel()
	<-w.ended
}

// offer hands st on unless it is not newer than what came before: into
// States() at once when nothing older waits in the queue or in the pump's
// hands (so order holds) and the channel has room, else to the queue.
func (w *Watch) offer(st KeyState) {
	w.mu.Lock()
	if st.Rev > w.lastRev && !w.done {
		w.lastRev = st.Rev
		if len(w.queue) == 0 && !w.inFlight {
			select {
			case w.ch <- st:
				w.mu.Unlock()
				return
			default:
			}
		}
		if w.queue = append(w.queue, st); len(w.queue) > maxWatchBacklog {
			w.queue = w.queue[1:]
		}
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
	w.mu.Unlock()
}

// Watch starts watching key: W on the client's connection (any member of
// a cluster serves it). The first W's refusal is returned here: ErrBusy
// (a watch limit), ErrForbidden, ErrUnauthenticated, ErrNoLeader (a member
// that has applied nothing yet), ErrUnreachable, ErrInvalidArgument.
func (c *Client) Watch(ctx context.Context, key string) (*Watch, error) {
	if err := (Request{Verb: VerbWatch, Key: key}).Validate(); err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	w := &Watch{Key: key, c: c, ch: make(chan KeyState, watchBuffer), cancel: cancel, ended: make(chan struct{}),
		wake: make(chan struct{}, 1)}
	cn, sub, err := c.subscribe(wctx, w, -1)
	if err != nil {
		cancel()
		return nil, err
	}
	pumped := make(chan struct{})
	go w.pump(wctx, pumped)
	go func() {
		defer close(w.ended)
		w.run(wctx, cn, sub)
		cancel()
		<-pumped
	}()
	return w, nil
}

// subscribe sends W over a working connection (from node `from`+1 on, or
// the current one when from < 0) and offers its state.
func (c *Client) subscribe(ctx context.Context, w *Watch, from int) (*conn, *watchSub, error) {
	c.mu.Lock()
	target, n := c.current, len(c.addrs)
	c.mu.Unlock()
	if from >= 0 {
		target = (from + 1) % n
	}
	var last error
	stale := 0
	for i := 0; i < n; i, target = i+1, (target+1)%n {
		cn, err := c.connTo(ctx, target)
		if err != nil {
			if errors.Is(err, ErrClosed) || errors.Is(err, ErrUnauthenticated) || ctx.Err() != nil {
				return nil, nil, err
			}
			last = err
			continue
		}
		sub := &watchSub{key: w.Key, push: w.offer}
		reply, err := cn.watch(ctx, sub, c.opts.ReplyTimeout)
		if err == errNotSent && stale < 3 {
			stale, i, target = stale+1, i-1, (target+n-1)%n // closed while idle: the same node again
			continue
		}
		if err == errNotSent {
			err = fail(ErrUnreachable, "connections to "+cn.addr+" keep closing")
		}
		if err != nil {
			last = err
			continue
		}
		switch {
		case reply.Kind == 'W':
			w.offer(reply.State)
			return cn, sub, nil
		case reply.Kind == 'B':
			return nil, nil, fail(ErrBusy, "too many watches (per connection or per server)")
		case reply.Kind == 'E' && reply.Code == "no_leader":
			last = fail(ErrNoLeader, cn.addr+" has applied nothing yet")
			continue
		case reply.Kind == 'E':
			return nil, nil, &RejectedError{Code: reply.Code}
		}
		return nil, nil, fail(ErrProtocol, "unexpected reply to W")
	}
	return nil, nil, last
}

// run keeps the watch alive: on a broken or retired connection it watches
// again (jittered backoff while no member answers) until ctx ends.
func (w *Watch) run(ctx context.Context, cn *conn, sub *watchSub) {
	c := w.c
	backoff := c.opts.BackoffInitial
	for {
		select {
		case <-ctx.Done():
			cn.unwatch(sub)
			return
		case <-cn.dead:
		}
		from := -1
		for {
			if ctx.Err() != nil {
				return
			}
			next, nsub, err := c.subscribe(ctx, w, from)
			if err == nil {
				cn, sub, backoff = next, nsub, c.opts.BackoffInitial
				break
			}
			var rejected *RejectedError
			if errors.Is(err, ErrClosed) || errors.Is(err, ErrBusy) || errors.As(err, &rejected) {
				w.mu.Lock()
				w.err = err
				w.mu.Unlock()
				return
			}
			c.mu.Lock()
			from = c.current
			c.mu.Unlock()
			if sleepCtx(ctx, c.jitter(backoff)) != nil {
				return
			}
			if backoff *= 2; backoff > c.opts.BackoffMax {
				backoff = c.opts.BackoffMax
			}
		}
	}
}

// pump hands queued states to the consumer, in order, until ctx ends.
func (w *Watch) pump(ctx context.Context, done chan struct{}) {
	defer close(done)
	defer func() {
		w.mu.Lock()
		w.done = true // offer sends nothing more, so closing is safe
		w.mu.Unlock()
		close(w.ch)
	}()
	for {
		w.mu.Lock()
		var st KeyState
		have := len(w.queue) > 0
		if have {
			st = w.queue[0]
			w.queue = w.queue[1:]
		}
		w.inFlight = have
		w.mu.Unlock()
		if !have {
			select {
			case <-w.wake:
				continue
			case <-ctx.Done():
				return
			}
		}
		select {
		case w.ch <- st:
		case <-ctx.Done():
			return
		}
	}
}
