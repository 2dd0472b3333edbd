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
	"golang.org/x/term"
)

// topSynopsis is top's usage line.
const topSynopsis = "dlock top [--redis URL] [--tls-*] [--prefix P] [--interval 1s] [--limit 40] [--iterations N] [PATTERN]"

// On a terminal (term.IsTerminal on stdout), top draws full screen: it
// enters the alternate screen, so that the shell's screen comes back as
// it was when top ends; draws each frame from the top left, every row cut
// to the terminal's width (term.GetSize, read before each frame) and to
// its height, never wrapped; and reads its keys from stdin in raw mode,
// where q or Ctrl-C ends it. However it ends (q, Ctrl-C, SIGINT, SIGTERM,
// --iterations) it leaves the alternate screen and restores the
// terminal's mode. Anywhere else (a pipe, a file) it writes the frames
// plainly, one after another, with no escape sequence.

// Escape sequences of the full-screen view (xterm, understood by every
// terminal emulator in use and by tmux and screen).
const (
	altScreenOn  = "\x1b[?1049h\x1b[?25l" // alternate screen; cursor hidden
	altScreenOff = "\x1b[?25h\x1b[?1049l" // cursor shown; back to the main screen
	frameStart   = "\x1b[H"               // cursor home: the frame overwrites the last
	lineEnd      = "\x1b[K\r\n"           // clear the rest of the row; next row (raw mode: CR too)
	frameEnd     = "\x1b[K\x1b[J"         // clear the rest of the last row, and below it
)

// screen is top's terminal: stdout, and stdin when it is one too.
type screen struct {
	out   *os.File
	in    *os.File
	saved *term.State // stdin's mode before raw; nil when not changed
}

// openScreen returns the terminal that w is, or nil when w is not one.
// It enters the alternate screen and puts stdin (when a terminal) in raw
// mode; close undoes both.
func openScreen(w io.Writer) *screen {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return nil
	}
	s := &screen{out: f}
	if term.IsTerminal(int(os.Stdin.Fd())) {
		if st, err := term.MakeRaw(int(os.Stdin.Fd())); err == nil {
			s.in, s.saved = os.Stdin, st
		}
	}
	fmt.Fprint(f, altScreenOn)
	return s
}

// close leaves the alternate screen and restores stdin's mode.
func (s *screen) close() {
	fmt.Fprint(s.out, altScreenOff)
	if s.saved != nil {
		_ = term.Restore(int(s.in.Fd()), s.saved)
	}
}

