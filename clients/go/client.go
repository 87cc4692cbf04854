// Package lockd is the Go client of lockd, the lock server (standard
// library only).
//
//	c, err := lockd.New(lockd.Options{Addresses: []string{"10.0.0.1:7110", "10.0.0.2:7120", "10.0.0.3:7130"}})
//	lock, err := c.Lock(ctx, "orders/42", lockd.LockOptions{Lease: 10 * time.Second, Wait: 5 * time.Second})
//	if err != nil { ... }                 // errors.Is(err, lockd.ErrTimedOut), ErrIndeterminate ...
//	defer lock.Release(context.Background())
//	store.Write(data, lock.Token)         // the fencing token
//	select { case <-lock.Lost(): stop() ; default: }   // the keeper could not keep it
//
// A Client is safe for concurrent use; every goroutine's requests are
// pipelined on one connection and matched to their replies by echo. It
// follows M redirects to the leader, retries E no_leader with jittered
// backoff within a budget, and reports E indeterminate (or a connection
// lost after sending, or a context that ended while the request was out)
// as ErrIndeterminate: the request may or may not have taken effect.
// docs/clients.md in the lockd tree has the rules it implements.
package lockd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"sync"
	"time"
)

// Options configures a Client; zero fields take the defaults shown.
type Options struct {
	// Every node's client address (host:port). The client starts with the
	// first and moves on when one cannot be reached, knows no leader, names
	// a leader that cannot be reached, or does not answer in time.
	Addresses []string
	// Owner is the default owner label (default HOST:PID).
	Owner string
	// ConnectTimeout bounds one connection attempt (3 s).
	ConnectTimeout time.Duration
	// ReplyTimeout is how long a reply may take beyond the request's wait (10 s).
	ReplyTimeout time.Duration
	// MaxRedirects is the M hops one request follows (3).
	MaxRedirects int
	// NoLeaderBudget is how long E no_leader is retried in total (10 s).
	NoLeaderBudget time.Duration
	// Backoff between retries doubles from BackoffInitial (50 ms) to
	// BackoffMax (1 s); each pause is drawn from [d/2, d] so clients that
	// failed together do not retry together.
	BackoffInitial, BackoffMax time.Duration
	// JitterSeed seeds the jitter; 0 seeds from the clock.
	JitterSeed int64
	// Credential authenticates every connection with H before its first
	// request (protocol.md §11; a server run with --auth token or any).
	// Made by `lockctl credential new IDENTITY`; read it from a file or
	// the environment, never from source code. "" sends no H. A refused
	// credential is ErrUnauthenticated, and is not tried on other nodes.
	Credential string
	// TLS, when set, wraps every connection in TLS (a lockd run with
	// --client-tls). An empty ServerName is each address's host, so the
	// node an M redirect names is checked under its own name. TLSFiles
	// builds one from PEM files (a CA, and a client certificate for --auth
	// cert or any). The credential, if any, is sent inside TLS.
	TLS *tls.Config
}

// TLSFiles returns a TLS configuration (TLS 1.2 or later) that trusts the
// CA certificates in caFile and, when certFile is not "", shows the client
// certificate certFile with its key keyFile (the identity is its CN).
// serverName, when not "", is the name the server's certificate must have
// instead of each address's host.
func TLSFiles(caFile, certFile, keyFile, serverName string) (*tls.Config, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, &invalidError{"cannot read the CA file: " + err.Error()}
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, &invalidError{"no PEM certificate in the CA file " + caFile}
	}
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12, ServerName: serverName}
	if certFile != "" || keyFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, &invalidError{"cannot load the client certificate: " + err.Error()}
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// Client talks to one lockd node or a cluster. Safe for concurrent use.
type Client struct {
	opts Options

	mu      sync.Mutex // guards everything below
	addrs   []string
	current int // the node requests go to (the leader, once known)
	conn    *conn
	old     []*conn // retired connections, closed once their requests are answered
	keepers map[*Lock]bool
	rng     *rand.Rand
	closed  bool
	// identity is what the server named in its latest H reply.
	identity string
}

