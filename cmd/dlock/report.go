package main

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/dlock-go/dlock"
)

// The human reports of inspect, ls and unlock --force. Each is a pure
// function of what the library returned and of now (for "held for"), so
// that the tests can render fixed inputs.

// newTable returns a tabwriter for an aligned table on w; Flush it.
func newTable(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0) }

// writeLock writes inspect's report of one lock.
func writeLock(w io.Writer, l *dlock.LockInfo, now time.Time) {
	fmt.Fprintf(w, "%s %s (key %s)\n", l.Kind, strconv.Quote(l.Name), display(l.Key))
	if l.Kind == dlock.KindLatch {
		if l.Held {
			fmt.Fprintf(w, "  count:     %d (closed: Wait blocks)\n", l.Count)
		} else {
			fmt.Fprintln(w, "  count:     0 (open: Wait returns)")
		}
		fmt.Fprintf(w, "  ttl:       %s\n", lockTTL(l.TTL))
		return
	}
	if l.Held {
		fmt.Fprintf(w, "  held:      yes, by %d holder%s\n", len(l.Holders), plural(len(l.Holders)))
	} else {
		fmt.Fprintln(w, "  held:      no")
	}
	switch l.Kind {
	case dlock.KindRWMutex:
		fmt.Fprintf(w, "  mode:      %s\n", orDash(l.Mode, "free"))
	case dlock.KindSemaphore:
		fmt.Fprintf(w, "  permits:   %d free of %d\n", l.Free, l.Capacity)
	case dlock.KindElection:
		if l.Held {
			fmt.Fprintf(w, "  leader:    value %s, term %d\n", strconv.Quote(l.Value), l.Holders[0].Fence)
		} else {
			fmt.Fprintln(w, "  leader:    none")
		}
	}
	fmt.Fprintf(w, "  ttl:       %s\n", lockTTL(l.TTL))
	if l.Fence == 0 {
		fmt.Fprintln(w, "  fence:     none held")
	} else {
		fmt.Fprintf(w, "  fence:     %d, the highest its holders have\n", l.Fence)
	}
	if l.KeptFor != "" {
		fmt.Fprintf(w, "  kept for:  %s (the waiter whose turn it is)\n", l.KeptFor)
	}
	if len(l.Holders) > 0 {
		fmt.Fprintln(w, "  holders:")
		writeHolders(w, l, now)
	}
	if len(l.Waiters) == 0 {
		fmt.Fprintln(w, "  waiters:   none")
		return
	}
	fmt.Fprintf(w, "  waiters:   %d, in the order they will be served:\n", len(l.Waiters))
	writeWaiters(w, l, now)
}

// writeHolders writes a lock's holders as a table, indented.
func writeHolders(w io.Writer, l *dlock.LockInfo, now time.Time) {
	t := newTable(w)
	rw, sem := l.Kind == dlock.KindRWMutex, l.Kind == dlock.KindSemaphore
	holds := "HOLDS"
	if sem {
		holds = "PERMITS"
	}
	row(t, "    TOKEN", when(rw, "SIDE"), holds,
		"FENCE", "LABEL", "HELD FOR", "TTL", "HOST", "PID", "PROGRAM", "CLIENT LABEL")
	for _, h := range l.Holders {
		row(t, "    "+h.Token, when(rw, h.Side), strconv.FormatInt(h.Holds, 10), strconv.FormatInt(h.Fence, 10),
			orDash(display(h.Label), "-"), heldFor(now, h.Since), left(h.TTL), ownerCells(h.Owner))
	}
	t.Flush()
}

// writeWaiters writes a lock's waiters as a table, in order, indented.
func writeWaiters(w io.Writer, l *dlock.LockInfo, now time.Time) {
	t := newTable(w)
	rw, sem := l.Kind == dlock.KindRWMutex, l.Kind == dlock.KindSemaphore
	row(t, "    #", "TOKEN", when(rw, "SIDE"), when(sem, "PERMITS"), "WAITING", "EXPIRES", "HOST", "PID", "PROGRAM", "CLIENT LABEL")
	for i, wt := range l.Waiters {
		row(t, "    "+strconv.Itoa(i+1), wt.Token, when(rw, wt.Side), when(sem, strconv.FormatInt(wt.Permits, 10)),
			heldFor(now, wt.Since), left(wt.Expires), ownerCells(wt.Owner))
	}
	t.Flush()
}

