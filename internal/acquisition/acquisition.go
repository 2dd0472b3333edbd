package acquisition

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/backend"
	"github.com/dlock-go/dlock/internal/backoff"
	"github.com/dlock-go/dlock/internal/deploy"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/hold"
	"github.com/dlock-go/dlock/internal/protocol"
	"github.com/dlock-go/dlock/internal/telemetry"
	"github.com/dlock-go/dlock/internal/transport"
	"github.com/dlock-go/dlock/internal/wake"
)

// Acquirer is what acquisitions need of their Client: its deployment,
// hubs, holds, telemetry. One per Client (New).
type Acquirer struct {
	be          backend.Backend
	caps        backend.Caps
	dep         *deploy.Deployment
	tel         *telemetry.Telemetry
	hubs        []*wake.Hub
	holds       *hold.Keeper
	drift       backend.Drift
	resendAfter time.Duration
	topo        *transport.Topology
	gaveBack    func(err error) bool
	life        context.Context
}

// Config is a Client's, for New.
type Config struct {
	Backend backend.Backend
	Dep     *deploy.Deployment
	Tel     *telemetry.Telemetry
	Hubs    []*wake.Hub // one per node
	Holds   *hold.Keeper
	Drift   backend.Drift
	// ResendAfter: a call may be sent twice by the client library when
	// its reply takes this long (the least of the nodes'
	// driver.Info.ResendAfter; 0: never). See "Acquires sent twice".
	ResendAfter time.Duration
	// Topology says whether the Client runs on a Redis Cluster, and
	// refreshes its slot map after a failed call
	// (internal/transport/topology.go, "Topology changes").
	Topology *transport.Topology
	// GaveBack reports whether err is a quorum round's that failed and
	// has given back, node by node, what it may have won: the acquire
	// has nothing more to undo for it.
	GaveBack func(err error) bool
	// Life ends when the Client closes: waits return errs.Closed.
	Life context.Context
}

// New returns the Acquirer of a Client.
func New(cfg Config) *Acquirer {
	return &Acquirer{be: cfg.Backend, caps: cfg.Backend.Caps(), dep: cfg.Dep, tel: cfg.Tel, hubs: cfg.Hubs, holds: cfg.Holds,
		drift: cfg.Drift, resendAfter: cfg.ResendAfter, topo: cfg.Topology,
		gaveBack: cfg.GaveBack, life: cfg.Life}
}

// Acquisition is one acquire: a Lock or TryLock of any primitive, or a
// LockAll of Mutexes taken by one script. It is the only acquire path:
// the deployment check, telemetry, the attempt, the wait, the undo of
// what a failed acquire left, and the holds of what it took. The caller
// (the root's acquire, LockAll) fills in the exported fields, then Runs it.
type Acquisition struct {
	c       *Acquirer
	What    string // the primitive, for telemetry ("LockAll" for a set)
	Name    string // the lock's name; a set's names, joined
	Channel string // where its wake-ups come
	Token   string
	Parts   []Part              // what it takes: one lock (One), or a set's
	one     [1]Part             // the one lock of a Lock or TryLock (no allocation of its own)
	held    [1]*hold.Hold       // the hold of that one lock (no allocation of its own)
	Spec    backend.AttemptSpec // what the backend was told (its attempts keep a pointer to it)
	Attempt backend.AttemptFunc
	// KeepAlive, when positive, is how often a waiter must try again at
	// the least, to keep its place in a queue alive.
	KeepAlive time.Duration
	// Leave, if set, gives up the waiter's places (one call per lock)
	// when a Lock gives up without the lock (ctx ended, client closed,
	// Redis error). Built only then. LeaveSpec, for a Lock of one lock,
	// is the same without a function made per acquire: its place is
	// Spec.Member's, given up by Spec.Leave.
	Leave     func() []protocol.Call
	LeaveSpec bool
	// HandOff: a release may hand the lock to this waiter (handoff.go);
	// last is its latest place, which a hand-off names.
	HandOff bool
	last    backend.Place
	// moving is the last cluster error a Lock's attempt met and waited
	// through (see "Topology changes" in internal/transport/topology.go), and pause how long it waited.
	moving error
	// why is why the last attempt was not won, when it says (backend.Outcome.Why)
	why   error
	pause backoff.Doubling
	// soon are the give-backs of a round that ctx's end cut short, made
	// at once beside Run's own undo (giveBack), which waits for them
	soon sync.WaitGroup
	// Detect, if set, looks for a deadlock while the acquire waits (a
	// Lock whose ctx carries leases: the root's deadlock_detect.go).
	Detect Detector
	unsettled
}

