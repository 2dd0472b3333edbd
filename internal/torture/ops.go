package torture

import (
	"context"
	"errors"
	"time"

	"github.com/dlock-go/dlock"
)

// spec describes one acquire call for the history.
type spec struct {
	scn     string
	client  string
	names   []string
	sides   map[string]string        // RWMutex side per name
	ttls    map[string]time.Duration // lease TTL per name
	permits int
	wait    bool
	reent   bool
	fixed   bool
	timeout time.Duration  // 0: until the worker stops
	outer   int64          // a nested acquire: the lease whose context it is made through (recorded as the call's ls)
	began   func(op int64) // if set, told the call's op once its call event is written
	hold    []string       // the leases its ctx carries (Event.Hold)
}

// held is a lease the goroutine holds (or a leadership: ld), with its
// belief bookkeeping.
type held struct {
	id      int64
	lease   *dlock.Lease
	ld      *dlock.Leadership // an Election's: lease is nil
	op      int64             // the Campaign's call id (ld)
	client  string            // the Campaign's Client (spec.client; ld)
	names   []string
	ttl     time.Duration // the longest TTL of its names
	fixed   bool
	set     bool  // from LockAll
	sem     bool  // a semaphore's permits
	pending int64 // a belief not yet written
	emitted int64 // when the last belief was written
}

// err is the hold's Err().
func (h *held) err() error {
	if h.ld != nil {
		return h.ld.Err()
	}
	return h.lease.Err()
}

// beliefEvery throttles belief events: the checker only needs the last
// belief of a lease, and each is also written before the lease ends.
const beliefEvery = 20 * time.Millisecond

// begin records an acquire call (of any kind) about to be made: its op,
// the ctx to make it with (its deadline fixed from the time of the call
// event, and recorded in it, so that the checker can compare the return
// with it), the call event, and when the call starts.
func (g *gor) begin(parent context.Context, sp spec) (op int64, ctx context.Context, cancel context.CancelFunc, e Event, st int64) {
	op = g.w.ops.Add(1)
	t0 := now()
	ctx, cancel = parent, context.CancelFunc(func() {})
	if sp.timeout > 0 {
		ctx, cancel = context.WithDeadline(parent, time.Unix(0, t0).Add(sp.timeout))
	}
	e = Event{T: t0, K: kCall, Op: op, Client: sp.client, Names: sp.names, Permits: sp.permits,
		Wait: sp.wait, Reent: sp.reent, Fixed: sp.fixed, Timeout: us(sp.timeout), Scn: sp.scn, Lease: sp.outer, Hold: sp.hold}
	if d, ok := ctx.Deadline(); ok {
		e.DL = d.UnixNano()
	}
	for _, n := range sp.names {
		e.Sides = append(e.Sides, sp.sides[n])
		e.TTLs = append(e.TTLs, us(sp.ttls[n]))
	}
	g.emit(e)
	if sp.began != nil {
		sp.began(op)
	}
	return op, ctx, cancel, e, now() // writing the call event may have blocked: the call starts now
}

// failed records an acquire (call event c) that returned err at t.
func (g *gor) failed(c Event, st, t int64, err error) {
	g.emit(Event{T: t, K: kFail, Op: c.Op, EK: errKind(err), Err: err.Error(), St: st, DL: c.DL, Cycle: cycleOf(err)})
}

// acquire records and makes one acquire call; nil when it failed.
func (g *gor) acquire(parent context.Context, sp spec, call func(ctx context.Context) (*dlock.Lease, error)) *held {
	op, ctx, cancel, e, st := g.begin(parent, sp)
	defer cancel()
	l, err := call(ctx)
	t := now()
	if err != nil {
		g.failed(e, st, t, err)
		return nil
	}
	// The lease begins here: Err() right after the return says whether it
	// began held (the fence-inversion check counts only those).
	errNow := l.Err()
	h := &held{id: g.w.leases.Add(1), lease: l, fixed: sp.fixed, sem: sp.permits > 0}
	parts := l.Parts()
	h.set = len(parts) > 1
	ge := Event{T: t, K: kGrant, Op: op, Lease: h.id, Client: sp.client, Scn: sp.scn, Reent: sp.reent,
		Permits: sp.permits, St: st, DL: e.DL, EK: errKind(errNow)}
	for _, p := range parts {
		n := aliasOf(p.Name())
		ge.Names = append(ge.Names, n)
		ge.Sides = append(ge.Sides, sp.sides[n])
		ge.Owners = append(ge.Owners, p.Token())
		ge.Fences = append(ge.Fences, p.Fence())
		ge.TTLs = append(ge.TTLs, us(sp.ttls[n]))
		h.ttl = max(h.ttl, sp.ttls[n])
		h.names = append(h.names, n)
	}
	if errNow != nil {
		ge.Err = errNow.Error()
	}
	g.emit(ge)
	if h.set {
		g.tokenOfSet(h)
	}
	return h
}

