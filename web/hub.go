package web

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/dlock-go/dlock"
)

// The hub is the one refresher behind every page, API call and scrape of
// a handler: it reads one Snapshot per interval while anyone looks, and
// none while nobody does.
//
// "Someone looks" is: a page's feed is open (watch), or the API or the
// metrics asked within the last interval (fresh). The refresh loop runs
// only then: it is started by the first of them, reads a snapshot at
// once, then one an interval after the last one ended, and ends by
// itself at the first tick that finds nobody looking. So N open pages
// cost one Snapshot an interval, as one page does; a scrape every 15 s
// costs one Snapshot a scrape.

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

// hub is safe for concurrent use.
type hub struct {
	read     func(ctx context.Context) (*dlock.Snapshot, error)
	render   func(st *state) []byte // the view of a state
	interval time.Duration
	timeout  time.Duration // bounds one read
	log      *slog.Logger

	mu      sync.Mutex    // guards the fields below
	cur     *state        // the last refresh's; nil before the first
	next    chan struct{} // closed when cur is replaced
	viewers int           // feeds open
	wanted  time.Time     // the last API or metrics request
	running bool          // the loop runs
	failing bool          // the last refresh failed (logged once a run of failures)
	counts  struct{ refreshes, errors uint64 }
}

// newHub returns a hub that reads with read and renders with render.
func newHub(interval, timeout time.Duration, log *slog.Logger, read func(context.Context) (*dlock.Snapshot, error), render func(*state) []byte) *hub {
	return &hub{read: read, render: render, interval: interval, timeout: timeout, log: log, next: make(chan struct{})}
}

// watch counts a viewer in until stop is called, and starts the loop if
// it is not running.
func (h *hub) watch() (stop func()) {
	h.mu.Lock()
	h.viewers++
	h.startLocked()
	h.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			h.mu.Lock()
			h.viewers--
			h.mu.Unlock()
		})
	}
}

// latest returns the last refresh's state (nil before the first) and a
// channel closed when there is a newer one.
func (h *hub) latest() (*state, <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cur, h.next
}

// fresh returns a state no older than the interval: the last one if it
// is, else the next one, which it has the loop read. It blocks until
// then or until ctx ends (returning ctx's error).
func (h *hub) fresh(ctx context.Context) (*state, error) {
	h.mu.Lock()
	now := time.Now()
	h.wanted = now
	if h.cur != nil && now.Sub(h.cur.at) <= h.interval {
		st := h.cur
		h.mu.Unlock()
		return st, nil
	}
	h.startLocked()
	next := h.next
	h.mu.Unlock()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-next:
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cur, nil
}

// startLocked starts the loop unless it runs. h.mu is held.
func (h *hub) startLocked() {
	if h.running {
		return
	}
	h.running = true
	go h.loop()
}

// loop refreshes at once, then an interval after each refresh ended,
// until a tick finds nobody looking. It is the only goroutine the hub
// starts, and at most one runs.
func (h *hub) loop() {
	t := time.NewTimer(h.interval)
	defer t.Stop()
	for {
		h.refresh()
		t.Reset(h.interval)
		<-t.C
		if !h.keepGoing() {
			return
		}
	}
}

// keepGoing says whether someone looks; if not, it marks the loop
// stopped (under the lock, so that the next viewer starts another).
func (h *hub) keepGoing() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.viewers > 0 || time.Since(h.wanted) < h.interval {
		return true
	}
	h.running = false
	return false
}

// refresh reads one snapshot, bounded by the timeout, and publishes it.
// A failed read keeps the last good snapshot, with the error beside it.
func (h *hub) refresh() {
	ctx, cancel := context.WithTimeout(context.Background(), h.timeout)
	began := time.Now()
	snap, err := h.read(ctx)
	cancel()
	took := time.Since(began)

	h.mu.Lock()
	h.counts.refreshes++
	st := &state{snap: snap, err: err, at: time.Now(), took: took}
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

	// rendered outside the lock: viewers keep reading the last state
	st.view = h.render(st)
	if logErr {
		h.log.Warn("dlock/web: refresh failed (logged once until one succeeds)", "err", err)
	}

	h.mu.Lock()
	h.cur = st
	close(h.next)
	h.next = make(chan struct{})
	h.mu.Unlock()
}
