package torture

import (
	"context"
	"time"

	"github.com/dlock-go/dlock"
)

// API shapes (issue 23): holds nested through a lease's context on every
// primitive (nested), mixed per-call options on one name (mixedopts), and
// latches reused across phases (latch). Their acquires are recorded like
// every other acquire, so the safety, fence, capacity and wait checks
// apply; check_shapes.go adds what only these shapes can show: a nested
// acquire that waits on its own hold, a FairMutex waiter passed over by a
// later arrival, and a latch counted twice or in the wrong phase.

// Event kinds of the shapes.
const (
	// kQueued: an Inspect saw the waiter of acquire Op (worker W) in its
	// lock's queue (T after Inspect returned; Owners: the waiter's token).
	kQueued = "queued"
	// Latches (Names: the latch; F[0]: the phase, counted by the
	// goroutine that owns the latch; T: called, End: returned).
	kLatchSet   = "lset"   // TrySetCount(P): M "set" or "notset"
	kLatchDown  = "ldown"  // CountDown (M "") or CountDownOnce(M): F[1] the count it returned
	kLatchWait  = "lwait"  // Wait returned (EK empty: the latch was open)
	kLatchCount = "lcount" // Count returned F[1]
)

// nestedAcquire makes an acquire through outer's context (ctx must carry
// it, or be the plain ctx for a second Campaign of one Client), records it
// as a re-entry nested in outer, and right after it returns checks that
// outer is still held (a belief: the checker reads a nested acquire that
// gave up after a long wait while outer was held throughout as a wait on
// its own hold).
func (g *gor) nestedAcquire(ctx context.Context, outer *held, sp spec, call func(ctx context.Context) (*dlock.Lease, error)) *held {
	sp.reent, sp.outer = true, outer.id
	in := g.acquire(ctx, sp, call)
	g.believe(outer)
	g.flush(outer)
	if in != nil {
		in.ttl = max(in.ttl, outer.ttl)
	}
	return in
}

// nestedTimeout is the ctx of a nested acquire that may wait on its own
// hold: long enough that the checker tells such a wait (selfWaitBound)
// from a slow call.
func (g *gor) nestedTimeout() time.Duration {
	return between(g.rng, 1500*time.Millisecond, 2500*time.Millisecond)
}

// otherSlot returns the client slot that is not s: a rival there is
// another dlock Client (other tokens, no lease in its contexts).
func (g *gor) otherSlot(s *slot) *slot { return g.w.slots[(s.idx+1)%len(g.w.slots)] }

// holding is a set of leases held at once by one goroutine (an outer lease
// and those nested in it), worked on together and released in any order.
type holding struct {
	g     *gor
	hs    []*held
	ended map[*held]bool
}

func (g *gor) holding(hs ...*held) *holding {
	return &holding{g: g, hs: hs, ended: map[*held]bool{}}
}

func (s *holding) add(h *held) {
	if h != nil {
		s.hs = append(s.hs, h)
	}
}

// work checks every lease still held, again and again, for about d.
func (s *holding) work(ctx context.Context, d time.Duration) {
	end := time.Now().Add(d)
	for {
		for _, h := range s.hs {
			if !s.ended[h] && !s.g.believe(h) {
				s.ended[h] = true
			}
		}
		if !time.Now().Before(end) || ctx.Err() != nil {
			return
		}
		sleepCtx(ctx, min(time.Until(end), logBetween(s.g.rng, 100*time.Microsecond, 3*time.Millisecond)))
	}
}

// releaseAll releases every lease in a random order, working on those
// left between two releases: after is how long, given whether the first
// lease (the outer one) is gone.
func (s *holding) releaseAll(ctx context.Context, after func(outerGone bool) time.Duration) {
	g := s.g
	outerGone := false
	for _, i := range g.rng.Perm(len(s.hs)) {
		h := s.hs[i]
		if h.ld != nil {
			g.flush(h)
			g.letGo(h)
		} else {
			g.releaseRetry(h, g.releaseMode(), true)
		}
		s.ended[h] = true
		if i == 0 {
			outerGone = true
		}
		s.work(ctx, after(outerGone))
	}
}
