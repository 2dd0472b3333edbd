package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dlock-go/dlock"
)

// topSynopsis is top's usage line.
const topSynopsis = "dlock top [--redis URL] [--tls-*] [--prefix P] [--interval 1s] [--limit 40] [--iterations N] [PATTERN]"

// terminal reports whether w is a terminal (a character device): only
// there does top clear the screen between frames.
func terminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// clearScreen moves the cursor home and clears the terminal (ANSI).
const clearScreen = "\x1b[H\x1b[2J"

// minInterval is top's shortest refresh interval: each refresh SCANs the
// keyspace.
const minInterval = 100 * time.Millisecond

// lostNote says why top's LOST/S column is empty.
const lostNote = "LOST/S –: a lost lease leaves no trace in Redis; see the dlock.leases.lost metric."

// snapshot is what one refresh of top saw.
type snapshot struct {
	at    time.Time // when the refresh returned
	locks []*dlock.LockInfo
	err   error // the refresh failed; locks is empty
}

// topView is what top shows, besides the snapshots.
type topView struct {
	prefix, pattern string
	interval        time.Duration
	limit           int // rows at most; 0: all
}

// topRow is one lock in top's table.
type topRow struct {
	l       *dlock.LockInfo
	heldFor time.Duration // the longest hold's age; -1 when unknown or free
	rate    float64       // acquisitions per second since the last refresh
	hasRate bool          // rate is known: not the first refresh, not a latch
}

// topCmd is "dlock top": a live view of the locks under the prefix whose
// names match PATTERN, refreshed every --interval, busiest first. It runs
// until SIGINT or SIGTERM (or --iterations refreshes) and exits 0.
func topCmd(args []string, stdout, stderr io.Writer) int {
	var (
		a adminFlags
		v topView
		n int
	)
	fs := newFlags("top")
	a.register(fs)
	fs.DurationVar(&v.interval, "interval", time.Second, "refresh every `DURATION` (each refresh SCANs the keyspace)")
	fs.IntVar(&v.limit, "limit", 40, "show the `N` busiest locks at most (0: all)")
	fs.IntVar(&n, "iterations", 0, "stop after `N` refreshes (default: until interrupted)")
	if code, ok := parseFlags(fs, topSynopsis, args, stdout, stderr); !ok {
		return code
	}
	pattern, err := patternArg(fs)
	if err != nil {
		return usageError(stderr, topSynopsis, "%v", err)
	}
	switch {
	case v.interval < minInterval:
		return usageError(stderr, topSynopsis, "--interval %v: want at least %v", v.interval, minInterval)
	case v.limit < 0 || n < 0:
		return usageError(stderr, topSynopsis, "--limit and --iterations must not be negative")
	}
	opt, err := a.options()
	if err != nil {
		return usageError(stderr, topSynopsis, "%v", err)
	}
	v.prefix, v.pattern = a.prefix, pattern

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	s, err := connect(ctx, opt, a.prefix)
	if err != nil {
		complain(stderr, "%v", err)
		return exitFail
	}
	defer s.close()
	topLoop(ctx, s.c, v, n, stdout)
	return exitOK
}

