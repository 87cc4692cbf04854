package lockd

// Watch's delivery on its own (no server): states reach States() in rev
// order whether they go straight into the channel or through the pump's
// queue, and a Close racing the connection's offers never panics.

import (
	"context"
	"testing"
	"time"
)

func newBareWatch() (*Watch, context.CancelFunc, chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	w := &Watch{Key: "k", ch: make(chan KeyState, watchBuffer), cancel: cancel, ended: make(chan struct{}),
		wake: make(chan struct{}, 1)}
	pumped := make(chan struct{})
	go w.pump(ctx, pumped)
	return w, cancel, pumped
}

// A consumer that stalls now and then makes offers go by the queue, then
// by the channel again: every state arrives once, in order.
func TestWatchDeliversInRevOrderThroughBothPaths(t *testing.T) {
	w, cancel, pumped := newBareWatch()
	defer func() { cancel(); <-pumped }()
	const n = 3000 // below maxWatchBacklog: nothing may be dropped
	go func() {
		for rev := uint64(1); rev <= n; rev++ {
			w.offer(KeyState{Key: "k", Rev: rev, Kind: "free"})
			if rev%500 == 0 {
				w.offer(KeyState{Key: "k", Rev: rev - 1, Kind: "free"}) // older: dropped
			}
		}
	}()
	direct, queued := 0, 0
	for want := uint64(1); want <= n; want++ {
		if want%700 == 0 {
			time.Sleep(20 * time.Millisecond) // let the channel fill and the queue grow
		}
		w.mu.Lock()
		if len(w.queue) > 0 {
			queued++
		} else {
			direct++
		}
		w.mu.Unlock()
		select {
		case st := <-w.States():
			if st.Rev != want {
				t.Fatalf("got rev %d, want %d", st.Rev, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("rev %d never arrived", want)
		}
	}
	if queued == 0 {
		t.Fatalf("the queue was never used (direct %d): the test did not cover the pump", direct)
	}
	select {
	case st := <-w.States():
		t.Fatalf("an extra state: %+v", st)
	case <-time.After(50 * time.Millisecond):
	}
}

// Offers keep coming while the watch is closed: States() closes, no send
// on a closed channel (a panic), whatever the interleaving.
func TestWatchCloseRacingOffersDoesNotPanic(t *testing.T) {
	for i := 0; i < 200; i++ {
		w, cancel, pumped := newBareWatch()
		stop := make(chan struct{})
		go func() {
			for rev := uint64(1); ; rev++ {
				select {
				case <-stop:
					return
				default:
				}
				w.offer(KeyState{Key: "k", Rev: rev, Kind: "free"})
			}
		}()
		for k := 0; k < i%20; k++ {
			<-w.States()
		}
		cancel()
		<-pumped
		for range w.States() { // drains what was buffered, then ends
		}
		close(stop)
	}
}

// The state the pump holds (taken from the queue, not yet sent) is older
// than anything offered meanwhile: a newer state must queue behind it even
// when States() has room, or the consumer would see them out of order.
func TestWatchOfferQueuesBehindTheStateThePumpHolds(t *testing.T) {
	w := &Watch{Key: "k", ch: make(chan KeyState, watchBuffer), wake: make(chan struct{}, 1)}
	w.offer(KeyState{Rev: 1}) // room: straight into States()
	if len(w.ch) != 1 || len(w.queue) != 0 {
		t.Fatalf("rev 1: %d in the channel, %d queued; want 1, 0", len(w.ch), len(w.queue))
	}
	w.mu.Lock()
	w.inFlight = true // as the pump is between taking rev 2 from the queue and sending it
	w.lastRev = 2
	w.mu.Unlock()
	w.offer(KeyState{Rev: 3})
	if len(w.ch) != 1 || len(w.queue) != 1 || w.queue[0].Rev != 3 {
		t.Fatalf("rev 3 with rev 2 in the pump's hands: %d in the channel, queue %+v; want it queued", len(w.ch), w.queue)
	}
}
