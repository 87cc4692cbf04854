package lockd

// The client side of lockd's text protocol (protocol.md), as pure code:
// requests to lines, reply lines to values. No I/O.

import (
	"errors"
	"net"
	"strconv"
	"strings"
	"time"
)

// Field limits of protocol.md §2, checked before a request is sent so a
// malformed request (whose E reply carries no echo) is never on the wire.
const (
	MaxOwnerBytes = 64
	MaxKeyBytes   = 250
	// MaxLimit is the largest limit of a shared acquire; 0 means no cap.
	MaxLimit = 65535
	// MaxCredentialBytes is the longest credential H carries (v1.2, §11).
	MaxCredentialBytes = 512
	// maxReplyLine is the longest reply line accepted (an M carries an
	// address and the longest echo); longer is a protocol error.
	maxReplyLine = 1024
)

// Verb is a request's first field.
type Verb byte

const (
	VerbAcquire Verb = 'A' // A owner key [lease_ms [wait_ms]]
	VerbRelease Verb = 'R' // R token key
	VerbKeep    Verb = 'K' // K token key lease_ms (v1.1)
	VerbShared  Verb = 'S' // S owner key limit [lease_ms [wait_ms]] (v1.2)
	VerbWatch   Verb = 'W' // W key (v1.3): the key's state now, then V pushes
	VerbUnwatch Verb = 'U' // U key (v1.3): stop the pushes
)

// isWatch is true for W and U: their replies echo only the key.
func (v Verb) isWatch() bool { return v == VerbWatch || v == VerbUnwatch }

// isAcquire is true for the verbs that ask for a grant: they carry an
// owner, may wait, and are answered by A/S/T/B echoing "owner key".
func (v Verb) isAcquire() bool { return v == VerbAcquire || v == VerbShared }

// Request is one request line.
type Request struct {
	Verb    Verb
	Owner   string // A and S
	Key     string
	Token   uint64 // R and K
	LeaseMS uint64 // A, S: 0 = the server's default lease; K: required (>= 1)
	WaitMS  uint64 // A and S
	Limit   uint32 // S only: 0 = a read lock, N = a semaphore of N permits
}

