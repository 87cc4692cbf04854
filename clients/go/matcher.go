package lockd

// matcher pairs replies with the pipelined requests they answer
// (protocol.md §1: a waiting acquire is answered later, so replies can
// arrive out of request order; the echoed fields tell them apart). Pure:
// every rule of matching lives here and is unit-tested without sockets.
//
//   - A/S/T/B and an M/E whose echo is "owner key" answer the acquire (A or
//     S) with that owner and key; only one may be in flight per owner and
//     key (two could not be told apart), so callers wait for the first.
//   - R/K/N and an M/E whose echo is "token key" answer the oldest release
//     or keep with that token and key (an R prefers a release, a K a keep).
//   - W/U, B <key> and an E whose echo is "key" answer the oldest watch or
//     unwatch of that key (a W prefers a W, a U an U).
//   - V and X are pushes, never replies: the connection routes them before
//     it asks the matcher (protocol.md §5c).
//   - An E without echo (a v1.2 server's E bad_lease/bad_wait/bad_limit; a
//     v1.3 server echoes them) is pinned on a request only when exactly one
//     request in flight could have drawn it. Otherwise it is held back: the
//     candidates become a group that expects one reply fewer than it has
//     members; each gets its own reply as it comes (they all echo), and once
//     all but one have, the E goes to the one left. A candidate whose caller
//     gives up first ends as ErrIndeterminate (its reply timeout), as any.
//     No request is ever given another's refusal, and the connection stays.

import (
	"container/list"
	"strconv"
)

// ghostGroup: candidates of a held-back echo-less E.
type ghostGroup struct {
	need int   // replies still to come to the group's members, the E aside
	e    Reply // the E, for the member left
}

// delivery is a reply for the request id.
type delivery struct {
	id    uint64
	reply Reply
}

type entry struct {
	id    uint64
	req   Request
	ghost *ghostGroup
}

type matcher struct {
	order  *list.List                 // of *entry, wire order
	byEcho map[string][]*list.Element // echo -> entries, oldest first
	// The largest lease and wait the server answered without refusal: a
	// request within them cannot have drawn an echo-less E bad_lease/bad_wait.
	okLease, okWait uint64
}

func newMatcher() *matcher {
	return &matcher{order: list.New(), byEcho: map[string][]*list.Element{}}
}

func (m *matcher) inFlight() int { return m.order.Len() }

// busy is true if an acquire with this owner and key is in flight.
func (m *matcher) busy(r Request) bool {
	return r.Verb.isAcquire() && len(m.byEcho[r.echo()]) > 0
}

func (m *matcher) add(id uint64, r Request) {
	el := m.order.PushBack(&entry{id: id, req: r})
	e := r.echo()
	m.byEcho[e] = append(m.byEcho[e], el)
}

func (m *matcher) remove(el *list.Element) {
	en := el.Value.(*entry)
	e := en.req.echo()
	els := m.byEcho[e]
	for i, x := range els {
		if x == el {
			els = append(els[:i:i], els[i+1:]...)
			break
		}
	}
	if len(els) == 0 {
		delete(m.byEcho, e)
	} else {
		m.byEcho[e] = els
	}
	m.order.Remove(el)
}

// take removes el, answered by r; the last reply a group waits for also
// gives the group's E to the member left (it drew it).
func (m *matcher) take(el *list.Element, r Reply) []delivery {
	en := el.Value.(*entry)
	m.remove(el)
	out := []delivery{{en.id, r}}
	if g := en.ghost; g != nil {
		if g.need--; g.need <= 0 {
			for x := m.order.Front(); x != nil; {
				nx := x.Next()
				if o := x.Value.(*entry); o.ghost == g {
					m.remove(x)
					out = append(out, delivery{o.id, g.e})
				}
				x = nx
			}
		}
	}
	return out
}

