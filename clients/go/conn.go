package lockd

// conn is one TCP connection to one node, shared by every goroutine of a
// Client: requests are pipelined (written at once, in wire order) and one
// reader goroutine hands each reply to the request the matcher pairs it
// with, whatever order replies arrive in.

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"
)

// maxInFlight bounds the requests one connection keeps in flight.
const maxInFlight = 100000

// errNotSent: the connection was already broken; the request never left
// and may safely go over a new connection.
var errNotSent = errors.New("connection closed before sending")

type result struct {
	reply Reply
	err   error
}

type conn struct {
	addr string
	nc   net.Conn

	wmu sync.Mutex // one writer at a time; held across matcher.add + write (wire order)

	mu        sync.Mutex // guards everything below
	m         *matcher
	waiters   map[uint64]chan result // buffered(1): the reply or the failure
	abandoned map[uint64]bool        // callers gave up: drop (or undo) the reply
	nextID    uint64
	broken    error
	changed   chan struct{} // closed (and replaced) whenever a reply is dispatched
	dead      chan struct{} // closed once the connection broke or was closed
	// retired: no new caller is given this connection (the client moved to
	// another node); it stays
	// open for the requests already in flight and closes once they are
	// answered, so moving on never fails another caller's request.
	retired  bool
	watchers map[string][]*watchSub // key -> the watches of this connection
	onX      map[uint64]func()      // token -> the keeper told of an X
	xSeen    map[uint64]bool        // X pushes no keeper had claimed yet (bounded)
	xOrder   []uint64
}

// watchSub is one Watch's interest in a key on one connection.
type watchSub struct {
	key  string
	push func(KeyState)
}

// maxXSeen bounds the X pushes remembered before their keeper registers.
const maxXSeen = 256

// dial connects to addr (over TLS when tlsConfig is set); with a
// credential, the connection is authenticated (H, protocol.md §11) before
// anything else is sent on it, and identity is what the server named.
func dial(ctx context.Context, addr string, timeout time.Duration, tlsConfig *tls.Config,
	credential string) (c *conn, identity string, err error) {
	d := net.Dialer{Timeout: timeout}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, "", failCause(ErrUnreachable, "cannot connect to "+addr, err)
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true) // small requests: latency over packet count
	}
	if tlsConfig != nil {
		if nc, err = handshake(ctx, nc, addr, timeout, tlsConfig); err != nil {
			return nil, "", err
		}
	}
	br := bufio.NewReaderSize(nc, 16*1024)
	if credential != "" {
		if identity, err = authenticate(ctx, nc, br, addr, timeout, credential); err != nil {
			_ = nc.Close()
			return nil, "", err
		}
	}
	c = &conn{addr: addr, nc: nc, m: newMatcher(), waiters: map[uint64]chan result{},
		abandoned: map[uint64]bool{}, nextID: 1, changed: make(chan struct{}), dead: make(chan struct{}),
		watchers: map[string][]*watchSub{}, onX: map[uint64]func(){}, xSeen: map[uint64]bool{}}
	go c.readLoop(br)
	return c, identity, nil
}

