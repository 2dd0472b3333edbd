package hold

import (
	"context"

	"github.com/dlock-go/dlock/internal/backend"
	"github.com/dlock-go/dlock/internal/errs"

	"github.com/dlock-go/dlock/internal/protocol"

	"sync"
	"time"
)

// watchdog keeps the Client's leases: one goroutine and one timer for all
// of them. It renews auto-renewed leases in batches (pipelines; go-redis
// sends a cluster pipeline as one per node), and ends any lease whose
// local deadline passes without a confirmed renewal.
//
// Its two schedules (schedule.go) are ordered by time, so an event costs
// O(log n) in the number of leases, not a scan of all of them. A batch
// holds at most maxBatch renewals and up to maxInflight batches run at
// once, each in a goroutine of its own, so a Redis call that hangs (a
// partition, a paused server) never delays the deadlines, nor a slow batch
// the next one: a lease is declared lost at its deadline whatever the
// network does.
type watchdog struct {
	c       *Keeper
	results chan []renewal
	done    chan struct{} // closed when run returns

	// mu guards the schedules, closed and next. Lock order: a hold's mu,
	// then this one.
	mu        sync.Mutex
	deadlines *schedule // every hold, by local deadline
	renewals  *schedule // renewed holds with no renewal in flight, by next renewal
	closed    bool
	next      time.Time   // when the loop wakes next; zero while it is busy
	timer     *time.Timer // wakes the loop at next (set while it sleeps)
}

const (
	maxBatch    = 1000 // renewals in one pipeline
	maxInflight = 4    // renewal batches in flight at once
)

// renewal is the outcome of renewing one hold.
type renewal struct {
	h     *Hold
	start time.Time
	ttl   time.Duration
	epoch int32
	seq   int64 // its place in the hold's sequence (doc.go, "Late commands")
	exact bool  // set the lease to exactly ttl (see due), not at least ttl
	ok    bool  // the server renewed it
	stale bool  // a later command of the hold ran first: nothing changed
	err   error // the call failed: outcome unknown
}

func newWatchdog(c *Keeper) *watchdog {
	return &watchdog{
		c:         c,
		results:   make(chan []renewal),
		done:      make(chan struct{}),
		deadlines: newSchedule(byDeadline),
		renewals:  newSchedule(byRenewal),
	}
}

// add starts watching h. It returns false when the Client is closed.
func (w *watchdog) add(h *Hold) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return false
	}
	w.deadlines.set(h, h.deadline)
	first := h.deadline
	if h.renew {
		w.renewals.set(h, h.nextRenew)
		first = min(first, h.nextRenew)
	}
	w.kickBefore(fromMono(first))
	return true
}

// reschedule puts h at its current times, after a change that may have
// moved them (Extend, re-entry). h.mu is held.
func (w *watchdog) reschedule(h *Hold) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.deadlines.in(h) {
		return // ended, or not watched yet
	}
	w.deadlines.set(h, h.deadline)
	first := h.deadline
	if w.renewals.in(h) {
		w.renewals.set(h, h.nextRenew)
		first = min(first, h.nextRenew)
	}
	w.kickBefore(fromMono(first))
}

// kickBefore makes the loop wake at t if it sleeps past t; a busy loop
// looks at the schedules before it sleeps again. The loop's timer is
// moved, and the loop left asleep: a Lock does not wake a goroutine (a
// hold taken and released within its renewal interval costs the loop
// nothing). w.mu is held.
func (w *watchdog) kickBefore(t time.Time) {
	if !w.next.IsZero() && t.Before(w.next) {
		w.next = t
		w.timer.Reset(time.Until(t))
	}
}

func (w *watchdog) remove(h *Hold) {
	w.mu.Lock()
	w.deadlines.remove(h)
	w.renewals.remove(h)
	w.mu.Unlock()
}

