package dlock

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// hub wakes waiting acquires when their lock is released. It holds one
// pub/sub connection per Client, opened by the first wait, subscribed to
// the channels of the locks that have waiters here and to no others.
//
// A notification is only a hint: a waiter also wakes when the holder's
// lease would have run out, so a message lost to a reconnect costs at most
// that lease's remaining time.
type hub struct {
	rdb     Redis
	sharded bool

	mu      sync.Mutex
	ps      *redis.PubSub
	done    chan struct{} // closed when the receive loop exits
	closed  bool
	waiting map[string]*channel
	// unconfirmed counts SUBSCRIBE commands sent per channel whose
	// confirmation has not come back; it outlives a channel's waiters, so
	// that a late confirmation of an old subscription is not taken as one
	// for a new waiter.
	unconfirmed map[string]int
}

// channel is the local state of one lock's channel.
type channel struct {
	waiters []*waiter // in arrival order
	ready   chan struct{}
}

// waiter is one waiting acquire.
type waiter struct {
	name  string
	token string          // the owner token it is trying to acquire with
	ready <-chan struct{} // closed once the subscription is confirmed
	wake  chan struct{}   // a release was published (buffer of one)
}

func newHub(rdb Redis, sharded bool) *hub {
	return &hub{rdb: rdb, sharded: sharded,
		waiting: make(map[string]*channel), unconfirmed: make(map[string]int)}
}

// join registers a waiter on the named channel, subscribing to it if it
// is the channel's first waiter here. It does not wait for the
// subscription: the waiter's ready channel closes when it is confirmed.
func (h *hub) join(name, token string) (*waiter, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, ErrClosed
	}
	if h.ps == nil {
		h.open()
	}
	ch := h.waiting[name]
	if ch == nil {
		ch = &channel{ready: make(chan struct{})}
		h.waiting[name] = ch
		h.unconfirmed[name]++
		// An error here is a broken connection; go-redis resubscribes on
		// reconnect and the waiter's lease-bounded timer covers the gap.
		ctx := context.Background()
		if h.sharded {
			_ = h.ps.SSubscribe(ctx, name)
		} else {
			_ = h.ps.Subscribe(ctx, name)
		}
	}
	w := &waiter{name: name, token: token, ready: ch.ready, wake: make(chan struct{}, 1)}
	ch.waiters = append(ch.waiters, w)
	return w, nil
}

// leave removes a waiter. A wake-up it received but did not use goes to
// the next waiter; the last waiter to leave unsubscribes.
func (h *hub) leave(w *waiter) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ch := h.waiting[w.name]
	if ch == nil {
		return
	}
	for i, o := range ch.waiters {
		if o == w {
			ch.waiters = append(ch.waiters[:i], ch.waiters[i+1:]...)
			break
		}
	}
	select {
	case <-w.wake:
		ch.wakeOne()
	default:
	}
	if len(ch.waiters) > 0 {
		return
	}
	delete(h.waiting, w.name)
	if h.closed {
		return
	}
	ctx := context.Background()
	if h.sharded {
		_ = h.ps.SUnsubscribe(ctx, w.name)
	} else {
		_ = h.ps.Unsubscribe(ctx, w.name)
	}
}

// wakeOne wakes the first waiter that has no wake-up pending.
func (ch *channel) wakeOne() {
	for _, w := range ch.waiters {
		select {
		case w.wake <- struct{}{}:
			return
		default:
		}
	}
}

// wakeAll wakes every waiter.
func (ch *channel) wakeAll() {
	for _, w := range ch.waiters {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// open starts the pub/sub connection and its receive loop. h.mu is held.
func (h *hub) open() {
	// The connection outlives the wait that opened it: it is the Client's.
	ctx := context.Background()
	if h.sharded {
		h.ps = h.rdb.SSubscribe(ctx)
	} else {
		h.ps = h.rdb.Subscribe(ctx)
	}
	h.done = make(chan struct{})
	msgs := h.ps.ChannelWithSubscriptions()
	go h.receive(msgs)
}

// receive dispatches confirmations and messages until the pub/sub
// connection is closed.
func (h *hub) receive(msgs <-chan any) {
	defer close(h.done)
	for m := range msgs {
		switch m := m.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" || m.Kind == "ssubscribe" {
				h.confirmed(m.Channel)
			}
		case *redis.Message:
			h.notify(m.Channel, m.Payload)
		}
	}
}

func (h *hub) confirmed(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if n := h.unconfirmed[name]; n > 1 {
		h.unconfirmed[name] = n - 1
		return
	}
	// The last SUBSCRIBE sent is confirmed (or this is a resubscription
	// after a reconnect): every release from now on reaches us.
	delete(h.unconfirmed, name)
	if ch := h.waiting[name]; ch != nil {
		select {
		case <-ch.ready:
		default:
			close(ch.ready)
		}
	}
}

// notify handles a release published on a lock's channel: "all" wakes
// every local waiter (a read lock or a permit count changed), "one" wakes
// one, and anything else is the token of the one waiter whose turn it is
// (a fair lock's head), woken if it waits here.
func (h *hub) notify(name, payload string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ch := h.waiting[name]
	if ch == nil {
		return
	}
	switch payload {
	case "all":
		ch.wakeAll()
	case "one":
		ch.wakeOne()
	default:
		for _, w := range ch.waiters {
			if w.token == payload {
				select {
				case w.wake <- struct{}{}:
				default:
				}
			}
		}
	}
}

// close closes the pub/sub connection and waits for the receive loop.
func (h *hub) close() {
	h.mu.Lock()
	h.closed = true
	ps, done := h.ps, h.done
	h.mu.Unlock()
	if ps != nil {
		_ = ps.Close()
		<-done
	}
}
