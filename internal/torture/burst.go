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