// writeList writes ls's table of locks.
func writeList(w io.Writer, locks []*dlock.LockInfo, prefix, pattern string) {
	if len(locks) == 0 {
		fmt.Fprintf(w, "no locks under prefix %q%s\n", prefix, when(pattern != "", fmt.Sprintf(" matching %q", pattern)))
		return
	}
	t := newTable(w)
	row(t, "KIND", "NAME", "HELD", "HOLDERS", "WAITERS", "TTL", "FENCE", "STATE")
	for _, l := range locks {
		row(t, string(l.Kind), display(l.Name), yesNo(l.Held), holdersSummary(l.Holders),
			strconv.Itoa(len(l.Waiters)), lockTTL(l.TTL), strconv.FormatInt(l.Fence, 10), kindState(l))
	}
	t.Flush()
	fmt.Fprintf(w, "%d lock%s\n", len(locks), plural(len(locks)))
}

// writeFreed writes what unlock --force freed: before is the lock as it
// was just before.
func writeFreed(w io.Writer, before *dlock.LockInfo, now time.Time) {
	name := strconv.Quote(before.Name)
	switch {
	case before.Kind == dlock.KindLatch && !before.Held:
		fmt.Fprintf(w, "latch %s was open: nothing to do\n", name)
		return
	case before.Kind == dlock.KindLatch:
		fmt.Fprintf(w, "opened latch %s (key %s), whose count was %d: its waiters are woken\n", name, display(before.Key), before.Count)
		return
	case !before.Held && before.KeptFor == "":
		fmt.Fprintf(w, "%s %s was not held: nothing freed\n", before.Kind, name)
		return
	case before.Kind == dlock.KindSemaphore:
		fmt.Fprintf(w, "took back the %d permit%s held of semaphore %s (key %s), capacity %d\n",
			before.Capacity-before.Free, plural(int(before.Capacity-before.Free)), name, display(before.Key), before.Capacity)
	default:
		fmt.Fprintf(w, "freed %s %s (key %s), which had %s left\n", before.Kind, name, display(before.Key), lockTTL(before.TTL))
	}
	if before.Kind == dlock.KindElection && before.Held {
		fmt.Fprintf(w, "  its leader's value was %s; observers are told nobody leads\n", strconv.Quote(before.Value))
	}
	if len(before.Holders) > 0 {
		fmt.Fprintln(w, "  holders (each learns at its next renewal that its lease is lost):")
		writeHolders(w, before, now)
	} else {
		fmt.Fprintf(w, "  no holder: it was kept for %s\n", before.KeptFor)
	}
	if n := len(before.Waiters); n > 0 {
		fmt.Fprintf(w, "  %d waiter%s: the next get%s it as from a release\n", n, plural(n), when(n == 1, "s"))
	}
	fmt.Fprintf(w, "the next fence is above %d (fences never go back)\n", before.Fence)
}

// row writes one table row; a cell "" is left out (a column that does
// not apply), a []string is spread into cells.
func row(t io.Writer, cells ...any) {
	var out []string
	for _, c := range cells {
		switch c := c.(type) {
		case string:
			if c != "" {
				out = append(out, c)
			}
		case []string:
			out = append(out, c...)
		}
	}
	fmt.Fprintln(t, strings.Join(out, "\t"))
}

// when returns s if cond holds, else "".
func when(cond bool, s string) string {
	if cond {
		return s
	}
	return ""
}

// ownerCells are the host, pid, program and label cells of an owner; "-"
// for what is not known.
func ownerCells(o *dlock.Owner) []string {
	if o == nil {
		return []string{"-", "-", "-", "-"}
	}
	pid := "-"
	if o.PID > 0 {
		pid = strconv.Itoa(o.PID)
	}
	return []string{orDash(display(o.Host), "-"), pid, orDash(display(o.Program), "-"), orDash(display(o.Label), "-")}
}

