package torture

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/dlock-go/dlock"
)

// Deadlock detection (deadlock_detect.go, internal/deadlock): a worker
// holds random locks of every kind and, holding them, waits for more
// through the leases' contexts (a wait that carries leases records
// itself; after the Client's delay it reads the wait-for graph).
//
//   - deadlock: the locks are taken in one global order (by name), so
//     that waits chain but never close a cycle: any ErrDeadlock is a false
//     report (checkDeadlocks).
//   - deadlockcycle: random orders, so that cycles close, each wait with
//     a bounded ctx: every ErrDeadlock must name a cycle whose members
//     all were waiting (a call of the history, in flight, carrying those
//     leases), the youngest its victim, the victim the call that gave up,
//     and at most one member of a cycle may give up.
//
// The names are their own (no other scenario waits while holding them):
// a wait of the ordered shape is then in no cycle, whatever the other
// shape does. Mutual exclusion and capacity are the usual checks.

// dlDelay is the WithDeadlockDelay of the shapes' Clients (worker.dl).
const dlDelay = 150 * time.Millisecond

// The shapes' names: the ordered shape's and the cycling shape's.
var (
	dlOrdered = []string{"eD0", "fD0", "mD0", "mD1", "rwD0", "rwD1", "sD0"}
	dlCycle   = []string{"eC0", "fC0", "mC0", "mC1", "rwC0", "sC0"}
)

// dlCycle is a *DeadlockError's cycle as recorded (Event.Cycle).
type dlRecord struct {
	Victim string   `json:"v"`
	Waits  []dlWait `json:"w"`
}

// dlWait is one wait of a recorded cycle.
type dlWait struct {
	Token string   `json:"t"`
	Since int64    `json:"s"` // Unix ns (the wait's record has ms)
	For   []string `json:"f"` // names
	Holds []string `json:"h"` // "name|side|token", side "r"/"w"/""
}

// cycleOf is err's cycle as recorded, "" if err is no *DeadlockError.
func cycleOf(err error) string {
	var de *dlock.DeadlockError
	if !errors.As(err, &de) {
		return ""
	}
	r := dlRecord{Victim: de.Victim}
	for _, w := range de.Waits {
		x := dlWait{Token: w.Token, Since: w.Since.UnixNano()}
		for _, f := range w.For {
			x.For = append(x.For, f.Name)
		}
		for _, h := range w.Holds {
			x.Holds = append(x.Holds, h.Name+"|"+shortSide(h.Side)+"|"+h.Token)
		}
		r.Waits = append(r.Waits, x)
	}
	b, _ := json.Marshal(r)
	return string(b)
}

// shortSide is an RWMutex side as the history writes it.
func shortSide(s string) string {
	switch s {
	case "read":
		return "r"
	case "write":
		return "w"
	}
	return ""
}

// deadlockShape takes 2-3 of the shape's locks, each through the
// contexts of the leases taken before it (a wait that holds them), works
// a little between two, then releases them in a random order.
func (g *gor) deadlockShape(ctx context.Context, cycles bool) {
	if len(g.w.dl) == 0 {
		sleepCtx(ctx, 50*time.Millisecond)
		return
	}
	scn, pool := "deadlock", dlOrdered
	if cycles {
		scn, pool = "deadlockcycle", dlCycle
	}
	k := 2 + g.rng.IntN(2)
	var names []string
	for _, i := range g.rng.Perm(len(pool))[:k] {
		names = append(names, pool[i])
	}
	if !cycles {
		slices.Sort(names) // one global order: chains, never a cycle
	}
	ci := g.rng.IntN(len(g.w.dl))
	c, cid := g.w.dl[ci], "dl"+string(rune('0'+ci))
	hs := g.holding()
	carrying := ctx
	var hold []string
	for i, name := range names {
		sp := spec{scn: scn, client: cid, names: []string{name}, wait: true, hold: slices.Clone(hold)}
		// The first lock carries nothing: a short ctx. The next ones wait
		// holding: long enough for the delay (and a few checks) mostly,
		// now and then ending around the check.
		switch {
		case i == 0:
			sp.timeout = between(g.rng, 100*time.Millisecond, 600*time.Millisecond)
		case g.rng.IntN(5) == 0:
			sp.timeout = between(g.rng, dlDelay/2, 2*dlDelay)
		default:
			sp.timeout = between(g.rng, 400*time.Millisecond, 2500*time.Millisecond)
		}
		var h *held
		side := ""
		if lockKind(name) == "election" {
			opt, ttl, fixed := g.elecTTL()
			sp.ttls, sp.fixed = one(name, ttl), fixed
			h = g.campaign(carrying, sp, c.Election(name, opt, dlock.WithQueueTTL(queueTTL)))
		} else {
			opt, ttl, fixed := g.lockTTL()
			sp.ttls, sp.fixed = one(name, ttl), fixed
			var call func(context.Context) (*dlock.Lease, error)
			switch lockKind(name) {
			case "mutex":
				m := c.Mutex(name, opt, dlock.WithQueueTTL(queueTTL))
				call = func(ctx context.Context) (*dlock.Lease, error) { return m.Lock(ctx) }
			case "fair":
				f := c.FairMutex(name, opt, dlock.WithQueueTTL(queueTTL))
				call = func(ctx context.Context) (*dlock.Lease, error) { return f.Lock(ctx) }
			case "rw":
				rw := c.RWMutex(name, opt, dlock.WithQueueTTL(queueTTL))
				side = "w"
				call = func(ctx context.Context) (*dlock.Lease, error) { return rw.Lock(ctx) }
				if g.rng.IntN(2) == 0 {
					side = "r"
					call = func(ctx context.Context) (*dlock.Lease, error) { return rw.RLock(ctx) }
				}
				sp.sides = oneSide(name, side)
			case "sem":
				sem := c.Semaphore(name, semCap[name], opt, dlock.WithQueueTTL(queueTTL))
				sp.permits = 1
				call = func(ctx context.Context) (*dlock.Lease, error) { return sem.Acquire(ctx, 1) }
			}
			h = g.acquire(carrying, sp, call)
		}
		if h == nil {
			break
		}
		hs.add(h)
		if h.ld != nil {
			carrying = h.ld.Context(carrying)
			hold = append(hold, name+"||")
		} else {
			carrying = h.lease.Context(carrying)
			hold = append(hold, name+"|"+side+"|"+h.lease.Token())
		}
		hs.work(ctx, logBetween(g.rng, 100*time.Microsecond, 20*time.Millisecond))
	}
	if len(hs.hs) > 0 {
		hs.work(ctx, logBetween(g.rng, 100*time.Microsecond, 30*time.Millisecond))
		hs.releaseAll(ctx, func(bool) time.Duration { return logBetween(g.rng, 100*time.Microsecond, 5*time.Millisecond) })
	}
}
