package torture

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-go/dlock"
)

// mixedOpts mixes per-call options on one name: 1-3 goroutines take the
// same shared Mutex, FairMutex, RWMutex side or Semaphore at once, each
// call with its own WithQueueTTL (150-600 ms), WithTTL or WithLease; or,
// three times in ten, a FairMutex arrival-order round (fifoRound).
func (g *gor) mixedOpts(ctx context.Context) {
	if g.rng.IntN(10) < 3 {
		g.fifoRound(ctx)
		return
	}
	var name string
	switch n := g.rng.IntN(8); {
	case n < 2:
		name = g.pickName(mutexNames)
	case n < 4:
		name = g.pickName(fairNames)
	case n < 6:
		name = g.pickName(rwNames)
	default:
		name = g.pickName(semNames)
	}
	var wg sync.WaitGroup
	for range 1 + g.rng.IntN(3) {
		hg := g.helper()
		wg.Add(1)
		go func() {
			defer wg.Done()
			hg.mixedCall(ctx, name)
		}()
	}
	wg.Wait()
}

// callOpts picks per-call options: a queue TTL of 150, 300 or 600 ms (at
// most the 600 ms the wait check allows a dead waiter), and a renewed or
// a fixed lease of 100 ms-2 s.
func (g *gor) callOpts() ([]dlock.LockOption, time.Duration, bool) {
	qttl := []time.Duration{150 * time.Millisecond, 300 * time.Millisecond, queueTTL}[g.rng.IntN(3)]
	d := logBetween(g.rng, 100*time.Millisecond, 2*time.Second)
	if g.rng.IntN(4) == 0 {
		return []dlock.LockOption{dlock.WithQueueTTL(qttl), dlock.WithLease(d)}, d, true
	}
	return []dlock.LockOption{dlock.WithQueueTTL(qttl), dlock.WithTTL(d)}, d, false
}

// mixedCall is one acquire of name with options of its own (the handle's
// are overridden), then a session.
func (g *gor) mixedCall(ctx context.Context, name string) {
	c, cid := g.slot().current()
	opts, ttl, fixed := g.callOpts()
	handle := []dlock.LockOption{dlock.WithTTL(300 * time.Millisecond), dlock.WithQueueTTL(queueTTL)}
	sp := spec{scn: "mixedopts", client: cid, names: []string{name}, ttls: one(name, ttl), fixed: fixed}
	wait := g.rng.IntN(10) < 7
	if wait {
		sp.wait, sp.timeout = true, logBetween(g.rng, 20*time.Millisecond, 1500*time.Millisecond)
	}
	var lock, try func(context.Context, ...dlock.LockOption) (*dlock.Lease, error)
	switch lockKind(name) {
	case "mutex":
		m := c.Mutex(name, handle...)
		lock, try = m.Lock, m.TryLock
	case "fair":
		f := c.FairMutex(name, handle...)
		lock, try = f.Lock, f.TryLock
	case "rw":
		rw := c.RWMutex(name, handle...)
		sp.sides = oneSide(name, "w")
		lock, try = rw.Lock, rw.TryLock
		if g.rng.IntN(2) == 0 {
			sp.sides = oneSide(name, "r")
			lock, try = rw.RLock, rw.TryRLock
		}
	case "sem":
		sem := c.Semaphore(name, semCap[name], handle...)
		sp.permits = 1 + g.rng.IntN(semCap[name])
		n := sp.permits
		lock = func(ctx context.Context, o ...dlock.LockOption) (*dlock.Lease, error) {
			return sem.Acquire(ctx, n, o...)
		}
		try = func(ctx context.Context, o ...dlock.LockOption) (*dlock.Lease, error) {
			return sem.TryAcquire(ctx, n, o...)
		}
	}
	call := func(ctx context.Context) (*dlock.Lease, error) { return try(ctx, opts...) }
	if wait {
		call = func(ctx context.Context) (*dlock.Lease, error) { return lock(ctx, opts...) }
	}
	h := g.acquire(ctx, sp, call)
	if h == nil {
		return
	}
	var reenter func(context.Context) (*dlock.Lease, error)
	if lockKind(name) != "sem" {
		// Re-entered with options of its own: a re-entry keeps the hold's.
		ropts, _, _ := g.callOpts()
		reenter = func(ctx context.Context) (*dlock.Lease, error) { return lock(ctx, ropts...) }
	}
	g.session(ctx, h, reenter, sp)
}

