package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// attemptFunc makes one acquire attempt. It returns the lease when the
// lock was taken; otherwise how long to wait at most before trying again
// (the holder's remaining lease, say). queued is true for a Lock's
// attempts, false for a TryLock's.
// msg, if not "", is the message that woke the waiter (a hand-off carries
// the lock).
type attemptFunc func(ctx context.Context, queued bool, msg string) (*Lease, time.Duration, error)

// acquisition is one Lock or TryLock call: the wait loop shared by the
// primitives.
type acquisition struct {
	c       *Client
	what    string // the primitive, for telemetry
	name    string
	channel string
	token   string
	p       protocol
	attempt attemptFunc
	// keepAlive, when positive, is how often a waiter must try again at
	// the least, to keep its place in a queue alive.
	keepAlive time.Duration
	// leave, if set, is run with member when a Lock gives up without the
	// lock (ctx ended, client closed, Redis error): it removes the
	// waiter's place in a queue.
	leave  func(member string) call
	member string
	// bury refuses the token's late attempts (bury.lua), before an
	// acquire that ends without the lock undoes what they left.
	bury call
	unsettled
}

// unsettled records whether an acquire's attempt failed with its outcome
// unknown (a Redis error, a reply that came after ctx ended: it may have
// taken the lock), and when that attempt can no longer run on the server.
type unsettled struct {
	unknown bool
	settled <-chan struct{}
}

// failed records an attempt that failed with err, its outcome unknown.
func (o *unsettled) failed(err error) { o.unknown, o.settled = true, settled(err) }

// after closes when what an acquire left may be undone: at once, unless
// an attempt given up on may still run.
func (o *unsettled) after() <-chan struct{} {
	if o.settled == nil {
		return closedChan
	}
	return o.settled
}

// abandon gives up the waiter's place (see leave).
func (a *acquisition) abandon(ctx context.Context) error {
	return a.c.be.everywhere(ctx, a.leave(a.member))
}

// run acquires: one attempt, then, for a Lock, waits woken by releases.
// What an acquire that ends without the lock may have left in Redis — a
// hold taken by an attempt whose outcome is unknown (a Redis error, a
// reply that came after ctx ended), a place in a queue — is undone once
// that attempt can no longer run on the server (see lateCall): before run
// returns when Redis answers within undoGrace, else in the background
// (Client.undo). So no lock is left held by nobody, and run returns as
// soon as ctx ends.
func (a *acquisition) run(ctx context.Context, wait bool) (l *Lease, err error) {
	c := a.c
	if err := c.checkDeployment(ctx); err != nil {
		if ctx.Err() != nil {
			return nil, waitEnded(a.name, ctx.Err())
		}
		return nil, err
	}
	defer func() {
		leave := wait && a.leave != nil
		if l != nil || (!a.unknown && !leave) {
			return
		}
		// Settled, for an acquire, means buried: once the token is in the
		// lock's dead set, no attempt of it that is still on its way, or
		// sent again, can take anything, so what the attempts took is
		// undone at once — not when the client library is done with
		// them, which says nothing of what the server will still run.
		c.undo(ctx, a.after(), func(ctx context.Context) error {
			// Where the bury fails the release may still be made: a late
			// attempt there is what it was before, held by nobody for
			// its TTL at most; the whole undo runs again later.
			var err0, err1, err2 error
			if c.caps.bury {
				err0 = c.be.everywhere(ctx, a.bury)
			}
			if a.unknown {
				c.tel.log.Info("dlock: acquire outcome unknown; undoing it", "lock", a.name, "err", err)
				err1 = c.be.run(ctx, a.p.release(a.token, 0, 0)).Err
			}
			if leave {
				err2 = a.abandon(ctx)
			}
			return errors.Join(err0, err1, err2)
		})
	}()
	var seen []uint64
	if wait {
		seen = c.epochs(a.channel)
	}
	l, next, err := a.try(ctx, wait, "")
	if l != nil || err != nil {
		return l, err
	}
	if !wait {
		return nil, fmt.Errorf("%w: %q is held", ErrNotObtained, a.name)
	}

	c.announce(ctx) // inspectors can tell who waits
	c.tel.waiting(a.what, a.name, 1)
	defer c.tel.waiting(a.what, a.name, -1)
	err = c.waitLoop(ctx, a.name, a.channel, a.token, seen, a.bound(next),
		func(ctx context.Context, msg string) (bool, time.Duration, error) {
			var next time.Duration
			l, next, err = a.try(ctx, true, msg)
			return l != nil || err != nil, a.bound(next), err
		})
	return l, err
}

