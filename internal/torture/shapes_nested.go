package torture

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/dlock-go/dlock"
)

// nested holds a lock and acquires it again through the lease's context,
// on one primitive at a time, while a rival on another Client of the
// worker tries to take the same name; then it releases every lease in a
// random order, the outer one possibly first, working on those left
// between two releases. Every lease left must go on excluding the rival:
// the safety and capacity checks see a rival granted while a nested lease
// still believes it holds the lock, and the self-wait check a nested
// acquire that waits on its own hold.
func (g *gor) nested(ctx context.Context) {
	switch n := g.rng.IntN(20); {
	case n < 4:
		g.nestedMutex(ctx, false)
	case n < 6:
		g.nestedMutex(ctx, true)
	case n < 12:
		g.nestedWrite(ctx)
	case n < 14:
		g.nestedRead(ctx)
	case n < 17:
		g.nestedSem(ctx)
	default:
		g.nestedCampaign(ctx)
	}
}

// afterRelease is how long the leases left work between two releases:
// longer once the outer lease is gone, so that a rival that was let in by
// a release that took more than its own lease shows.
func (g *gor) afterRelease(outerGone bool) time.Duration {
	if outerGone {
		return logBetween(g.rng, 10*time.Millisecond, 200*time.Millisecond)
	}
	return logBetween(g.rng, 200*time.Microsecond, 10*time.Millisecond)
}

// nestedMutex: a Mutex (or FairMutex) re-entered 1-4 levels deep, each
// level through the context of a random lease taken before.
func (g *gor) nestedMutex(ctx context.Context, fair bool) {
	s := g.slot()
	c, cid := s.current()
	names := mutexNames
	if fair {
		names = fairNames
	}
	name := g.pickName(names)
	opt, ttl, fixed := g.lockTTL()
	var lock func(context.Context, ...dlock.LockOption) (*dlock.Lease, error)
	if fair {
		lock = c.FairMutex(name, opt, dlock.WithQueueTTL(queueTTL)).Lock
	} else {
		lock = c.Mutex(name, opt, dlock.WithQueueTTL(queueTTL)).Lock
	}
	call := func(ctx context.Context) (*dlock.Lease, error) { return lock(ctx) }
	defer g.rival(ctx, s, name, "w")()
	sp := spec{scn: "nested", client: cid, names: []string{name}, ttls: one(name, ttl), fixed: fixed,
		wait: true, timeout: between(g.rng, 200*time.Millisecond, 1500*time.Millisecond)}
	outer := g.acquire(ctx, sp, call)
	if outer == nil {
		return
	}
	hs := g.holding(outer)
	for range 1 + g.rng.IntN(4) {
		hs.work(ctx, logBetween(g.rng, 100*time.Microsecond, 5*time.Millisecond))
		via := hs.hs[g.rng.IntN(len(hs.hs))]
		if hs.ended[via] {
			continue
		}
		in := sp
		in.timeout = g.nestedTimeout()
		hs.add(g.nestedAcquire(via.lease.Context(ctx), via, in, call))
	}
	hs.releaseAll(ctx, g.afterRelease)
}

// nestedWrite: an RWMutex write lock, 1-3 reads taken inside it through
// its context (each a read hold of its own), now and then a read
// re-entered through a read's context, the write re-entered, and a read
// inside the write given up after 20 µs-3 ms (its undo must not remove a
// sibling's hold); then every lease is released in a random order — the
// writer before a read is a downgrade, and the reads left must still
// exclude the rival writer.
func (g *gor) nestedWrite(ctx context.Context) {
	s := g.slot()
	c, cid := s.current()
	name := g.pickName(rwNames)
	opt, ttl, fixed := g.lockTTL()
	rw := c.RWMutex(name, opt, dlock.WithQueueTTL(queueTTL))
	rlock := func(ctx context.Context) (*dlock.Lease, error) { return rw.RLock(ctx) }
	wlock := func(ctx context.Context) (*dlock.Lease, error) { return rw.Lock(ctx) }
	defer g.rival(ctx, s, name, "w")()
	sp := spec{scn: "nested", client: cid, names: []string{name}, ttls: one(name, ttl), fixed: fixed,
		sides: oneSide(name, "w"), wait: true, timeout: between(g.rng, 200*time.Millisecond, 1500*time.Millisecond)}
	w := g.acquire(ctx, sp, wlock)
	if w == nil {
		return
	}
	hs := g.holding(w)
	rsp := sp
	rsp.sides = oneSide(name, "r")
	undone := false
	for range 1 + g.rng.IntN(3) {
		hs.work(ctx, logBetween(g.rng, 100*time.Microsecond, 5*time.Millisecond))
		if hs.ended[w] {
			break
		}
		in := rsp
		in.timeout = g.nestedTimeout()
		r := g.nestedAcquire(w.lease.Context(ctx), w, in, rlock)
		hs.add(r)
		switch n := g.rng.IntN(8); {
		case n < 2 && r != nil:
			in.timeout = g.nestedTimeout()
			hs.add(g.nestedAcquire(r.lease.Context(ctx), r, in, rlock))
		case n < 3:
			win := sp
			win.timeout = g.nestedTimeout()
			hs.add(g.nestedAcquire(w.lease.Context(ctx), w, win, wlock))
		case n < 6 && !undone && r != nil:
			// Given up at once, with a sibling read held.
			undone = true
			in.timeout = logBetween(g.rng, 20*time.Microsecond, 3*time.Millisecond)
			hs.add(g.nestedAcquire(w.lease.Context(ctx), w, in, rlock))
		}
	}
	hs.releaseAll(ctx, g.afterRelease)
}

