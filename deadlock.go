package dlock

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dlock-go/dlock/internal/deadlock"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/protocol"
)

// ErrDeadlock is the error of a Lock (RLock, Acquire, Campaign, LockAll)
// given up because it was part of a deadlock: it waited while holding
// leases (passed in its ctx with Lease.Context), and the locks it waited
// for were held by acquires that waited, in turn, for what it held. Of
// the cycle's waits exactly one gives up — the youngest, the one that
// began waiting last — and the others are served. It matches
// ErrNotObtained; errors.As with a *DeadlockError gives the cycle.
// docs/guarantees.md, "Deadlocks".
var ErrDeadlock = errs.Deadlock

// DeadlockError is the error of an acquire given up to break a deadlock
// (ErrDeadlock). It matches ErrDeadlock and ErrNotObtained.
type DeadlockError struct {
	Deadlock
}

// Error names the cycle: each wait, what it holds, what it waits for.
func (e *DeadlockError) Error() string {
	return "dlock: deadlock: " + e.Deadlock.String() + "; this acquire gave up"
}

// Is reports whether target is ErrDeadlock or ErrNotObtained.
func (e *DeadlockError) Is(target error) bool {
	return target == ErrDeadlock || target == ErrNotObtained
}

// LockRef names one lock, or one side of an RWMutex.
type LockRef struct {
	Kind Kind
	Name string
	Side string // an RWMutex's: "read" or "write"
}

// String is the lock as the CLI writes it: kind, name, and side.
func (r LockRef) String() string {
	s := string(r.Kind) + " " + fmt.Sprintf("%q", r.Name)
	if r.Side != "" {
		s += " (" + r.Side + ")"
	}
	return s
}

// HeldLock is one lease that a waiting acquire holds.
type HeldLock struct {
	LockRef
	Token string // the lease's owner token, as its lock's Holder shows it
}

// Wait is one acquire that waits while it holds leases, as it recorded
// itself in Redis for the deadlock detector (only such acquires record
// anything: a wait that holds nothing cannot close a cycle).
type Wait struct {
	Token string    // the waiting acquire's own owner token
	Since time.Time // when it began waiting, by its Client's clock
	// For is what it waits for: one lock, or a LockAll's set (all of
	// them, taken together by one script).
	For     []LockRef
	Permits int64      // a Semaphore wait's permits
	Holds   []HeldLock // the leases it holds while it waits
	Label   string     // its acquire's WithLabel
	Owner   *Owner     // who it is, if its Client said
}

// Deadlock is a cycle of waits: each waits for a lock that the next
// holds, and the last for one the first holds.
type Deadlock struct {
	Waits []Wait
	// Victim is the Token of the wait that gives up: the youngest (latest
	// Since; of equal ones, the greatest Token).
	Victim string
	// At is when it was found: for a deadlock broken (Snapshot.Broken),
	// when its victim gave up.
	At time.Time
}

// String writes the cycle on one line.
func (d Deadlock) String() string {
	var b strings.Builder
	for i, w := range d.Waits {
		if i > 0 {
			b.WriteString(", then ")
		}
		b.WriteString(w.describe())
		if w.Token == d.Victim {
			b.WriteString(" [gives up]")
		}
	}
	return b.String()
}

// describe writes who the wait is, what it holds and what it waits for.
func (w Wait) describe() string {
	var b strings.Builder
	switch {
	case w.Label != "":
		fmt.Fprintf(&b, "%q", w.Label)
	case w.Owner != nil:
		fmt.Fprintf(&b, "%s pid %d", w.Owner.Host, w.Owner.PID)
	default:
		b.WriteString("token " + w.Token)
	}
	b.WriteString(" holding ")
	for i, h := range w.Holds {
		if i > 0 {
			b.WriteString(" and ")
		}
		b.WriteString(h.LockRef.String())
	}
	b.WriteString(" waits for ")
	for i, f := range w.For {
		if i > 0 {
			b.WriteString(" and ")
		}
		b.WriteString(f.String())
	}
	return b.String()
}

// SnapshotOptions says what Snapshot reads.
type SnapshotOptions struct {
	// Pattern keeps the locks whose name matches it (path.Match syntax;
	// "" for all). Waits and deadlocks are all read, whatever it is.
	Pattern string
	// Limit is how many locks are inspected at most (0: 1000); the rest
	// are counted in More, not read.
	Limit int
}

// Snapshot is the state of a prefix's locks at one moment, read by one
// SCAN pass: what a live page or `dlock top` shows.
type Snapshot struct {
	At    time.Time   // when the pass began, by this process's clock
	Locks []*LockInfo // the locks found that match, inspected, by name
	// More is how many matching locks were found beyond Limit, and not
	// inspected.
	More int
	// Waits are the waits recorded by acquires that hold leases.
	Waits []Wait
	// Deadlocks are the cycles among Waits now (each found as the
	// detector finds it; its victim gives up once it has waited the
	// Client's WithDeadlockDelay).
	Deadlocks []Deadlock
	// Broken are the deadlocks broken in the last hour, newest first: a
	// victim records its cycle when it gives up.
	Broken []Deadlock
	// Keys is how many keys the SCAN pass walked.
	Keys int
}