func (w *watchdog) run(ctx context.Context) {
	defer close(w.done)
	var batches sync.WaitGroup
	defer batches.Wait()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	w.mu.Lock()
	w.timer = timer
	w.mu.Unlock()
	inflight := 0
	for {
		now := time.Now()
		w.expire(now)
		for inflight < maxInflight {
			rs := w.due(now)
			if len(rs) == 0 {
				break
			}
			inflight++
			batches.Go(func() { w.renew(ctx, rs) })
		}
		w.mu.Lock()
		next := now.Add(time.Hour)
		if h, t := w.deadlines.first(); h != nil {
			next = earlier(next, t)
		}
		if h, t := w.renewals.first(); h != nil && inflight < maxInflight {
			next = earlier(next, t)
		}
		w.next = next
		timer.Reset(time.Until(next)) // under w.mu: kickBefore moves it too
		w.mu.Unlock()
		select {
		case <-ctx.Done():
			w.shutdown()
			return
		case <-timer.C:
		case rs := <-w.results:
			inflight--
			w.apply(rs)
		}
		w.mu.Lock()
		w.next = time.Time{} // busy: adds need not kick
		w.mu.Unlock()
	}
}

// expire ends the holds whose deadline has passed.
func (w *watchdog) expire(now time.Time) {
	for {
		w.mu.Lock()
		h, t := w.deadlines.first()
		w.mu.Unlock()
		if h == nil || t.After(now) {
			return
		}
		h.mu.Lock()
		w.mu.Lock()
		switch {
		case h.err != nil:
			w.deadlines.remove(h) // ended: its remove is on its way
			w.renewals.remove(h)
		case mono(now) < h.deadline:
			w.deadlines.set(h, h.deadline)
		}
		w.mu.Unlock()
		h.mu.Unlock()
		_ = h.expireIfLate(now)
	}
}

// due takes the renewals that are due out of the schedule, as one batch:
// those due now, and with them those due within a sixth of their TTL, so
// that leases share batches.
func (w *watchdog) due(now time.Time) []renewal {
	var rs []renewal
	for len(rs) < maxBatch {
		w.mu.Lock()
		h, t := w.renewals.first()
		w.mu.Unlock()
		if h == nil || t.After(now) && len(rs) == 0 {
			break
		}
		h.mu.Lock()
		if t.After(now.Add(h.ttl / 6)) {
			h.mu.Unlock()
			break
		}
		w.mu.Lock()
		switch {
		case h.err != nil:
			w.renewals.remove(h)
		case h.nextRenew > mono(now.Add(h.ttl/6)):
			w.renewals.set(h, h.nextRenew) // not due after all
		case h.limited:
			w.renewals.remove(h) // its lease reaches its max hold: nothing more to renew
		default:
			w.renewals.remove(h) // back in when the outcome is known
			h.renewing = true
			// WithMaxHold: renew up to the limit, then no more (cut, counted
			// from now: the renewal's start, earlier than its send, so the
			// lease it confirms ends at the limit, and the server's after)
			ttl, _ := h.cut(h.ttl, now)
			ttl = max(ttl, MinTTL)
			// While an Extend given up on may have run (unsure), the lease in
			// Redis may be longer than any the hold counts on (an Extend
			// that landed late counts its TTL from then): the renewal sets
			// it to exactly ttl, so that Redis's end comes back to the
			// hold's. That shortens nothing the hold counts on: the hold
			// counts on start+ttl of the confirmed commands, each sent
			// before this one with a TTL that ends no later (the same TTL,
			// or one cut to the same max hold; an Extend resets what the
			// hold counts on to its own), and the sequence refuses any of
			// them that would land after it. Only with a sequence: without
			// one, an older renewal could land after it.
			exact := h.unsure != nil && h.p.Ordered()
			if rs == nil { // made once at the most it may hold: no garbage of growing
				rs = make([]renewal, 0, min(maxBatch, w.renewals.Len()+1))
			}
			rs = append(rs, renewal{h: h, start: now, ttl: ttl, epoch: h.epoch, seq: h.next(), exact: exact})
		}
		w.mu.Unlock()
		h.mu.Unlock()
	}
	return rs
}

