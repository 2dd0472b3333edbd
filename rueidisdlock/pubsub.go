package rueidisdlock

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/backoff"
	"github.com/redis/rueidis"
)

// PubSub returns a pub/sub connection: a dedicated rueidis connection
// with pub/sub hooks. rueidis does not resubscribe a dedicated connection
// that breaks; this one does, on a new connection, every channel it has,
// and the new confirmations come as events (the hub makes its waiters
// check their locks on each). On a cluster it goes to node (an address
// NodeOf returned), or, when node is "", to the node of the first channel
// subscribed (sharded) or any node (not sharded).
func (d *libDriver) PubSub(node string, sharded bool, events func(driver.Event)) driver.PubSub {
	ctx, cancel := context.WithCancel(context.Background())
	p := &pubSub{d: d, node: node, sharded: sharded, events: events, ctx: ctx, cancel: cancel,
		kick: make(chan struct{}, 1), exited: make(chan struct{}), asked: map[string]int{}}
	go p.run()
	return p
}

// pubSub is a pub/sub connection that reconnects itself. Its run loop
// owns the rueidis connection: it opens one when there is a channel to
// subscribe, subscribes it to every channel, and opens the next when it
// breaks. Subscribe and Unsubscribe change the set of channels and send
// the change on the current connection, if any: a connection that the
// loop installs later is subscribed to the set as it is then (both happen
// under mu), so no channel is left out.
type pubSub struct {
	d       *libDriver
	node    string
	sharded bool
	events  func(driver.Event)
	ctx     context.Context // ends at Close
	cancel  context.CancelFunc
	kick    chan struct{} // a channel waits for a connection (buffer of one)
	exited  chan struct{} // closed when run returns

	mu       sync.Mutex
	channels []string       // subscribed, in order
	asked    map[string]int // unsubscribes sent and not answered yet, by channel
	first    string         // the first channel ever subscribed (routes a cluster's sharded connection)
	conn     *psConn        // the current connection (nil: none yet, or reconnecting)
	closed   bool

	deliver sync.Mutex // held while an event is handed over
	stopped bool       // Close was called: no more events (under deliver)
}

// psConn is one rueidis connection of a pubSub.
type psConn struct {
	dc  rueidis.DedicatedClient
	pin string // a cluster's commands carry this channel's slot ("": none)
}

// Backoff between connection attempts.
const (
	minBackoff = 50 * time.Millisecond
	maxBackoff = time.Second
)

func (p *pubSub) run() {
	defer close(p.exited)
	pause := backoff.New(minBackoff, maxBackoff)
	for {
		p.mu.Lock()
		waiting := len(p.channels) == 0
		p.mu.Unlock()
		if waiting {
			select {
			case <-p.kick:
				continue
			case <-p.ctx.Done():
				return
			}
		}
		c := p.open()
		if c == nil {
			return // closed
		}
		errs := c.dc.SetPubSubHooks(p.hooks(c))
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.dc.Close()
			return
		}
		p.conn = c
		p.asked = map[string]int{} // the last connection's answers will not come
		channels := slices.Clone(p.channels)
		p.mu.Unlock()
		opened := time.Now()
		_ = p.send(p.ctx, c, true, channels...)
		select {
		case <-errs:
		case <-p.ctx.Done():
		}
		p.mu.Lock()
		if p.conn == c {
			p.conn = nil
		}
		p.mu.Unlock()
		c.dc.Close()
		if time.Since(opened) > maxBackoff {
			pause.Reset() // it worked for a while: reconnect at once
		}
		t := time.NewTimer(pause.Next())
		select {
		case <-t.C:
		case <-p.ctx.Done():
			t.Stop()
			return
		}
	}
}

// open opens a dedicated connection to the pubSub's node. Dialling does
// not take a ctx in rueidis, so it runs on a goroutine of its own that
// Close does not wait for: it closes the connection it made if the
// pubSub was closed meanwhile (it ends within rueidis's dial timeout).
func (p *pubSub) open() *psConn {
	made := make(chan *psConn, 1)
	go func() {
		c := p.dial()
		select {
		case made <- c:
		case <-p.ctx.Done():
			c.dc.Close()
		}
	}()
	select {
	case c := <-made:
		return c
	case <-p.ctx.Done():
		return nil
	}
}

