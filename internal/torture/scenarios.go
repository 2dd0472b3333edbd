package torture

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/envdriver"
)

// mix is one random operation on the shared names, of a random kind.
func (g *gor) mix(ctx context.Context) {
	c, cid := g.slot().current()
	switch g.rng.IntN(8) {
	case 0, 1, 2:
		g.mixMutex(ctx, c, cid, mutexNames, false)
	case 3:
		g.mixMutex(ctx, c, cid, fairNames, true)
	case 4, 5:
		g.mixRW(ctx, c, cid)
	default:
		g.mixSem(ctx, c, cid)
	}
}

// mixMutex takes a Mutex (or a FairMutex) with Lock or TryLock and holds
// it for a session.
func (g *gor) mixMutex(ctx context.Context, c *dlock.Client, cid string, names []string, fair bool) {
	name := g.pickName(names)
	opt, ttl, fixed := g.lockTTL()
	opts := []dlock.LockOption{opt, dlock.WithQueueTTL(queueTTL)}
	if !fixed && g.rng.IntN(6) == 0 {
		// a hold limit: renewed up to it, then lost (WithMaxHold); one
		// below the TTL cuts the lease to it, as recorded
		limit := logBetween(g.rng, 5*time.Millisecond, 2*ttl)
		opts = append(opts, dlock.WithMaxHold(limit))
		ttl = min(ttl, limit)
	}
	sp := spec{scn: "mix", client: cid, names: []string{name}, ttls: one(name, ttl), fixed: fixed}
	var lock, try func(context.Context, ...dlock.LockOption) (*dlock.Lease, error)
	if fair {
		f := c.FairMutex(name, opts...)
		lock, try = f.Lock, f.TryLock
	} else {
		m := c.Mutex(name, opts...)
		lock, try = m.Lock, m.TryLock
	}
	call := func(ctx context.Context) (*dlock.Lease, error) { return try(ctx) }
	if g.rng.IntN(10) < 7 {
		sp.wait, sp.timeout = true, g.lockTimeout()
		call = func(ctx context.Context) (*dlock.Lease, error) { return lock(ctx) }
	}
	h := g.acquire(ctx, sp, call)
	if h == nil {
		return
	}
	g.session(ctx, h, func(ctx context.Context) (*dlock.Lease, error) { return lock(ctx) }, sp)
}

// mixRW reads or writes an RWMutex, with read-inside-write, downgrade
// and a refused upgrade at random.
func (g *gor) mixRW(ctx context.Context, c *dlock.Client, cid string) {
	name := g.pickName(rwNames)
	opt, ttl, fixed := g.lockTTL()
	rw := c.RWMutex(name, opt, dlock.WithQueueTTL(queueTTL))
	wait := g.rng.IntN(10) < 7
	sp := spec{scn: "mix", client: cid, names: []string{name}, ttls: one(name, ttl), fixed: fixed, wait: wait}
	if wait {
		sp.timeout = g.lockTimeout()
	}
	rlock := func(ctx context.Context) (*dlock.Lease, error) { return rw.RLock(ctx) }
	wlock := func(ctx context.Context) (*dlock.Lease, error) { return rw.Lock(ctx) }
	if g.rng.IntN(2) == 0 {
		sp.sides = oneSide(name, "r")
		call := rlock
		if !wait {
			call = func(ctx context.Context) (*dlock.Lease, error) { return rw.TryRLock(ctx) }
		}
		h := g.acquire(ctx, sp, call)
		if h == nil {
			return
		}
		if g.rng.IntN(10) == 0 {
			// Upgrading is refused with ErrInvalidArgument.
			up := sp
			up.sides, up.reent, up.wait, up.timeout = oneSide(name, "w"), true, true, 50*time.Millisecond
			if x := g.acquire(h.lease.Context(ctx), up, wlock); x != nil {
				g.fatal("RWMutex %q: a read lease was upgraded to a write lease", name)
				g.release(x, relNormal)
			}
		}
		g.session(ctx, h, rlock, sp)
		return
	}
	sp.sides = oneSide(name, "w")
	call := wlock
	if !wait {
		call = func(ctx context.Context) (*dlock.Lease, error) { return rw.TryLock(ctx) }
	}
	h := g.acquire(ctx, sp, call)
	if h == nil {
		return
	}
	if g.rng.IntN(4) == 0 {
		// Read inside the write hold (same owner), then unlock in either
		// order: write first is a downgrade.
		rsp := sp
		rsp.sides, rsp.reent, rsp.wait, rsp.timeout = oneSide(name, "r"), true, true, 100*time.Millisecond
		if r := g.acquire(h.lease.Context(ctx), rsp, rlock); r != nil {
			r.ttl = h.ttl
			g.work(ctx, h, logBetween(g.rng, 100*time.Microsecond, 5*time.Millisecond))
			if g.rng.IntN(2) == 0 {
				g.releaseRetry(h, relNormal, true)
				g.session(ctx, r, rlock, rsp)
			} else {
				g.releaseRetry(r, relNormal, true)
				g.session(ctx, h, wlock, sp)
			}
			return
		}
	}
	g.session(ctx, h, wlock, sp)
}

