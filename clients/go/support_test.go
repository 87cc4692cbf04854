package lockd

// Test support: real lockd processes (single mode, and a 3-node cluster
// on loopback with its own data dirs) and a scripted fake node. LOCKD_BIN
// names the lockd binary (default: build/bin/lockd of this tree). Every
// wait polls against a generous deadline; nothing sleeps a fixed time to
// let something happen.

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func lockdBin(t *testing.T) string {
	if b := os.Getenv("LOCKD_BIN"); b != "" {
		return b
	}
	b, _ := filepath.Abs("../../build/bin/lockd")
	if _, err := os.Stat(b); err != nil {
		t.Fatalf("no lockd binary: set LOCKD_BIN (tried %s)", b)
	}
	return b
}

var listeningRE = regexp.MustCompile(`listening on \S+:(\d+)`)

// proc is a running lockd whose stderr is drained (so it never blocks).
type proc struct {
	cmd  *exec.Cmd
	port string
	mu   sync.Mutex
	err  strings.Builder
	exit chan struct{}
}

func startLockd(t *testing.T, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(lockdBin(t), args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, exit: make(chan struct{})}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sent := false
		for sc.Scan() {
			p.mu.Lock()
			p.err.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			if m := listeningRE.FindStringSubmatch(sc.Text()); m != nil && !sent {
				found <- m[1]
				sent = true
			}
		}
		_ = cmd.Wait()
		close(p.exit)
	}()
	select {
	case p.port = <-found:
	case <-p.exit:
		t.Fatalf("lockd did not start: %s", p.stderr())
	case <-time.After(10 * time.Second):
		p.kill()
		t.Fatalf("lockd did not start in 10 s: %s", p.stderr())
	}
	t.Cleanup(p.kill)
	return p
}

func (p *proc) stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err.String()
}

func (p *proc) addr() string { return "127.0.0.1:" + p.port }

// kill is kill -9, and waits for the exit.
func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-p.exit:
	case <-time.After(10 * time.Second):
	}
}

// single starts `lockd --mode single` on a free port (or `listen`).
func single(t *testing.T, listen string) *proc {
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	return startLockd(t, "--listen", listen, "--admin", "off")
}

// callOnce sends one line on a fresh connection and returns the reply line
// ("" if none in time).
func callOnce(addr, line string, timeout time.Duration) string {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return ""
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		return ""
	}
	r, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return ""
	}
	return strings.TrimSpace(r)
}