// keys calls quit when q, Q, Ctrl-C or Ctrl-D is typed (raw mode: Ctrl-C
// is a byte, not a SIGINT). Its goroutine reads stdin until then, or
// until stdin ends; a read it is blocked in when top ends is left to the
// process's exit (stdin cannot be interrupted portably).
func (s *screen) keys(quit func()) {
	if s.in == nil {
		return
	}
	go func() {
		buf := make([]byte, 64)
		for {
			n, err := s.in.Read(buf)
			for _, b := range buf[:n] {
				if b == 'q' || b == 'Q' || b == 3 || b == 4 {
					quit()
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
}

// draw writes one frame: each row cut to the terminal's width, as many
// rows as it has. topLoop draws the last frame again when the terminal
// is resized (SIGWINCH), so that it never waits a refresh to fit.
func (s *screen) draw(frame string) {
	width, height, err := term.GetSize(int(s.out.Fd()))
	if err != nil || width < 1 || height < 1 {
		width, height = 80, 24
	}
	fmt.Fprint(s.out, fitFrame(frame, width, height))
}

// fitFrame renders frame for a terminal of width columns and height
// rows: from the top left, every row cut to width (never wrapped: a
// wrapped row would scroll the frame), the rows past height left out.
// Each character counts as one column (the table is ASCII but for the
// names, and "–").
func fitFrame(frame string, width, height int) string {
	lines := strings.Split(strings.TrimSuffix(frame, "\n"), "\n")
	if len(lines) > height {
		lines = lines[:height]
	}
	var b strings.Builder
	b.WriteString(frameStart)
	for i, l := range lines {
		if r := []rune(l); len(r) > width {
			l = string(r[:width])
		}
		b.WriteString(l)
		if i < len(lines)-1 {
			b.WriteString(lineEnd)
		}
	}
	b.WriteString(frameEnd)
	return b.String()
}

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
	// dead are the locks in a deadlock now, deadlocks how many cycles
	// there are, more how many locks were found past topInspectLimit.
	dead      map[lockID]bool
	deadlocks int
	more      int
}

// topInspectLimit is how many locks one refresh of top inspects at most
// (the rest are counted, not read).
const topInspectLimit = 1000

// topView is what top shows, besides the snapshots.
type topView struct {
	prefix, pattern string
	interval        time.Duration
	limit           int // rows at most; 0: all
}

// topRow is one lock in top's table.
type topRow struct {
	l       *dlock.LockInfo
	dead    bool          // in a deadlock now
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
	durationVar(fs, &v.interval, "interval", "", time.Second, "refresh every `DURATION` (each refresh SCANs the keyspace)")
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
	if scr := openScreen(stdout); scr != nil {
		defer scr.close()
		ctx, quit := context.WithCancel(ctx)
		defer quit()
		scr.keys(quit)
		resized := make(chan os.Signal, 1)
		notifyResize(resized)
		defer signal.Stop(resized)
		topLoop(ctx, s.c, v, n, scr.draw, resized)
		return exitOK
	}
	first := true
	topLoop(ctx, s.c, v, n, func(frame string) {
		if !first {
			fmt.Fprintln(stdout) // frames one after another, in a pipe or a file
		}
		first = false
		fmt.Fprint(stdout, frame)
	}, nil)
	return exitOK
}

// topLoop draws a frame every interval until ctx ends, or n frames when n
// is above 0. A failed refresh is shown, and the next one tried. draw
// puts a frame on the screen, or after the last one in a pipe or a file.
func topLoop(ctx context.Context, c *dlock.Client, v topView, n int, draw func(frame string), resized <-chan os.Signal) {
	tick := time.NewTicker(v.interval)
	defer tick.Stop()
	var prev *snapshot
	for i := 1; ; i++ {
		cur := refresh(ctx, c, v.pattern)
		if ctx.Err() != nil {
			return
		}
		frame := renderTop(v, prev, cur)
		draw(frame)
		if cur.err == nil {
			prev = cur
		}
		if n > 0 && i >= n {
			return
		}
		for waiting := true; waiting; {
			select {
			case <-ctx.Done():
				return
			case <-resized:
				draw(frame) // the same frame, fitted to the new size
			case <-tick.C:
				waiting = false
			}
		}
	}
}

// refresh reads the locks and the deadlocks (one Client.Snapshot),
// bounded by adminTimeout.
func refresh(ctx context.Context, c *dlock.Client, pattern string) *snapshot {
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	s, err := c.Snapshot(ctx, dlock.SnapshotOptions{Pattern: pattern, Limit: topInspectLimit})
	if err != nil {
		return &snapshot{at: time.Now(), err: err}
	}
	return &snapshot{at: time.Now(), locks: s.Locks, dead: deadlockedLocks(s), deadlocks: len(s.Deadlocks), more: s.More}
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
		r := topRow{l: l, heldFor: -1, dead: cur.dead[lockID{l.Kind, l.Name}]}
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
		return cmp.Or(compareBool(b.dead, a.dead), cmp.Compare(b.rate, a.rate), cmp.Compare(len(b.l.Waiters), len(a.l.Waiters)),
			cmp.Compare(b.heldFor, a.heldFor), cmp.Compare(a.l.Name, b.l.Name), cmp.Compare(a.l.Kind, b.l.Kind))
	})
	return rows
}

// compareBool orders false before true.
func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
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
	if cur.deadlocks > 0 {
		fmt.Fprintf(&b, "DEADLOCK: %d cycle%s of waits now (dlock deadlocks tells who); its locks are marked and first\n",
			cur.deadlocks, plural(cur.deadlocks))
	}
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
		name := display(r.l.Name)
		if r.dead {
			name = "DEADLOCK " + name
		}
		row(t, string(r.l.Kind), name, holder, heldFor, strconv.Itoa(len(r.l.Waiters)), acq, "–")
	}
	t.Flush()
	if len(shown) < len(rows) {
		fmt.Fprintf(&b, "… and %d more (--limit)\n", len(rows)-len(shown))
	}
	if cur.more > 0 {
		fmt.Fprintf(&b, "… and %d more not inspected (a refresh reads %d at most): narrow PATTERN\n", cur.more, topInspectLimit)
	}
	fmt.Fprintln(&b)
	fmt.Fprintln(&b, "ACQ/S: holds seen to begin per second since the last refresh (one that began and ended between two refreshes is not seen).")
	fmt.Fprintln(&b, lostNote)
	return b.String()
}