// mixSem takes permits of a semaphore.
func (g *gor) mixSem(ctx context.Context, c *dlock.Client, cid string) {
	name := g.pickName(semNames)
	capacity := semCap[name]
	opt, ttl, fixed := g.lockTTL()
	s := c.Semaphore(name, capacity, opt, dlock.WithQueueTTL(queueTTL))
	n := 1
	if g.rng.IntN(5) < 2 {
		n = 1 + g.rng.IntN(capacity)
	}
	sp := spec{scn: "mix", client: cid, names: []string{name}, ttls: one(name, ttl), fixed: fixed, permits: n}
	call := func(ctx context.Context) (*dlock.Lease, error) { return s.TryAcquire(ctx, n) }
	if g.rng.IntN(10) < 7 {
		sp.wait, sp.timeout = true, g.lockTimeout()
		call = func(ctx context.Context) (*dlock.Lease, error) { return s.Acquire(ctx, n) }
	}
	if g.rng.IntN(10) == 0 {
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		capNow, _, err := s.Permits(pctx)
		cancel()
		if err == nil && capNow != capacity {
			g.fatal("semaphore %q: capacity %d, want %d", name, capNow, capacity)
		}
	}
	h := g.acquire(ctx, sp, call)
	if h == nil {
		return
	}
	g.session(ctx, h, nil, sp)
}

// longWaiter waits long on a shared name: a lock that is never freed shows
// as a waiter that waits seconds on a lock nobody holds.
func (g *gor) longWaiter(ctx context.Context) {
	c, cid := g.slot().current()
	ttl := between(g.rng, 100*time.Millisecond, 800*time.Millisecond)
	opt := dlock.WithTTL(ttl)
	var name string
	var lock func(context.Context) (*dlock.Lease, error)
	sides := map[string]string{}
	switch g.rng.IntN(4) {
	case 0:
		name = g.pickName(fairNames)
		f := c.FairMutex(name, opt, dlock.WithQueueTTL(queueTTL))
		lock = func(ctx context.Context) (*dlock.Lease, error) { return f.Lock(ctx) }
	case 1:
		name = g.pickName(rwNames)
		rw := c.RWMutex(name, opt, dlock.WithQueueTTL(queueTTL))
		sides[name] = "w"
		lock = func(ctx context.Context) (*dlock.Lease, error) { return rw.Lock(ctx) }
	default:
		name = g.pickName(mutexNames)
		m := c.Mutex(name, opt, dlock.WithQueueTTL(queueTTL))
		lock = func(ctx context.Context) (*dlock.Lease, error) { return m.Lock(ctx) }
	}
	sp := spec{scn: "waiter", client: cid, names: []string{name}, ttls: one(name, ttl), sides: sides,
		wait: true, timeout: between(g.rng, 2*time.Second, 4*time.Second)}
	if h := g.acquire(ctx, sp, lock); h != nil {
		g.work(ctx, h, logBetween(g.rng, 100*time.Microsecond, 10*time.Millisecond))
		g.release(h, relNormal)
	}
}

// unlockEnded holds a lock and unlocks it with a context that has already
// ended; then unlocks again, or gives the lease up. Either way the lock
// must be free within a TTL.
func (g *gor) unlockEnded(ctx context.Context) {
	c, cid := g.slot().current()
	name := g.pickName(mutexNames)
	ttl := between(g.rng, 100*time.Millisecond, 800*time.Millisecond)
	m := c.Mutex(name, dlock.WithTTL(ttl), dlock.WithQueueTTL(queueTTL))
	sp := spec{scn: "unlock", client: cid, names: []string{name}, ttls: one(name, ttl),
		wait: true, timeout: 100 * time.Millisecond}
	h := g.acquire(ctx, sp, func(ctx context.Context) (*dlock.Lease, error) { return m.Lock(ctx) })
	if h == nil {
		return
	}
	g.work(ctx, h, logBetween(g.rng, 200*time.Microsecond, 20*time.Millisecond))
	mode := relEnded
	if g.rng.IntN(4) == 0 {
		mode = relTiny
	}
	g.release(h, mode)
}

