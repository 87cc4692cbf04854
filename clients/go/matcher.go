package lockd

// matcher pairs replies with the pipelined requests they answer
// (protocol.md §1: a waiting acquire is answered later, so replies can
// arrive out of request order; the echoed fields tell them apart). Pure.
//
//   - A/S/T/B and an M/E whose echo is "owner key" answer the acquire (A or
//     S) with that owner and key; only one may be in flight per owner and
//     key (two could not be told apart), so callers wait for the first.
//   - R/K/N and an M/E whose echo is "token key" answer the oldest release
//     or keep with that token and key (an R prefers a release, a K a keep).
//   - An E without echo is answered at once, so it belongs to the oldest
//     request in flight that could have drawn it and cannot still be waiting.

import (
	"container/list"
	"strconv"
)

type entry struct {
	id  uint64
	req Request
}

type matcher struct {
	order  *list.List                 // of *entry, wire order
	byEcho map[string][]*list.Element // echo -> entries, oldest first
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
	el := m.order.PushBack(&entry{id, r})
	e := r.echo()
	m.byEcho[e] = append(m.byEcho[e], el)
}

func (m *matcher) take(el *list.Element) uint64 {
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
	return en.id
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

// match returns the id of the request the reply answers, removed from the
// in-flight set; false if none matches (a protocol error).
func (m *matcher) match(r Reply) (uint64, bool) {
	var el *list.Element
	switch r.Kind {
	case 'A', 'S', 'T', 'B':
		el = m.find("A "+r.Owner+" "+r.Key, 0)
	case 'R', 'K':
		el = m.find("T "+strconv.FormatUint(r.Token, 10)+" "+r.Key, Verb(r.Kind))
	case 'N':
		el = m.find("T "+strconv.FormatUint(r.Token, 10)+" "+r.Key, 0)
	default: // M, E
		if r.Key != "" {
			// An owner may look like a token: the acquire reading first.
			el = m.find("A "+r.EchoFirst+" "+r.Key, 0)
			if el == nil {
				if t, ok := ParseToken(r.EchoFirst); ok {
					el = m.find("T "+strconv.FormatUint(t, 10)+" "+r.Key, 0)
				}
			}
		} else {
			couldDraw := func(q Request) bool {
				switch r.Code {
				case "bad_wait":
					return q.Verb.isAcquire() && q.WaitMS > 0
				case "bad_lease":
					return q.Verb == VerbKeep || (q.Verb.isAcquire() && q.LeaseMS > 0)
				case "bad_limit":
					return q.Verb == VerbShared
				}
				return true
			}
			for x := m.order.Front(); x != nil && el == nil; x = x.Next() {
				q := x.Value.(*entry).req
				if couldDraw(q) && !(q.Verb.isAcquire() && q.WaitMS > 0) {
					el = x
				}
			}
			for x := m.order.Front(); x != nil && el == nil; x = x.Next() {
				if couldDraw(x.Value.(*entry).req) {
					el = x
				}
			}
		}
	}
	if el == nil {
		return 0, false
	}
	return m.take(el), true
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