func visible(s string, max int) bool {
	if len(s) == 0 || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// Validate says why the protocol would refuse the request (an error
// wrapping ErrInvalidArgument), or nil.
func (r Request) Validate() error {
	bad := func(msg string) error { return &invalidError{msg} }
	switch r.Verb {
	case VerbAcquire, VerbShared, VerbRelease, VerbKeep:
	case VerbWatch, VerbUnwatch:
		if !visible(r.Key, MaxKeyBytes) {
			return bad("key must be 1..250 visible ASCII bytes without spaces")
		}
		return nil
	default:
		return bad("verb must be A, S, R, K, W or U")
	}
	if r.Verb.isAcquire() && !visible(r.Owner, MaxOwnerBytes) {
		return bad("owner must be 1..64 visible ASCII bytes without spaces")
	}
	if !r.Verb.isAcquire() && r.Token == 0 {
		return bad("token must be 1 or more")
	}
	if !visible(r.Key, MaxKeyBytes) {
		return bad("key must be 1..250 visible ASCII bytes without spaces")
	}
	if r.Verb == VerbShared && r.Limit > MaxLimit {
		return bad("limit must be 0..65535 (0: no cap)")
	}
	if r.Verb == VerbKeep && r.LeaseMS == 0 {
		return bad("keep needs a lease of 1 ms or more")
	}
	if r.Verb.isAcquire() && r.LeaseMS == 0 && r.WaitMS != 0 {
		return bad("a wait needs an explicit lease (the protocol puts lease before wait)")
	}
	return nil
}

// Line is the request line, ending in "\n". The request must be valid.
func (r Request) Line() string {
	var b strings.Builder
	b.WriteByte(byte(r.Verb))
	b.WriteByte(' ')
	if r.Verb.isWatch() {
		b.WriteString(r.Key)
	} else if r.Verb.isAcquire() {
		b.WriteString(r.Owner)
		b.WriteByte(' ')
		b.WriteString(r.Key)
		if r.Verb == VerbShared {
			b.WriteByte(' ')
			b.WriteString(strconv.FormatUint(uint64(r.Limit), 10))
		}
		if r.LeaseMS != 0 {
			b.WriteByte(' ')
			b.WriteString(strconv.FormatUint(r.LeaseMS, 10))
			if r.WaitMS != 0 {
				b.WriteByte(' ')
				b.WriteString(strconv.FormatUint(r.WaitMS, 10))
			}
		}
	} else {
		b.WriteString(strconv.FormatUint(r.Token, 10))
		b.WriteByte(' ')
		b.WriteString(r.Key)
		if r.Verb == VerbKeep {
			b.WriteByte(' ')
			b.WriteString(strconv.FormatUint(r.LeaseMS, 10))
		}
	}
	b.WriteByte('\n')
	return b.String()
}

// echo is the echo the request's replies carry, tagged by kind. A and S
// share one ("A owner key"): their T and B replies look the same.
func (r Request) echo() string {
	if r.Verb.isWatch() {
		return "W " + r.Key
	}
	if r.Verb.isAcquire() {
		return "A " + r.Owner + " " + r.Key
	}
	return "T " + strconv.FormatUint(r.Token, 10) + " " + r.Key
}

// Reply is one parsed line from the server. Which fields are set depends
// on Kind; M and E keep their echo raw (EchoFirst, Key): it is "owner key"
// for an acquire, "token key" for a release or keep, and "key" alone (EchoFirst
// "") for a W or U, as is a B to a W. V and X are pushes (protocol.md §5c),
// never replies.
type Reply struct {
	Kind      byte     // A S T B R N K M E H W U, and the pushes V X
	Token     uint64   // A, S, R, N, K, X
	Owner     string   // A, S, T, B (B to a W: "")
	Key       string   // every kind with an echo
	EchoFirst string   // M, E: the first echo field, "" if none or the echo is a key alone
	Leader    string   // M: the leader's client host:port
	Code      string   // E: no_leader, indeterminate, bad_lease ...
	Identity  string   // H: the identity the connection is authenticated as
	State     KeyState // W, V: the key's state

	arrived time.Time // when the connection read it
}

// KeyState is who holds a key (protocol.md §5c), as a W reply or a V push
// tells it. Rev grows with every change; a state with a Rev not above one
// already seen is older and is dropped.
type KeyState struct {
	Key   string
	Rev   uint64
	Kind  string // "free", "held" or "shared"
	Owner string // held: the holder's owner label
	Token uint64 // held: the holder's fencing token
	Limit uint32 // shared: the key's limit
	Count uint32 // shared: how many hold it
}

// isPush is true for V and X: lines the server sends on its own.
func (r Reply) isPush() bool { return r.Kind == 'V' || r.Kind == 'X' }

// parseState parses "<key> <rev> <state...>" of a W reply or a V push.
func parseState(f []string) (KeyState, bool) {
	if len(f) < 3 {
		return KeyState{}, false
	}
	st := KeyState{Key: f[0], Kind: f[2]}
	var ok bool
	if st.Rev, ok = ParseToken(f[1]); !ok {
		return KeyState{}, false
	}
	switch {
	case st.Kind == "free" && len(f) == 3:
	case st.Kind == "held" && len(f) == 5:
		st.Owner = f[3]
		if st.Token, ok = ParseToken(f[4]); !ok {
			return KeyState{}, false
		}
	case st.Kind == "shared" && len(f) == 5:
		l, err1 := strconv.ParseUint(f[3], 10, 16)
		n, err2 := strconv.ParseUint(f[4], 10, 32)
		if err1 != nil || err2 != nil || n == 0 {
			return KeyState{}, false
		}
		st.Limit, st.Count = uint32(l), uint32(n)
	default:
		return KeyState{}, false
	}
	return st, true
}

// isGrant is true for A and S: the server granted the key (and a token).
func (r Reply) isGrant() bool { return r.Kind == 'A' || r.Kind == 'S' }

// ParseToken parses a decimal token 1..2^64-1.
func ParseToken(s string) (uint64, bool) {
	if s == "" || s[0] == '+' || s[0] == '-' {
		return 0, false
	}
	v, err := strconv.ParseUint(s, 10, 64)
	return v, err == nil && v != 0
}

var errBadReply = errors.New("not a protocol reply")

// ParseReply parses one reply line (without "\n"; a trailing "\r" is ignored).
func ParseReply(line string) (Reply, error) {
	f := strings.Fields(strings.TrimSuffix(line, "\r"))
	if len(f) == 0 || len(f[0]) != 1 {
		return Reply{}, errBadReply
	}
	r := Reply{Kind: f[0][0]}
	var ok bool
	switch r.Kind {
	case 'A', 'S':
		if len(f) != 4 {
			return Reply{}, errBadReply
		}
		if r.Token, ok = ParseToken(f[1]); !ok {
			return Reply{}, errBadReply
		}
		r.Owner, r.Key = f[2], f[3]
	case 'T', 'B':
		switch {
		case len(f) == 3:
			r.Owner, r.Key = f[1], f[2]
		case len(f) == 2 && r.Kind == 'B': // B <key>: a W past a watch limit
			r.Key = f[1]
		default:
			return Reply{}, errBadReply
		}
	case 'W', 'V':
		if r.State, ok = parseState(f[1:]); !ok {
			return Reply{}, errBadReply
		}
		r.Key = r.State.Key
	case 'U':
		if len(f) != 2 {
			return Reply{}, errBadReply
		}
		r.Key = f[1]
	case 'R', 'N', 'K', 'X':
		if len(f) != 3 {
			return Reply{}, errBadReply
		}
		if r.Token, ok = ParseToken(f[1]); !ok {
			return Reply{}, errBadReply
		}
		r.Key = f[2]
	case 'H':
		if len(f) != 2 {
			return Reply{}, errBadReply
		}
		r.Identity = f[1]
	case 'M':
		if len(f) != 4 {
			return Reply{}, errBadReply
		}
		r.Leader, r.EchoFirst, r.Key = f[1], f[2], f[3]
	case 'E':
		if len(f) < 2 || len(f) > 4 {
			return Reply{}, errBadReply
		}
		r.Code = f[1]
		if len(f) == 4 {
			r.EchoFirst, r.Key = f[2], f[3]
		} else if len(f) == 3 { // the echo of a W or U: the key alone
			r.Key = f[2]
		}
	default:
		return Reply{}, errBadReply
	}
	return r, nil
}

// validAddress is true for host:port with a port in 1..65535 (IPv6 as [::1]:7070).
func validAddress(s string) bool {
	host, port, err := net.SplitHostPort(s)
	if err != nil || host == "" {
		return false
	}
	p, err := strconv.ParseUint(port, 10, 16)
	return err == nil && p != 0
}