// lockAll takes 2-3 locks at once: mutexes of one Client (one script), or
// a mix of kinds.
func (g *gor) lockAll(ctx context.Context) {
	c, cid := g.slot().current()
	k := 2 + g.rng.IntN(2)
	sp := spec{scn: "lockall", client: cid, wait: true, ttls: map[string]time.Duration{}, sides: map[string]string{}}
	var lockers []dlock.Locker
	add := func(name string, l dlock.Locker, ttl time.Duration) {
		sp.names = append(sp.names, name)
		sp.ttls[name] = ttl
		lockers = append(lockers, l)
	}
	if g.rng.IntN(10) < 6 {
		for _, i := range g.rng.Perm(len(mutexNames))[:k] {
			opt, ttl, _ := g.lockTTL()
			add(mutexNames[i], c.Mutex(mutexNames[i], opt, dlock.WithQueueTTL(queueTTL)), ttl)
		}
	} else {
		kinds := g.rng.Perm(3)[:k]
		for _, kind := range kinds {
			opt, ttl, _ := g.lockTTL()
			switch kind {
			case 0:
				n := g.pickName(mutexNames)
				add(n, c.Mutex(n, opt, dlock.WithQueueTTL(queueTTL)), ttl)
			case 1:
				n := g.pickName(fairNames)
				add(n, c.FairMutex(n, opt, dlock.WithQueueTTL(queueTTL)), ttl)
			case 2:
				n := g.pickName(rwNames)
				rw := c.RWMutex(n, opt, dlock.WithQueueTTL(queueTTL))
				if g.rng.IntN(2) == 0 {
					sp.sides[n] = "r"
					add(n, rw.RLocker(), ttl)
				} else {
					sp.sides[n] = "w"
					add(n, rw, ttl)
				}
			}
		}
	}
	if g.rng.IntN(10) < 6 {
		sp.timeout = g.lockTimeout()
	} else {
		sp.timeout = between(g.rng, 200*time.Millisecond, 2*time.Second)
	}
	h := g.acquire(ctx, sp, func(ctx context.Context) (*dlock.Lease, error) { return dlock.LockAll(ctx, lockers...) })
	if h == nil {
		return
	}
	g.session(ctx, h, nil, sp)
}

