// Package wake wakes waiting acquires when their turn comes: a Hub per
// Redis node keeps the pub/sub subscriptions of a Client's waits and
// routes each message to the waiter it names (or, for a broadcast, to
// every waiter of the channel). It imports only the driver seam and
// internal/protocol.
package wake

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/backoff"
	"github.com/dlock-go/dlock/internal/protocol"

	"github.com/dlock-go/dlock/driver"
)

// Hub wakes waiting acquires when their turn comes. A waiter registered in
// Redis is told on its Client's own channel (Client.wakeTo), by a message
// naming it; a latch's waiters, an RWMutex's readers and script-free
// mutexes listen on their lock's channel for broadcasts. The Hub
// subscribes to a channel when it first has a waiter here; it unsubscribes
// when the last one leaves, except from the Client's own channel on a
// single node, which it keeps until Close (waits come and go; one
// subscription serves them all).
//
// On a single node (PUBLISH/SUBSCRIBE) one pub/sub connection per Client
// carries every channel. With sharded pub/sub (a cluster: SPUBLISH and
// SSUBSCRIBE, where a channel lives on the node of its slot) there is one
// connection per node, opened when a channel of that node is first waited
// on: a Client has as many pub/sub connections as the cluster has
// masters at most, however many locks it waits on.
//
// A notification is only a hint: a waiter also wakes when the holder's
// lease would have run out, so a message lost to a reconnect or a failover
// costs at most that lease's remaining time.
type Hub struct {
	d         driver.Driver
	sharded   bool
	own       string // the Client's own channel, kept once subscribed ("" on a cluster)
	id        string // the Client's id: its channels end with ":wake:<id>"
	closedErr error

	mu       sync.Mutex
	shared   *psConn              // single node: the one connection
	nodes    map[string]*nodeConn // sharded: one connection per node, by address
	closed   bool
	waiting  map[string]*listeners
	receives sync.WaitGroup // the sender
	ops      []func()       // subscription changes not sent yet (see send)
	sending  bool           // the sender goroutine runs
}

// listeners is this hub's state of one lock's pub/sub channel: who waits
// on it here, and its subscription.
type listeners struct {
	waiters   []*Waiter // in arrival order
	ready     chan struct{}
	confirms  uint64 // confirmations of the subscription so far
	conn      *psConn
	node      *nodeConn   // sharded: the node's connection, shared
	alone     bool        // conn is this channel's only (a sharded channel whose node is unknown)
	moving    bool        // the server ended its subscription: it is being moved (see moved)
	rechecked time.Time   // when recheck last looked its node up
	kept      []unclaimed // messages for waiters that have not joined (see keep)
}

// nodeConn is a pub/sub connection to one node of a cluster, and how many
// channels it carries; it is closed when it carries none (so a connection
// to a master that failed over does not outlive its channels).
type nodeConn struct {
	addr     string
	conn     *psConn
	channels int
}

// Waiter is one waiting acquire.
type Waiter struct {
	name  string
	token string          // the owner token it is trying to acquire with
	Ready <-chan struct{} // closed once the subscription is confirmed
	Epoch uint64          // the subscription's confirmations when it joined
	wake  chan struct{}   // its turn came (buffer of one; may be shared by hubs)
	msg   string          // the last message naming it (a hand-off carries the lock)
}

// Message returns and forgets the last message that named w.
func (h *Hub) Message(w *Waiter) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := w.msg
	w.msg = ""
	return m
}

// Config is what a Hub is told of its Client.
type Config struct {
	Sharded bool   // sharded pub/sub: SSUBSCRIBE, a connection per cluster node
	Own     string // the Client's own channel, kept once subscribed ("" on a cluster)
	ID      string // the Client's id: its channels end with ":wake:<id>"
	Closed  error  // what Join returns once the hub is closed
}

// New makes the hub of node d.
func New(d driver.Driver, cfg Config) *Hub {
	return &Hub{d: d, sharded: cfg.Sharded, own: cfg.Own, id: cfg.ID, closedErr: cfg.Closed,
		waiting: make(map[string]*listeners), nodes: make(map[string]*nodeConn)}
}

// Epoch is how many times the subscription to a channel has been
// confirmed (0: it is not subscribed). A waiter that registered in Redis
// after it read a count, and joins with the same count, was listening
// when it registered: a message for it cannot have been missed.
func (h *Hub) Epoch(name string) uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ch := h.waiting[name]; ch != nil {
		return ch.confirms
	}
	return 0
}

