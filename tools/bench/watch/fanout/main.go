// fanout: lockd's watch fan-out against etcd's, side by side in one run.
//
// N watchers of one key while one writer changes the key's holder R times a
// second; the sides alternate round by round (lockd, etcd, lockd, etcd ...),
// each round on a freshly started server. Per round it measures:
//
//	delivered   every change seen by every watcher (count, against N x changes)
//	latency     per change, from the change being decided (lockd: the writer
//	            reads the A reply of the new holder; etcd: the writer reads the
//	            Put response) to the LAST watcher receiving it; p50/p99/max
//	            over the round's changes (one clock: one process)
//	cpu         server utime+stime (/proc/PID/stat, every thread) over the
//	            change window / notifications delivered
//	memory      server RSS with the connections open and idle, then with the
//	            watches: bytes per watch above the idle connections
//	generator   this process's own CPU over the window (it must not be the
//	            bottleneck: printed as % of one core)
//
// lockd: one TCP connection per watcher (one W per key per connection,
// protocol §5c); the writer pipelines "R <token> k" and "A o<i> k" in one
// write, so a change is the new holder o<i> (a push of "free" between them,
// if the server sends one, is counted apart and not as a change).
// lockd:c3: a 3-member cluster (peer secret, formed by POST /v1/cluster/init),
// the watchers spread round robin over the members (each serves watches from
// its applied state), the writer on the leader; CPU and RSS summed over the
// members.
// etcd: gRPC over HTTP/2 (h2c, golang.org/x/net/http2, hand-framed protobuf:
// no etcd client library is packaged here), --etcd-conns connections, one
// Watch stream each, N/conns watches per stream (as clientv3 multiplexes
// watchers on one stream per connection); the writer Puts value o<i>.
//
// Build: see fanout_compare (GOPATH mode: Debian's gocode and clients/go as lockd/clients/go)
// (needs golang-golang-x-net-dev). Driven by tools/bench/watch/fanout_compare.
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/net/http2"

	lockdclient "lockd/clients/go"
)

var (
	flWatchers  = flag.Int("watchers", 10000, "watchers of the one key")
	flRate      = flag.Int("rate", 100, "holder changes per second")
	flDuration  = flag.Duration("duration", 20*time.Second, "change window per round")
	flRounds    = flag.Int("rounds", 2, "rounds per side (alternating)")
	flLockd     = flag.String("lockd", "build/bin/lockd", "lockd binary")
	flLockdArgs = flag.String("lockd-args", "", "extra lockd flags")
	flEtcd      = flag.String("etcd", "etcd", "etcd binary")
	flEtcdConns = flag.Int("etcd-conns", 100, "etcd: gRPC connections (one Watch stream each)")
	flSides     = flag.String("sides", "lockd,etcd", "sides to run, in order: lockd, lockd:c3 (3-member cluster), lockd:go:CONNS (the Go client), etcd (--etcd-conns), etcd:CONNS")
	flTmp       = flag.String("tmp", "", "scratch dir (default: a new one under /tmp)")
	flJSON      = flag.String("json", "", "write every round's result here")
	flReaders   = flag.Int("readers", 1, "lockd: epoll reader threads for the watchers")
	flSettle    = flag.Duration("settle", 5*time.Second, "after the last change, wait this long at most for stragglers")
)

const key = "fanout-key"

type round struct {
	Side        string  `json:"side"`
	Round       int     `json:"round"`
	Watchers    int     `json:"watchers"`
	Conns       int     `json:"conns"`
	Changes     int     `json:"changes"`
	ChangesPerS float64 `json:"changes_per_s"`
	Delivered   int64   `json:"delivered"`
	Expected    int64   `json:"expected"`
	Complete    int     `json:"changes_seen_by_all"`
	OtherPushes int64   `json:"other_pushes"`
	Dropped     int64   `json:"watchers_dropped"`
	P50ms       float64 `json:"p50_ms"`
	P99ms       float64 `json:"p99_ms"`
	Maxms       float64 `json:"max_ms"`
	ServerCPUs  float64 `json:"server_cpu_s"`
	NsPerNotif  float64 `json:"server_cpu_ns_per_notification"`
	IdleRSS     int64   `json:"rss_idle_bytes"`
	WatchRSS    int64   `json:"rss_watching_bytes"`
	BytesPerW   float64 `json:"bytes_per_watch"`
	GenCPUs     float64 `json:"generator_cpu_s"`
	GenCorePct  float64 `json:"generator_core_pct"`
	WindowS     float64 `json:"window_s"`
	Load1       string  `json:"loadavg"`
}

// ---- shared bookkeeping ------------------------------------------------------