// relay is a chain of hand-offs on a long-TTL name private to this
// process: a holder, optionally a few Lock calls on the same Client whose
// contexts end within 0.05-2 ms, then 1-3 waiters, and the holder unlocks
// at once or soon. Every waiter must get the lock within milliseconds of
// its release; a lost wake-up costs the holder's whole TTL (seconds).
func (g *gor) relay(ctx context.Context, cancelFirst bool) {
	c, cid := g.slot().current()
	// Names of their own for the two variants, so that a lost wake-up
	// after a pub/sub reconnect is told from one after cancelled waits.
	name := relayName(g.w.cfg.Slot, 0, g.id)
	if cancelFirst {
		name = relayName(g.w.cfg.Slot, 1, g.id)
	}
	ttl := between(g.rng, relayTTLMin, relayTTLMax)
	m := c.Mutex(name, dlock.WithTTL(ttl), dlock.WithQueueTTL(queueTTL))
	lock := func(ctx context.Context) (*dlock.Lease, error) { return m.Lock(ctx) }
	sp := spec{scn: "relay", client: cid, names: []string{name}, ttls: one(name, ttl), wait: true,
		timeout: 200 * time.Millisecond}
	h := g.acquire(ctx, sp, lock)
	if h == nil {
		return
	}
	g.work(ctx, h, logBetween(g.rng, 100*time.Microsecond, 3*time.Millisecond))

	var cancelled sync.WaitGroup
	if cancelFirst {
		for range 1 + g.rng.IntN(5) {
			hg := g.helper()
			csp := sp
			csp.scn, csp.timeout = "relay-cancel", logBetween(hg.rng, 50*time.Microsecond, 2*time.Millisecond)
			cancelled.Add(1)
			go func() {
				defer cancelled.Done()
				if x := hg.acquire(ctx, csp, lock); x != nil {
					hg.release(x, relNormal)
				}
			}()
		}
		// All of them have given up before the hand-off: one that was
		// still trying could take the lock itself.
		cancelled.Wait()
	}

	var waiters sync.WaitGroup
	for range 1 + g.rng.IntN(3) {
		hg := g.helper()
		wc, wcid := c, cid
		if hg.rng.IntN(5) == 0 {
			wc, wcid = hg.slot().current()
		}
		wttl := between(hg.rng, relayTTLMin, relayTTLMax)
		wm := wc.Mutex(name, dlock.WithTTL(wttl), dlock.WithQueueTTL(queueTTL))
		wsp := spec{scn: "relay-wait", client: wcid, names: []string{name}, ttls: one(name, wttl),
			wait: true, timeout: 25 * time.Second}
		waiters.Add(1)
		go func() {
			defer waiters.Done()
			wh := hg.acquire(ctx, wsp, func(ctx context.Context) (*dlock.Lease, error) { return wm.Lock(ctx) })
			if wh != nil {
				hg.work(ctx, wh, logBetween(hg.rng, 100*time.Microsecond, 5*time.Millisecond))
				hg.release(wh, relNormal)
			}
		}()
	}
	switch g.rng.IntN(4) {
	case 1:
		time.Sleep(between(g.rng, 0, 500*time.Microsecond))
	case 2:
		time.Sleep(between(g.rng, 0, 3*time.Millisecond))
	case 3:
		time.Sleep(between(g.rng, 3*time.Millisecond, 30*time.Millisecond))
	}
	g.believe(h)
	g.release(h, relNormal)
	waiters.Wait()
}

// closeHeld takes a long-TTL lock with a Client of its own, starts a
// waiter on another Client, and closes its Client without unlocking (as a
// service shutting down would): Close must release what the Client held,
// so the waiter gets the lock at once instead of after the TTL.
func (g *gor) closeHeld(ctx context.Context) {
	s := g.slot()
	own, err := envdriver.New(s.rdb, dlock.WithPrefix(prefix))
	if err != nil {
		g.fatal("dlock.New: %v", err)
		return
	}
	cid := fmt.Sprintf("p%d", g.w.privates.Add(1))
	name := relayName(g.w.cfg.Slot, 2, g.id)
	ttl := between(g.rng, closeTTLMin, closeTTLMax)
	sp := spec{scn: "close", client: cid, names: []string{name}, ttls: one(name, ttl), wait: true,
		timeout: 200 * time.Millisecond}
	m := own.Mutex(name, dlock.WithTTL(ttl), dlock.WithQueueTTL(queueTTL))
	h := g.acquire(ctx, sp, func(ctx context.Context) (*dlock.Lease, error) { return m.Lock(ctx) })
	if h == nil {
		_ = own.Close()
		return
	}
	g.work(ctx, h, logBetween(g.rng, 100*time.Microsecond, 3*time.Millisecond))
	var waiter sync.WaitGroup
	hg := g.helper()
	c, wcid := hg.slot().current()
	wttl := between(hg.rng, closeTTLMin, closeTTLMax)
	wm := c.Mutex(name, dlock.WithTTL(wttl), dlock.WithQueueTTL(queueTTL))
	wsp := spec{scn: "close-wait", client: wcid, names: []string{name}, ttls: one(name, wttl),
		wait: true, timeout: 10 * time.Second}
	waiter.Add(1)
	go func() {
		defer waiter.Done()
		if wh := hg.acquire(ctx, wsp, func(ctx context.Context) (*dlock.Lease, error) { return wm.Lock(ctx) }); wh != nil {
			hg.work(ctx, wh, logBetween(hg.rng, 100*time.Microsecond, 3*time.Millisecond))
			hg.release(wh, relNormal)
		}
	}()
	time.Sleep(between(g.rng, 0, 5*time.Millisecond))
	g.flush(h)
	t0 := now()
	err = own.Close()
	g.emit(Event{T: t0, End: now(), K: kClose, Client: cid, EK: errKind(err)})
	if err := h.lease.Err(); err == nil {
		g.fatal("lease %d of a closed Client: Err() == nil", h.id)
	}
	g.emit(Event{K: kAbandon, Lease: h.id, Msg: "left to Client.Close"})
	waiter.Wait()
}