// dial makes the connection, unsubscribed, to the pubSub's node.
func (p *pubSub) dial() *psConn {
	c := &psConn{}
	client := p.d.client
	if p.d.cluster {
		if n := p.d.client.Nodes()[p.node]; p.node != "" && n != nil {
			client = n // a master's own connections
		} else if p.sharded {
			p.mu.Lock()
			c.pin = p.first
			p.mu.Unlock()
		}
	}
	c.dc, _ = client.Dedicate()
	return c
}

// hooks hands c's pub/sub traffic over as events. A sharded channel that
// the server unsubscribes by itself (its slot moved away from the node)
// is forgotten (a reconnect does not subscribe it where it no longer
// lives) and its end told: the caller subscribes it where it lives now.
func (p *pubSub) hooks(c *psConn) rueidis.PubSubHooks {
	return rueidis.PubSubHooks{
		OnMessage: func(m rueidis.PubSubMessage) {
			p.hand(driver.Event{Channel: m.Channel, Payload: m.Message})
		},
		OnSubscription: func(s rueidis.PubSubSubscription) {
			switch s.Kind {
			case "subscribe", "ssubscribe":
				p.hand(driver.Event{Channel: s.Channel, Subscribed: true})
			case "sunsubscribe", "unsubscribe":
				p.mu.Lock()
				asked := p.asked[s.Channel] > 0 // the answer to an Unsubscribe: not told
				if asked {
					if p.asked[s.Channel]--; p.asked[s.Channel] == 0 {
						delete(p.asked, s.Channel)
					}
				} else {
					p.channels = slices.DeleteFunc(p.channels, func(ch string) bool { return ch == s.Channel })
				}
				p.mu.Unlock()
				if !asked {
					p.hand(driver.Event{Channel: s.Channel, Unsubscribed: true})
				}
			}
		},
	}
}

// hand gives e to the events func, one at a time, never after Close.
func (p *pubSub) hand(e driver.Event) {
	p.deliver.Lock()
	defer p.deliver.Unlock()
	if !p.stopped {
		p.events(e)
	}
}

// send sends SUBSCRIBE (or UNSUBSCRIBE) for channels on c: sharded, one
// command per channel (channels of one node may be of several slots).
func (p *pubSub) send(ctx context.Context, c *psConn, subscribe bool, channels ...string) error {
	if len(channels) == 0 {
		return nil
	}
	b := c.dc.B()
	var cmds []rueidis.Completed
	switch {
	case !p.sharded && subscribe:
		cmds = append(cmds, b.Subscribe().Channel(channels...).Build())
	case !p.sharded:
		cmds = append(cmds, b.Unsubscribe().Channel(channels...).Build())
	default:
		for _, ch := range channels {
			var cmd rueidis.Completed
			if subscribe {
				cmd = b.Ssubscribe().Channel(ch).Build()
			} else {
				cmd = b.Sunsubscribe().Channel(ch).Build()
			}
			if c.pin != "" {
				cmd = cmd.SetSlot(c.pin)
			}
			cmds = append(cmds, cmd)
		}
	}
	for _, r := range c.dc.DoMulti(ctx, cmds...) {
		if err := r.Error(); err != nil {
			return err
		}
	}
	return nil
}

// Subscribe adds the channels and subscribes the current connection to
// them; when there is none yet, the next one is subscribed to them.
func (p *pubSub) Subscribe(ctx context.Context, channels ...string) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return errClosed
	}
	for _, ch := range channels {
		if !slices.Contains(p.channels, ch) {
			p.channels = append(p.channels, ch)
		}
	}
	if p.first == "" && len(channels) > 0 {
		p.first = channels[0]
	}
	c := p.conn
	p.mu.Unlock()
	if c == nil {
		select {
		case p.kick <- struct{}{}:
		default:
		}
		return nil
	}
	return p.send(ctx, c, true, channels...)
}

// Unsubscribe removes the channels and unsubscribes the current
// connection from them.
func (p *pubSub) Unsubscribe(ctx context.Context, channels ...string) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return errClosed
	}
	p.channels = slices.DeleteFunc(p.channels, func(ch string) bool { return slices.Contains(channels, ch) })
	c := p.conn
	if c != nil {
		for _, ch := range channels {
			p.asked[ch]++
		}
	}
	p.mu.Unlock()
	if c == nil {
		return nil
	}
	return p.send(ctx, c, false, channels...)
}

// Close closes the connection and waits for the loop. No event is handed
// over once it returns.
func (p *pubSub) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.deliver.Lock()
	p.stopped = true
	p.deliver.Unlock()
	p.cancel()
	<-p.exited
	return nil
}
