package torture

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-go/dlock"
)

// Burst of calls with short ctxs and long names during blockedwrite.
const (
	burstGoroutines = 12
	burstLead       = 150 * time.Millisecond // the burst starts this long before the path stops
)

// burst runs the blockedwrite fault's burst in a worker: "burst MS SEED
// SLOTS" (SLOTS: the client slots to use, "02" or "012"). Each of its
// goroutines, until MS have passed, takes a long name (3 in 4; a
// FairMutex one in 3 of those) or a shared Mutex name with a 20-300 ms
// ctx (log-uniform; Lock or TryLock), on a random one of those slots,
// and holds what it gets for 0.1-5 ms.
func (w *worker) burst(ctx context.Context, cmd string) {
	var ms int64
	var seed uint64
	var slots string
	if _, err := fmt.Sscanf(cmd, "burst %d %d %s", &ms, &seed, &slots); err != nil {
		stderrf("torture worker: %q: %v", cmd, err)
		return
	}
	until := time.Now().Add(time.Duration(ms) * time.Millisecond)
	var wg sync.WaitGroup
	for i := range burstGoroutines {
		g := w.newGor(1000+int(w.gids.Add(1)), seed+uint64(i)*0x9e3779b97f4a7c15)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(until) && ctx.Err() == nil {
				g.burstCall(ctx, slots)
			}
		}()
	}
	wg.Wait()
}

// burstCall is one call of a burst.
func (g *gor) burstCall(ctx context.Context, slots string) {
	s := g.w.slots[int(slots[g.rng.IntN(len(slots))]-'0')]
	c, cid := s.current()
	opt, ttl, fixed := g.lockTTL()
	var name string
	switch n := g.rng.IntN(12); {
	case n < 3:
		name = "fL0"
	case n < 9:
		name = []string{"mL0", "mL0", "mL1"}[g.rng.IntN(3)]
	default:
		name = g.pickName(mutexNames)
	}
	sp := spec{scn: "blockedwrite", client: cid, names: []string{name}, ttls: one(name, ttl), fixed: fixed,
		timeout: logBetween(g.rng, 20*time.Millisecond, 300*time.Millisecond)}
	var call func(context.Context) (*dlock.Lease, error)
	if lockKind(name) == "fair" {
		f := c.FairMutex(realName(name), opt, dlock.WithQueueTTL(queueTTL))
		sp.wait, call = true, func(ctx context.Context) (*dlock.Lease, error) { return f.Lock(ctx) }
	} else {
		m := c.Mutex(realName(name), opt, dlock.WithQueueTTL(queueTTL))
		if g.rng.IntN(2) == 0 {
			sp.wait, call = true, func(ctx context.Context) (*dlock.Lease, error) { return m.Lock(ctx) }
		} else {
			call = func(ctx context.Context) (*dlock.Lease, error) { return m.TryLock(ctx) }
		}
	}
	if h := g.acquire(ctx, sp, call); h != nil {
		g.work(ctx, h, logBetween(g.rng, 100*time.Microsecond, 5*time.Millisecond))
		g.release(h, relNormal)
	}
}

// The reset fault's burst: on names private to the worker, with long TTLs
// (so that a hold left behind by a reset outlasts the wait bound), a
// holder on a proxied client and a rival on the direct one.
const (
	resetBurstGoroutines = 4
	resetTTLMin          = 3 * time.Second
	resetTTLMax          = 5 * time.Second
)

// resetBurst runs the reset fault's burst in a worker: "rburst MS SEED".
// Each of its goroutines, until MS have passed, takes its name
// (resetName) on a proxied client (slot 0 or 2) with a 2-200 ms ctx
// (log-uniform) and a 3-5 s renewed lease, works, re-enters it through
// its context, Extends it, releases it as the mix does (session), while a
// rival on slot 1 (not proxied: no reset reaches it) waits for it with a
// 6 s ctx and lets it go at once. A grant or a re-entry that a reset
// left behind at the server (a hold the holder does not know of, a count
// its Unlock does not undo) keeps the rival waiting on a lock the history
// says is free, for seconds: the wait check sees it.
func (w *worker) resetBurst(ctx context.Context, cmd string) {
	var ms int64
	var seed uint64
	if _, err := fmt.Sscanf(cmd, "rburst %d %d", &ms, &seed); err != nil {
		stderrf("torture worker: %q: %v", cmd, err)
		return
	}
	until := time.Now().Add(time.Duration(ms) * time.Millisecond)
	var wg sync.WaitGroup
	for i := range resetBurstGoroutines {
		g := w.newGor(1000+int(w.gids.Add(1)), seed+uint64(i)*0x9e3779b97f4a7c15)
		name := resetName(w.cfg.Slot, i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(until) && ctx.Err() == nil {
				g.resetRound(ctx, name)
			}
		}()
	}
	wg.Wait()
}

// resetRound is one round of a reset burst's goroutine on name.
func (g *gor) resetRound(ctx context.Context, name string) {
	lockOn := func(c *dlock.Client, ttl time.Duration) func(context.Context) (*dlock.Lease, error) {
		opt := dlock.WithTTL(ttl)
		if lockKind(name) == "fair" {
			f := c.FairMutex(name, opt, dlock.WithQueueTTL(queueTTL))
			return func(ctx context.Context) (*dlock.Lease, error) { return f.Lock(ctx) }
		}
		m := c.Mutex(name, opt, dlock.WithQueueTTL(queueTTL))
		return func(ctx context.Context) (*dlock.Lease, error) { return m.Lock(ctx) }
	}
	var rival sync.WaitGroup
	defer rival.Wait()
	hg := g.helper()
	rival.Add(1)
	go func() {
		defer rival.Done()
		sleepCtx(ctx, logBetween(hg.rng, 100*time.Microsecond, 20*time.Millisecond))
		c, cid := hg.w.slots[1].current()
		ttl := between(hg.rng, resetTTLMin, resetTTLMax)
		sp := spec{scn: "reset-rival", client: cid, names: []string{name}, ttls: one(name, ttl), wait: true,
			timeout: 6 * time.Second}
		if h := hg.acquire(ctx, sp, lockOn(c, ttl)); h != nil {
			hg.work(ctx, h, logBetween(hg.rng, 100*time.Microsecond, 2*time.Millisecond))
			hg.release(h, relNormal)
		}
	}()
	c, cid := g.w.slots[[]int{0, 2}[g.rng.IntN(2)]].current()
	ttl := between(g.rng, resetTTLMin, resetTTLMax)
	lock := lockOn(c, ttl)
	sp := spec{scn: "reset", client: cid, names: []string{name}, ttls: one(name, ttl), wait: true,
		timeout: logBetween(g.rng, 2*time.Millisecond, 200*time.Millisecond)}
	if h := g.acquire(ctx, sp, lock); h != nil {
		g.session(ctx, h, lock, sp)
	}
}
