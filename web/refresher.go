package web

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/dlock-go/dlock"
)

// The refresher is the one reader behind every page, API call and scrape of
// a handler: it reads one Snapshot per interval while anyone looks, and
// none while nobody does. It starts no goroutine: a read runs in the
// request that finds the last state older than the interval (the others
// that come meanwhile wait for it: a single flight), so with nobody
// looking nothing runs at all. An open page's feed (follow) asks again
// exactly an interval after the state it got, which every page got at
// once: the first feed to wake reads, the others share its read. So N
// open pages cost one Snapshot an interval, as one page does, and a
// scrape every 15 s costs one Snapshot a scrape.

// state is one refresh's outcome, as every viewer gets it.
type state struct {
	snap *dlock.Snapshot // the last good snapshot (nil if none yet)
	err  error           // this refresh's error (nil: snap is this refresh's)
	at   time.Time       // when this refresh ended
	took time.Duration   // how long its Snapshot took
	view []byte          // the JSON of /api/snapshot and /events
	// counts, as of this refresh
	refreshes, errors uint64
}

// refresher is safe for concurrent use.
type refresher struct {
	read     func(ctx context.Context) (*dlock.Snapshot, error)
	render   func(st *state) []byte // the view of a state
	interval time.Duration
	timeout  time.Duration // bounds one read
	log      *slog.Logger

	mu       sync.Mutex    // guards the fields below
	cur      *state        // the last refresh's; nil before the first
	inflight chan struct{} // while a read runs: closed when it has ended and cur is its
	failing  bool          // the last refresh failed (logged once a run of failures)
	counts   struct{ refreshes, errors uint64 }
}

// newRefresher returns a refresher that reads with read and renders with render.
func newRefresher(interval, timeout time.Duration, log *slog.Logger, read func(context.Context) (*dlock.Snapshot, error), render func(*state) []byte) *refresher {
	return &refresher{read: read, render: render, interval: interval, timeout: timeout, log: log}
}

// fresh returns a state younger than the interval: the last one if it
// is; else the one of the read under way, or of a read it makes itself.
// It blocks until then, or until ctx ends (returning ctx's error; a read
// it makes itself runs to its end, bounded by the timeout, for the others
// waiting on it).
func (h *refresher) fresh(ctx context.Context) (*state, error) {
	h.mu.Lock()
	if h.cur != nil && time.Since(h.cur.at) < h.interval {
		st := h.cur
		h.mu.Unlock()
		return st, nil
	}
	if ch := h.inflight; ch != nil {
		h.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-ch:
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.cur, nil
	}
	ch := make(chan struct{})
	h.inflight = ch
	h.mu.Unlock()
	return h.refresh(context.WithoutCancel(ctx), ch), nil
}

// follow calls show with a fresh state at once, and then each time the
// interval has passed since the state it showed, until ctx ends or show
// fails. It returns ctx's error or show's.
func (h *refresher) follow(ctx context.Context, show func(*state) error) error {
	t := time.NewTimer(0)
	defer t.Stop()
	<-t.C
	for {
		st, err := h.fresh(ctx)
		if err != nil {
			return err
		}
		if err := show(st); err != nil {
			return err
		}
		t.Reset(time.Until(st.at.Add(h.interval)))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// refresh reads one snapshot, bounded by the timeout, publishes it as
// cur, closes done and returns it. A failed read keeps the last good
// snapshot, with the error beside it.
func (h *refresher) refresh(ctx context.Context, done chan struct{}) *state {
	ctx, cancel := context.WithTimeout(ctx, h.timeout)
	began := time.Now()
	snap, err := h.read(ctx)
	cancel()
	took := time.Since(began)

	h.mu.Lock()
	h.counts.refreshes++
	st := &state{snap: snap, err: err, took: took}
	logErr := false
	switch {
	case err != nil:
		h.counts.errors++
		if h.cur != nil {
			st.snap = h.cur.snap
		}
		logErr, h.failing = !h.failing, true
	case snap == nil: // a source that answers nothing: keep the last
		h.counts.errors++
		st.err = errNoSnapshot
		if h.cur != nil {
			st.snap = h.cur.snap
		}
	default:
		h.failing = false
	}
	st.refreshes, st.errors = h.counts.refreshes, h.counts.errors
	h.mu.Unlock()

	// rendered outside the lock: the others wait on done meanwhile
	st.view = h.render(st)
	if logErr {
		h.log.Warn("dlock/web: refresh failed (logged once until one succeeds)", "err", err)
	}
	st.at = time.Now()

	h.mu.Lock()
	h.cur = st
	h.inflight = nil
	close(done)
	h.mu.Unlock()
	return st
}