// Snapshot reads the state of the Client's prefix: one SCAN pass (on a
// cluster, one per master) finds the locks, the waits and the deadlocks
// broken lately; then the first Limit locks that match are inspected, the
// waits read, and the cycles among them found. Its cost on Redis is that
// pass, one inspection per lock shown, and a GET per wait recorded: a
// page that refreshes shares one Snapshot among its viewers (package web).
// On a quorum Client it fails: its nodes are not inspected.
func (c *Client) Snapshot(ctx context.Context, opts SnapshotOptions) (*Snapshot, error) {
	if err := checkCall(ctx, c, "*"); err != nil {
		return nil, err
	}
	if opts.Limit < 0 {
		return nil, invalid("Snapshot: negative Limit %d", opts.Limit)
	}
	r, err := c.reader()
	if err != nil {
		return nil, err
	}
	limit := cmp.Or(opts.Limit, defaultSnapshotLimit)
	s := &Snapshot{At: time.Now()}
	found, err := c.scanPrefix(ctx, r, opts.Pattern, true)
	if err != nil {
		return nil, err
	}
	s.Keys = found.keys
	waitKeys, brokenKeys := found.waits, found.broken
	waitPre := waitKey(c.prefix, "")
	ids := found.sorted()
	if len(ids) > limit {
		s.More = len(ids) - limit
		ids = ids[:limit]
	}
	for _, l := range ids {
		info, err := c.inspect(ctx, l.kd, l.name, &c.owners)
		if err != nil {
			return nil, err
		}
		s.Locks = append(s.Locks, info)
	}
	g := &snapshotGraph{graphReader: graphReader{c}, states: map[deadlock.Lock]deadlock.State{}, waits: map[string]*deadlock.Wait{}}
	var waits []*deadlock.Wait
	for _, k := range waitKeys {
		w, err := graphReader{c}.WaitOf(ctx, strings.TrimPrefix(k, waitPre)) // (a record left behind is none)
		if err != nil {
			return nil, err
		}
		if w == nil || !slices.ContainsFunc(w.Holds, func(h deadlock.Held) bool { return waitKey(c.prefix, h.Token) == k }) {
			continue
		}
		for _, h := range w.Holds {
			if x, ok := g.waits[h.Token]; ok && x.Token == w.Token {
				w = x // one Wait per wait, however many tokens it holds
			}
		}
		if !slices.Contains(waits, w) {
			waits = append(waits, w)
		}
		for _, h := range w.Holds {
			g.waits[h.Token] = w
		}
	}
	slices.SortFunc(waits, func(a, b *deadlock.Wait) int {
		return cmp.Or(cmp.Compare(a.Since, b.Since), strings.Compare(a.Token, b.Token))
	})
	public := map[*deadlock.Wait]Wait{}
	pub := func(w *deadlock.Wait) Wait {
		if p, ok := public[w]; ok {
			return p
		}
		p := c.publicWait(ctx, w)
		public[w] = p
		return p
	}
	inCycle := map[string]bool{}
	for _, w := range waits {
		s.Waits = append(s.Waits, pub(w))
		if inCycle[w.Token] {
			continue
		}
		cycle, victim, err := deadlock.Find(ctx, g, w)
		if err != nil {
			return nil, err
		}
		if cycle == nil {
			continue
		}
		d := Deadlock{Victim: victim.Token, At: s.At}
		for _, x := range cycle {
			inCycle[x.Token] = true
			d.Waits = append(d.Waits, pub(x))
		}
		s.Deadlocks = append(s.Deadlocks, d)
	}
	for _, k := range brokenKeys {
		v, err := r.Do(ctx, protocol.Keyed("GET", k)).Text()
		var b brokenRecord
		if err != nil || json.Unmarshal([]byte(v), &b) != nil {
			continue // (expired since the scan, or not a record)
		}
		d := Deadlock{Victim: b.Victim, At: time.UnixMilli(b.At)}
		for _, w := range b.Waits {
			d.Waits = append(d.Waits, c.publicWait(ctx, w))
		}
		s.Broken = append(s.Broken, d)
	}
	slices.SortFunc(s.Broken, func(a, b Deadlock) int { return b.At.Compare(a.At) })
	return s, nil
}

// snapshotGraph is the graph as a Snapshot reads it: each lock's state
// read once, and the waits that the scan found (no other).
type snapshotGraph struct {
	graphReader
	states map[deadlock.Lock]deadlock.State
	waits  map[string]*deadlock.Wait // by held token
}

func (g *snapshotGraph) State(ctx context.Context, l deadlock.Lock) (deadlock.State, error) {
	if st, ok := g.states[l]; ok {
		return st, nil
	}
	st, err := g.graphReader.State(ctx, l)
	if err == nil {
		g.states[l] = st
	}
	return st, err
}

func (g *snapshotGraph) WaitOf(_ context.Context, token string) (*deadlock.Wait, error) {
	return g.waits[token], nil
}

// defaultSnapshotLimit is how many locks a Snapshot inspects by default.
const defaultSnapshotLimit = 1000