// nestedRead: a read lock, an upgrade through its context (refused at
// once: a grant is fatal, a wait a wait on its own hold), then reads
// re-entered through the contexts of reads held, released in any order.
func (g *gor) nestedRead(ctx context.Context) {
	s := g.slot()
	c, cid := s.current()
	name := g.pickName(rwNames)
	opt, ttl, fixed := g.lockTTL()
	rw := c.RWMutex(name, opt, dlock.WithQueueTTL(queueTTL))
	rlock := func(ctx context.Context) (*dlock.Lease, error) { return rw.RLock(ctx) }
	defer g.rival(ctx, s, name, "w")()
	sp := spec{scn: "nested", client: cid, names: []string{name}, ttls: one(name, ttl), fixed: fixed,
		sides: oneSide(name, "r"), wait: true, timeout: between(g.rng, 200*time.Millisecond, 1500*time.Millisecond)}
	r := g.acquire(ctx, sp, rlock)
	if r == nil {
		return
	}
	hs := g.holding(r)
	up := sp
	up.sides, up.timeout = oneSide(name, "w"), g.nestedTimeout()
	if x := g.nestedAcquire(r.lease.Context(ctx), r, up, func(ctx context.Context) (*dlock.Lease, error) { return rw.Lock(ctx) }); x != nil {
		g.fatal("RWMutex %q: a read lease was upgraded to a write lease through its context", name)
		g.release(x, relNormal)
	}
	for range g.rng.IntN(4) {
		hs.work(ctx, logBetween(g.rng, 100*time.Microsecond, 5*time.Millisecond))
		via := hs.hs[g.rng.IntN(len(hs.hs))]
		if hs.ended[via] {
			continue
		}
		in := sp
		in.timeout = g.nestedTimeout()
		hs.add(g.nestedAcquire(via.lease.Context(ctx), via, in, rlock))
	}
	hs.releaseAll(ctx, g.afterRelease)
}

// nestedSem: every permit of a semaphore, then an Acquire (or TryAcquire)
// of one more through the lease's context. Nobody else can hold a permit
// then: the nested call can only wait on its own hold, and a grant of a
// permit of its own would exceed the capacity (the capacity check).
func (g *gor) nestedSem(ctx context.Context) {
	s := g.slot()
	c, cid := s.current()
	name := g.pickName(semNames)
	capacity := semCap[name]
	opt, ttl, fixed := g.lockTTL()
	sem := c.Semaphore(name, capacity, opt, dlock.WithQueueTTL(queueTTL))
	defer g.rival(ctx, s, name, "p")()
	sp := spec{scn: "nested", client: cid, names: []string{name}, ttls: one(name, ttl), fixed: fixed,
		permits: capacity, wait: true, timeout: between(g.rng, 200*time.Millisecond, 1500*time.Millisecond)}
	outer := g.acquire(ctx, sp, func(ctx context.Context) (*dlock.Lease, error) { return sem.Acquire(ctx, capacity) })
	if outer == nil {
		return
	}
	hs := g.holding(outer)
	hs.work(ctx, logBetween(g.rng, 100*time.Microsecond, 5*time.Millisecond))
	in := sp
	in.permits, in.timeout = 1, g.nestedTimeout()
	call := func(ctx context.Context) (*dlock.Lease, error) { return sem.Acquire(ctx, 1) }
	if g.rng.IntN(4) == 0 {
		in.wait = false
		call = func(ctx context.Context) (*dlock.Lease, error) { return sem.TryAcquire(ctx, 1) }
	}
	hs.add(g.nestedAcquire(outer.lease.Context(ctx), outer, in, call))
	hs.work(ctx, logBetween(g.rng, 100*time.Microsecond, 5*time.Millisecond))
	hs.releaseAll(ctx, g.afterRelease)
}