type tally struct {
	n       int32
	counts  []int32 // per change: watchers that have seen it
	lastNs  []int64 // per change: when the last (n-th) watcher saw it
	decided []int64 // per change: when the writer learnt it was decided
	other   int64
	dropped int64
	start   time.Time
}

func newTally(n, maxChanges int) *tally {
	return &tally{n: int32(n), counts: make([]int32, maxChanges), lastNs: make([]int64, maxChanges),
		decided: make([]int64, maxChanges), start: time.Now()}
}

func (t *tally) now() int64 { return int64(time.Since(t.start)) }

// saw: a watcher received change i.
func (t *tally) saw(i int) {
	if i < 0 || i >= len(t.counts) {
		atomic.AddInt64(&t.other, 1)
		return
	}
	if atomic.AddInt32(&t.counts[i], 1) == t.n {
		atomic.StoreInt64(&t.lastNs[i], t.now())
	}
}

// ownerIndex: "o123" -> 123.
func ownerIndex(b []byte) int {
	if len(b) < 2 || b[0] != 'o' {
		return -1
	}
	v := 0
	for _, c := range b[1:] {
		if c < '0' || c > '9' {
			return -1
		}
		v = v*10 + int(c-'0')
	}
	return v
}

// ---- /proc -------------------------------------------------------------------

func cpuTicks(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	u, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (u + st) / 100.0 // USER_HZ
}

func rss(pid int) int64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			f := strings.Fields(l)
			v, _ := strconv.ParseInt(f[1], 10, 64)
			return v * 1024
		}
	}
	return 0
}

// settledRSS: RSS once it stops moving (the server may still be digesting).
func settledRSS(pid int) int64 {
	prev := rss(pid)
	for i := 0; i < 20; i++ {
		time.Sleep(150 * time.Millisecond)
		cur := rss(pid)
		if cur == prev {
			return cur
		}
		prev = cur
	}
	return prev
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func percentile(v []float64, p float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	idx := int(p*float64(len(s))+0.5) - 1
	if idx < 0 {
		idx = 0
	}
	if idx >= len(s) {
		idx = len(s) - 1
	}
	return s[idx]
}

// ---- lockd -------------------------------------------------------------------

type lockdServer struct {
	cmd  *exec.Cmd
	addr string
}

func startLockd(dir string, n int) (*lockdServer, error) {
	args := []string{"--mode=single", "--listen", "127.0.0.1:0", "--admin", "off",
		"--max-connections", strconv.Itoa(n + 100), "--max-connections-per-ip", "0"}
	if *flLockdArgs != "" {
		args = append(args, strings.Fields(*flLockdArgs)...)
	}
	cmd := exec.Command(*flLockd, args...)
	logf, err := os.Create(filepath.Join(dir, "lockd.log"))
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	cmd.Stderr = io.MultiWriter(logf, pw)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	re := regexp.MustCompile(`listening on (127\.0\.0\.1:\d+)`)
	addrc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		sent := false
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil && !sent {
				addrc <- m[1]
				sent = true
			}
		}
	}()
	select {
	case a := <-addrc:
		return &lockdServer{cmd: cmd, addr: a}, nil
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		return nil, errors.New("lockd did not log its address")
	}
}

// lockdSide: the processes of one lockd side, where watchers connect
// (round robin) and where the writer goes.
type lockdSide struct {
	cmds    []*exec.Cmd
	watchAt []string
	writeAt string
}

func (l *lockdSide) pids() []int {
	var p []int
	for _, c := range l.cmds {
		p = append(p, c.Process.Pid)
	}
	return p
}

func (l *lockdSide) stop() {
	for _, c := range l.cmds {
		c.Process.Kill()
		c.Wait()
	}
}

func sumCPU(pids []int) float64 {
	t := 0.0
	for _, p := range pids {
		t += cpuTicks(p)
	}
	return t
}

// settledRSSSum: the members' RSS summed, once it stops moving.
func settledRSSSum(pids []int) int64 {
	sum := func() int64 {
		var t int64
		for _, p := range pids {
			t += rss(p)
		}
		return t
	}
	prev := sum()
	for i := 0; i < 20; i++ {
		time.Sleep(150 * time.Millisecond)
		cur := sum()
		if cur == prev {
			return cur
		}
		prev = cur
	}
	return prev
}