// Join registers a waiter on the named channel, subscribing to it if it
// is the channel's first waiter here. It does not wait for the
// subscription: the waiter's ready channel closes when it is confirmed.
func (h *Hub) Join(name, token string, wake chan struct{}) (*Waiter, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, h.closedErr
	}
	ch := h.waiting[name]
	if ch == nil {
		ch = &listeners{ready: make(chan struct{})}
		h.waiting[name] = ch
		// The connection belongs to the Client, not to this wait.
		ctx := context.Background()
		if h.sharded {
			h.openNode(ctx, ch, name)
		} else {
			if h.shared == nil {
				h.shared = h.open("")
			}
			ch.conn = h.shared
		}
		// An error is a broken connection. go-redis reconnects at once,
		// but subscribes the new connection only to the channels it had
		// before this one: send it again, now that the channel is on
		// go-redis's list (if that fails too, the next reconnect includes
		// it; its confirmation makes the waiters check, and the waiter's
		// timer covers the gap).
		conn := ch.conn
		h.send(func() {
			if conn.Subscribe(ctx, name) != nil {
				_ = conn.Subscribe(ctx, name)
			}
		})
	}
	w := &Waiter{name: name, token: token, Ready: ch.ready, Epoch: ch.confirms, wake: wake}
	ch.waiters = append(ch.waiters, w)
	if token != "" {
		ch.claim(w)
	}
	return w, nil
}

// Leave removes a waiter. A wake-up it received but did not use goes to
// the next waiter; the last waiter to Leave unsubscribes.
func (h *Hub) Leave(w *Waiter) {
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
	// A broadcast's wake-up that the waiter did not use goes to the next
	// waiter here. On its Client's own channel a waiter was told by name,
	// and what it was given Redis passes on when it leaves the queue.
	if !strings.HasSuffix(w.name, ":wake:"+h.id) {
		select {
		case <-w.wake:
			ch.wakeOne()
		default:
		}
	}
	if len(ch.waiters) > 0 || w.name == h.own {
		return
	}
	delete(h.waiting, w.name)
	if h.closed {
		return
	}
	conn, name := ch.conn, w.name
	if !h.detach(ch.conn, ch.node, ch.alone) {
		h.send(func() { _ = conn.Unsubscribe(context.Background(), name) })
	}
}

// detach takes a channel off its sharded connection conn (its node's, or
// its own if alone): it closes a connection of its own, or its node's
// when no other channel is on it, and reports whether it closed one (its
// receive loop ends then). h.mu is held.
func (h *Hub) detach(conn *psConn, node *nodeConn, alone bool) bool {
	switch {
	case alone:
		h.send(func() { _ = conn.Close() })
		return true
	case node != nil:
		if node.channels--; node.channels == 0 {
			delete(h.nodes, node.addr)
			h.send(func() { _ = conn.Close() })
			return true
		}
	}
	return false
}

// attach gives a sharded channel the connection to node addr, opening
// it on first use. h.mu is held.
func (h *Hub) attach(ch *listeners, addr string) {
	n := h.nodes[addr]
	if n == nil {
		n = &nodeConn{addr: addr, conn: h.open(addr)}
		h.nodes[addr] = n
	}
	n.channels++
	ch.conn, ch.node, ch.alone = n.conn, n, false
}

// send queues a change of subscriptions (SUBSCRIBE, UNSUBSCRIBE, closing
// a connection) to be sent in order by the hub's sender goroutine, started
// when there is something to send and ended when there is nothing: those
// are round trips, or may wait for one (dialling, go-redis's hello on a
// new connection), and a stalled server must not hold up a waiter's join
// or leave, or the delivery of wake-ups, which wait for h.mu. The waiter's
// ready channel and timer cover the time until the subscription takes
// effect. h.mu is held.
func (h *Hub) send(op func()) {
	h.ops = append(h.ops, op)
	if h.sending {
		return
	}
	h.sending = true
	h.receives.Add(1)
	go func() {
		defer h.receives.Done()
		for {
			h.mu.Lock()
			if len(h.ops) == 0 {
				h.sending = false
				h.mu.Unlock()
				return
			}
			op := h.ops[0]
			h.ops = h.ops[1:]
			h.mu.Unlock()
			op()
		}
	}()
}

// openNode gives a sharded channel the pub/sub connection to the master
// that serves its slot, opening it on first use. When the node cannot be
// told (no slot map yet), the channel gets a connection of its own
// instead, which the driver opens to the channel's node. h.mu is held.
func (h *Hub) openNode(ctx context.Context, ch *listeners, name string) {
	addr, err := h.d.NodeOf(ctx, name)
	if err != nil {
		ch.conn, ch.node, ch.alone = h.open(""), nil, true // no channel yet: nothing sent
		return
	}
	h.attach(ch, addr)
}

// wakeOne wakes the first waiter. If it already has a wake-up pending it
// will try the lock anyway, and whoever wins publishes the next release:
// waking a second waiter would only make them race (and with a quorum,
// whose nodes each publish the same release, wake one waiter per node).
func (ch *listeners) wakeOne() {
	if len(ch.waiters) == 0 {
		return
	}
	Poke(ch.waiters[0].wake)
}