// earlier returns the earlier of two times.
func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// renew renews a batch in one pipeline and hands the outcomes to the loop.
func (w *watchdog) renew(ctx context.Context, rs []renewal) {
	ops := make([]backend.Op, len(rs))
	shortest := rs[0].ttl
	for i, r := range rs {
		ops[i] = r.h.p.Renew(r.h.token, r.ttl, r.exact, r.seq)
		shortest = min(shortest, r.ttl)
	}
	// No point waiting for a reply past the soonest deadline.
	bctx, cancel := context.WithTimeout(ctx, shortest)
	defer cancel()
	start := time.Now() // each renewal's start was set before (due): earlier, so its deadline is safe
	cmds := w.c.be.Batch(bctx, ops, true)
	for i, cmd := range cmds {
		v, err := cmd.Int64()
		rs[i].ok, rs[i].stale, rs[i].err = v == 1, v == protocol.ReplyStale, err
	}
	failed, first := failures(rs)
	w.c.tel.Renewed(len(rs), failed, first, time.Since(start))
	select {
	case w.results <- rs:
	case <-ctx.Done():
	}
}

// failures counts the renewals of rs that failed, and gives the first's
// error.
func failures(rs []renewal) (failed int, first error) {
	for _, r := range rs {
		if r.err != nil {
			if failed == 0 {
				first = r.err
			}
			failed++
		}
	}
	return failed, first
}

// apply records a batch's outcomes: renewed leases get a later deadline,
// leases found gone are lost, failed calls are retried soon. Every hold
// still held goes back into the schedules at its new times.
func (w *watchdog) apply(rs []renewal) {
	now := time.Now()
	for _, r := range rs {
		h := r.h
		h.mu.Lock()
		h.renewing = false
		switch {
		case h.err != nil:
		case r.err != nil:
			// Unknown outcome: try again soon; the deadline still holds.
			w.c.topo.Hint(r.err)
			h.nextRenew = mono(now.Add(h.ttl / 10))
		case r.stale:
			// A later command of the hold ran first (an Extend): this
			// renewal changed nothing and confirms nothing; the next
			// one comes soon.
			h.settle(r.start, r.seq)
			h.nextRenew = mono(now.Add(h.ttl / 10))
		case r.ok && r.epoch == h.epoch:
			h.confirmed(r.start, r.ttl, r.seq) // limited when it reaches the max hold
		case r.ok:
			// Extend ran meanwhile and set the schedule itself.
		}
		gone := h.err == nil && r.err == nil && !r.ok && !r.stale && !h.releasing
		if h.err == nil && !gone {
			w.mu.Lock()
			if w.deadlines.in(h) {
				// Its deadline's key stays: an outcome only ever moves a
				// deadline later (confirmed), and a key may be earlier
				// than its hold's deadline, never later (schedule): when
				// it comes up, expire checks the hold and moves it. A
				// round of renewals costs the deadlines' heap nothing.
				w.renewals.set(h, h.nextRenew)
			}
			w.mu.Unlock()
		}
		h.mu.Unlock()
		if gone {
			h.end(lost(reasonGone, h.k.Name, "renewal found the lock gone or held by another owner"))
		}
	}
}

// shutdown ends every lease still held (with the watchdog gone nothing
// would renew them), then releases them in Redis: each holder is told
// before anybody else can take its lock.
func (w *watchdog) shutdown() {
	w.mu.Lock()
	w.closed = true
	hs := make([]*Hold, len(w.deadlines.holds)) // every hold is in it
	for i, e := range w.deadlines.holds {
		hs[i] = e.h
		e.h.index = [2]int32{-1, -1}
	}
	w.deadlines, w.renewals = newSchedule(byDeadline), newSchedule(byRenewal)
	w.mu.Unlock()
	for _, h := range hs {
		h.end(errs.Closed)
	}
	w.c.releaseHolds(hs)
}