// startLockdCluster: a 3-member cluster with a peer secret, formed by
// POST /v1/cluster/init; the writer goes to the leader, watchers to every
// member (each serves watches from its applied state, §5c).
func startLockdCluster(dir string, n, members int) (*lockdSide, error) {
	secret := filepath.Join(dir, "peer-secret")
	b := make([]byte, 32)
	f, _ := os.Open("/dev/urandom")
	io.ReadFull(f, b)
	f.Close()
	if err := os.WriteFile(secret, []byte(fmt.Sprintf("%x\n", b)), 0o600); err != nil {
		return nil, err
	}
	client, raft, admin := make([]int, members), make([]int, members), make([]int, members)
	var peers []string
	for k := 0; k < members; k++ {
		client[k], raft[k], admin[k] = freePort(), freePort(), freePort()
		peers = append(peers, "--peer", fmt.Sprintf("%d=127.0.0.1:%d/127.0.0.1:%d", k+1, client[k], raft[k]))
	}
	side := &lockdSide{}
	for k := 0; k < members; k++ {
		args := append([]string{"--mode", "cluster", "--node-id", strconv.Itoa(k + 1)}, peers...)
		args = append(args, "--data-dir", filepath.Join(dir, fmt.Sprintf("n%d", k+1)),
			"--admin", fmt.Sprintf("127.0.0.1:%d", admin[k]), "--log-level", "warn",
			"--peer-secret-file", secret, "--max-connections", strconv.Itoa(n+100),
			"--max-connections-per-ip", "0")
		cmd := exec.Command(*flLockd, args...)
		logf, err := os.Create(filepath.Join(dir, fmt.Sprintf("n%d.log", k+1)))
		if err != nil {
			return nil, err
		}
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			side.stop()
			return nil, err
		}
		side.cmds = append(side.cmds, cmd)
		side.watchAt = append(side.watchAt, fmt.Sprintf("127.0.0.1:%d", client[k]))
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Post(fmt.Sprintf("http://127.0.0.1:%d/v1/cluster/init", admin[0]),
			"application/json", strings.NewReader("{}"))
		code := 0
		if err == nil {
			code = resp.StatusCode
			resp.Body.Close()
		}
		if code == 200 || code == 409 {
			break
		}
		if time.Now().After(deadline) {
			side.stop()
			return nil, fmt.Errorf("cluster init: %v %d", err, code)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The leader answers a release of an unknown token itself (N); the
	// others answer M.
	for side.writeAt == "" {
		for _, a := range side.watchAt {
			c, err := net.DialTimeout("tcp", a, time.Second)
			if err != nil {
				continue
			}
			c.SetDeadline(time.Now().Add(2 * time.Second))
			c.Write([]byte("R 1 fanout-probe\n"))
			l, _ := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if strings.HasPrefix(l, "N ") {
				side.writeAt = a
				break
			}
		}
		if side.writeAt == "" {
			if time.Now().After(deadline) {
				side.stop()
				return nil, errors.New("cluster: no leader")
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return side, nil
}

func runLockd(dir string, r int, members int) (*round, error) {
	n := *flWatchers
	var side *lockdSide
	name := "lockd"
	if members == 0 {
		srv, err := startLockd(dir, n)
		if err != nil {
			return nil, err
		}
		side = &lockdSide{cmds: []*exec.Cmd{srv.cmd}, watchAt: []string{srv.addr}, writeAt: srv.addr}
	} else {
		var err error
		if side, err = startLockdCluster(dir, n, members); err != nil {
			return nil, err
		}
		name = fmt.Sprintf("lockd:c%d", members)
	}
	defer side.stop()
	pids := side.pids()
	maxChanges := int(float64(*flRate)*flDuration.Seconds()*1.2) + 100
	t := newTally(n, maxChanges)

	// Raw sockets read by --readers epoll loops, each on its own thread: a
	// goroutine per connection costs this process more CPU per notification
	// than the server spends sending it (measured: 13 us against 9 us).
	fds := make([]int, n)
	for i := range fds {
		a := side.watchAt[i%len(side.watchAt)]
		host, ps, _ := net.SplitHostPort(a)
		port, _ := strconv.Atoi(ps)
		sa := &syscall.SockaddrInet4{Port: port}
		copy(sa.Addr[:], net.ParseIP(host).To4())
		fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("watcher %d: socket: %v", i, err)
		}
		if err := syscall.Connect(fd, sa); err != nil {
			return nil, fmt.Errorf("watcher %d: connect: %v", i, err)
		}
		syscall.SetsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1)
		fds[i] = fd
	}
	defer func() {
		for _, fd := range fds {
			syscall.Close(fd)
		}
	}()
	// One idle request each ("U key" answers "U key" and watches nothing),
	// so the server has accepted and set up every connection.
	if err := requestAll(fds, "U "+key+"\n", "U "); err != nil {
		return nil, err
	}
	idle := settledRSSSum(pids)
	if err := requestAll(fds, "W "+key+"\n", "W "); err != nil {
		return nil, err
	}
	watching := settledRSSSum(pids)

	var stop atomic.Bool
	var wg sync.WaitGroup
	nr := *flReaders
	for k := 0; k < nr; k++ {
		var mine []int
		for i := k; i < n; i += nr {
			mine = append(mine, fds[i])
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := epollReader(mine, t, &stop); err != nil {
				fmt.Fprintf(os.Stderr, "fanout: reader: %v\n", err)
			}
		}()
	}

	m, err := measureChanges(pids, t, func() (int, error) { return writeChanges(side.writeAt, t, maxChanges) })
	if err != nil {
		return nil, err
	}
	stop.Store(true)
	wg.Wait()
	return summarize(t, name, r, n, n, m, idle, watching), nil
}

// runLockdGo: the watchers are Watch()es of lockd's Go client library
// (clients/go), conns Clients with watchers/conns Watch()es each, as one
// process with many watchers would use it: a Client serves all its watches
// on its one connection, the server pushes a change once per connection
// (§5c: a key watched twice on one connection is watched once) and the
// library hands it to each Watch of the key. A notification is delivered
// when a Watch's States() channel yields it to its reader goroutine.
func runLockdGo(dir string, r int, conns int) (*round, error) {
	n := *flWatchers
	if conns <= 0 || n%conns != 0 {
		return nil, fmt.Errorf("lockd:go: %d watchers do not divide into %d connections", n, conns)
	}
	srv, err := startLockd(dir, n)
	if err != nil {
		return nil, err
	}
	side := &lockdSide{cmds: []*exec.Cmd{srv.cmd}, watchAt: []string{srv.addr}, writeAt: srv.addr}
	defer side.stop()
	pids := side.pids()
	maxChanges := int(float64(*flRate)*flDuration.Seconds()*1.2) + 100
	t := newTally(n, maxChanges)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clients := make([]*lockdclient.Client, conns)
	for i := range clients {
		c, err := lockdclient.New(lockdclient.Options{Addresses: []string{srv.addr}})
		if err != nil {
			return nil, err
		}
		defer c.Close()
		clients[i] = c
	}
	// One idle request each ("R 1 idle" answers N), so every connection is
	// open and set up.
	if err := parallel(conns, func(i int) error {
		rep, err := clients[i].Do(ctx, lockdclient.Request{Verb: lockdclient.VerbRelease, Token: 1, Key: "idle"})
		if err == nil && rep.Kind != 'N' {
			err = fmt.Errorf("reply %q to R", rep.Kind)
		}
		return err
	}); err != nil {
		return nil, err
	}
	idle := settledRSSSum(pids)
	watches := make([]*lockdclient.Watch, n)
	if err := parallel(n, func(i int) error {
		w, err := clients[i%conns].Watch(ctx, key)
		watches[i] = w
		return err
	}); err != nil {
		return nil, err
	}
	watching := settledRSSSum(pids)
	var wg sync.WaitGroup
	for _, w := range watches {
		wg.Add(1)
		go func(w *lockdclient.Watch) {
			defer wg.Done()
			first := true
			for st := range w.States() {
				if first { // the W reply's state, from before the changes
					first = false
					continue
				}
				if st.Kind == "held" {
					t.saw(ownerIndex([]byte(st.Owner)))
				} else {
					atomic.AddInt64(&t.other, 1)
				}
			}
			if w.Err() != nil {
				atomic.AddInt64(&t.dropped, 1)
			}
		}(w)
	}

	m, err := measureChanges(pids, t, func() (int, error) { return writeChanges(side.writeAt, t, maxChanges) })
	if err != nil {
		return nil, err
	}
	for _, w := range watches {
		w.Close()
	}
	wg.Wait()
	return summarize(t, fmt.Sprintf("lockd:go:%d", conns), r, n, conns, m, idle, watching), nil
}

// window: what one round's change window measured.
type window struct {
	changes      int
	seconds      float64
	serverCPU    float64 // s, the server processes' utime+stime over the window and the settling
	generatorCPU float64 // s, this process's
}

// measureChanges: the writer's changes (write returns how many it made)
// and the wait for stragglers (settle), with the servers' and this
// process's CPU over both.
func measureChanges(pids []int, t *tally, write func() (int, error)) (window, error) {
	gen0, cpu0, w0 := cpuTicks(os.Getpid()), sumCPU(pids), time.Now()
	changes, err := write()
	if err != nil {
		return window{}, err
	}
	seconds := time.Since(w0).Seconds()
	settle(t, changes)
	return window{changes, seconds, sumCPU(pids) - cpu0, cpuTicks(os.Getpid()) - gen0}, nil
}

// writeChanges: one connection changes the key's holder --rate times a
// second for --duration ("R <token> k" and "A o<i> k" in one write); a
// change is decided when the A reply arrives. Returns the changes made.
func writeChanges(addr string, t *tally, maxChanges int) (int, error) {
	wc, err := net.Dial("tcp", addr)
	if err != nil {
		return 0, err
	}
	defer wc.Close()
	wr := bufio.NewReader(wc)
	changes := 0
	token := ""
	tick := time.NewTicker(time.Second / time.Duration(*flRate))
	defer tick.Stop()
	end := time.Now().Add(*flDuration)
	for time.Now().Before(end) && changes < maxChanges {
		<-tick.C
		var req string
		if token != "" {
			req = "R " + token + " " + key + "\n"
		}
		req += fmt.Sprintf("A o%d %s 600000\n", changes, key)
		if _, err := wc.Write([]byte(req)); err != nil {
			return changes, err
		}
		for {
			l, err := wr.ReadString('\n')
			if err != nil {
				return changes, fmt.Errorf("writer: %v", err)
			}
			if strings.HasPrefix(l, "A ") {
				t.decided[changes] = t.now()
				token = strings.Fields(l)[1]
				break
			}
			if !strings.HasPrefix(l, "R ") {
				return changes, fmt.Errorf("writer: unexpected %q", l)
			}
		}
		changes++
	}
	return changes, nil
}

// requestAll sends req on every (blocking) socket, then reads one reply line
// from each, which must start with want.
func requestAll(fds []int, req, want string) error {
	for i, fd := range fds {
		if _, err := syscall.Write(fd, []byte(req)); err != nil {
			return fmt.Errorf("watcher %d: write: %v", i, err)
		}
	}
	buf := make([]byte, 512)
	for i, fd := range fds {
		got := 0
		for got == 0 || buf[got-1] != '\n' {
			k, err := syscall.Read(fd, buf[got:])
			if err != nil || k <= 0 {
				return fmt.Errorf("watcher %d: read: %v", i, err)
			}
			got += k
		}
		if !strings.HasPrefix(string(buf[:got]), want) {
			return fmt.Errorf("watcher %d: reply %q", i, buf[:got])
		}
	}
	return nil
}

// epollReader reads the watchers' pushes until stop: level-triggered epoll,
// one read per ready socket, lines split by hand (a line cut by a read is
// kept for the next one).
func epollReader(fds []int, t *tally, stop *atomic.Bool) error {
	runtime.LockOSThread()
	ep, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return err
	}
	defer syscall.Close(ep)
	partial := make(map[int32][]byte)
	for _, fd := range fds {
		syscall.SetNonblock(fd, true)
		ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(fd)}
		if err := syscall.EpollCtl(ep, syscall.EPOLL_CTL_ADD, fd, &ev); err != nil {
			return err
		}
	}
	events := make([]syscall.EpollEvent, 1024)
	buf := make([]byte, 64<<10)
	heldTag := []byte(" held ")
	line := func(l []byte) {
		// V <key> <rev> held o<i> <token>
		if len(l) > 2 && l[0] == 'V' {
			if j := bytes.Index(l, heldTag); j >= 0 {
				rest := l[j+len(heldTag):]
				if sp := bytes.IndexByte(rest, ' '); sp > 0 {
					t.saw(ownerIndex(rest[:sp]))
					return
				}
			}
		}
		atomic.AddInt64(&t.other, 1)
	}
	for !stop.Load() {
		n, err := syscall.EpollWait(ep, events, 50)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		for _, ev := range events[:n] {
			fd := int(ev.Fd)
			k, err := syscall.Read(fd, buf)
			if err == syscall.EAGAIN {
				continue
			}
			if err != nil || k == 0 {
				atomic.AddInt64(&t.dropped, 1)
				syscall.EpollCtl(ep, syscall.EPOLL_CTL_DEL, fd, nil)
				continue
			}
			data := buf[:k]
			if p, ok := partial[ev.Fd]; ok {
				data = append(p, data...)
				delete(partial, ev.Fd)
			}
			for len(data) > 0 {
				nl := bytes.IndexByte(data, '\n')
				if nl < 0 {
					partial[ev.Fd] = append([]byte(nil), data...)
					break
				}
				line(data[:nl])
				data = data[nl+1:]
			}
		}
	}
	return nil
}