// handshake runs the TLS handshake on nc, bounded by timeout and ctx. The
// server's certificate must name cfg.ServerName, or else addr's host.
func handshake(ctx context.Context, nc net.Conn, addr string, timeout time.Duration, cfg *tls.Config) (net.Conn, error) {
	if cfg.ServerName == "" {
		cfg = cfg.Clone()
		if host, _, err := net.SplitHostPort(addr); err == nil {
			cfg.ServerName = host
		}
	}
	by := time.Now().Add(timeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(by) {
		by = dl
	}
	tc := tls.Client(nc, cfg)
	_ = nc.SetDeadline(by)
	if err := tc.HandshakeContext(ctx); err != nil {
		_ = nc.Close()
		return nil, failCause(ErrUnreachable, "TLS handshake with "+addr+" failed", err)
	}
	_ = nc.SetDeadline(time.Time{})
	return tc, nil
}

// authenticate sends H and reads its reply, nothing else in flight: H
// <identity>, or E unauthenticated (the server then closes the connection).
// Bounded by timeout and ctx; the credential never appears in an error.
func authenticate(ctx context.Context, nc net.Conn, br *bufio.Reader, addr string, timeout time.Duration,
	credential string) (string, error) {
	by := time.Now().Add(timeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(by) {
		by = dl
	}
	_ = nc.SetDeadline(by)
	defer func() { _ = nc.SetDeadline(time.Time{}) }()
	if _, err := nc.Write([]byte("H " + credential + "\n")); err != nil {
		return "", failCause(ErrUnreachable, "cannot authenticate to "+addr, err)
	}
	line, err := br.ReadSlice('\n')
	if err != nil {
		return "", failCause(ErrUnreachable, "no reply to H from "+addr, err)
	}
	reply, perr := ParseReply(strings.TrimSuffix(string(line), "\n"))
	switch {
	case perr == nil && reply.Kind == 'H':
		return reply.Identity, nil
	case perr == nil && reply.Kind == 'E' && reply.Code == "unauthenticated":
		return "", fail(ErrUnauthenticated, addr+" refused the credential")
	default:
		return "", fail(ErrProtocol, "unexpected reply to H from "+addr+": "+strings.TrimSpace(string(line)))
	}
}

// usable is true if new callers may send on this connection.
func (c *conn) usable() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.broken == nil && !c.retired
}

func (c *conn) close() { c.fail(errors.New("connection closed by the client")) }

func (c *conn) isDead() bool {
	select {
	case <-c.dead:
		return true
	default:
		return false
	}
}

// retire gives the connection no new callers and closes it once nothing
// is in flight on it (at once if nothing is).
func (c *conn) retire() {
	c.mu.Lock()
	c.retired = true
	c.closeIfIdleLocked()
	c.mu.Unlock()
}

func (c *conn) closeIfIdleLocked() {
	if c.retired && c.broken == nil && c.m.inFlight() == 0 {
		c.failLocked(errors.New("connection retired"))
	}
}

// listenX calls fn (on the reader goroutine, once) when X arrives for token.
func (c *conn) listenX(token uint64, fn func()) {
	c.mu.Lock()
	seen := c.xSeen[token]
	if !seen {
		c.onX[token] = fn
	}
	c.mu.Unlock()
	if seen {
		fn()
	}
}

func (c *conn) unlistenX(token uint64) {
	c.mu.Lock()
	delete(c.onX, token)
	c.mu.Unlock()
}

// peerClosed is true when the peer closed the connection (EOF with nothing
// before it) and the reader has not noticed yet: a node killed or restarted
// a moment ago. The request is not sent, so it can go over a new connection.
func (c *conn) peerClosed() bool {
	raw := c.nc
	if t, ok := raw.(*tls.Conn); ok {
		raw = t.NetConn() // a peek at the socket: EOF there is EOF inside TLS too
	}
	tc, ok := raw.(*net.TCPConn)
	if !ok {
		return false
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return false
	}
	closed := false
	_ = rc.Control(func(fd uintptr) {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		closed = (n == 0 && err == nil) || (err != nil && err != syscall.EAGAIN && err != syscall.EINTR)
	})
	return closed
}

// submit sends r. A second acquire of one owner and key waits (until
// queueBy or ctx ends) for the first to be answered: their replies could
// not be told apart. It waits holding no lock, so every other request (the
// release that ends the first one's wait, say) goes out meanwhile.
// errNotSent if the connection had broken.
func (c *conn) submit(ctx context.Context, r Request, queueBy time.Time) (uint64, chan result, error) {
	return c.submitHook(ctx, r, queueBy, nil)
}

// submitHook is submit; hook, when set, runs under the connection's locks
// just before r is recorded and written (wire order with r), and says
// whether r is to be sent at all.
func (c *conn) submitHook(ctx context.Context, r Request, queueBy time.Time, hook func() bool) (uint64, chan result, error) {
	queued := false
	for {
		c.mu.Lock()
		changed, busy := c.changed, c.broken == nil && c.m.busy(r)
		c.mu.Unlock()
		if busy {
			queued = true
			t := time.NewTimer(time.Until(queueBy))
			select {
			case <-changed:
				t.Stop()
				continue
			case <-t.C:
				return 0, nil, fail(ErrTimedOut, "an acquire by this owner for this key was still in flight")
			case <-ctx.Done():
				t.Stop()
				return 0, nil, failCause(ErrTimedOut, "an acquire by this owner for this key was still in flight", ctx.Err())
			}
		}
		c.wmu.Lock()
		c.mu.Lock()
		if c.broken == nil && c.m.busy(r) { // another one went first meanwhile: wait again
			c.mu.Unlock()
			c.wmu.Unlock()
			continue
		}
		if queued && r.WaitMS > 0 {
			// The wait counts from the call, not from the end of the
			// queueing: send what is left of it (0: one try, no wait).
			r.WaitMS = millis(time.Until(queueBy))
		}
		if hook != nil && c.broken == nil && !hook() {
			c.mu.Unlock()
			c.wmu.Unlock()
			return 0, nil, nil
		}
		id, ch, err := c.addLocked(r)
		c.mu.Unlock()
		if err == nil {
			if _, werr := c.nc.Write([]byte(r.Line())); werr != nil {
				// May be partly written: the waiter gets ErrIndeterminate.
				c.fail(werr)
			}
		}
		c.wmu.Unlock()
		return id, ch, err
	}
}

// addLocked records r as the next request on the wire; c.mu and c.wmu held.
func (c *conn) addLocked(r Request) (uint64, chan result, error) {
	if c.broken == nil && c.peerClosed() {
		c.failLocked(errors.New("connection closed by " + c.addr))
	}
	if c.broken != nil {
		return 0, nil, errNotSent
	}
	if c.m.inFlight() >= maxInFlight {
		return 0, nil, fail(ErrBusy, "too many requests in flight on one connection")
	}
	id := c.nextID
	c.nextID++
	ch := make(chan result, 1)
	c.m.add(id, r)
	c.waiters[id] = ch
	return id, ch, nil
}

// wait returns the reply to id, or ErrIndeterminate when the connection
// broke, `by` passed or ctx ended first (the request may have taken
// effect; a late grant is released at once).
func (c *conn) wait(ctx context.Context, id uint64, ch chan result, by time.Time) (Reply, error) {
	t := time.NewTimer(time.Until(by))
	defer t.Stop()
	var cause error
	select {
	case res := <-ch:
		return res.reply, res.err
	case <-t.C:
	case <-ctx.Done():
		cause = ctx.Err()
	}
	c.mu.Lock()
	select {
	case res := <-ch: // arrived meanwhile
		c.mu.Unlock()
		return res.reply, res.err
	default:
	}
	if _, inFlight := c.waiters[id]; inFlight {
		c.abandoned[id] = true
	}
	c.mu.Unlock()
	if cause != nil {
		return Reply{}, failCause(ErrIndeterminate, "gave up waiting for "+c.addr, cause)
	}
	return Reply{}, fail(ErrIndeterminate, "no reply from "+c.addr+" in time")
}

func (c *conn) fail(why error) {
	c.mu.Lock()
	c.failLocked(why)
	c.mu.Unlock()
}

// failLocked marks the connection broken and fails every request in flight.
func (c *conn) failLocked(why error) {
	if c.broken == nil {
		c.broken = why
		_ = c.nc.Close()
	}
	for _, id := range c.m.drain() {
		if ch, ok := c.waiters[id]; ok {
			ch <- result{err: failCause(ErrIndeterminate, "connection to "+c.addr+" lost before the reply", why)}
			delete(c.waiters, id)
		}
	}
	c.abandoned = map[uint64]bool{}
	close(c.changed)
	c.changed = make(chan struct{})
	select {
	case <-c.dead:
	default:
		close(c.dead)
	}
}

func (c *conn) readLoop(br *bufio.Reader) {
	for {
		line, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull || len(line) > maxReplyLine {
			c.fail(errors.New("reply line from " + c.addr + " too long"))
			return
		}
		if err != nil {
			c.fail(err)
			return
		}
		c.dispatch(string(line[:len(line)-1]))
	}
}

func (c *conn) dispatch(text string) {
	reply, perr := ParseReply(text)
	reply.arrived = time.Now()
	if perr == nil && reply.isPush() {
		c.push(reply)
		return
	}
	c.mu.Lock()
	var out []delivery
	ok := false
	if perr == nil {
		out, ok = c.m.match(reply)
	}
	if !ok {
		// Nothing we sent can have drawn this line: no reply on this
		// connection can be trusted any more.
		c.failLocked(errors.New("unexpected reply from " + c.addr + ": " + text))
		c.mu.Unlock()
		return
	}
	var undo []Reply
	for _, d := range out {
		ch := c.waiters[d.id]
		delete(c.waiters, d.id)
		if c.abandoned[d.id] && d.reply.isGrant() {
			undo = append(undo, d.reply)
		}
		delete(c.abandoned, d.id)
		if ch != nil {
			ch <- result{reply: d.reply}
		}
	}
	close(c.changed)
	c.changed = make(chan struct{})
	if len(undo) == 0 {
		c.closeIfIdleLocked()
	}
	c.mu.Unlock()
	for _, g := range undo {
		// A grant nobody waits for any more: release it, so a timed-out
		// acquire never leaves a lock held by nobody until its lease ends.
		// Sent from another goroutine: the reader must go on reading.
		go func(g Reply) {
			rid, _, err := c.submit(context.Background(), Request{Verb: VerbRelease, Token: g.Token, Key: g.Key}, time.Now())
			c.mu.Lock()
			if err == nil && rid != 0 {
				if _, inFlight := c.waiters[rid]; inFlight {
					c.abandoned[rid] = true
				}
			}
			c.closeIfIdleLocked()
			c.mu.Unlock()
		}(g)
	}
}

// push routes a V to this connection's watches of its key and an X to the
// keeper of its token (protocol.md §5c); never to the matcher.
func (c *conn) push(p Reply) {
	c.mu.Lock()
	if p.Kind == 'X' {
		fn := c.onX[p.Token]
		delete(c.onX, p.Token)
		if fn == nil && !c.xSeen[p.Token] {
			c.xSeen[p.Token] = true
			c.xOrder = append(c.xOrder, p.Token)
			if len(c.xOrder) > maxXSeen {
				delete(c.xSeen, c.xOrder[0])
				c.xOrder = c.xOrder[1:]
			}
		}
		c.mu.Unlock()
		if fn != nil {
			fn()
		}
		return
	}
	subs := append([]*watchSub(nil), c.watchers[p.Key]...)
	c.mu.Unlock()
	for _, s := range subs {
		s.push(p.State)
	}
}

// watch registers sub and sends W for its key (in wire order with the
// registration, so no U of another watch of the key can overtake it), and
// returns W's reply (or B, E). A refused W unregisters sub.
func (c *conn) watch(ctx context.Context, sub *watchSub, timeout time.Duration) (Reply, error) {
	id, ch, err := c.submitHook(ctx, Request{Verb: VerbWatch, Key: sub.key}, time.Now(), func() bool {
		c.watchers[sub.key] = append(c.watchers[sub.key], sub)
		return true
	})
	if err != nil {
		return Reply{}, err
	}
	reply, err := c.wait(ctx, id, ch, time.Now().Add(timeout))
	if err != nil || reply.Kind != 'W' {
		c.mu.Lock()
		c.dropSubLocked(sub)
		c.mu.Unlock()
	}
	return reply, err
}

func (c *conn) dropSubLocked(sub *watchSub) bool {
	subs := c.watchers[sub.key]
	for i, s := range subs {
		if s == sub {
			subs = append(subs[:i:i], subs[i+1:]...)
			break
		}
	}
	if len(subs) == 0 {
		delete(c.watchers, sub.key)
		return true
	}
	c.watchers[sub.key] = subs
	return false
}

// unwatch unregisters sub and, if it was the key's last watch here, sends
// U (its reply is read and dropped).
func (c *conn) unwatch(sub *watchSub) {
	id, _, err := c.submitHook(context.Background(), Request{Verb: VerbUnwatch, Key: sub.key}, time.Now(), func() bool {
		return c.dropSubLocked(sub)
	})
	c.mu.Lock()
	if err == nil && id != 0 {
		if _, inFlight := c.waiters[id]; inFlight {
			c.abandoned[id] = true
			delete(c.waiters, id)
		}
	}
	if err != nil { // broken: nothing to tell the server
		c.dropSubLocked(sub)
	}
	c.mu.Unlock()
}