// New checks the options and returns a Client; it connects on first use.
func New(opts Options) (*Client, error) {
	if len(opts.Addresses) == 0 {
		opts.Addresses = []string{"127.0.0.1:7070"}
	}
	for _, a := range opts.Addresses {
		if !validAddress(a) {
			return nil, &invalidError{fmt.Sprintf("bad address %q (want host:port)", a)}
		}
	}
	if opts.Credential != "" && !visible(opts.Credential, MaxCredentialBytes) {
		return nil, &invalidError{fmt.Sprintf("bad credential (want 1..%d visible ASCII bytes, no spaces)", MaxCredentialBytes)}
	}
	if opts.Owner == "" {
		host, _ := os.Hostname()
		opts.Owner = sanitizeOwner(host + ":" + strconv.Itoa(os.Getpid()))
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&opts.ConnectTimeout, 3*time.Second)
	def(&opts.ReplyTimeout, 10*time.Second)
	def(&opts.NoLeaderBudget, 10*time.Second)
	def(&opts.BackoffInitial, 50*time.Millisecond)
	def(&opts.BackoffMax, time.Second)
	if opts.MaxRedirects <= 0 {
		opts.MaxRedirects = 3
	}
	seed := opts.JitterSeed
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	return &Client{opts: opts, addrs: append([]string(nil), opts.Addresses...), rng: rand.New(rand.NewSource(seed))}, nil
}

// sanitizeOwner keeps an owner label within the protocol: visible ASCII, 64 bytes.
func sanitizeOwner(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c < 0x21 || c > 0x7e {
			b[i] = '_'
		}
	}
	if len(b) > MaxOwnerBytes {
		b = b[len(b)-MaxOwnerBytes:]
	}
	return string(b)
}

// Close stops every keeper (their locks' Lost closes, Err wrapping
// ErrClosed; OnLost is not called) and closes the connections; nothing is
// sent or reconnected afterwards. Locks still held end with their leases
// (call Release first to free them at once).
func (c *Client) Close() error {
	c.mu.Lock()
	conns := append(c.old, c.conn)
	keepers := c.keepers
	c.conn, c.old, c.keepers, c.closed = nil, nil, nil, true
	c.mu.Unlock()
	for l := range keepers {
		l.stopKeeper()
		l.declareLost(fail(ErrClosed, "the client was closed"))
	}
	for _, cn := range conns {
		if cn != nil {
			cn.close()
		}
	}
	return nil
}

// track registers a running keeper (false if the client is closed).
func (c *Client) track(l *Lock, on bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if on && c.closed {
		return false
	}
	if on {
		if c.keepers == nil {
			c.keepers = map[*Lock]bool{}
		}
		c.keepers[l] = true
	} else {
		delete(c.keepers, l)
	}
	return true
}

func (c *Client) connTo(ctx context.Context, target int) (*conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	addr := c.addrs[target]
	if c.conn != nil && c.conn.usable() && c.conn.addr == addr {
		return c.conn, nil
	}
	// Dialing under the lock: the other goroutines want the same connection.
	nc, identity, err := dial(ctx, addr, c.opts.ConnectTimeout, c.opts.TLS, c.opts.Credential)
	if err != nil {
		return nil, err
	}
	if identity != "" {
		c.identity = identity
	}
	if c.conn != nil {
		// Other callers may have requests in flight on it (a wait queued
		// at a healthy leader): it closes once they are answered.
		c.conn.retire()
		live := c.old[:0]
		for _, o := range c.old {
			if !o.isDead() {
				live = append(live, o)
			}
		}
		c.old = append(live, c.conn)
	}
	c.conn, c.current = nc, target
	return nc, nil
}

// Identity is the identity the server authenticated the connection as
// (its H reply to Options.Credential), or "" before the first connection
// or without a Credential.
func (c *Client) Identity() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.identity
}

func (c *Client) indexOf(addr string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, a := range c.addrs {
		if a == addr {
			return i
		}
	}
	c.addrs = append(c.addrs, addr)
	return len(c.addrs) - 1
}

func (c *Client) next(i int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return (i + 1) % len(c.addrs)
}

func (c *Client) jitter(ceiling time.Duration) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ceiling < 2 {
		return ceiling
	}
	return ceiling/2 + time.Duration(c.rng.Int63n(int64(ceiling/2)+1))
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Do sends any request, following redirects and retrying E no_leader, and
// returns the reply (kinds A, S, T, B, R, N, K). The context's deadline
// cuts the retry budget and the reply wait short; a context that ends
// while the request is out gives ErrIndeterminate (wrapping ctx.Err()).
// Errors: ErrIndeterminate, ErrNoLeader, ErrUnreachable, ErrLimitMismatch,
// *RejectedError (errors.Is ErrUnauthenticated or ErrForbidden for those
// codes), ErrInvalidArgument, ErrProtocol, ErrClosed.
func (c *Client) Do(ctx context.Context, r Request) (Reply, error) {
	if r.Verb.isWatch() {
		return Reply{}, &invalidError{"W and U are sent by Watch"}
	}
	reply, _, err := c.do(ctx, r)
	return reply, err
}

