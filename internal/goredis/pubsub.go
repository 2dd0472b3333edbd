package goredis

import (
	"context"
	"sync"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/redis/go-redis/v9"
)

// PubSub opens a go-redis pub/sub connection: go-redis connects it on its
// first subscription, and on a reconnect subscribes it again to its
// channels, whose confirmations come as events.
//
// The receive loop starts with the first Subscribe, not before: go-redis's
// loop connects as soon as it runs, and a cluster's sharded connection
// made before it knows a channel goes to a random node, where every
// SSUBSCRIBE is answered MOVED and never confirmed.
func (g *Driver) PubSub(node string, sharded bool, events func(driver.Event)) driver.PubSub {
	ctx := context.Background()
	var ps *redis.PubSub
	g.mu.Lock()
	n := g.nodes[node]
	g.mu.Unlock()
	switch {
	case n != nil:
		ps = n.SSubscribe(ctx)
	case sharded:
		ps = g.rdb.SSubscribe(ctx)
	default:
		ps = g.rdb.Subscribe(ctx)
	}
	return &goPubSub{ps: ps, sharded: sharded, events: events, done: make(chan struct{}),
		channels: map[string]bool{}, asked: map[string]int{}, forgetting: map[string]bool{}}
}

// goPubSub is a go-redis pub/sub connection and its receive loop.
type goPubSub struct {
	ps      *redis.PubSub
	sharded bool
	events  func(driver.Event)
	start   sync.Once     // the receive loop, with the first Subscribe
	done    chan struct{} // closed when the receive loop ends

	mu         sync.Mutex
	channels   map[string]bool // subscribed and not unsubscribed by the caller
	asked      map[string]int  // unsubscribes sent and not answered yet, by channel
	forgetting map[string]bool // unsubscribed by the driver itself (ended)
}

// ended handles the end of a subscription to channel and reports whether
// to tell it (driver.Event.Unsubscribed): not the answer to an
// Unsubscribe. One the server ended by itself (a sharded channel's slot
// moved) is still on go-redis's list, which would subscribe it again on a
// reconnect, where it no longer lives, so the driver unsubscribes it (on
// the receive loop, before the caller hears of it and may subscribe it
// again) and does not tell the answer to that either.
func (p *goPubSub) ended(channel string) bool {
	p.mu.Lock()
	switch {
	case p.asked[channel] > 0: // the answer to an Unsubscribe
		if p.asked[channel]--; p.asked[channel] == 0 {
			delete(p.asked, channel)
		}
		p.mu.Unlock()
		return false
	case p.forgetting[channel]:
		delete(p.forgetting, channel)
		p.mu.Unlock()
		return false
	case p.channels[channel] && p.sharded:
		delete(p.channels, channel)
		p.forgetting[channel] = true
		p.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = p.ps.SUnsubscribe(ctx, channel)
		cancel()
		return true
	}
	p.mu.Unlock()
	return false // not a channel it carries
}

func (p *goPubSub) receive() {
	msgs := p.ps.ChannelWithSubscriptions()
	go func() {
		defer close(p.done)
		for m := range msgs {
			switch m := m.(type) {
			case *redis.Subscription:
				switch m.Kind {
				case "subscribe", "ssubscribe":
					p.events(driver.Event{Channel: m.Channel, Subscribed: true})
				case "sunsubscribe", "unsubscribe":
					if p.ended(m.Channel) {
						p.events(driver.Event{Channel: m.Channel, Unsubscribed: true})
					}
				}
			case *redis.Message:
				p.events(driver.Event{Channel: m.Channel, Payload: m.Payload})
			}
		}
	}()
}

// Subscribe subscribes the connection to channels and starts its
// receive loop the first time.
func (p *goPubSub) Subscribe(ctx context.Context, channels ...string) error {
	p.mu.Lock()
	for _, ch := range channels {
		p.channels[ch] = true // a reply to an unsubscribe still due is still not told (forgetting)
	}
	p.mu.Unlock()
	var err error
	if p.sharded {
		err = p.ps.SSubscribe(ctx, channels...)
	} else {
		err = p.ps.Subscribe(ctx, channels...)
	}
	// go-redis remembers the channels even when err is not nil and
	// subscribes them on its next connection.
	p.start.Do(p.receive)
	return err
}

// Unsubscribe ends the subscriptions of channels; their answers are not
// told as events.
func (p *goPubSub) Unsubscribe(ctx context.Context, channels ...string) error {
	p.mu.Lock()
	for _, ch := range channels {
		delete(p.channels, ch)
		p.asked[ch]++
	}
	p.mu.Unlock()
	if p.sharded {
		return p.ps.SUnsubscribe(ctx, channels...)
	}
	return p.ps.Unsubscribe(ctx, channels...)
}

// Close closes the connection and waits for its receive loop to end.
func (p *goPubSub) Close() error {
	err := p.ps.Close()
	p.start.Do(func() { close(p.done) }) // no loop was started
	<-p.done
	return err
}
