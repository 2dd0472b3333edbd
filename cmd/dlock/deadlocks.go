package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/dlock-go/dlock"
)

// deadlocksSynopsis is deadlocks' usage line.
const deadlocksSynopsis = "dlock deadlocks [--redis URL] [--tls-*] [--prefix P] [--json]"

// deadlocksCmd is "dlock deadlocks": it prints the deadlocks under the
// prefix now (Snapshot.Deadlocks: each cycle, who holds what and waits
// for what, and its victim) and those broken in the last hour
// (Snapshot.Broken), as a report or, with --json, as one object (see
// deadlocksJSON). It exits 0 whether or not there are any; 1 when Redis
// cannot be read.
func deadlocksCmd(args []string, stdout, stderr io.Writer) int {
	var (
		a      adminFlags
		asJSON bool
	)
	fs := newFlags("deadlocks")
	a.register(fs)
	fs.BoolVar(&asJSON, "json", false, "print one JSON object: deadlocks now and broken (the schema is in docs/cli.md)")
	if code, ok := parseFlags(fs, deadlocksSynopsis, args, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return usageError(stderr, deadlocksSynopsis, "deadlocks takes no arguments, got %q", fs.Args())
	}
	t, err := a.options()
	if err != nil {
		return usageError(stderr, deadlocksSynopsis, "%v", err)
	}
	return adminRun(t, a.prefix, stderr, func(ctx context.Context, s *session) int {
		// the waits and deadlocks are read whole; the locks are not
		// printed, so one is inspected at most
		snap, err := s.c.Snapshot(ctx, dlock.SnapshotOptions{Limit: 1})
		if err != nil {
			complain(stderr, "deadlocks: %v", err)
			return exitFail
		}
		if asJSON {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			if err := enc.Encode(deadlocksOf(snap)); err != nil {
				complain(stderr, "writing JSON: %v", err)
				return exitFail
			}
			return exitOK
		}
		writeDeadlocks(stdout, snap, a.prefix)
		return exitOK
	})
}

// writeDeadlocks writes the report of the deadlocks now and broken.
func writeDeadlocks(w io.Writer, s *dlock.Snapshot, prefix string) {
	switch n := len(s.Deadlocks); n {
	case 0:
		fmt.Fprintf(w, "no deadlock now under prefix %q (%d acquire%s wait%s while holding leases)\n",
			prefix, len(s.Waits), plural(len(s.Waits)), map[bool]string{true: "s", false: ""}[len(s.Waits) == 1])
	default:
		fmt.Fprintf(w, "%d deadlock%s now under prefix %q:\n", n, plural(n), prefix)
	}
	for i, d := range s.Deadlocks {
		fmt.Fprintf(w, "\ndeadlock %d, %d waits in a cycle:\n", i+1, len(d.Waits))
		writeCycle(w, d, s.At)
		fmt.Fprintf(w, "  victim: %s, the youngest wait: it gives up (ErrDeadlock) once it has waited the detector's delay\n",
			victimOf(d))
	}
	if len(s.Broken) == 0 {
		return
	}
	fmt.Fprintf(w, "\n%d deadlock%s broken in the last hour, newest first:\n", len(s.Broken), plural(len(s.Broken)))
	for _, d := range s.Broken {
		at := "-"
		if !d.At.IsZero() {
			at = d.At.Local().Format("15:04:05")
		}
		fmt.Fprintf(w, "\n%s  %s gave up:\n", at, victimOf(d))
		writeCycle(w, d, time.Time{})
	}
}

// writeCycle writes one line a wait: who, what it holds, what it waits
// for, and since when (at now; nothing when now is zero).
func writeCycle(w io.Writer, d dlock.Deadlock, now time.Time) {
	for _, x := range d.Waits {
		var holds, waits []string
		for _, h := range x.Holds {
			holds = append(holds, h.LockRef.String())
		}
		for _, f := range x.For {
			waits = append(waits, f.String())
		}
		line := fmt.Sprintf("  %s holds %s, waits for %s", waitWho(x), strings.Join(holds, " and "), strings.Join(waits, " and "))
		if !now.IsZero() && !x.Since.IsZero() {
			line += " (" + short(max(now.Sub(x.Since), 0)) + ")"
		}
		if x.Token == d.Victim {
			line += "  <- victim"
		}
		fmt.Fprintln(w, line)
	}
}

