package lockd

// Every outcome a caller may act on is an error value to test with
// errors.Is. Outcomes that carry detail are types whose Is() names the
// sentinel, so errors.Is(err, ErrIndeterminate) and
// errors.Is(err, context.DeadlineExceeded) can both hold for one error.

import (
	"errors"
	"fmt"
)

var (
	// ErrTimedOut is T: the key is held by someone else (wait 0), or the wait ran out.
	ErrTimedOut = errors.New("lockd: timed out: not granted")
	// ErrBusy is B: the key's wait queue or a server-wide cap is full; not enqueued.
	ErrBusy = errors.New("lockd: busy: the key's wait queue or a server cap is full")
	// ErrNotHeld is N: the token does not hold the key (lease ended, released, moved on).
	ErrNotHeld = errors.New("lockd: not held")
	// ErrIndeterminate means the request may or may not have taken effect:
	// E indeterminate, the connection dropped after sending, no reply in
	// time, or the context ended while the request was out. For an
	// acquire: you hold no lock you can use (you have no token).
	ErrIndeterminate = errors.New("lockd: indeterminate: the request may or may not have taken effect")
	// ErrNoLeader means no leader was found (E no_leader, redirects) within the retry budget.
	ErrNoLeader = errors.New("lockd: no leader")
	// ErrUnreachable means no address could be connected to; nothing was sent.
	ErrUnreachable = errors.New("lockd: unreachable")
	// ErrLimitMismatch is E limit_mismatch: a shared acquire's limit differs
	// from the one the key's shared holders and waiters carry.
	ErrLimitMismatch = errors.New("lockd: limit mismatch")
	// ErrInvalidArgument means the request was refused before sending.
	ErrInvalidArgument = errors.New("lockd: invalid argument")
	// ErrProtocol means the server sent a line this client does not understand.
	ErrProtocol = errors.New("lockd: protocol error")
	// ErrLost means the keeper could not keep the lock: its token is dead.
	ErrLost = errors.New("lockd: lock lost")
	// ErrClosed means the client was closed.
	ErrClosed = errors.New("lockd: client closed")
	// ErrUnauthenticated means the server requires authentication and this
	// connection has none: E unauthenticated to a request (no Credential
	// set), or the server refused the Credential (protocol.md §11).
	ErrUnauthenticated = errors.New("lockd: unauthenticated")
	// ErrForbidden is E forbidden: the connection's identity may not use
	// this verb on this key (the server's ACL).
	ErrForbidden = errors.New("lockd: forbidden")
)

// RejectedError is an E for a bad field (bad_lease, bad_wait ...): the
// server refused the request as invalid.
type RejectedError struct{ Code string }

func (e *RejectedError) Error() string { return "lockd: rejected: E " + e.Code }

// Is makes errors.Is(err, ErrUnauthenticated) and errors.Is(err,
// ErrForbidden) hold for those codes.
func (e *RejectedError) Is(target error) bool {
	return (target == ErrUnauthenticated && e.Code == "unauthenticated") ||
		(target == ErrForbidden && e.Code == "forbidden")
}

// outcome is a sentinel with a reason, and optionally a cause (a context
// error, a network error) that errors.Is/As can reach.
type outcome struct {
	kind   error
	reason string
	cause  error
}

func (e *outcome) Error() string {
	if e.cause != nil {
		return fmt.Sprintf("%v: %s: %v", e.kind, e.reason, e.cause)
	}
	return fmt.Sprintf("%v: %s", e.kind, e.reason)
}
func (e *outcome) Is(target error) bool { return target == e.kind }
func (e *outcome) Unwrap() error        { return e.cause }

func fail(kind error, reason string) error { return &outcome{kind: kind, reason: reason} }
func failCause(kind error, reason string, cause error) error {
	return &outcome{kind: kind, reason: reason, cause: cause}
}

type invalidError struct{ msg string }

func (e *invalidError) Error() string        { return "lockd: invalid argument: " + e.msg }
func (e *invalidError) Is(target error) bool { return target == ErrInvalidArgument }
