package lockd

// examples/leader_election/go, run exactly as docs/clients.md shows
// (`go run . -addr ... -key ... -name ... -hold ...`) against a real lockd:
// two candidates, one leads, resigns, and the other takes over.

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestLeaderElectionExampleRuns(t *testing.T) {
	d := single(t, "")
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	dir, _ := filepath.Abs("../../examples/leader_election/go")
	// Compile once (the two runs then start at once).
	build := exec.Command(goBin, "build", "-o", filepath.Join(t.TempDir(), "leader_election"), ".")
	build.Dir = dir
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	run := func(name, hold string) (*exec.Cmd, *lockedBuffer) {
		cmd := exec.Command(goBin, "run", ".", "-addr", d.addr(), "-key", "leader/demo", "-name", name, "-hold", hold, "-lease", "2s")
		cmd.Dir = dir
		out := &lockedBuffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill() })
		return cmd, out
	}
	a, aOut := run("node-a", "6s")
	if !eventually(t, 60*time.Second, func() bool { return strings.Contains(aOut.String(), "node-a: leading with token") }) {
		t.Fatalf("node-a never led:\n%s", aOut.String())
	}
	b, bOut := run("node-b", "500ms")
	if !eventually(t, 60*time.Second, func() bool { return strings.Contains(bOut.String(), "node-b: campaigning") }) {
		t.Fatalf("node-b never campaigned:\n%s", bOut.String())
	}
	// node-b sees node-a lead while it waits (Observe, a real W/V).
	if !eventually(t, 30*time.Second, func() bool { return strings.Contains(bOut.String(), "node-b: node-a leads leader/demo") }) {
		t.Fatalf("node-b never saw node-a lead:\n%s", bOut.String())
	}
	if strings.Contains(bOut.String(), "node-b: leading") && !strings.Contains(aOut.String(), "resigned") {
		t.Fatalf("two leaders:\n%s\n%s", aOut.String(), bOut.String())
	}
	if err := a.Wait(); err != nil {
		t.Fatalf("node-a: %v\n%s", err, aOut.String())
	}
	if err := b.Wait(); err != nil {
		t.Fatalf("node-b: %v\n%s", err, bOut.String())
	}
	if i, j := strings.Index(bOut.String(), "node-a leads"), strings.Index(bOut.String(), "node-b: leading"); i < 0 || j < i {
		t.Errorf("node-b led before node-a resigned:\n%s", bOut.String())
	}
	for _, want := range []string{"node-a: resigned", "node-b: leading with token", "node-b: resigned"} {
		if !strings.Contains(aOut.String()+bOut.String(), want) {
			t.Errorf("no %q in\n%s\n%s", want, aOut.String(), bOut.String())
		}
	}
	t.Logf("node-a:\n%snode-b:\n%s", aOut.String(), bOut.String())
}