// wake wakes the waiters that match: every one, or those with the token,
// which keep msg (the message that named them). It reports whether any
// matched.
func (ch *listeners) wake(token, msg string) bool {
	woken := false
	for _, w := range ch.waiters {
		if token == "" || w.token == token {
			woken = true
			if token != "" {
				w.msg = msg
			}
			Poke(w.wake)
		}
	}
	return woken
}

// A message that names a waiter who has not joined (yet) is kept for a
// while: a release may name a waiter between its attempt and its joining
// the hub, and a waiter that joins a channel that was subscribed all
// along does not check the lock when it joins (see waitLoop), so it would
// sleep until its bound. Tokens are not reused, so a message kept for a
// waiter that never comes (it took the lock, or gave up) is only
// forgotten: after keptFor, or when more than maxKept are kept.
const (
	keptFor = 10 * time.Second
	maxKept = 256
)

// unclaimed is a message kept for a waiter that has not joined.
type unclaimed struct {
	token, msg string
	at         time.Time
}

// keep keeps msg for the waiter with token, which has not joined.
func (ch *listeners) keep(token, msg string) {
	now := time.Now()
	ch.kept = slices.DeleteFunc(ch.kept, func(u unclaimed) bool { return now.Sub(u.at) > keptFor })
	if len(ch.kept) >= maxKept {
		ch.kept = ch.kept[1:]
	}
	ch.kept = append(ch.kept, unclaimed{token, msg, now})
}

// claim gives w the last message kept for its token, if any, and wakes it.
func (ch *listeners) claim(w *Waiter) {
	found := false
	ch.kept = slices.DeleteFunc(ch.kept, func(u unclaimed) bool {
		if u.token != w.token {
			return false
		}
		w.msg, found = u.msg, true
		return true
	})
	if found {
		Poke(w.wake)
	}
}

// Poke wakes whoever waits on wake, a channel with a buffer of one; a
// wake-up already pending is enough.
func Poke(wake chan struct{}) {
	select {
	case wake <- struct{}{}:
	default:
	}
}

// psConn is a pub/sub connection of the hub.
type psConn struct{ driver.PubSub }

// open opens a pub/sub connection to node ("": the driver's choice),
// whose events come to the hub. h.mu is held.
func (h *Hub) open(node string) *psConn {
	c := &psConn{}
	c.PubSub = h.d.PubSub(node, h.sharded, func(e driver.Event) {
		switch {
		case e.Subscribed:
			h.confirmed(c, e.Channel)
		case e.Unsubscribed:
			h.moved(c, e.Channel)
		default:
			h.notify(c, e.Channel, e.Payload)
		}
	})
	return c
}

// confirmed handles the confirmation of a subscription to a channel:
// from then on every release published on it reaches this hub, so the
// channel's waiters check the lock (ready closes the first time; later,
// they are woken). Confirmations are not matched to SUBSCRIBE commands:
// one sent on a connection that dies is answered, if at all, by go-redis's
// resubscription when it reconnects, which answers several at once. So
// every confirmation makes the waiters check; one that comes early (that
// of an earlier SUBSCRIBE of the channel, since unsubscribed) costs an
// extra check, and the confirmation of the latest SUBSCRIBE, which comes
// after it took effect, makes them check again.
func (h *Hub) confirmed(c *psConn, name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ch := h.waiting[name]
	if ch == nil || ch.conn != c {
		return // nobody waits (an old subscription's news)
	}
	ch.confirms++
	select {
	case <-ch.ready:
		ch.wake("", "")
	default:
		close(ch.ready)
	}
}

// Topology. On a cluster a channel lives on the node of its slot; when the
// slot moves (a resharding, a failover) the server ends its sharded
// subscriptions there (driver.Event.Unsubscribed), and a release is then
// published where the slot lives now, which this hub does not hear. moved
// follows the channel: it asks the driver for the slot's node, again
// (after a Refresh of its slot map) until the answer is not the node that
// ended the subscription, for movedFor at most (then it takes the answer
// as it is), and subscribes the channel there; the confirmation makes the
// channel's waiters check their locks once (confirmed), so a release
// published during the move is not waited out. Until then the waiters
// sleep no longer than their bound, as when a message is lost.
const (
	movedFor   = 2 * time.Second
	movedFirst = 5 * time.Millisecond   // the first pause between lookups, doubling
	movedMax   = 200 * time.Millisecond // the longest pause
)

// moved handles the end of a sharded channel's subscription that the
// server made (see "Topology").
func (h *Hub) moved(c *psConn, name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ch := h.waiting[name]
	if h.closed || !h.sharded || ch == nil || ch.conn != c || ch.moving {
		return
	}
	h.move(ch, name, movedFor, true)
}