// do is Do, also naming the connection that answered.
func (c *Client) do(ctx context.Context, r Request) (Reply, *conn, error) {
	if err := r.Validate(); err != nil {
		return Reply{}, nil, err
	}
	budgetEnd := time.Now().Add(c.opts.NoLeaderBudget)
	if dl, ok := ctx.Deadline(); ok && dl.Before(budgetEnd) {
		budgetEnd = dl
	}
	backoff := c.opts.BackoffInitial
	backOff := func(last error) error {
		pause := c.jitter(backoff)
		if backoff *= 2; backoff > c.opts.BackoffMax {
			backoff = c.opts.BackoffMax
		}
		if time.Now().Add(pause).After(budgetEnd) {
			return last
		}
		if err := sleepCtx(ctx, pause); err != nil {
			return failCause(ErrNoLeader, "gave up retrying", err)
		}
		return nil
	}
	c.mu.Lock()
	target := c.current
	c.mu.Unlock()
	redirects, unreachable, stale := 0, 0, 0
	redirected := false // target is the leader named by the last M
	for {
		if err := ctx.Err(); err != nil {
			return Reply{}, nil, err // nothing sent
		}
		cn, err := c.connTo(ctx, target)
		if err != nil {
			if errors.Is(err, ErrClosed) || errors.Is(err, ErrUnauthenticated) || errors.Is(err, ErrProtocol) {
				return Reply{}, nil, err // another node would not change it
			}
			target = c.next(target)
			if redirected {
				// The leader an M named is down (killed a moment ago: its
				// followers name it until their election timeout). That is
				// no leader for now: back off, ask another node.
				redirected, redirects = false, 0
				if e := backOff(failCause(ErrNoLeader, "the leader named by M cannot be reached", err)); e != nil {
					return Reply{}, nil, e
				}
				continue
			}
			c.mu.Lock()
			n := len(c.addrs)
			c.mu.Unlock()
			if unreachable++; unreachable >= n {
				return Reply{}, nil, err
			}
			continue
		}
		wait := time.Duration(r.WaitMS) * time.Millisecond
		id, ch, err := cn.submit(ctx, r, time.Now().Add(wait))
		if err == errNotSent {
			// The connection broke while idle (a restarted node): not sent,
			// go over a new one. Bounded (a node closing every connection).
			if stale++; stale > 3 {
				return Reply{}, nil, fail(ErrUnreachable, "connections to "+cn.addr+" keep closing")
			}
			continue
		}
		if err != nil {
			return Reply{}, nil, err
		}
		by := time.Now().Add(wait + c.opts.ReplyTimeout)
		reply, err := cn.wait(ctx, id, ch, by)
		if err != nil {
			// No reply (a paused, partitioned or dead node, or the caller
			// gave up): not resent, since it may have taken effect; the
			// next request goes to the next node, not the same silent one.
			if ctx.Err() == nil {
				c.mu.Lock()
				if c.current == target {
					c.current = (target + 1) % len(c.addrs)
				}
				c.mu.Unlock()
			}
			return Reply{}, nil, err
		}
		unreachable, redirected = 0, false
		switch {
		case reply.Kind == 'M':
			if !validAddress(reply.Leader) {
				return Reply{}, nil, fail(ErrProtocol, "M names a bad leader address: "+reply.Leader)
			}
			if redirects++; redirects > c.opts.MaxRedirects {
				return Reply{}, nil, fail(ErrNoLeader, fmt.Sprintf("more than %d redirects (last to %s)", c.opts.MaxRedirects, reply.Leader))
			}
			target, redirected = c.indexOf(reply.Leader), true
			continue
		case reply.Kind == 'E' && reply.Code == "no_leader":
			if e := backOff(fail(ErrNoLeader, "no leader known within the retry budget")); e != nil {
				return Reply{}, nil, e
			}
			target, redirects = c.next(target), 0 // another node may know one
			continue
		case reply.Kind == 'E' && reply.Code == "indeterminate":
			return Reply{}, nil, fail(ErrIndeterminate, "the leader lost leadership before the request committed")
		case reply.Kind == 'E' && reply.Code == "limit_mismatch":
			return Reply{}, nil, fail(ErrLimitMismatch, "the key is shared with another limit")
		case reply.Kind == 'E':
			return Reply{}, nil, &RejectedError{Code: reply.Code}
		}
		return reply, cn, nil
	}
}