// Detector is a wait's deadlock detection. Run records the wait when it
// begins (Record), checks after each pause Next returns, and removes the
// record when the wait ends however it ends (Done).
type Detector interface {
	Next() time.Duration
	Record(ctx context.Context)
	// Check returns the error to end the wait with (its victim's
	// *DeadlockError) when the wait is a deadlock's victim, else nil:
	// a failed read is no deadlock, and is looked at again.
	Check(ctx context.Context) error
	Done(ctx context.Context)
}

// New returns an acquisition by c; the caller fills it in.
func (c *Acquirer) New() *Acquisition {
	return &Acquisition{c: c, pause: backoff.New(transport.MovingFirst, transport.MovingMax)}
}

// One makes p the one lock the acquisition takes (a Lock or TryLock).
func (a *Acquisition) One(p Part) {
	a.one[0] = p
	a.Parts = a.one[:]
}

// Part is one lock an acquisition takes: its request (by pointer: the
// handle's, or a LockAll part's), the hold's protocol as the backend runs
// it (Held: a quorum's fans out to its nodes), and the acquire's options.
type Part struct {
	*backend.Request
	Held backend.HoldOps
	Cfg  backend.LockConfig
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
func (a *Acquisition) each(ctx context.Context, mk func(p Part) protocol.Call) error {
	var errs []error
	for _, p := range a.Parts {
		errs = append(errs, a.c.be.Everywhere(ctx, mk(p)))
	}
	return errors.Join(errs...)
}

// Run acquires: one attempt, then, for a Lock, waits woken by releases.
// What an acquire that ends without the lock may have left in Redis — a
// hold taken by an attempt whose outcome is unknown (a Redis error, a
// reply that came after ctx ended), a place in a queue — is undone once
// that attempt can no longer run on the server (transport.Settled): before run
// returns when Redis answers within undoGrace, else in the background
// (hold.Keeper.Undo). So no lock is left held by nobody, and run returns as
// soon as ctx ends.
// Run runs the acquisition: a TryLock (wait false) or a Lock. It returns
// the holds it took: its one lock's, or a set's, in its Parts' order.
func (a *Acquisition) Run(ctx context.Context, wait bool) (hs []*hold.Hold, err error) {
	c := a.c
	start := time.Now()
	ctx, span := c.tel.AcquireStarted(ctx, a.What, a.Name, wait)
	defer func() { c.tel.AcquireEnded(ctx, span, a.What, a.Name, start, err) }()
	if err := c.dep.Check(ctx); err != nil {
		if ctx.Err() != nil {
			return nil, errs.WaitEnded(a.Name, ctx.Err())
		}
		return nil, err
	}
	defer func() {
		defer a.soon.Wait() // (giveBack's, made beside this undo: one grace for both)
		leave := wait && (a.Leave != nil || a.LeaveSpec)
		if hs != nil || (!a.unknown && !leave) {
			return
		}
		// Settled, for an acquire, means buried: once the token is in the
		// lock's dead set, no attempt of it that is still on its way, or
		// sent again, can take anything, so what the attempts took is
		// undone at once — not when the client library is done with
		// them, which says nothing of what the server will still run.
		why := err // (the closure below outlives Run: a copy, so that err stays on the stack when nothing is undone)
		undo := c.holds.Undo
		if !c.caps.Bury {
			// Nothing buries the token: the release must not reach the
			// server before the attempt may have run there (a late SET NX
			// would take the lock for nobody), so it waits for the
			// attempt to be settled, within undoGrace of ctx's end.
			undo = c.holds.UndoAfter
		}
		undo(ctx, a.after(), a.ttl(), func(ctx context.Context) error {
			// Where the bury fails the release may still be made: a late
			// attempt there is what it was before, held by nobody for
			// its TTL at most; the whole undo runs again later.
			var err0, err1, err2 error
			if c.caps.Bury {
				err0 = a.each(ctx, func(p Part) protocol.Call { return backend.BuryCall(p.K, a.Token, p.Cfg) })
			}
			// The release and the leave go together, once the bury has
			// answered: in either order the attempt can take nothing
			// more, and a round trip in turn each made a waiter's undo
			// three, longer than undoGrace on a link of 3 ms each way
			// (TestCancelFirstInstantsUndone's "both ways" rows).
			var both sync.WaitGroup
			if leave {
				both.Go(func() {
					for _, lc := range a.leaves() {
						err2 = errors.Join(err2, c.be.Everywhere(ctx, lc))
					}
				})
			}
			if a.unknown {
				c.tel.Log.Info("dlock: acquire outcome unknown; undoing it", "lock", a.Name, "err", why)
				for _, p := range a.Parts {
					err1 = errors.Join(err1, c.be.Run(ctx, p.Held.Release(a.Token, 0, 0)).Err)
				}
			}
			both.Wait()
			return errors.Join(err0, err1, err2)
		})
	}()
	var seen []uint64
	if wait {
		seen = c.Epochs(a.Channel)
	}
	hs, next, err := a.try(ctx, wait, "")
	if hs != nil || err != nil {
		return hs, err
	}
	if !wait {
		if a.why != nil {
			return nil, fmt.Errorf("%w: %q: %w", errs.NotObtained, a.Name, a.why)
		}
		return nil, fmt.Errorf("%w: %q is held", errs.NotObtained, a.Name)
	}

	c.dep.Announce(ctx) // inspectors can tell who waits
	c.tel.Waiting(a.What, a.Name, 1)
	defer c.tel.Waiting(a.What, a.Name, -1)
	var due time.Time // the next deadlock check's (Detect)
	if a.Detect != nil {
		a.Detect.Record(ctx)
		defer a.Detect.Done(ctx)
		first := a.Detect.Next()
		due = time.Now().Add(first)
		next = min(next, first)
	}
	err = c.WaitLoop(ctx, a.Name, a.Channel, a.Token, seen, a.bound(next),
		func(ctx context.Context, msg string) (bool, time.Duration, error) {
			var next time.Duration
			hs, next, err = a.try(ctx, true, msg)
			if hs != nil || err != nil || a.Detect == nil {
				return hs != nil || err != nil, a.bound(next), err
			}
			if now := time.Now(); !now.Before(due) {
				if err = a.Detect.Check(ctx); err != nil {
					return true, 0, err
				}
				due = now.Add(a.Detect.Next())
			}
			return false, a.bound(min(next, time.Until(due))), nil
		})
	if err != nil && a.moving != nil && errors.Is(err, errs.NotObtained) {
		err = fmt.Errorf("%w (the cluster was failing meanwhile: %w)", err, a.moving)
	}
	if err != nil && a.why != nil && errors.Is(err, errs.NotObtained) {
		err = fmt.Errorf("%w (its last round: %w)", err, a.why)
	}
	return hs, err
}

// leaves are the calls that give up a waiter's places (Leave, LeaveSpec).
func (a *Acquisition) leaves() []protocol.Call {
	if a.LeaveSpec {
		return []protocol.Call{a.Spec.Leave(a.Spec.Member)}
	}
	return a.Leave()
}

// WaitLoop waits on a channel until check reports done or fails. It
// joins the channel's listeners, checks once the subscription is confirmed
// (a release may have come before it) — unless it was already subscribed,
// with the same epochs, before the attempt that came first (seen, from
// epochs) — then sleeps until a notification or first/the next bound that
// check returned, whichever is sooner, and checks again. When ctx ends it
// returns an error matching errs.NotObtained and ctx.Err(); when the Client
// closes, errs.Closed.
func (c *Acquirer) WaitLoop(ctx context.Context, name, channel, token string, seen []uint64, bound time.Duration,
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
	poll := poller{d: c.dep, pause: backoff.New(pollFirst, pollMax)}
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
			return errs.WaitEnded(name, ctx.Err())
		case <-c.life.Done():
			return errs.Closed
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
func (a *Acquisition) ttl() time.Duration {
	var d time.Duration
	for _, p := range a.Parts {
		d = max(d, p.Cfg.TTL)
	}
	return d
}

// try makes one attempt, or takes the lock that msg, a hand-off, gave
// it. One whose outcome is unknown is marked so, for run to undo it.
func (a *Acquisition) try(ctx context.Context, queued bool, msg string) ([]*hold.Hold, time.Duration, error) {
	if a.HandOff && msg != "" {
		if o, ok := HandedOver(msg, a.last, a.c.drift); ok {
			return a.lease(ctx, o)
		}
	}
	if a.why != nil {
		// The last round said why it did not win (a quorum's: no fence,
		// perhaps for a node not folded): fold again first, as the next
		// acquire would (nothing once the fold is done).
		_ = a.c.dep.Fold(ctx)
	}
	sent := time.Now()
	o, err := a.Attempt(ctx, queued, !a.last.Sent.IsZero())
	if r := a.c.resendAfter; o.SentTwice || r > 0 && time.Since(sent) >= r {
		// A copy of this attempt may still run (see "Acquires sent
		// twice"): a lease buries its token before its release, and an
		// acquire that ends without the lock undoes what a copy may take.
		a.resent, a.unknown = true, true
	}
	a.giveBack(ctx, o.GiveBack)
	if err != nil {
		a.c.topo.Hint(err)
		// A quorum's round that failed has given back what it may have
		// won, node by node (giveBack).
		if !a.c.gaveBack(err) && !errors.Is(err, errs.Closed) && !errors.Is(err, errs.InvalidArgument) {
			a.failed(err)
		}
		if ctx.Err() != nil {
			return nil, 0, errs.WaitEnded(a.Name, ctx.Err())
		}
		if queued && a.c.topo.Cluster() && transport.Transient(err) {
			a.moving = err
			return nil, a.pause.Next(), nil
		}
		return nil, 0, err
	}
	a.pause.Reset()
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

// giveBack runs the undo steps of an attempt that did not win (a quorum
// round's): those to be made at once, at once; the others in the
// background once their After has closed. A step that buries first
// (Buries) is made at once too when ctx has ended — the acquire returns
// now, and what it left must be undone before it does when Redis answers
// within undoGrace — as the acquire's own undo is (see Run): buried, the
// call still on its way takes nothing. When ctx has ended the steps made
// at once run beside Run's own undo (soon), which waits for them: one
// grace for both, not one after the other.
func (a *Acquisition) giveBack(ctx context.Context, steps []backend.UndoStep) {
	ended := ctx.Err() != nil
	for _, g := range steps {
		switch {
		case ended && (g.After == nil || g.Buries):
			after := g.After
			if after == nil {
				after = transport.Closed()
			}
			a.soon.Go(func() { a.c.holds.Undo(ctx, after, a.ttl(), g.Undo) })
		case g.After == nil:
			a.c.holds.Undo(ctx, transport.Closed(), a.ttl(), g.Undo)
		default:
			a.c.holds.UndoLater(g.After, a.ttl(), g.Undo)
		}
	}
}

// lease makes the holds of what an attempt took, registered with the
// watchdog: its one lock's, or a set's. If the Client was closed
// meanwhile it returns errs.Closed, and run undoes what was taken.
func (a *Acquisition) lease(ctx context.Context, o backend.Outcome) ([]*hold.Hold, time.Duration, error) {
	if o.Fences == nil { // one lock
		h, err := a.leaseOf(ctx, a.Parts[0], o.Fence, o)
		if err != nil {
			return nil, 0, err
		}
		a.held[0] = h
		return a.held[:], 0, nil
	}
	hs := make([]*hold.Hold, len(a.Parts))
	for i, p := range a.Parts {
		h, err := a.leaseOf(ctx, p, o.Fences[i], o)
		if err != nil {
			Release(ctx, hs[:i])
			return nil, 0, err
		}
		hs[i] = h
	}
	return hs, 0, nil
}

// leaseOf makes the hold of one lock taken with fence. If the Client was
// closed meanwhile, what was taken is undone by run.
func (a *Acquisition) leaseOf(ctx context.Context, p Part, fence int64, o backend.Outcome) (*hold.Hold, error) {
	s := hold.Spec{Keys: p.K, What: p.What, Ops: p.Held, Token: a.Token, Fence: fence, Cfg: p.Cfg, Side: p.Side,
		Start: o.Start, Handed: o.Handed, TTL: o.TTL, MaxFrom: o.MaxFrom}
	if a.unknown || a.resent {
		s.BuryFor = backend.BuryFor(p.Cfg)
	}
	h, err := a.c.holds.Keep(ctx, s)
	if err != nil {
		a.failed(err) // the rest, taken in Redis, is undone by run
		return nil, err
	}
	a.c.dep.Announce(ctx)
	return h, nil
}

// Release unlocks the first leases of holds just taken, the last taken
// first, within ctx or, once it has ended, within undoGrace (a release
// that cannot be made then goes on in the background: hold.Hold.Unlock).
func Release(ctx context.Context, hs []*hold.Hold) {
	ctx, cancel := hold.Graced(ctx)
	defer cancel()
	for i := len(hs) - 1; i >= 0; i-- {
		_ = hs[i].Unlock(ctx, hs[i].FirstEnd())
	}
}

// Epochs returns each hub's epoch of a channel (see hub.epoch).
func (c *Acquirer) Epochs(channel string) []uint64 {
	e := make([]uint64, len(c.hubs))
	for i, h := range c.hubs {
		e[i] = h.Epoch(channel)
	}
	return e
}

// bound caps a wait at the keep-alive interval.
func (a *Acquisition) bound(d time.Duration) time.Duration {
	if a.KeepAlive > 0 && d > a.KeepAlive {
		return a.KeepAlive
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
	d     *deploy.Deployment
	pause backoff.Doubling
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
	return min(p.pause.Next(), bound)
}
