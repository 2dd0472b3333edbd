package dlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/dlock-go/dlock/internal/backend"
	"github.com/dlock-go/dlock/internal/deploy"
	"github.com/dlock-go/dlock/internal/hold"
	"github.com/dlock-go/dlock/internal/protocol"
	"github.com/dlock-go/dlock/internal/transport"
	"github.com/dlock-go/dlock/internal/wake"
)

// acquisition is one acquire: a Lock or TryLock of any primitive, or a
// LockAll of Mutexes taken by one script. It is the only acquire path:
// the deployment check, telemetry, the attempt, the wait, the undo of
// what a failed acquire left, and the holds and leases of what it took.
type acquisition struct {
	c       *Client
	what    string // the primitive, for telemetry ("LockAll" for a set)
	name    string // the lock's name; a set's names, joined
	channel string
	token   string
	parts   []part              // what it takes: one lock (one[:]), or a set's
	one     [1]part             // the one lock of a Lock or TryLock (no allocation of its own)
	spec    backend.AttemptSpec // what the backend was told (its attempts keep a pointer to it)
	attempt backend.AttemptFunc
	// keepAlive, when positive, is how often a waiter must try again at
	// the least, to keep its place in a queue alive.
	keepAlive time.Duration
	// leave, if set, gives up the waiter's places (one call per lock)
	// when a Lock gives up without the lock (ctx ended, client closed,
	// Redis error). Built only then.
	leave func() []protocol.Call
	// handOff: a release may hand the lock to this waiter (handoff.go);
	// last is its latest place, which a hand-off names.
	handOff bool
	last    backend.Place
	// moving is the last cluster error a Lock's attempt met and waited
	// through (see "Topology changes" in client.go), and pause how long it waited.
	moving error
	// why is why the last attempt was not won, when it says (outcome.why)
	why   error
	pause time.Duration
	unsettled
}

// part is one lock an acquisition takes.
type part struct {
	k    *protocol.Keys
	what string
	side side
	p    backend.HoldOps
	cfg  lockConfig
}

// unsettled records whether an acquire's attempt failed with its outcome
// unknown (a Redis error, a reply that came after ctx ended: it may have
// taken the lock), and when that attempt can no longer run on the server;
// and whether one took so long that the client library may have sent it
// twice (resent: see "Acquires sent twice").
type unsettled struct {
	unknown bool
	resent  bool
	settled <-chan struct{}
}

// Acquires sent twice. go-redis sends a call again when its reply has
// not come within its ReadTimeout (driver.Info.ResendAfter), and the
// first copy's bytes may still reach the server after the second copy
// ran: the path stalled, and TCP delivers them later. When the second
// copy took the lock, that first copy may land after the lease's Unlock
// and, finding the lock free, take it again for a token nobody holds (the
// torture test saw it). So a lease whose acquire had an attempt that took
// ResendAfter or more, or failed with its outcome unknown, buries its
// token before its final release (hold.buryFirst), for as long as
// buryCall buries an undone acquire's.
//
// Why this cannot grant twice, nor for nobody: every acquire script
// refuses a buried token first; the release is sent only once the bury
// has answered, so it runs after it; so a copy that runs after the
// release takes nothing, and one that runs before it finds its own token
// holding (lock.lua: it only lengthens the lease, which the release then
// ends). A copy later still than the burial takes what it takes for its
// own TTL at most, as a holder that crashed at once would; and so does
// one whose bury failed (the release is made all the same).
// The cost, a call, is paid only by leases whose acquire was that slow.

// failed records an attempt that failed with err, its outcome unknown.
func (o *unsettled) failed(err error) { o.unknown, o.settled = true, transport.Settled(err) }

// after closes when what an acquire left may be undone: at once, unless
// an attempt given up on may still run.
func (o *unsettled) after() <-chan struct{} {
	if o.settled == nil {
		return transport.Closed()
	}
	return o.settled
}

// each runs one call per lock of the acquisition (mk builds it) on every
// node, and returns the errors joined.
func (a *acquisition) each(ctx context.Context, mk func(p part) protocol.Call) error {
	var errs []error
	for _, p := range a.parts {
		errs = append(errs, a.c.be.Everywhere(ctx, mk(p)))
	}
	return errors.Join(errs...)
}