// who names a holder briefly: host/pid and label when its Client said,
// else the start of its token.
func who(h dlock.Holder) string {
	s := ""
	switch o := h.Owner; {
	case o != nil:
		s = display(o.Host) + "/" + strconv.Itoa(o.PID)
		if o.Label != "" {
			s += " (" + display(o.Label) + ")"
		}
	case len(h.Token) > 12:
		s = h.Token[:12] + "…"
	default:
		s = orDash(display(h.Token), "-")
	}
	if h.Label != "" { // the hold's own (--label, dlock.WithLabel): what it is doing
		s = display(h.Label) + " @ " + s
	}
	return s
}

// busyHolder names who holds the lock a refused acquire's err (a
// *dlock.BusyError) found: its label, host/pid, and fence; "another
// owner" when the error does not say (a quorum, or the read after the
// refusal failed).
func busyHolder(err error) string {
	var be *dlock.BusyError
	if !errors.As(err, &be) || be.Holder == nil {
		return "another owner"
	}
	s := who(*be.Holder)
	if be.Holder.Fence != 0 {
		s += ", fence " + strconv.FormatInt(be.Holder.Fence, 10)
	}
	if n := len(be.Holders); n > 1 {
		s += fmt.Sprintf(" (and %d more)", n-1)
	}
	return s
}

// holdersSummary names the first holder and counts the others.
func holdersSummary(hs []dlock.Holder) string {
	switch len(hs) {
	case 0:
		return "-"
	case 1:
		return who(hs[0])
	}
	return fmt.Sprintf("%s +%d", who(hs[0]), len(hs)-1)
}

// kindState is a lock's state in a word or two, by kind.
func kindState(l *dlock.LockInfo) string {
	switch l.Kind {
	case dlock.KindMutex:
		if l.KeptFor != "" {
			return "kept for a waiter"
		}
	case dlock.KindRWMutex:
		return orDash(l.Mode, "free")
	case dlock.KindSemaphore:
		return fmt.Sprintf("%d/%d free", l.Free, l.Capacity)
	case dlock.KindLatch:
		if l.Count > 0 {
			return fmt.Sprintf("count %d", l.Count)
		}
		return "open"
	case dlock.KindElection:
		if l.Held {
			return "value " + valueCell(l.Value)
		}
		return "no leader"
	}
	return "-"
}

// maxValueCell is how many characters of a leader's value a table shows.
const maxValueCell = 32

// valueCell is a leader's value for a table: quoted (so that "" shows),
// and cut short when long.
func valueCell(v string) string {
	if r := []rune(v); len(r) > maxValueCell {
		v = string(r[:maxValueCell-1]) + "…"
	}
	return strconv.Quote(v)
}

// lockTTL formats LockInfo.TTL: 0 when there is no key, -1 for no expiry.
func lockTTL(d time.Duration) string {
	switch {
	case d == 0:
		return "no key"
	case d < 0:
		return "no expiry"
	}
	return short(d)
}

// left formats the time a hold or a waiter's place has left; a negative
// one is overdue (expired, not yet cleaned up).
func left(d time.Duration) string {
	if d < 0 {
		return "overdue"
	}
	return short(d)
}

// heldFor formats how long ago since was, "-" when it is not known.
func heldFor(now, since time.Time) string {
	if since.IsZero() {
		return "-"
	}
	return short(max(now.Sub(since), 0))
}

// short formats a duration to a precision that fits its size.
func short(d time.Duration) string {
	switch {
	case d < 10*time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// display quotes s when it has spaces or control characters, which
// would blur a table.
func display(s string) string {
	if strings.IndexFunc(s, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
		return strconv.Quote(s)
	}
	return s
}

// orDash returns s, or dash when s is empty.
func orDash(s, dash string) string {
	if s == "" {
		return dash
	}
	return s
}

// yesNo formats a bool for a table.
func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// plural returns "s" unless n is 1.
func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