// shortCtx makes acquires with a 100-300 ms ctx on the go-redis client
// made without ContextTimeoutEnabled (as most users make it), for 1-3 s:
// when the server stalls (the stall fault) each must still return within
// ctxBound of its ctx's end.
func (g *gor) shortCtx(ctx context.Context) {
	s := g.w.slots[1] // ContextTimeoutEnabled: false
	until := time.Now().Add(between(g.rng, time.Second, 3*time.Second))
	for time.Now().Before(until) && ctx.Err() == nil {
		c, cid := s.current()
		opt, ttl, fixed := g.lockTTL()
		sp := spec{scn: "shortctx", client: cid, ttls: map[string]time.Duration{}, fixed: fixed,
			timeout: between(g.rng, 100*time.Millisecond, 300*time.Millisecond)}
		var call func(context.Context) (*dlock.Lease, error)
		switch g.rng.IntN(4) {
		case 0, 1:
			name := g.pickName(mutexNames)
			m := c.Mutex(name, opt, dlock.WithQueueTTL(queueTTL))
			sp.names, sp.ttls[name] = []string{name}, ttl
			if g.rng.IntN(2) == 0 {
				sp.wait, call = true, func(ctx context.Context) (*dlock.Lease, error) { return m.Lock(ctx) }
			} else {
				call = func(ctx context.Context) (*dlock.Lease, error) { return m.TryLock(ctx) }
			}
		case 2:
			name := g.pickName(fairNames)
			f := c.FairMutex(name, opt, dlock.WithQueueTTL(queueTTL))
			sp.names, sp.ttls[name], sp.wait = []string{name}, ttl, true
			call = func(ctx context.Context) (*dlock.Lease, error) { return f.Lock(ctx) }
		default:
			name := g.pickName(semNames)
			sem := c.Semaphore(name, semCap[name], opt, dlock.WithQueueTTL(queueTTL))
			sp.names, sp.ttls[name], sp.wait, sp.permits = []string{name}, ttl, true, 1
			call = func(ctx context.Context) (*dlock.Lease, error) { return sem.Acquire(ctx, 1) }
		}
		if h := g.acquire(ctx, sp, call); h != nil {
			g.work(ctx, h, logBetween(g.rng, 100*time.Microsecond, 10*time.Millisecond))
			g.release(h, relNormal)
		}
		sleepCtx(ctx, logBetween(g.rng, 100*time.Microsecond, 20*time.Millisecond))
	}
}

// rwStream runs, in every worker, RWMutex writers and readers looping on
// one name (rwStreamName) until the worker stops: in worker slots 0 and 1
// a writer and a reader, in the others two readers (2 writers and 4
// readers with 3 workers). Each waits up to 8 s; the phase check counts
// how many turns of the other side pass a waiter.
func (g *gor) rwStream(ctx context.Context) {
	roles := []string{"w", "r"}
	if g.w.cfg.Slot >= 2 {
		roles = []string{"r", "r"}
	}
	var wg sync.WaitGroup
	for _, side := range roles {
		hg := g.helper()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				c, cid := hg.slot().current()
				ttl := between(hg.rng, 300*time.Millisecond, 800*time.Millisecond)
				rw := c.RWMutex(rwStreamName, dlock.WithTTL(ttl), dlock.WithQueueTTL(queueTTL))
				sp := spec{scn: "rwstream", client: cid, names: []string{rwStreamName}, ttls: one(rwStreamName, ttl),
					sides: oneSide(rwStreamName, side), wait: true, timeout: 8 * time.Second}
				call := func(ctx context.Context) (*dlock.Lease, error) { return rw.Lock(ctx) }
				hold := between(hg.rng, 2*time.Millisecond, 15*time.Millisecond)
				if side == "r" {
					call = func(ctx context.Context) (*dlock.Lease, error) { return rw.RLock(ctx) }
					hold = between(hg.rng, 5*time.Millisecond, 30*time.Millisecond)
				}
				if h := hg.acquire(ctx, sp, call); h != nil {
					hg.work(ctx, h, hold)
					hg.release(h, relNormal)
				}
				sleepCtx(ctx, between(hg.rng, 0, 5*time.Millisecond))
			}
		}()
	}
	wg.Wait()
}