func (m *matcher) find(echo string, prefer Verb) *list.Element {
	els := m.byEcho[echo]
	if len(els) == 0 {
		return nil
	}
	for _, el := range els {
		if el.Value.(*entry).req.Verb == prefer {
			return el
		}
	}
	return els[0]
}

// couldDraw is true if q may be the request an echo-less E code answers.
func (m *matcher) couldDraw(code string, q Request) bool {
	switch code {
	case "bad_wait":
		return q.Verb.isAcquire() && q.WaitMS > m.okWait
	case "bad_lease":
		return (q.Verb == VerbKeep || q.Verb.isAcquire()) && q.LeaseMS > m.okLease
	case "bad_limit":
		return q.Verb == VerbShared
	}
	return true
}

// learn records that the server accepted q's lease and wait.
func (m *matcher) learn(q Request, r Reply) {
	if r.Kind == 'E' || r.Kind == 'M' {
		return
	}
	if q.LeaseMS > m.okLease {
		m.okLease = q.LeaseMS
	}
	if q.Verb.isAcquire() && q.WaitMS > m.okWait {
		m.okWait = q.WaitMS
	}
}

// match returns the requests the reply settles, removed from the in-flight
// set: the one it answers, and when that resolves a held-back E, the one
// that drew it. None for an echo-less E that several requests could have
// drawn (held back). ok is false if nothing matches (a protocol error).
func (m *matcher) match(r Reply) (out []delivery, ok bool) {
	var el *list.Element
	switch r.Kind {
	case 'A', 'S', 'T':
		el = m.find("A "+r.Owner+" "+r.Key, 0)
	case 'B':
		if r.Owner == "" {
			el = m.find("W "+r.Key, VerbWatch)
		} else {
			el = m.find("A "+r.Owner+" "+r.Key, 0)
		}
	case 'W', 'U':
		el = m.find("W "+r.Key, Verb(r.Kind))
	case 'R', 'K':
		el = m.find("T "+strconv.FormatUint(r.Token, 10)+" "+r.Key, Verb(r.Kind))
	case 'N':
		el = m.find("T "+strconv.FormatUint(r.Token, 10)+" "+r.Key, 0)
	case 'M', 'E':
		switch {
		case r.Key != "" && r.EchoFirst == "":
			el = m.find("W "+r.Key, VerbWatch)
		case r.Key != "":
			// An owner may look like a token: the acquire reading first.
			el = m.find("A "+r.EchoFirst+" "+r.Key, 0)
			if el == nil {
				if t, ok := ParseToken(r.EchoFirst); ok {
					el = m.find("T "+strconv.FormatUint(t, 10)+" "+r.Key, 0)
				}
			}
		default:
			var cands []*list.Element
			for x := m.order.Front(); x != nil; x = x.Next() {
				if en := x.Value.(*entry); en.ghost == nil && m.couldDraw(r.Code, en.req) {
					cands = append(cands, x)
				}
			}
			if len(cands) == 0 {
				// A group's member drew it (two refused in one group, the
				// same code): it settles one member as any reply would.
				for x := m.order.Front(); x != nil && el == nil; x = x.Next() {
					if en := x.Value.(*entry); en.ghost != nil && en.ghost.e.Code == r.Code {
						el = x
					}
				}
				break
			}
			if len(cands) == 1 {
				el = cands[0]
				break
			}
			g := &ghostGroup{need: len(cands) - 1, e: r}
			for _, x := range cands {
				x.Value.(*entry).ghost = g
			}
			return nil, true
		}
	}
	if el == nil {
		return nil, false
	}
	m.learn(el.Value.(*entry).req, r)
	return m.take(el, r), true
}

// drain removes and returns every id in flight, oldest first.
func (m *matcher) drain() []uint64 {
	ids := make([]uint64, 0, m.order.Len())
	for x := m.order.Front(); x != nil; x = x.Next() {
		ids = append(ids, x.Value.(*entry).id)
	}
	m.order.Init()
	m.byEcho = map[string][]*list.Element{}
	return ids
}