// topLoop draws a frame every interval until ctx ends, or n frames when n
// is above 0. A failed refresh is shown, and the next one tried.
func topLoop(ctx context.Context, c *dlock.Client, v topView, n int, w io.Writer) {
	tick := time.NewTicker(v.interval)
	defer tick.Stop()
	var prev *snapshot
	for i := 1; ; i++ {
		cur := refresh(ctx, c, v.pattern)
		if ctx.Err() != nil {
			return
		}
		if terminal(w) {
			fmt.Fprint(w, clearScreen)
		} else if i > 1 {
			fmt.Fprintln(w) // frames one after another, in a pipe or a file
		}
		fmt.Fprint(w, renderTop(v, prev, cur))
		if cur.err == nil {
			prev = cur
		}
		if n > 0 && i >= n {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// refresh reads the locks, bounded by adminTimeout.
func refresh(ctx context.Context, c *dlock.Client, pattern string) *snapshot {
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	locks, err := c.Locks(ctx, pattern)
	return &snapshot{at: time.Now(), locks: locks, err: err}
}

// lockID names a lock in a snapshot.
type lockID struct {
	kind dlock.Kind
	name string
}

// topRows makes cur's rows, busiest first: most acquisitions per second,
// then most waiters, then held before free and the longest hold first,
// then by name and kind. prev is the previous snapshot (nil for the
// first); a lock it does not have had no fence then.
func topRows(prev, cur *snapshot) []topRow {
	// the holds (by fence) each lock had then
	seen := map[lockID]map[int64]bool{}
	if prev != nil {
		for _, l := range prev.locks {
			fences := map[int64]bool{}
			for _, h := range l.Holders {
				fences[h.Fence] = true
			}
			seen[lockID{l.Kind, l.Name}] = fences
		}
	}
	rows := make([]topRow, 0, len(cur.locks))
	for _, l := range cur.locks {
		r := topRow{l: l, heldFor: -1}
		for _, h := range l.Holders {
			if !h.Since.IsZero() {
				r.heldFor = max(r.heldFor, cur.at.Sub(h.Since), 0)
			}
		}
		if dt := cur.at.Sub(timeOf(prev)).Seconds(); prev != nil && dt > 0 && l.Kind != dlock.KindLatch {
			began := 0 // holds that have a fence the lock's holders did not have then
			for _, h := range l.Holders {
				if h.Fence != 0 && !seen[lockID{l.Kind, l.Name}][h.Fence] {
					began++
				}
			}
			r.rate, r.hasRate = float64(began)/dt, true
		}
		rows = append(rows, r)
	}
	slices.SortStableFunc(rows, func(a, b topRow) int {
		return cmp.Or(cmp.Compare(b.rate, a.rate), cmp.Compare(len(b.l.Waiters), len(a.l.Waiters)),
			cmp.Compare(b.heldFor, a.heldFor), cmp.Compare(a.l.Name, b.l.Name), cmp.Compare(a.l.Kind, b.l.Kind))
	})
	return rows
}

// timeOf is a snapshot's time, zero for none.
func timeOf(s *snapshot) time.Time {
	if s == nil {
		return time.Time{}
	}
	return s.at
}

// renderTop renders one frame of top (without the clear-screen): a
// header, the table of cur's locks, busiest first, and a note. prev is
// the last good snapshot before cur, nil for none; cur.at is "now".
func renderTop(v topView, prev, cur *snapshot) string {
	var b strings.Builder
	scope := "all locks"
	if v.pattern != "" {
		scope = fmt.Sprintf("locks matching %q", v.pattern)
	}
	fmt.Fprintf(&b, "dlock top  %s  prefix %q, %s, every %v  (Ctrl-C quits)\n",
		cur.at.Format("15:04:05"), v.prefix, scope, v.interval)
	if cur.err != nil {
		fmt.Fprintf(&b, "refresh failed: %v\n(trying again every %v)\n", cur.err, v.interval)
		return b.String()
	}
	rows := topRows(prev, cur)
	held, waiting, rate := 0, 0, 0.0
	for _, r := range rows {
		if r.l.Held {
			held++
		}
		waiting += len(r.l.Waiters)
		rate += r.rate
	}
	fmt.Fprintf(&b, "%d lock%s, %d held, %d waiter%s", len(rows), plural(len(rows)), held, waiting, plural(waiting))
	if prev != nil {
		fmt.Fprintf(&b, ", %.1f acquisitions/s", rate)
	}
	fmt.Fprintln(&b)
	fmt.Fprintln(&b)
	t := newTable(&b)
	row(t, "KIND", "NAME", "HOLDER", "HELD FOR", "WAITERS", "ACQ/S", "LOST/S")
	shown := rows
	if v.limit > 0 && len(rows) > v.limit {
		shown = rows[:v.limit]
	}
	for _, r := range shown {
		holder, heldFor := holdersSummary(r.l.Holders), "-"
		switch {
		case r.l.Kind == dlock.KindLatch:
			holder = kindState(r.l)
		case r.l.Kind == dlock.KindElection && r.l.Held:
			holder += " " + valueCell(r.l.Value) // the leader and its value
		}
		if r.heldFor >= 0 {
			heldFor = short(r.heldFor)
		}
		acq := "–"
		if r.hasRate {
			acq = strconv.FormatFloat(r.rate, 'f', 1, 64)
		}
		row(t, string(r.l.Kind), display(r.l.Name), holder, heldFor, strconv.Itoa(len(r.l.Waiters)), acq, "–")
	}
	t.Flush()
	if len(shown) < len(rows) {
		fmt.Fprintf(&b, "… and %d more (--limit)\n", len(rows)-len(shown))
	}
	fmt.Fprintln(&b)
	fmt.Fprintln(&b, "ACQ/S: holds seen to begin per second since the last refresh (one that began and ended between two refreshes is not seen).")
	fmt.Fprintln(&b, lostNote)
	return b.String()
}