// waitLoop waits on a channel until check reports done or fails. It
// joins the channel's listeners, checks once the subscription is confirmed
// (a release may have come before it) — unless it was already subscribed,
// with the same epochs, before the attempt that came first (seen, from
// epochs) — then sleeps until a notification or first/the next bound that
// check returned, whichever is sooner, and checks again. When ctx ends it
// returns an error matching ErrNotObtained and ctx.Err(); when the Client
// closes, ErrClosed.
func (c *Client) waitLoop(ctx context.Context, name, channel, token string, seen []uint64, bound time.Duration,
	check func(ctx context.Context, msg string) (done bool, next time.Duration, err error)) error {
	c.probePubSub(ctx, channel) // once per Client: are its channels granted?
	// One wake channel, however many nodes may publish the release.
	wake := make(chan struct{}, 1)
	var ready <-chan struct{}
	var first0 *waiter // on the first node (a hand-off comes from a single node only)
	listening := seen != nil
	for i, h := range c.hubs {
		w, err := h.join(channel, token, wake)
		if err != nil {
			return err
		}
		defer h.leave(w)
		if ready == nil {
			ready = w.ready // the first node's is enough to know
			first0 = w
		}
		listening = listening && seen[i] > 0 && seen[i] == w.epoch
	}
	if listening {
		ready = nil // no check needed: a message for us cannot have been missed
	}
	// Waits poll while pub/sub is refused, or while this wait's
	// subscription is not confirmed: a SUBSCRIBE the ACL refuses is
	// dropped by go-redis without a word, and its confirmation never comes.
	poll := poller{d: c.dep}
	confirmed := listening
	timer := time.NewTimer(poll.cap(bound, !confirmed))
	defer timer.Stop()
	for {
		woken := false
		select {
		case <-ready:
			ready = nil // closed now; once is enough
			confirmed = true
		case <-wake:
			woken = true
		case <-timer.C:
		case <-ctx.Done():
			return waitEnded(name, ctx.Err())
		case <-c.life.Done():
			return ErrClosed
		}
		msg := ""
		if woken {
			msg = c.hubs[0].message(first0)
		}
		done, next, err := check(ctx, msg)
		if err != nil && woken {
			// Woken, but the check failed (its ctx ended meanwhile, say):
			// the wake-up was not used. Put it back, and leave hands it
			// to the next waiter; else that one sleeps out the lease.
			poke(wake)
		}
		if done || err != nil {
			return err
		}
		timer.Reset(poll.cap(next, !confirmed))
	}
}

// try makes one attempt. One whose outcome is unknown is marked so, for
// run to undo it.
func (a *acquisition) try(ctx context.Context, queued bool, msg string) (*Lease, time.Duration, error) {
	l, next, err := a.attempt(ctx, queued, msg)
	if err == nil {
		return l, next, nil
	}
	a.c.clusterHint(err)
	// A quorum's round that failed has given back what it may have won,
	// node by node (quorum.giveBack).
	if _, quorum := errors.AsType[*QuorumError](err); !quorum && !errors.Is(err, ErrClosed) && !errors.Is(err, ErrInvalidArgument) {
		a.failed(err)
	}
	if ctx.Err() != nil {
		return nil, 0, waitEnded(a.name, ctx.Err())
	}
	return nil, 0, err
}

// epochs returns each hub's epoch of a channel (see hub.epoch).
func (c *Client) epochs(channel string) []uint64 {
	e := make([]uint64, len(c.hubs))
	for i, h := range c.hubs {
		e[i] = h.epoch(channel)
	}
	return e
}

// bound caps a wait at the keep-alive interval.
func (a *acquisition) bound(d time.Duration) time.Duration {
	if a.keepAlive > 0 && d > a.keepAlive {
		return a.keepAlive
	}
	return d
}

// Polling, when pub/sub is refused: a wait's first sleep is pollFirst,
// doubled after each sleep up to pollMax, and never longer than the wait
// would sleep anyway (the holder's remaining lease, its place's renewal).
const (
	pollFirst = 16 * time.Millisecond
	pollMax   = 256 * time.Millisecond
)

// poller is one wait's polling backoff (fresh for every wait).
type poller struct {
	d    *deployment
	next time.Duration
}

// cap returns how long the wait sleeps at most: bound, or less while
// pub/sub is refused (from pollFirst, doubling), or pollMax while the
// wait's subscription is unconfirmed (a confirmation takes a round trip:
// a wait that finds none after pollMax checks the lock, and again).
func (p *poller) cap(bound time.Duration, unconfirmed bool) time.Duration {
	if p.d.refused.Load() == nil {
		if unconfirmed {
			return min(bound, pollMax)
		}
		return bound
	}
	if p.next == 0 {
		p.next = pollFirst
	}
	d := p.next
	p.next = min(2*p.next, pollMax)
	return min(d, bound)
}