// fifoName is the FairMutex of the arrival-order rounds of driver
// goroutine g of worker slot s: private, so that only the round's own
// waiters queue on it.
func fifoName(s, g int) string { return fmt.Sprintf("fq%d.%d", s, g) }

// fifoRound is issue 23's finding 5 as a shape: H holds a FairMutex; A
// queues with a 6 s queue TTL; B queues with 150-400 ms and gives up
// after 30-150 ms; 350-900 ms later C queues (its own queue TTL: 300 ms,
// 600 ms or 6 s); H lets go. A arrived first and kept its place alive
// (it renews it every 2 s): it must be served before C. Each waiter's
// place is seen with Inspect and recorded (queued) once it is in the
// queue; the FIFO check reads those.
func (g *gor) fifoRound(ctx context.Context) {
	c, cid := g.slot().current()
	name := fifoName(g.w.cfg.Slot, g.id)
	ttl := between(g.rng, time.Second, 2*time.Second)
	m := c.FairMutex(name, dlock.WithTTL(ttl))
	sp := spec{scn: "fifo-hold", client: cid, names: []string{name}, ttls: one(name, ttl), wait: true, timeout: time.Second}
	h := g.acquire(ctx, sp, func(ctx context.Context) (*dlock.Lease, error) { return m.Lock(ctx) })
	if h == nil {
		return
	}
	known := map[string]bool{h.lease.Token(): true}
	g.queuedTokens(ctx, c, name, known, 0) // leftovers of an earlier round are not arrivals
	var wg sync.WaitGroup
	defer wg.Wait()
	waiter := func(label string, qttl, timeout time.Duration) (op int64, returned chan struct{}) {
		hg := g.helper()
		wc, wcid := hg.slot().current()
		wttl := between(hg.rng, time.Second, 2*time.Second)
		f := wc.FairMutex(name, dlock.WithTTL(wttl), dlock.WithQueueTTL(qttl))
		ops := make(chan int64, 1)
		returned = make(chan struct{})
		wsp := spec{scn: "fifo-" + label, client: wcid, names: []string{name}, ttls: one(name, wttl), wait: true,
			timeout: timeout, began: func(op int64) { ops <- op }}
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := hg.acquire(ctx, wsp, func(ctx context.Context) (*dlock.Lease, error) { return f.Lock(ctx) })
			close(returned)
			if x != nil {
				hg.work(ctx, x, logBetween(hg.rng, time.Millisecond, 10*time.Millisecond))
				hg.release(x, relNormal)
			}
		}()
		return <-ops, returned
	}
	see := func(op int64, returned chan struct{}) {
		until := time.Now().Add(2 * time.Second)
		for time.Now().Before(until) && ctx.Err() == nil {
			if g.queuedTokens(ctx, c, name, known, op) {
				return
			}
			select {
			case <-returned:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}
	opA, retA := waiter("a", between(g.rng, 4*time.Second, 6*time.Second), 8*time.Second)
	see(opA, retA)
	opB, retB := waiter("b", between(g.rng, 150*time.Millisecond, 400*time.Millisecond), between(g.rng, 30*time.Millisecond, 150*time.Millisecond))
	see(opB, retB)
	<-retB
	g.work(ctx, h, between(g.rng, 350*time.Millisecond, 900*time.Millisecond))
	qC := []time.Duration{300 * time.Millisecond, queueTTL, 6 * time.Second}[g.rng.IntN(3)]
	opC, retC := waiter("c", qC, 8*time.Second)
	see(opC, retC)
	g.work(ctx, h, logBetween(g.rng, 100*time.Microsecond, 5*time.Millisecond))
	g.release(h, relNormal)
}

// queuedTokens reads name's queue; a waiter not in known is recorded as
// acquire op's place (op 0: only remembered) and true returned.
func (g *gor) queuedTokens(ctx context.Context, c *dlock.Client, name string, known map[string]bool, op int64) bool {
	ictx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	info, err := c.Inspect(ictx, dlock.KindMutex, name)
	cancel()
	if err != nil {
		return false
	}
	found := false
	for _, w := range info.Waiters {
		if known[w.Token] {
			continue
		}
		known[w.Token] = true
		if op != 0 && !found {
			g.emit(Event{K: kQueued, Op: op, Names: []string{name}, Owners: []string{w.Token}})
			found = true
		}
	}
	return found
}