func eventually(t *testing.T, timeout time.Duration, cond func() bool) bool {
	t.Helper()
	end := time.Now().Add(timeout)
	for time.Now().Before(end) {
		if cond() {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return cond()
}

var portsMu sync.Mutex
var handedOut = map[int]bool{}
var portLocks *os.File

// reservePort locks byte p of a file shared by every test process on the
// host (the C++ and Python test helpers take the same locks), for the rest
// of this process's life: while a node is down its port binds, and a
// parallel test could otherwise pick it and take it first.
func reservePort(p int) bool {
	if portLocks == nil {
		dir := os.Getenv("TMPDIR")
		if dir == "" {
			dir = "/tmp"
		}
		f, err := os.OpenFile(filepath.Join(dir, "lockd-test-ports.lock"), os.O_RDWR|os.O_CREATE, 0o666)
		if err != nil {
			return true // no shared file: the bind check alone
		}
		portLocks = f
	}
	lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: 0, Start: int64(p), Len: 1}
	return syscall.FcntlFlock(portLocks.Fd(), syscall.F_SETLK, &lk) == nil
}

// freePort is a port below the kernel's ephemeral range that was free a
// moment ago (a node's outgoing connections cannot take it before the node
// binds it), never the same twice in one process.
func freePort(t *testing.T) int {
	portsMu.Lock()
	defer portsMu.Unlock()
	hi := 32767
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		var lo, h int
		if _, err := fmt.Sscan(string(b), &lo, &h); err == nil && lo > 10001 {
			hi = lo - 1
		}
	}
	for i := 0; i < 500; i++ {
		p := 10000 + int(time.Now().UnixNano()%int64(hi-10000))
		if handedOut[p] || !reservePort(p) {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		l.Close()
		handedOut[p] = true
		return p
	}
	t.Fatal("no free port")
	return 0
}

// cluster is three `lockd --mode cluster` nodes (ids 1..3) with short Raft
// timeouts, formed once by POST /v1/cluster/init to node 1 (v1.3: a start
// never forms a group).
type cluster struct {
	t     *testing.T
	dir   string
	ports map[int][3]int // id -> client, raft, admin
	nodes map[int]*proc
}

func newCluster(t *testing.T) *cluster {
	c := &cluster{t: t, dir: t.TempDir(), ports: map[int][3]int{}, nodes: map[int]*proc{}}
	for i := 1; i <= 3; i++ {
		c.ports[i] = [3]int{freePort(t), freePort(t), freePort(t)}
	}
	for i := 1; i <= 3; i++ {
		c.start(i)
	}
	c.init(1)
	return c
}

// init forms the group: POST /v1/cluster/init to node i, again while it
// answers 504 or not at all (a 409 after a 504: that first init formed it).
func (c *cluster) init(i int) {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	timedOut := false
	last := ""
	for time.Now().Before(deadline) {
		status := 0
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", c.ports[i][2]), 2*time.Second)
		if err == nil {
			_ = conn.SetDeadline(time.Now().Add(35 * time.Second))
			fmt.Fprintf(conn, "POST /v1/cluster/init HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
			line, rerr := bufio.NewReader(conn).ReadString('\n')
			conn.Close()
			last = line
			if rerr == nil {
				fmt.Sscanf(line, "HTTP/1.1 %d", &status)
			}
		} else {
			last = err.Error()
		}
		if status == 200 || (status == 409 && timedOut) {
			return
		}
		if status != 0 && status != 503 && status != 504 {
			c.t.Fatalf("POST /v1/cluster/init to node %d: %s", i, last)
		}
		timedOut = timedOut || status == 504
		time.Sleep(50 * time.Millisecond)
	}
	c.t.Fatalf("POST /v1/cluster/init to node %d: no answer in time (%s)", i, last)
}

func (c *cluster) addr(i int) string { return fmt.Sprintf("127.0.0.1:%d", c.ports[i][0]) }

func (c *cluster) addrs() []string { return []string{c.addr(1), c.addr(2), c.addr(3)} }

func (c *cluster) start(i int) {
	args := []string{"--mode", "cluster", "--node-id", fmt.Sprint(i), "--data-dir", filepath.Join(c.dir, fmt.Sprint("node", i)),
		"--admin", fmt.Sprintf("127.0.0.1:%d", c.ports[i][2]), "--election-timeout-ms", "150", "--heartbeat-ms", "30",
		"--insecure-peers"} // loopback test nodes: no peer authentication
	for j := 1; j <= 3; j++ {
		args = append(args, "--peer", fmt.Sprintf("%d=127.0.0.1:%d/127.0.0.1:%d", j, c.ports[j][0], c.ports[j][1]))
	}
	c.nodes[i] = startLockd(c.t, args...)
}

func (c *cluster) kill9(i int) {
	c.nodes[i].kill()
	delete(c.nodes, i)
}

// leader is the id of the node serving as leader (R 1 probe gets N), once
// both other live nodes redirect to it; 0 at the deadline.
func (c *cluster) leader(except int) int {
	c.t.Helper()
	id := 0
	eventually(c.t, 20*time.Second, func() bool {
		for i := range c.nodes {
			if i != except && callOnce(c.addr(i), "R 1 lockd-probe", 500*time.Millisecond) == "N 1 lockd-probe" {
				for j := range c.nodes {
					if j != i && callOnce(c.addr(j), "R 1 lockd-probe", 500*time.Millisecond) != fmt.Sprintf("M %s 1 lockd-probe", c.addr(i)) {
						return false
					}
				}
				id = i
				return true
			}
		}
		return false
	})
	return id
}

// fakeNode answers each request line with what handler returns.
type fakeNode struct {
	l        net.Listener
	mu       sync.Mutex
	received []string
	conns    []net.Conn
}

func newFake(t *testing.T, handler func(line string) []string) *fakeNode {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeNode{l: l}
	t.Cleanup(func() {
		l.Close()
		f.mu.Lock()
		for _, c := range f.conns {
			c.Close()
		}
		f.mu.Unlock()
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			f.mu.Lock()
			f.conns = append(f.conns, c)
			f.mu.Unlock()
			go func() {
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					f.mu.Lock()
					f.received = append(f.received, sc.Text())
					f.mu.Unlock()
					for _, r := range handler(sc.Text()) {
						c.Write([]byte(r + "\n"))
					}
				}
			}()
		}
	}()
	return f
}

func (f *fakeNode) addr() string { return f.l.Addr().String() }

func (f *fakeNode) lines() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.received...)
}

func (f *fakeNode) saw(line string) bool {
	for _, l := range f.lines() {
		if l == line {
			return true
		}
	}
	return false
}

// push sends line on every open connection (a reply held back).
func (f *fakeNode) push(line string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.conns {
		c.Write([]byte(line + "\n"))
	}
}

func echo(line string) string {
	f := strings.Fields(line)
	return f[1] + " " + f[2]
}

func newClient(t *testing.T, addrs ...string) *Client {
	t.Helper()
	c, err := New(Options{Addresses: addrs, ReplyTimeout: 5 * time.Second, JitterSeed: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func bg() context.Context { return context.Background() }

// stop closes the listener and every connection: the node is gone.
func (f *fakeNode) stop() {
	f.l.Close()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.conns {
		c.Close()
	}
}

// connCount is how many connections the node accepted.
func (f *fakeNode) connCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.conns)
}

func (f *fakeNode) count(prefix string) int {
	n := 0
	for _, l := range f.lines() {
		if strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n
}