// tokenOfSet calls Token on a set's lease: whatever it returns, it must
// not panic.
func (g *gor) tokenOfSet(h *held) {
	defer func() {
		if r := recover(); r != nil {
			g.fatal("Lease.Token of a LockAll set (%v) panicked: %v", h.names, r)
		}
	}()
	_ = h.lease.Token()
}

// believe checks the lease: t is taken just before Err, and only a nil Err
// counts as the holder believing it held the lock at t.
func (g *gor) believe(h *held) bool {
	t := now()
	err := h.err()
	if err != nil {
		g.flush(h)
		g.emit(Event{K: kLost, Lease: h.id, EK: errKind(err), Err: err.Error()})
		return false
	}
	h.pending = t
	if time.Duration(t-h.emitted) >= beliefEvery {
		g.flush(h)
	}
	return true
}

func (g *gor) flush(h *held) {
	if h.pending != 0 {
		g.emit(Event{T: h.pending, K: kBelief, Lease: h.id})
		h.emitted, h.pending = h.pending, 0
	}
}

// work is the critical section: check the lease, sleep a little, repeat,
// for about d. It returns false when the lease was found ended.
func (g *gor) work(ctx context.Context, h *held, d time.Duration) bool {
	end := time.Now().Add(d)
	write := g.rng.IntN(3) == 0 // a fenced write, once (fenced.go)
	for {
		if !g.believe(h) {
			return false
		}
		if write {
			write = false
			g.fencedWrite(ctx, h)
		}
		if !time.Now().Before(end) || ctx.Err() != nil {
			return true
		}
		sleepCtx(ctx, min(time.Until(end), logBetween(g.rng, 100*time.Microsecond, 4*time.Millisecond)))
	}
}

// unlock records and makes one Unlock call.
func (g *gor) unlock(h *held, ctx context.Context, how string) error {
	g.flush(h)
	g.emit(Event{K: kUCall, Lease: h.id, Msg: how})
	err := h.lease.Unlock(ctx)
	e := Event{K: kUnlock, Lease: h.id, EK: errKind(err)}
	if err != nil {
		e.Err = err.Error()
	}
	g.emit(e)
	return err
}

// Release modes.
const (
	relNormal = iota // Unlock with a live context
	relEnded         // Unlock with an ended context, then again or give up
	relTiny          // Unlock with a context of 20-500 µs, then again or give up
	relTwice         // Unlock, then Unlock again (ErrNotHeld)
)

// release lets go of h in the given mode. A re-entered lease is always
// unlocked in the end (retry): giving it up would leave the hold count
// above zero, and the lock rightly held, after the outer Unlock.
func (g *gor) release(h *held, mode int) { g.releaseRetry(h, mode, false) }