// waitWho names a wait: its label, its owner (host/pid program), its
// token's first characters.
func waitWho(x dlock.Wait) string {
	var parts []string
	if x.Label != "" {
		parts = append(parts, fmt.Sprintf("%q", x.Label))
	}
	if o := x.Owner; o != nil { // display: quoted if it carries control characters (a terminal's escapes)
		s := fmt.Sprintf("%s/%d", display(o.Host), o.PID)
		if o.Program != "" {
			s += " " + display(o.Program)
		}
		if o.Label != "" {
			s = display(o.Label) + " @ " + s
		}
		parts = append(parts, s)
	}
	tok := x.Token
	if len(tok) > 12 {
		tok = tok[:12] + "…"
	}
	parts = append(parts, "token "+tok)
	return strings.Join(parts, " ")
}

// victimOf names a deadlock's victim.
func victimOf(d dlock.Deadlock) string {
	for _, x := range d.Waits {
		if x.Token == d.Victim {
			return waitWho(x)
		}
	}
	return "token " + d.Victim
}

// deadlockedLocks are the locks of s's deadlocks now: each cycle's
// holds and the locks its waits wait for.
func deadlockedLocks(s *dlock.Snapshot) map[lockID]bool {
	out := map[lockID]bool{}
	for _, d := range s.Deadlocks {
		for _, x := range d.Waits {
			for _, h := range x.Holds {
				out[lockID{h.Kind, h.Name}] = true
			}
			for _, f := range x.For {
				out[lockID{f.Kind, f.Name}] = true
			}
		}
	}
	return out
}

// The JSON of deadlocks --json, documented in docs/cli.md ("Deadlocks"),
// stable as inspect's is: fields may be added, never renamed. Times
// are RFC 3339 in UTC with milliseconds (null when unknown); lists are
// [] when empty; an owner is null when its Client did not record one.

// deadlocksJSON is the whole answer.
type deadlocksJSON struct {
	Deadlocks []deadlockJSON `json:"deadlocks"` // cycles now
	Broken    []deadlockJSON `json:"broken"`    // broken in the last hour, newest first
}

// deadlockJSON is one cycle.
type deadlockJSON struct {
	Victim string     `json:"victim"` // the token of the wait that gives up (gave up)
	At     *string    `json:"at"`     // when it was found (broken: when the victim gave up)
	Waits  []waitJSON `json:"waits"`  // in the cycle's order: each waits for a lock the next holds
}

// waitJSON is one wait of a cycle.
type waitJSON struct {
	Token   string        `json:"token"`
	Label   string        `json:"label"`
	Since   *string       `json:"since"`
	Permits int64         `json:"permits"`
	For     []lockRefJSON `json:"for"`
	Holds   []heldJSON    `json:"holds"`
	Owner   *ownerJSON    `json:"owner"`
}

// lockRefJSON names a lock (an RWMutex's side too).
type lockRefJSON struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
	Side string `json:"side"`
}

// heldJSON is a lease a wait holds.
type heldJSON struct {
	lockRefJSON
	Token string `json:"token"`
}

// deadlocksOf is the JSON of s's deadlocks.
func deadlocksOf(s *dlock.Snapshot) deadlocksJSON {
	out := deadlocksJSON{Deadlocks: []deadlockJSON{}, Broken: []deadlockJSON{}}
	for _, d := range s.Deadlocks {
		out.Deadlocks = append(out.Deadlocks, deadlockOf(d))
	}
	for _, d := range s.Broken {
		out.Broken = append(out.Broken, deadlockOf(d))
	}
	return out
}

// deadlockOf is the JSON of one cycle.
func deadlockOf(d dlock.Deadlock) deadlockJSON {
	dj := deadlockJSON{Victim: d.Victim, At: timeJSON(d.At), Waits: []waitJSON{}}
	for _, x := range d.Waits {
		wj := waitJSON{Token: x.Token, Label: x.Label, Since: timeJSON(x.Since), Permits: x.Permits,
			For: []lockRefJSON{}, Holds: []heldJSON{}, Owner: ownerOf(x.Owner)}
		for _, f := range x.For {
			wj.For = append(wj.For, lockRefJSON{string(f.Kind), f.Name, f.Side})
		}
		for _, h := range x.Holds {
			wj.Holds = append(wj.Holds, heldJSON{lockRefJSON{string(h.Kind), h.Name, h.Side}, h.Token})
		}
		dj.Waits = append(dj.Waits, wj)
	}
	return dj
}
