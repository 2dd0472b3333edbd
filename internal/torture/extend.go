package torture

import (
	"context"
	"time"

	"github.com/dlock-go/dlock"
)

// extendRace holds a short-TTL lease renewed by the watchdog and Extends
// it, again and again, to a short d and then to a d 4-10 times longer,
// aiming the long Extend at the moment the watchdog's next renewal (with
// the old, short TTL) is in flight. Between Extends it keeps working, so
// that its beliefs are recorded while contenders try to take the lock. If
// the lock is taken, it contends instead.
func (g *gor) extendRace(ctx context.Context) {
	c, cid := g.slot().current()
	name := g.pickName(extNames)
	ttl := between(g.rng, 60*time.Millisecond, 200*time.Millisecond)
	m := c.Mutex(name, dlock.WithTTL(ttl))
	sp := spec{scn: "extend", client: cid, names: []string{name}, ttls: one(name, ttl), wait: true,
		timeout: between(g.rng, time.Millisecond, 30*time.Millisecond)}
	h := g.acquire(ctx, sp, func(ctx context.Context) (*dlock.Lease, error) { return m.Lock(ctx) })
	if h == nil {
		g.contend(ctx, c, cid, name)
		return
	}
	cycles := 2 + g.rng.IntN(6)
	for i := 0; i < cycles && ctx.Err() == nil; i++ {
		short := between(g.rng, 60*time.Millisecond, 200*time.Millisecond)
		t0 := time.Now()
		if !g.extendOK(ctx, h, short) {
			break
		}
		// The watchdog renews a lease TTL/3 after the request that last
		// confirmed it (batched up to TTL/6 earlier).
		var at time.Duration
		if g.rng.IntN(5) < 3 {
			at = short/3 + between(g.rng, 0, 2500*time.Microsecond) - 1500*time.Microsecond
		} else {
			at = between(g.rng, short/6, short/3+2*time.Millisecond) - time.Millisecond
		}
		if !g.work(ctx, h, time.Until(t0.Add(at))) {
			break
		}
		long := min(short*time.Duration(4+g.rng.IntN(7)), 2*time.Second)
		if !g.extendOK(ctx, h, long) {
			break
		}
		if !g.work(ctx, h, between(g.rng, long/3, long/2)) {
			break
		}
		if g.rng.IntN(2) == 0 && !g.extendGivenUp(ctx, h, short) {
			break
		}
	}
	g.release(h, relNormal)
}

// extendGivenUp (issue 23, finding 3) lengthens the lease to 1.5-3 s
// (renewed every 0.5-1 s from then on), then, 3-8 times, asks for a much
// shorter one with a ctx short enough to give up on, lengthens it again
// and keeps working while the lease says held: an Extend that fails
// leaves the lease as it was, and a late copy landing after the give-up
// (a "late" fault) must not cut the lease behind the holder's back
// (contenders on the name would take it within ms).
func (g *gor) extendGivenUp(ctx context.Context, h *held, short time.Duration) bool {
	big := between(g.rng, 1500*time.Millisecond, 3*time.Second)
	for range 3 + g.rng.IntN(6) {
		if !g.extendOK(ctx, h, big) || !g.work(ctx, h, between(g.rng, 0, 20*time.Millisecond)) {
			return false
		}
		ectx, cancel := context.WithTimeout(ctx, logBetween(g.rng, 2*time.Millisecond, 300*time.Millisecond))
		err := g.extend(ectx, h, between(g.rng, 20*time.Millisecond, short))
		cancel()
		if err != nil && !g.believe(h) {
			return false
		}
		if !g.work(ctx, h, between(g.rng, 50*time.Millisecond, 300*time.Millisecond)) {
			return false
		}
	}
	return true
}

// extendOK extends h and reports whether it is still held.
func (g *gor) extendOK(ctx context.Context, h *held, d time.Duration) bool {
	ectx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return g.extend(ectx, h, d) == nil && g.believe(h)
}

// contend tries to take name every few milliseconds for a while; on
// success it works a little and unlocks.
func (g *gor) contend(ctx context.Context, c *dlock.Client, cid, name string) {
	until := time.Now().Add(between(g.rng, 200*time.Millisecond, time.Second))
	for time.Now().Before(until) && ctx.Err() == nil {
		ttl := between(g.rng, 60*time.Millisecond, 200*time.Millisecond)
		m := c.Mutex(name, dlock.WithTTL(ttl))
		sp := spec{scn: "extend-contend", client: cid, names: []string{name}, ttls: one(name, ttl)}
		call := func(ctx context.Context) (*dlock.Lease, error) { return m.TryLock(ctx) }
		if g.rng.IntN(10) < 3 {
			sp.wait, sp.timeout = true, logBetween(g.rng, time.Millisecond, 30*time.Millisecond)
			call = func(ctx context.Context) (*dlock.Lease, error) { return m.Lock(ctx) }
		}
		if h := g.acquire(ctx, sp, call); h != nil {
			g.work(ctx, h, logBetween(g.rng, 500*time.Microsecond, 20*time.Millisecond))
			g.release(h, relNormal)
			return
		}
		sleepCtx(ctx, between(g.rng, 2*time.Millisecond, 10*time.Millisecond))
	}
}