func (g *gor) releaseRetry(h *held, mode int, retry bool) {
	if errors.Is(h.lease.Err(), dlock.ErrClosed) && !retry && g.rng.IntN(2) == 0 {
		// Its Client was closed: a shutting-down service would not
		// unlock; Close releases what its Client held.
		g.emit(Event{K: kAbandon, Lease: h.id, Msg: "left to Client.Close"})
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var err error
	switch mode {
	case relEnded:
		ended, cancelEnded := context.WithCancel(context.Background())
		cancelEnded()
		err = g.unlock(h, ended, "ended")
	case relTiny:
		tiny, cancelTiny := context.WithTimeout(context.Background(), between(g.rng, 20*time.Microsecond, 500*time.Microsecond))
		err = g.unlock(h, tiny, "tiny")
		cancelTiny()
	default:
		err = g.unlock(h, ctx, "normal")
		if mode == relTwice && err == nil {
			if err2 := g.unlock(h, ctx, "again"); err2 == nil {
				g.fatal("a second Unlock of lease %d (%v) succeeded", h.id, h.names)
			}
		}
		if err != nil && errKind(err) == "redis" {
			// A fault: try once more, as a user would.
			err = g.unlock(h, ctx, "retry")
		}
		if err != nil {
			g.emit(Event{K: kAbandon, Lease: h.id, Msg: "unlock failed"})
		}
		return
	}
	if err == nil {
		return
	}
	if retry || g.rng.IntN(2) == 0 {
		if g.unlock(h, ctx, "after-failed") == nil {
			return
		}
	}
	g.emit(Event{K: kAbandon, Lease: h.id, Msg: "gave up after a failed unlock"})
}

// releaseMode picks how a mix operation releases.
func (g *gor) releaseMode() int {
	switch n := g.rng.IntN(100); {
	case n < 82:
		return relNormal
	case n < 90:
		return relEnded
	case n < 95:
		return relTiny
	}
	return relTwice
}

// extend records and makes an Extend call.
func (g *gor) extend(ctx context.Context, h *held, d time.Duration) error {
	g.flush(h)
	h.ttl = max(h.ttl, d)
	g.emit(Event{K: kExtCall, Lease: h.id, D: us(d)})
	err := h.lease.Extend(ctx, d)
	e := Event{K: kExt, Lease: h.id, D: us(d), EK: errKind(err)}
	if err != nil {
		e.Err = err.Error()
	}
	g.emit(e)
	return err
}

// session is what a holder does with a lease from the mix: work, with
// re-entry, Extend and TTL at random, then a release.
func (g *gor) session(ctx context.Context, h *held, reenter func(ctx context.Context) (*dlock.Lease, error), sp spec) {
	steps := 1 + g.rng.IntN(4)
	for range steps {
		if !g.work(ctx, h, logBetween(g.rng, 200*time.Microsecond, 40*time.Millisecond)) {
			break
		}
		switch n := g.rng.IntN(10); {
		case n < 2 && reenter != nil && ctx.Err() == nil:
			inner := sp
			inner.reent, inner.wait, inner.timeout = true, true, 100*time.Millisecond
			in := g.acquire(h.lease.Context(ctx), inner, reenter)
			if in != nil {
				in.ttl = h.ttl
				g.work(ctx, in, logBetween(g.rng, 100*time.Microsecond, 10*time.Millisecond))
				g.releaseRetry(in, g.releaseMode(), true)
			}
		case n < 4 && !h.fixed:
			var d time.Duration
			if g.rng.IntN(2) == 0 {
				d = between(g.rng, 20*time.Millisecond, h.ttl)
			} else {
				d = between(g.rng, h.ttl, min(4*h.ttl, 3*time.Second))
			}
			ectx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			_ = g.extend(ectx, h, d)
			cancel()
		case n < 5:
			tctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			_, _ = h.lease.TTL(tctx)
			cancel()
		}
	}
	g.release(h, g.releaseMode())
}

// lockTTL picks a lease option for the shared names: renewed mostly,
// sometimes a fixed lease.
func (g *gor) lockTTL() (dlock.LockOption, time.Duration, bool) {
	d := between(g.rng, 100*time.Millisecond, 800*time.Millisecond)
	if g.rng.IntN(7) == 0 {
		return dlock.WithLease(d), d, true
	}
	return dlock.WithTTL(d), d, false
}

// lockTimeout picks how long a Lock may wait in the mix: from 50 µs to
// 50 ms, log-uniform.
func (g *gor) lockTimeout() time.Duration {
	return logBetween(g.rng, 50*time.Microsecond, 50*time.Millisecond)
}

func one(name string, d time.Duration) map[string]time.Duration {
	return map[string]time.Duration{name: d}
}

func oneSide(name, side string) map[string]string { return map[string]string{name: side} }

func (g *gor) pickName(names []string) string { return names[g.rng.IntN(len(names))] }