// nestedCampaign: a leader Campaigns again on its own Client, through its
// leadership's context or with a plain one (issue 23, finding 6: it
// waited on itself). Proclaiming instead is fine (the same term: recorded
// as the same owner, its value naming the outer Campaign), refusing too;
// waiting is not — but once the outer leadership has ended (lost), the
// second Campaign is a candidate of its own, and may wait for and win a
// term of its own with its value (againValueOf).
func (g *gor) nestedCampaign(ctx context.Context) {
	s := g.slot()
	c, cid := s.current()
	name := g.pickName(elecNames)
	opt, ttl, fixed := g.elecTTL()
	e := c.Election(name, opt, dlock.WithQueueTTL(queueTTL))
	defer g.rival(ctx, s, name, "e")()
	sp := spec{scn: "nested", client: cid, names: []string{name}, ttls: one(name, ttl), fixed: fixed,
		wait: true, timeout: between(g.rng, 200*time.Millisecond, 2*time.Second)}
	ld := g.campaign(ctx, sp, e)
	if ld == nil {
		return
	}
	hs := g.holding(ld)
	hs.work(ctx, logBetween(g.rng, 100*time.Microsecond, 5*time.Millisecond))
	in := sp
	in.reent, in.outer, in.timeout = true, ld.id, g.nestedTimeout()
	via := ctx
	if g.rng.IntN(2) == 0 {
		via = ld.ld.Context(ctx)
	}
	hs.add(g.campaignAgain(via, ld, in, e))
	g.believe(ld)
	g.flush(ld)
	hs.work(ctx, logBetween(g.rng, 100*time.Microsecond, 5*time.Millisecond))
	hs.releaseAll(ctx, g.afterRelease)
}

// campaignAgain records and makes a second Campaign of outer's Client.
func (g *gor) campaignAgain(parent context.Context, outer *held, sp spec, e *dlock.Election) *held {
	op, ctx, cancel, ce, st := g.begin(parent, sp)
	defer cancel()
	value := againValueOf(g.w.cfg.ID, outer.op, op)
	ld, err := e.Campaign(ctx, value)
	t := now()
	if err != nil {
		g.failed(ce, st, t, err)
		return nil
	}
	errNow := ld.Err()
	name := sp.names[0]
	h := &held{id: g.w.leases.Add(1), ld: ld, op: outer.op, names: sp.names, ttl: sp.ttls[name], fixed: sp.fixed}
	// the same leadership, proclaimed again, is the same owner (see leaders)
	owner, _ := g.w.leaders.LoadOrStore(ld, leaderOwner(g.w.cfg.ID, h.id))
	ge := Event{T: t, K: kGrant, Op: op, Lease: h.id, Client: sp.client, Scn: sp.scn, St: st, DL: ce.DL, Reent: true,
		EK: errKind(errNow), Names: sp.names, Sides: []string{""}, Owners: []string{owner.(string)},
		Fences: []int64{ld.Term()}, TTLs: []int64{us(sp.ttls[name])}}
	if errNow != nil {
		ge.Err = errNow.Error()
	}
	g.emit(ge)
	return h
}

// rival takes name from the other Client slot of the worker, again and
// again, until the returned func is called (which waits for it): a writer
// ("w"; now and then a reader of an RWMutex), one permit ("p") or a
// Campaign ("e"), each with a 50-600 ms ctx, held 0.1-3 ms.
func (g *gor) rival(ctx context.Context, s *slot, name, what string) (stop func()) {
	hg := g.helper()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			default:
			}
			c, cid := g.otherSlot(s).current()
			ttl := between(hg.rng, 200*time.Millisecond, 800*time.Millisecond)
			opt := dlock.WithTTL(ttl)
			sp := spec{scn: "nested-rival", client: cid, names: []string{name}, ttls: one(name, ttl), wait: true,
				timeout: between(hg.rng, 50*time.Millisecond, 600*time.Millisecond)}
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
				sp.sides = oneSide(name, "w")
				call = func(ctx context.Context) (*dlock.Lease, error) { return rw.Lock(ctx) }
				if hg.rng.IntN(4) == 0 {
					sp.sides = oneSide(name, "r")
					call = func(ctx context.Context) (*dlock.Lease, error) { return rw.RLock(ctx) }
				}
			case "sem":
				sem := c.Semaphore(name, semCap[name], opt, dlock.WithQueueTTL(queueTTL))
				sp.permits = 1
				call = func(ctx context.Context) (*dlock.Lease, error) { return sem.Acquire(ctx, 1) }
			case "election":
				e := c.Election(name, opt, dlock.WithQueueTTL(queueTTL))
				if h := hg.campaign(ctx, sp, e); h != nil {
					hg.work(ctx, h, logBetween(hg.rng, 100*time.Microsecond, 3*time.Millisecond))
					hg.letGo(h)
				}
				sleepCtx(ctx, between(hg.rng, 0, 5*time.Millisecond))
				continue
			}
			if h := hg.acquire(ctx, sp, call); h != nil {
				hg.work(ctx, h, logBetween(hg.rng, 100*time.Microsecond, 3*time.Millisecond))
				hg.release(h, relNormal)
			} else if errors.Is(ctx.Err(), context.Canceled) {
				return
			}
			sleepCtx(ctx, between(hg.rng, 0, 5*time.Millisecond))
		}
	}()
	return func() {
		close(done)
		wg.Wait()
	}
}