// run acquires: one attempt, then, for a Lock, waits woken by releases.
// What an acquire that ends without the lock may have left in Redis — a
// hold taken by an attempt whose outcome is unknown (a Redis error, a
// reply that came after ctx ended), a place in a queue — is undone once
// that attempt can no longer run on the server (transport.Settled): before run
// returns when Redis answers within undoGrace, else in the background
// (Client.undo). So no lock is left held by nobody, and run returns as
// soon as ctx ends.
func (a *acquisition) run(ctx context.Context, wait bool) (l *Lease, err error) {
	c := a.c
	start := time.Now()
	ctx, span := c.tel.AcquireStarted(ctx, a.what, a.name, wait)
	defer func() { c.tel.AcquireEnded(ctx, span, a.what, a.name, start, err) }()
	if err := c.dep.Check(ctx); err != nil {
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
		c.holds.Undo(ctx, a.after(), a.ttl(), func(ctx context.Context) error {
			// Where the bury fails the release may still be made: a late
			// attempt there is what it was before, held by nobody for
			// its TTL at most; the whole undo runs again later.
			var err0, err1, err2 error
			if c.caps.Bury {
				err0 = a.each(ctx, func(p part) protocol.Call { return buryCall(p.k, a.token, p.cfg) })
			}
			if a.unknown {
				c.tel.Log.Info("dlock: acquire outcome unknown; undoing it", "lock", a.name, "err", err)
				for _, p := range a.parts {
					err1 = errors.Join(err1, c.be.Run(ctx, p.p.Release(a.token, 0, 0)).Err)
				}
			}
			if leave {
				for _, lc := range a.leave() {
					err2 = errors.Join(err2, c.be.Everywhere(ctx, lc))
				}
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
		if a.why != nil {
			return nil, fmt.Errorf("%w: %q: %w", ErrNotObtained, a.name, a.why)
		}
		return nil, fmt.Errorf("%w: %q is held", ErrNotObtained, a.name)
	}

	c.dep.Announce(ctx) // inspectors can tell who waits
	c.tel.Waiting(a.what, a.name, 1)
	defer c.tel.Waiting(a.what, a.name, -1)
	err = c.waitLoop(ctx, a.name, a.channel, a.token, seen, a.bound(next),
		func(ctx context.Context, msg string) (bool, time.Duration, error) {
			var next time.Duration
			l, next, err = a.try(ctx, true, msg)
			return l != nil || err != nil, a.bound(next), err
		})
	if err != nil && a.moving != nil && errors.Is(err, ErrNotObtained) {
		err = fmt.Errorf("%w (the cluster was failing meanwhile: %w)", err, a.moving)
	}
	if err != nil && a.why != nil && errors.Is(err, ErrNotObtained) {
		err = fmt.Errorf("%w (its last round: %w)", err, a.why)
	}
	return l, err
}

// Grants that come back too late. A grant whose reply comes after its
// lease's validity has passed (start+TTL less the drift margin: the
// server stalled longer than the TTL, say) proves nothing any more: the
// lock may have expired on the server and gone to another owner. So an
// acquire never returns such a lease (its Err would say it is lost at
// once; dlock run would start CMD and stop it at once): it releases what
// was taken (the lock may still be held in Redis, its TTL counted from
// when the grant ran), and a Lock acquires again, with a new token, within
// its ctx, while a TryLock — and a Campaign, as its doc says — fails with
// ErrNotObtained (and ErrLeaseLost: won, but lost before the reply
// came). A LockAll that takes its locks one by one does the same when a
// part's lease ended while it waited for the next (a fixed lease shorter
// than that wait). The check is the lease's own (Err, its local
// deadline: expireIfLate), the one Campaign makes after recording its
// value, and the error says it as Campaign does (wonButLost).

// valid runs take — one acquisition, with a token of its own — until it
// returns a lease that is still valid, or fails (see above); with again
// false (a TryLock, a Campaign) it runs it once. Tries again come after a
// pause that doubles from retryFirst up to retryMax (a server that stays
// slow is not hammered), and not at all for a lease that no reply can
// find valid (a TTL within the drift margin: 2 ms or less by default).
func valid(ctx context.Context, name string, again bool, take func() (*Lease, error)) (*Lease, error) {
	pause := retryFirst
	for {
		l, err := take()
		if err != nil {
			return nil, err
		}
		lost := l.Err()
		if lost == nil {
			return l, nil
		}
		// A new token for the next try: a release that hands the lock on
		// leaves this one in the dead set, where it could take nothing.
		releaseAll(ctx, []*Lease{l})
		if !again || slices.ContainsFunc(l.Parts(), func(p *Lease) bool { return p.of.First().NeverValid() }) {
			return nil, wonButLost(name, lost)
		}
		l.of.First().Keeper().Tel().Log.Info("dlock: a lease ended before its acquire could return it; acquiring again", "lock", name, "err", lost)
		timer := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, waitEnded(name, ctx.Err())
		case <-timer.C:
		}
		pause = min(2*pause, retryMax)
	}
}

// Tries again of an acquire whose lease ended before it returned (valid).
const (
	retryFirst = time.Millisecond
	retryMax   = 256 * time.Millisecond
)

// wonButLost is the error of an acquire that won a lock whose lease had
// ended before the acquire could return it.
func wonButLost(name string, err error) error {
	return fmt.Errorf("%w: %q: won, but %w", ErrNotObtained, name, err)
}

// buryCall is bury.lua for token: its late attempts are refused for
// buryFor(cfg).
func buryCall(k *protocol.Keys, token string, cfg lockConfig) protocol.Call {
	return protocol.BuryArgs{Token: token, For: buryFor(cfg).Milliseconds()}.Call(k)
}

// buryFor is how long a buried token is refused: twice the longest the
// acquire's lease or place could last.
func buryFor(cfg lockConfig) time.Duration { return 2 * max(cfg.TTL, cfg.QueueTTL) }

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
	c.dep.ProbePubSub(ctx, channel) // once per Client: are its channels granted?
	// One wake channel, however many nodes may publish the release.
	wakeUp := make(chan struct{}, 1)
	var ready <-chan struct{}
	var first0 *wake.Waiter // on the first node (a hand-off comes from a single node only)
	listening := seen != nil
	for i, h := range c.hubs {
		w, err := h.Join(channel, token, wakeUp)
		if err != nil {
			return err
		}
		defer h.Leave(w)
		if ready == nil {
			ready = w.Ready // the first node's is enough to know
			first0 = w
		}
		listening = listening && seen[i] > 0 && seen[i] == w.Epoch
	}
	if listening {
		ready = nil // no check needed: a message for us cannot have been missed
	}
	// Waits poll while pub/sub is refused, or while this wait's
	// subscription is not confirmed: a SUBSCRIBE the ACL refuses is
	// dropped by go-redis without a word, and its confirmation never comes.
	poll := poller{d: c.dep}
	confirmed := listening
	began, told := time.Now(), false
	timer := time.NewTimer(poll.cap(bound, !confirmed))
	defer timer.Stop()
	for {
		woken := false
		select {
		case <-ready:
			ready = nil // closed now; once is enough
			confirmed = true
		case <-wakeUp:
			woken = true
		case <-timer.C:
			if !confirmed && c.dep.Refused() == nil { // refused: no subscription to look for
				for _, h := range c.hubs {
					h.Recheck(channel)
				}
				if !told && time.Since(began) > unconfirmedFor {
					told = true // never silently: a wait that only polls says so, once
					c.tel.Log.Warn("dlock: a wait's wake-up subscription is not confirmed; it polls the lock",
						"lock", name, "channel", channel, "for", time.Since(began).Round(time.Millisecond))
				}
			}
		case <-ctx.Done():
			return waitEnded(name, ctx.Err())
		case <-c.life.Done():
			return ErrClosed
		}
		msg := ""
		if woken {
			msg = c.hubs[0].Message(first0)
		}
		done, next, err := check(ctx, msg)
		if err != nil && woken {
			// Woken, but the check failed (its ctx ended meanwhile, say):
			// the wake-up was not used. Put it back, and leave hands it
			// to the next waiter; else that one sleeps out the lease.
			wake.Poke(wakeUp)
		}
		if done || err != nil {
			return err
		}
		timer.Reset(poll.cap(next, !confirmed))
	}
}

// ttl is the longest TTL the acquisition asks for.
func (a *acquisition) ttl() time.Duration {
	var d time.Duration
	for _, p := range a.parts {
		d = max(d, p.cfg.TTL)
	}
	return d
}

// try makes one attempt, or takes the lock that msg, a hand-off, gave
// it. One whose outcome is unknown is marked so, for run to undo it.
func (a *acquisition) try(ctx context.Context, queued bool, msg string) (*Lease, time.Duration, error) {
	if a.handOff && msg != "" {
		if o, ok := handedOver(msg, a.last, a.c.drift); ok {
			return a.lease(ctx, o)
		}
	}
	sent := time.Now()
	o, err := a.attempt(ctx, queued, !a.last.Sent.IsZero())
	if r := a.c.resendAfter; r > 0 && time.Since(sent) >= r {
		a.resent = true
	}
	for _, g := range o.GiveBack {
		if g.After == nil {
			a.c.holds.Undo(ctx, transport.Closed(), a.ttl(), g.Undo)
		} else {
			a.c.holds.UndoLater(g.After, a.ttl(), g.Undo)
		}
	}
	if err != nil {
		a.c.clusterHint(err)
		// A quorum's round that failed has given back what it may have
		// won, node by node (giveBack).
		if _, quorum := errors.AsType[*QuorumError](err); !quorum && !errors.Is(err, ErrClosed) && !errors.Is(err, ErrInvalidArgument) {
			a.failed(err)
		}
		if ctx.Err() != nil {
			return nil, 0, waitEnded(a.name, ctx.Err())
		}
		if queued && a.c.cluster() && transient(err) {
			a.moving = err
			a.pause = min(max(2*a.pause, movingFirst), movingMax)
			return nil, a.pause, nil
		}
		return nil, 0, err
	}
	a.pause = 0
	if ctx.Err() == nil { // a round its ctx cut short says less than the one before
		a.why = o.Why
	}
	if !o.Placed.Sent.IsZero() {
		a.last = o.Placed
	}
	if o.Granted {
		return a.lease(ctx, o)
	}
	return nil, o.Wait, nil
}

// lease makes the holds of what an attempt took, registers them with the
// watchdog, and returns their lease: a set's when it took several. If the
// Client was closed meanwhile it returns ErrClosed, and run undoes what
// was taken.
func (a *acquisition) lease(ctx context.Context, o backend.Outcome) (*Lease, time.Duration, error) {
	if o.Fences == nil { // one lock
		l, err := a.leaseOf(ctx, a.parts[0], o.Fence, o)
		return l, 0, err
	}
	leases := make([]*Lease, len(a.parts))
	for i, p := range a.parts {
		l, err := a.leaseOf(ctx, p, o.Fences[i], o)
		if err != nil {
			releaseAll(ctx, leases[:i])
			return nil, 0, err
		}
		leases[i] = l
	}
	return newSet(leases), 0, nil
}

// leaseOf makes the hold of one lock taken with fence, and its lease. If
// the Client was closed meanwhile, what was taken is undone by run.
func (a *acquisition) leaseOf(ctx context.Context, p part, fence int64, o backend.Outcome) (*Lease, error) {
	s := hold.Spec{Keys: p.k, What: p.what, Ops: p.p, Token: a.token, Fence: fence, Cfg: p.cfg, Side: string(p.side),
		Start: o.Start, Handed: o.Handed, TTL: o.TTL, MaxFrom: o.MaxFrom}
	if a.unknown || a.resent {
		s.BuryFor = buryFor(p.cfg)
	}
	h, err := a.c.holds.Keep(ctx, s)
	if err != nil {
		a.failed(err) // the rest, taken in Redis, is undone by run
		return nil, err
	}
	l := &Lease{of: h, end: h.FirstEnd()}
	a.c.dep.Announce(ctx)
	return l, nil
}

// epochs returns each hub's epoch of a channel (see hub.epoch).
func (c *Client) epochs(channel string) []uint64 {
	e := make([]uint64, len(c.hubs))
	for i, h := range c.hubs {
		e[i] = h.Epoch(channel)
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

// unconfirmedFor is how long a wait polls, its subscription unconfirmed,
// before it says so in the log.
const unconfirmedFor = 5 * time.Second

// Polling, when pub/sub is refused: a wait's first sleep is pollFirst,
// doubled after each sleep up to pollMax, and never longer than the wait
// would sleep anyway (the holder's remaining lease, its place's renewal).
const (
	pollFirst = 16 * time.Millisecond
	pollMax   = 256 * time.Millisecond
)

// poller is one wait's polling backoff (fresh for every wait).
type poller struct {
	d    *deploy.Deployment
	next time.Duration
}

// cap returns how long the wait sleeps at most: bound, or less while
// pub/sub is refused (from pollFirst, doubling), or pollMax while the
// wait's subscription is unconfirmed (a confirmation takes a round trip:
// a wait that finds none after pollMax checks the lock, and again).
func (p *poller) cap(bound time.Duration, unconfirmed bool) time.Duration {
	if p.d.Refused() == nil {
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
