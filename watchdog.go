package dlock

import (
	"context"

	"github.com/redis/go-redis/v9"
	"sync"
	"time"
)

// watchdog keeps the Client's leases: one goroutine and one timer for all
// of them. It renews auto-renewed leases in batches, one pipeline per
// round (go-redis sends a cluster pipeline as one per node), and ends any
// lease whose local deadline passes without a confirmed renewal.
//
// Renewals run in a goroutine of their own, one batch at a time, so that a
// Redis call that hangs (a partition, a paused server) never delays the
// deadlines: a lease is declared lost at its deadline whatever the network
// does.
type watchdog struct {
	c       *Client
	wake    chan struct{} // the set or a schedule changed
	results chan []renewal
	done    chan struct{} // closed when run returns

	mu     sync.Mutex
	holds  map[*hold]struct{}
	closed bool
	next   time.Time // when the loop wakes next; zero while it is busy
}

// renewal is the outcome of renewing one hold.
type renewal struct {
	h     *hold
	start time.Time
	ttl   time.Duration
	epoch int
	ok    bool  // the server renewed it
	err   error // the call failed: outcome unknown
}

func newWatchdog(c *Client) *watchdog {
	return &watchdog{
		c:       c,
		wake:    make(chan struct{}, 1),
		results: make(chan []renewal),
		done:    make(chan struct{}),
		holds:   make(map[*hold]struct{}),
	}
}

// add starts watching h. It returns false when the Client is closed.
func (w *watchdog) add(h *hold) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return false
	}
	w.holds[h] = struct{}{}
	// Wake the loop only if this hold needs it before the loop wakes
	// anyway: an acquire costs no scheduling in the common case.
	h.mu.Lock()
	due := h.deadline
	if h.renew && h.nextRenew.Before(due) {
		due = h.nextRenew
	}
	h.mu.Unlock()
	if w.next.IsZero() || due.Before(w.next) {
		w.kick()
	}
	return true
}

func (w *watchdog) remove(h *hold) {
	w.mu.Lock()
	delete(w.holds, h)
	w.mu.Unlock()
}

// kick makes the loop look at its schedule again.
func (w *watchdog) kick() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *watchdog) run(ctx context.Context) {
	defer close(w.done)
	var batches sync.WaitGroup
	defer batches.Wait()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	inflight := false
	for {
		now := time.Now()
		next := now.Add(time.Hour)
		var due []renewal
		for _, h := range w.snapshot() {
			h.expireIfLate(now)
			h.mu.Lock()
			if h.err == nil {
				if h.deadline.Before(next) {
					next = h.deadline
				}
				if h.renew && !h.renewing && !inflight {
					// Renew what is due, and what would be due within a
					// sixth of its TTL, so that leases share batches.
					if !h.nextRenew.After(now.Add(h.ttl / 6)) {
						h.renewing = true
						due = append(due, renewal{h: h, ttl: h.ttl, epoch: h.epoch})
					} else if h.nextRenew.Before(next) {
						next = h.nextRenew
					}
				}
			}
			h.mu.Unlock()
		}
		if len(due) > 0 {
			inflight = true
			batches.Add(1)
			go func() {
				defer batches.Done()
				w.renew(ctx, due)
			}()
		}
		w.mu.Lock()
		w.next = next
		w.mu.Unlock()
		timer.Reset(time.Until(next))
		select {
		case <-ctx.Done():
			w.shutdown()
			return
		case <-w.wake:
		case <-timer.C:
		case rs := <-w.results:
			inflight = false
			w.apply(rs)
		}
		w.mu.Lock()
		w.next = time.Time{} // busy: adds kick until the next wait
		w.mu.Unlock()
	}
}

// snapshot returns the holds being watched.
func (w *watchdog) snapshot() []*hold {
	w.mu.Lock()
	defer w.mu.Unlock()
	hs := make([]*hold, 0, len(w.holds))
	for h := range w.holds {
		hs = append(hs, h)
	}
	return hs
}

// renew renews a batch in one pipeline and hands the outcomes to the loop.
func (w *watchdog) renew(ctx context.Context, rs []renewal) {
	ops := make([]op, len(rs))
	calls := make([]call, 0, len(rs)) // the scripts among them, to batch
	shortest := rs[0].ttl
	for i, r := range rs {
		ops[i] = r.h.p.renew(r.h.token, r.ttl, false)
		if cl, ok := ops[i].(call); ok {
			calls = append(calls, cl)
		}
		shortest = min(shortest, r.ttl)
	}
	// No point waiting for a reply past the soonest deadline.
	bctx, cancel := context.WithTimeout(ctx, shortest)
	defer cancel()
	start := time.Now()
	var cmds []*redis.Cmd
	_, cluster := w.c.rdb.(*redis.ClusterClient)
	if len(calls) == len(ops) && !(cluster && w.c.sync.replicas > 0) {
		cmds = runBatch(bctx, w.c.rdb, calls, w.c.sync)
	} else if qops := quorumOps(ops); qops != nil {
		cmds = w.c.q.runOps(bctx, qops) // one batch per node, all nodes at once
	} else {
		// Transactions (no scripts) cannot share a pipeline, and on a
		// cluster WAIT must follow each write on its node's connection.
		for _, o := range ops {
			cmds = append(cmds, w.c.grant(bctx, o))
		}
	}
	for i, cmd := range cmds {
		rs[i].start = start
		v, err := cmd.Int64()
		rs[i].ok, rs[i].err = v == 1, err
	}
	select {
	case w.results <- rs:
	case <-ctx.Done():
	}
}

// apply records a batch's outcomes: renewed leases get a later deadline,
// leases found gone are lost, failed calls are retried soon.
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
			w.c.clusterHint(r.err)
			h.nextRenew = now.Add(h.ttl / 10)
		case r.ok && r.epoch == h.epoch:
			h.confirmed(r.start, r.ttl)
		case r.ok:
			// Extend ran meanwhile and set the schedule itself.
		}
		gone := h.err == nil && r.err == nil && !r.ok && !h.releasing
		h.mu.Unlock()
		if gone {
			h.end(lost(h.k.name, "renewal found the lock gone or held by another owner"))
		}
	}
}

// shutdown ends every lease still held (with the watchdog gone nothing
// would renew them), then releases them in Redis: each holder is told
// before anybody else can take its lock.
func (w *watchdog) shutdown() {
	w.mu.Lock()
	w.closed = true
	hs := w.holds
	w.holds = map[*hold]struct{}{}
	w.mu.Unlock()
	ended := make([]*hold, 0, len(hs))
	for h := range hs {
		h.end(ErrClosed)
		ended = append(ended, h)
	}
	w.c.releaseAll(ended)
}