// move moves ch, in the background, to the node that serves its slot
// once the driver knows it is not the node of ch's connection (nodeAfter,
// for within at most). ended: the server ended the subscription (the
// driver forgot the channel), so past within it follows the answer as it
// is; else (a subscription never confirmed) it stays unless the node
// changed. h.mu is held.
func (h *Hub) move(ch *listeners, name string, within time.Duration, ended bool) {
	ch.moving = true
	old := ""
	if ch.node != nil {
		old = ch.node.addr
	}
	h.receives.Add(1)
	go func() {
		defer h.receives.Done()
		addr := h.nodeAfter(name, old, within)
		if !ended && (addr == "" || addr == old) {
			h.mu.Lock()
			ch.moving = false
			h.mu.Unlock()
			return
		}
		h.follow(ch, name, addr, ended)
	}()
}

// nodeAfter returns the node that serves name's slot once the driver
// knows it is not old ("" if it cannot tell), or its answer after within
// (one lookup for 0); sooner if the hub closes.
func (h *Hub) nodeAfter(name, old string, within time.Duration) string {
	deadline := time.Now().Add(within)
	pause := backoff.New(movedFirst, movedMax)
	for {
		h.d.Refresh()
		ctx, cancel := context.WithTimeout(context.Background(), movedMax)
		addr, err := h.d.NodeOf(ctx, name)
		cancel()
		if err == nil && addr != old || !time.Now().Before(deadline) {
			return addr
		}
		h.mu.Lock()
		closed := h.closed
		h.mu.Unlock()
		if closed {
			return addr
		}
		time.Sleep(pause.Next())
	}
}

// follow moves ch to the connection of node addr ("": one of its own, to
// the node of its first channel) and subscribes it there, if it still has
// waiters here; ended as for move.
func (h *Hub) follow(ch *listeners, name, addr string, ended bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ch.moving = false
	if h.closed || h.waiting[name] != ch {
		return // the last waiter left: leave closed what was its
	}
	conn, node, alone := ch.conn, ch.node, ch.alone
	if addr == "" {
		ch.conn, ch.node, ch.alone = h.open(""), nil, true
	} else {
		h.attach(ch, addr)
	}
	moved := ch.conn
	h.send(func() { _ = moved.Subscribe(context.Background(), name) })
	// Then, not before (a Close waits for its receive loop, which may be
	// backing off after errors), the old connection. The driver forgot
	// the channel there if the server ended it; one that was never
	// confirmed it may still have (and subscribe it again, in vain, on a
	// reconnect), so it is unsubscribed (the answer is not told).
	if !h.detach(conn, node, alone) && !ended {
		h.send(func() { _ = conn.Unsubscribe(context.Background(), name) })
	}
}

// Recheck is for a wait whose subscription has not been confirmed for a
// while (see waitLoop): on a cluster, a SUBSCRIBE that reached a node
// after the channel's slot had moved away is refused there (MOVED) and
// never confirmed, and nothing else tells. If the slot's node, looked up
// again, is not the channel's connection's, the channel moves there (see
// "Topology"). At most once per recheckEvery per channel.
func (h *Hub) Recheck(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ch := h.waiting[name]
	if h.closed || !h.sharded || ch == nil || ch.moving || time.Since(ch.rechecked) < recheckEvery {
		return
	}
	select {
	case <-ch.ready:
		return // confirmed once: an end of it is told (moved)
	default:
	}
	ch.rechecked = time.Now()
	h.move(ch, name, 0, false)
}

// recheckEvery spaces rechecks of one channel.
const recheckEvery = time.Second

// notify handles a message: "all" wakes every waiter of the channel (a
// latch opened, a writer left), "one" wakes one (a script-free mutex was
// released), and anything else is the member of the waiter whose turn it
// is, '<client id>:<token>[:<permits>]', woken if it still waits.
func (h *Hub) notify(c *psConn, name, payload string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ch := h.waiting[name]
	if ch == nil || ch.conn != c {
		return
	}
	switch payload {
	case protocol.WakeAll:
		ch.wake("", "")
	case protocol.WakeOne:
		ch.wakeOne()
	default:
		// a member, or a hand-off '<member> <fence> <ms>'
		if tok := protocol.TokenOf(payload); !ch.wake(tok, payload) && tok != "" {
			ch.keep(tok, payload)
		}
	}
}

// Close closes every pub/sub connection and waits for the receive loops.
func (h *Hub) Close() {
	h.mu.Lock()
	h.closed = true
	var conns []*psConn
	if h.shared != nil {
		conns = append(conns, h.shared)
	}
	for _, n := range h.nodes {
		conns = append(conns, n.conn)
	}
	for _, ch := range h.waiting {
		if ch.alone {
			conns = append(conns, ch.conn)
		}
	}
	h.mu.Unlock()
	for _, c := range conns {
		_ = c.Close() // returns when its events have ended
	}
	h.receives.Wait()
}