// settle: wait until every change reached every watcher, or --settle passed.
func settle(t *tally, changes int) {
	deadline := time.Now().Add(*flSettle)
	for time.Now().Before(deadline) {
		done := true
		for i := 0; i < changes; i++ {
			if atomic.LoadInt32(&t.counts[i]) < t.n {
				done = false
				break
			}
		}
		if done {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func summarize(t *tally, side string, r, n, conns int, m window, idle, watching int64) *round {
	changes, cpu, gen := m.changes, m.serverCPU, m.generatorCPU
	var lat []float64
	var delivered int64
	complete := 0
	for i := 0; i < changes; i++ {
		c := atomic.LoadInt32(&t.counts[i])
		delivered += int64(c)
		if c == t.n {
			complete++
			lat = append(lat, float64(atomic.LoadInt64(&t.lastNs[i])-t.decided[i])/1e6)
		}
	}
	res := &round{Side: side, Round: r, Watchers: n, Conns: conns, Changes: changes,
		ChangesPerS: float64(changes) / m.seconds, Delivered: delivered, Expected: int64(n) * int64(changes),
		Complete: complete, OtherPushes: atomic.LoadInt64(&t.other), Dropped: atomic.LoadInt64(&t.dropped),
		P50ms: percentile(lat, 0.50), P99ms: percentile(lat, 0.99), Maxms: percentile(lat, 1.0),
		ServerCPUs: cpu, IdleRSS: idle, WatchRSS: watching, GenCPUs: gen, WindowS: m.seconds, Load1: loadavg()}
	if delivered > 0 {
		res.NsPerNotif = cpu * 1e9 / float64(delivered)
	}
	res.BytesPerW = float64(watching-idle) / float64(n)
	res.GenCorePct = 100 * gen / m.seconds
	return res
}

// parallel runs f(0..n-1), 64 at a time; the first error.
func parallel(n int, f func(i int) error) error {
	var mu sync.Mutex
	var first error
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			if err := f(i); err != nil {
				mu.Lock()
				if first == nil {
					first = fmt.Errorf("%d: %v", i, err)
				}
				mu.Unlock()
			}
		}(i)
	}
	wg.Wait()
	return first
}

// ---- etcd: gRPC by hand ------------------------------------------------------

func pbVarint(b []byte, v uint64) []byte { return binary.AppendUvarint(b, v) }
func pbBytes(b []byte, field int, v []byte) []byte {
	b = pbVarint(b, uint64(field<<3|2))
	b = pbVarint(b, uint64(len(v)))
	return append(b, v...)
}

// grpcFrame: uncompressed length-prefixed message.
func grpcFrame(msg []byte) []byte {
	out := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(out[1:], uint32(len(msg)))
	return append(out, msg...)
}

// pbFields calls f(field, wiretype, varint, bytes) for each field of m.
func pbFields(m []byte, f func(field int, wt int, v uint64, b []byte)) error {
	for len(m) > 0 {
		tag, n := binary.Uvarint(m)
		if n <= 0 {
			return errors.New("bad tag")
		}
		m = m[n:]
		field, wt := int(tag>>3), int(tag&7)
		switch wt {
		case 0:
			v, n := binary.Uvarint(m)
			if n <= 0 {
				return errors.New("bad varint")
			}
			m = m[n:]
			f(field, wt, v, nil)
		case 2:
			l, n := binary.Uvarint(m)
			if n <= 0 || int(l) > len(m)-n {
				return errors.New("bad length")
			}
			f(field, wt, 0, m[n:n+int(l)])
			m = m[n+int(l):]
		case 1:
			m = m[8:]
		case 5:
			m = m[4:]
		default:
			return fmt.Errorf("wire type %d", wt)
		}
	}
	return nil
}

func h2client() *http.Client {
	return &http.Client{Transport: &http2.Transport{
		AllowHTTP: true,
		DialTLS: func(network, addr string, _ *tls.Config) (net.Conn, error) {
			return net.Dial(network, addr)
		},
	}}
}

func grpcRead(rd io.Reader, hdr []byte) ([]byte, error) {
	if _, err := io.ReadFull(rd, hdr[:5]); err != nil {
		return nil, err
	}
	msg := make([]byte, binary.BigEndian.Uint32(hdr[1:5]))
	_, err := io.ReadFull(rd, msg)
	return msg, err
}

func etcdPut(c *http.Client, base string, value string) error {
	var m []byte
	m = pbBytes(m, 1, []byte(key))
	m = pbBytes(m, 2, []byte(value))
	return etcdUnary(c, base+"/etcdserverpb.KV/Put", m)
}

// etcdRange: a read of the key (no disk write), to open a connection.
func etcdRange(c *http.Client, base string) error {
	return etcdUnary(c, base+"/etcdserverpb.KV/Range", pbBytes(nil, 1, []byte(key)))
}

func etcdUnary(c *http.Client, url string, m []byte) error {
	req, _ := http.NewRequest("POST", url, bytes.NewReader(grpcFrame(m)))
	req.Header.Set("content-type", "application/grpc")
	req.Header.Set("te", "trailers")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if s := resp.Trailer.Get("grpc-status"); s != "0" && s != "" {
		return fmt.Errorf("put: grpc-status %s %s", s, resp.Trailer.Get("grpc-message"))
	}
	if s := resp.Header.Get("grpc-status"); s != "" && s != "0" {
		return fmt.Errorf("put: grpc-status %s %s", s, resp.Header.Get("grpc-message"))
	}
	return nil
}

type etcdServer struct {
	cmd  *exec.Cmd
	base string
}

func startEtcd(dir string) (*etcdServer, error) {
	cp, pp := freePort(), freePort()
	cu, pu := fmt.Sprintf("http://127.0.0.1:%d", cp), fmt.Sprintf("http://127.0.0.1:%d", pp)
	cmd := exec.Command(*flEtcd, "--name", "fan", "--data-dir", filepath.Join(dir, "etcd-data"),
		"--listen-client-urls", cu, "--advertise-client-urls", cu,
		"--listen-peer-urls", pu, "--initial-advertise-peer-urls", pu,
		"--initial-cluster", "fan="+pu, "--logger", "zap", "--log-level", "error")
	logf, err := os.Create(filepath.Join(dir, "etcd.log"))
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &etcdServer{cmd: cmd, base: cu}
	c := h2client()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if err := etcdPut(c, cu, "init"); err == nil {
			return s, nil
		} else if time.Now().After(deadline) {
			cmd.Process.Kill()
			return nil, fmt.Errorf("etcd not ready: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

type etcdStream struct {
	pw   *io.PipeWriter
	body io.ReadCloser
	rd   *bufio.Reader
}

// openWatchStream opens a Watch stream with k watches of the key on it.
func openWatchStream(c *http.Client, base string, k int) (*etcdStream, error) {
	pr, pw := io.Pipe()
	req, _ := http.NewRequest("POST", base+"/etcdserverpb.Watch/Watch", pr)
	req.Header.Set("content-type", "application/grpc")
	req.Header.Set("te", "trailers")
	s := &etcdStream{pw: pw}
	type rr struct {
		r *http.Response
		e error
	}
	ch := make(chan rr, 1)
	go func() { r, e := c.Do(req); ch <- rr{r, e} }()
	return s, func() error {
		// a create must go out before the server sends headers
		if err := s.create(k); err != nil {
			return err
		}
		x := <-ch
		if x.e != nil {
			return x.e
		}
		s.body = x.r.Body
		s.rd = bufio.NewReaderSize(x.r.Body, 64<<10)
		return s.waitCreated(k)
	}()
}

func (s *etcdStream) create(k int) error {
	var m []byte
	m = pbBytes(m, 1, []byte(key))
	var w []byte
	w = pbBytes(w, 1, m)
	f := grpcFrame(w)
	buf := make([]byte, 0, len(f)*k)
	for i := 0; i < k; i++ {
		buf = append(buf, f...)
	}
	_, err := s.pw.Write(buf)
	return err
}

// waitCreated reads k "created" responses.
func (s *etcdStream) waitCreated(k int) error {
	hdr := make([]byte, 5)
	for k > 0 {
		msg, err := grpcRead(s.rd, hdr)
		if err != nil {
			return err
		}
		created := false
		pbFields(msg, func(f, wt int, v uint64, b []byte) {
			if f == 3 && v == 1 {
				created = true
			}
		})
		if created {
			k--
		}
	}
	return nil
}

func runEtcd(dir string, r int, nc int) (*round, error) {
	n := *flWatchers
	if nc < 1 || nc > n {
		return nil, fmt.Errorf("etcd: %d connections for %d watchers", nc, n)
	}
	srv, err := startEtcd(dir)
	if err != nil {
		return nil, err
	}
	defer func() { srv.cmd.Process.Kill(); srv.cmd.Wait() }()
	pid := srv.cmd.Process.Pid
	maxChanges := int(float64(*flRate)*flDuration.Seconds()*1.2) + 100
	t := newTally(n, maxChanges)

	// Idle: nc HTTP/2 connections, each opened by one Range. Then one Watch
	// stream on each, with N/nc watches of the key.
	clients := make([]*http.Client, nc)
	if err := parallel(nc, func(i int) error {
		clients[i] = h2client()
		return etcdRange(clients[i], srv.base)
	}); err != nil {
		return nil, err
	}
	idle := settledRSS(pid)
	per := make([]int, nc)
	for i := 0; i < n; i++ {
		per[i%nc]++
	}
	streams := make([]*etcdStream, nc)
	if err := parallel(nc, func(i int) error {
		s, err := openWatchStream(clients[i], srv.base, per[i])
		streams[i] = s
		return err
	}); err != nil {
		return nil, err
	}
	watching := settledRSS(pid)

	var wg sync.WaitGroup
	var closing atomic.Bool
	for _, s := range streams {
		wg.Add(1)
		go func(s *etcdStream) {
			defer wg.Done()
			hdr := make([]byte, 5)
			for {
				msg, err := grpcRead(s.rd, hdr)
				if err != nil {
					if !closing.Load() {
						atomic.AddInt64(&t.dropped, 1)
					}
					return
				}
				pbFields(msg, func(f, wt int, v uint64, ev []byte) {
					if f != 11 {
						return
					}
					idx := -1
					pbFields(ev, func(f, wt int, v uint64, kv []byte) {
						if f != 2 {
							return
						}
						pbFields(kv, func(f, wt int, v uint64, val []byte) {
							if f == 5 {
								idx = ownerIndex(val)
							}
						})
					})
					t.saw(idx)
				})
			}
		}(s)
	}

	wcl := h2client()
	m, err := measureChanges([]int{pid}, t, func() (int, error) {
		changes := 0
		tick := time.NewTicker(time.Second / time.Duration(*flRate))
		defer tick.Stop()
		end := time.Now().Add(*flDuration)
		for time.Now().Before(end) && changes < maxChanges {
			<-tick.C
			if err := etcdPut(wcl, srv.base, fmt.Sprintf("o%d", changes)); err != nil {
				return changes, err
			}
			t.decided[changes] = t.now()
			changes++
		}
		return changes, nil
	})
	if err != nil {
		return nil, err
	}
	closing.Store(true)
	for _, s := range streams {
		s.pw.Close()
		s.body.Close()
	}
	wg.Wait()
	return summarize(t, fmt.Sprintf("etcd:%d", nc), r, n, nc, m, idle, watching), nil
}

func main() {
	flag.Parse()
	var lim syscall.Rlimit
	syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
	lim.Cur = lim.Max
	syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	if lim.Cur < uint64(*flWatchers)+200 {
		fmt.Fprintf(os.Stderr, "fanout: open-file limit %d is below %d watchers\n", lim.Cur, *flWatchers)
		os.Exit(2)
	}
	tmp := *flTmp
	if tmp == "" {
		var err error
		tmp, err = os.MkdirTemp("", "fanout-")
		if err != nil {
			panic(err)
		}
		defer os.RemoveAll(tmp)
	}
	var all []*round
	sides := strings.Split(*flSides, ",")
	for r := 1; r <= *flRounds; r++ {
		for _, side := range sides {
			dir := filepath.Join(tmp, fmt.Sprintf("%s-%d", side, r))
			os.MkdirAll(dir, 0o700)
			var res *round
			var err error
			switch {
			case side == "lockd":
				res, err = runLockd(dir, r, 0)
			case side == "lockd:c3":
				res, err = runLockd(dir, r, 3)
			case strings.HasPrefix(side, "lockd:go:"):
				nc, _ := strconv.Atoi(side[9:])
				res, err = runLockdGo(dir, r, nc)
			case side == "etcd":
				res, err = runEtcd(dir, r, *flEtcdConns)
			case strings.HasPrefix(side, "etcd:"):
				nc, _ := strconv.Atoi(side[5:])
				res, err = runEtcd(dir, r, nc)
			default:
				err = fmt.Errorf("unknown side %q", side)
			}
			if err != nil {
				fmt.Fprintf(os.Stderr, "fanout: %s round %d: %v\n", side, r, err)
				os.Exit(1)
			}
			all = append(all, res)
			fmt.Printf("%-10s r%d: %d watchers/%d conns, %d changes (%.1f/s), delivered %d/%d (all: %d changes), other %d, dropped %d; "+
				"last-watcher latency p50 %.2f ms p99 %.2f ms max %.2f ms; server CPU %.2f s = %.0f ns/notification; "+
				"RSS idle %.1f MB, watching %.1f MB = %.0f B/watch; generator %.0f%% of a core; load %s\n",
				res.Side, r, res.Watchers, res.Conns, res.Changes, res.ChangesPerS, res.Delivered, res.Expected, res.Complete,
				res.OtherPushes, res.Dropped, res.P50ms, res.P99ms, res.Maxms, res.ServerCPUs, res.NsPerNotif,
				float64(res.IdleRSS)/1e6, float64(res.WatchRSS)/1e6, res.BytesPerW, res.GenCorePct, res.Load1)
			runtime.GC()
		}
	}
	if *flJSON != "" {
		b, _ := json.MarshalIndent(all, "", "  ")
		os.WriteFile(*flJSON, b, 0o644)
	}
}