func millis(d time.Duration) uint64 {
	if d <= 0 {
		return 0
	}
	return uint64((d + time.Millisecond - 1) / time.Millisecond)
}

// AcquireOptions are the fields of one acquire.
type AcquireOptions struct {
	Owner string        // default: the client's Options.Owner
	Lease time.Duration // 0: the server's default lease (then Wait must be 0)
	// Wait is how long the server may queue the request before answering
	// T. It is cut to the context's deadline, so the server answers T in
	// time rather than the client giving up on an unknown outcome.
	Wait time.Duration
}

func (c *Client) grant(ctx context.Context, verb Verb, key string, limit uint32, o AcquireOptions) (*Lock, error) {
	owner := o.Owner
	if owner == "" {
		owner = c.opts.Owner
	}
	wait := o.Wait
	if dl, ok := ctx.Deadline(); ok && wait > 0 {
		// Leave the reply time to travel back before the context ends.
		if left := time.Until(dl) - 50*time.Millisecond; left < wait {
			wait = left
			if wait < time.Millisecond {
				wait = time.Millisecond
			}
		}
	}
	r := Request{Verb: verb, Owner: owner, Key: key, LeaseMS: millis(o.Lease), WaitMS: millis(wait), Limit: limit}
	sentAt := time.Now()
	reply, cn, err := c.do(ctx, r)
	if err != nil {
		return nil, err
	}
	switch {
	case reply.Kind == byte(verb):
		return &Lock{client: c, conn: cn, Token: reply.Token, Key: key, Owner: owner, Lease: o.Lease, SentAt: sentAt,
			GrantedAt: reply.arrived, waited: r.WaitMS > 0, Shared: verb == VerbShared, Limit: limit,
			lost: make(chan struct{})}, nil
	case reply.Kind == 'T':
		return nil, fail(ErrTimedOut, "not granted (held, full, or someone queued first)")
	case reply.Kind == 'B':
		return nil, ErrBusy
	}
	return nil, fail(ErrProtocol, fmt.Sprintf("unexpected reply %c to %c", reply.Kind, verb))
}

// Acquire sends A: the key held exclusively, without a keeper (see Lock).
// ErrTimedOut for T, ErrBusy for B, and the errors of Do.
func (c *Client) Acquire(ctx context.Context, key string, o AcquireOptions) (*Lock, error) {
	return c.grant(ctx, VerbAcquire, key, 0, o)
}

// AcquireShared sends S (protocol v1.2), without a keeper: limit 0 is a
// reader of a reader-writer lock (Acquire is its write side), N one of N
// permits of a semaphore. ErrLimitMismatch when the key's holders and
// waiters carry another limit.
func (c *Client) AcquireShared(ctx context.Context, key string, limit uint32, o AcquireOptions) (*Lock, error) {
	return c.grant(ctx, VerbShared, key, limit, o)
}

// Release sends R: ErrNotHeld if the token does not hold the key.
func (c *Client) Release(ctx context.Context, token uint64, key string) error {
	reply, err := c.Do(ctx, Request{Verb: VerbRelease, Token: token, Key: key})
	if err != nil {
		return err
	}
	return tokenOutcome(reply, 'R')
}

// Keep sends K: the lease now ends `lease` from the server's now.
// ErrNotHeld once the lease has ended or the key moved on.
func (c *Client) Keep(ctx context.Context, token uint64, key string, lease time.Duration) error {
	reply, err := c.Do(ctx, Request{Verb: VerbKeep, Token: token, Key: key, LeaseMS: millis(lease)})
	if err != nil {
		return err
	}
	return tokenOutcome(reply, 'K')
}

func tokenOutcome(reply Reply, verb byte) error {
	switch reply.Kind {
	case verb:
		return nil
	case 'N':
		return fail(ErrNotHeld, "the token does not hold the key (lease ended, released, or moved on)")
	}
	return fail(ErrProtocol, fmt.Sprintf("unexpected reply %c to %c", reply.Kind, verb))
}
