package lockd

// The pure parts: request lines and validation, reply parsing, matching.

import (
	"errors"
	"testing"
)

func TestRequestLines(t *testing.T) {
	for _, c := range []struct {
		r    Request
		want string
	}{
		{Request{Verb: VerbAcquire, Owner: "o", Key: "k"}, "A o k\n"},
		{Request{Verb: VerbAcquire, Owner: "o", Key: "k", LeaseMS: 100, WaitMS: 5}, "A o k 100 5\n"},
		{Request{Verb: VerbShared, Owner: "o", Key: "k"}, "S o k 0\n"},
		{Request{Verb: VerbShared, Owner: "o", Key: "k", Limit: 8, LeaseMS: 100}, "S o k 8 100\n"},
		{Request{Verb: VerbRelease, Token: 7, Key: "k"}, "R 7 k\n"},
		{Request{Verb: VerbKeep, Token: 7, Key: "k", LeaseMS: 300}, "K 7 k 300\n"},
	} {
		if err := c.r.Validate(); err != nil {
			t.Errorf("%q: %v", c.want, err)
		}
		if got := c.r.Line(); got != c.want {
			t.Errorf("got %q, want %q", got, c.want)
		}
	}
}

func TestValidateRefusesBeforeSending(t *testing.T) {
	long := make([]byte, 251)
	for i := range long {
		long[i] = 'k'
	}
	for _, r := range []Request{
		{Verb: VerbAcquire, Owner: "has space", Key: "k"},
		{Verb: VerbAcquire, Owner: "o", Key: string(long)},
		{Verb: VerbAcquire, Owner: "o", Key: "k", WaitMS: 10},
		{Verb: VerbShared, Owner: "o", Key: "k", Limit: 65536},
		{Verb: VerbRelease, Key: "k"},
		{Verb: VerbKeep, Token: 1, Key: "k"},
		{Verb: 'X', Owner: "o", Key: "k"},
	} {
		if err := r.Validate(); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%+v: got %v", r, err)
		}
	}
}

func TestParseReply(t *testing.T) {
	r, err := ParseReply("S 18446744073709551615 o k\r")
	if err != nil || r.Kind != 'S' || r.Token != 18446744073709551615 || r.Owner != "o" || r.Key != "k" {
		t.Fatalf("%+v %v", r, err)
	}
	if r, _ := ParseReply("M 10.0.0.2:7070 5 k"); r.Leader != "10.0.0.2:7070" || r.EchoFirst != "5" {
		t.Errorf("%+v", r)
	}
	if r, _ := ParseReply("E bad_lease"); r.Code != "bad_lease" || r.Key != "" {
		t.Errorf("%+v", r)
	}
	if r, _ := ParseReply("V k 7 held o 42"); !r.isPush() || r.State != (KeyState{Key: "k", Rev: 7, Kind: "held", Owner: "o", Token: 42}) {
		t.Errorf("%+v", r)
	}
	if r, _ := ParseReply("W k 3 shared 2 1"); r.Kind != 'W' || r.State.Limit != 2 || r.State.Count != 1 || r.Key != "k" {
		t.Errorf("%+v", r)
	}
	if r, _ := ParseReply("E forbidden k"); r.Key != "k" || r.EchoFirst != "" {
		t.Errorf("%+v", r)
	}
	for _, bad := range []string{"", "Z 1 k", "X 0 k", "V k 0 free", "V k 1 held o", "W k 1 shared 0 0", "U", "A 0 o k", "A +1 o k", "A 1 o", "R 1", "E", "AA 1 o k",
		"A 18446744073709551616 o k", "S 1 o"} {
		if _, err := ParseReply(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func reply(t *testing.T, line string) Reply {
	r, err := ParseReply(line)
	if err != nil {
		t.Fatalf("%q: %v", line, err)
	}
	return r
}

func TestMatcherPairsRepliesByEcho(t *testing.T) {
	m := newMatcher()
	m.add(1, Request{Verb: VerbShared, Owner: "a", Key: "k", LeaseMS: 100, WaitMS: 5000})
	m.add(2, Request{Verb: VerbAcquire, Owner: "b", Key: "k2", LeaseMS: 100})
	m.add(3, Request{Verb: VerbKeep, Token: 9, Key: "k", LeaseMS: 100})
	m.add(4, Request{Verb: VerbRelease, Token: 9, Key: "k"})
	if !m.busy(Request{Verb: VerbAcquire, Owner: "a", Key: "k"}) {
		t.Error("an A and an S of one owner and key share one echo")
	}
	for _, c := range []struct {
		line string
		id   uint64
	}{{"A 11 b k2", 2}, {"R 9 k", 4}, {"N 9 k", 3}, {"S 12 a k", 1}} {
		if id, ok := matchOne(m, reply(t, c.line)); !ok || id != c.id {
			t.Errorf("%q: got %d %v, want %d", c.line, id, ok, c.id)
		}
	}
	if _, ok := m.match(reply(t, "A 13 a k")); ok {
		t.Error("matched with nothing in flight")
	}
	// E without echo: the one request that could have drawn it.
	m.add(5, Request{Verb: VerbShared, Owner: "c", Key: "k", Limit: 2, LeaseMS: 100, WaitMS: 50})
	m.add(6, Request{Verb: VerbRelease, Token: 5, Key: "x"})
	m.add(7, Request{Verb: VerbAcquire, Owner: "d", Key: "k", LeaseMS: 5000})
	for _, c := range []struct {
		line string
		id   uint64
	}{{"E bad_limit", 5}, {"E limit_mismatch 5 x", 6}, {"E bad_lease", 7}} {
		if id, ok := matchOne(m, reply(t, c.line)); !ok || id != c.id {
			t.Errorf("%q: got %d %v, want %d", c.line, id, ok, c.id)
		}
	}
	if m.inFlight() != 0 {
		t.Errorf("%d left", m.inFlight())
	}
}
