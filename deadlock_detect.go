package dlock

import (
	"context"
	"encoding/json"
	"slices"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/acquisition"
	"github.com/dlock-go/dlock/internal/backend"
	"github.com/dlock-go/dlock/internal/deadlock"
	"github.com/dlock-go/dlock/internal/hold"
	"github.com/dlock-go/dlock/internal/protocol"
)

// Deadlock detection, the Client's side (the rule is internal/deadlock's).
//
// A Lock that must wait, and whose ctx carries leases of this Client
// (Lease.Context; a LockAll's parts taken so far), records its wait under
// each token it holds: <prefix>:wait:<token>, the record as JSON, for
// recordTTL, written again at each check. Once it has waited the
// Client's delay, and every delay after, it reads the graph from the lock
// it waits for (internal/deadlock.Find) and, if it is the victim of a
// cycle, gives up with a *DeadlockError: its Lock returns it, and leaves
// the queue as a cancelled Lock does. It records the cycle broken under
// <prefix>:deadlock:<its token> for an hour (Snapshot.Broken). The wait's
// records are deleted when it ends, however it ends.
//
// Nothing of this runs on the uncontended path, nor for a wait whose ctx
// carries no lease, and nothing is read until a wait has lasted the
// delay. A quorum Client (NewQuorum) does none of it: its holders are
// not inspected (inspect.go's reader), so it has no graph to read.
//
// Why this grants nothing twice: the detector only ever ends a wait, the
// way its ctx's end would (Run's undo buries what an attempt may have
// taken, and leaves the queue); it writes no lock, queue or mark key.

// waitKey is where a wait is recorded under a token it holds.
func waitKey(prefix, token string) string { return prefix + ":wait:" + token }

// brokenKey is where a victim records the deadlock it broke.
func brokenKey(prefix, token string) string { return prefix + ":deadlock:" + token }

// brokenTTL is how long a broken deadlock stays listed.
const brokenTTL = time.Hour

// detector is one wait's deadlock detection (acquisition.Detector).
type detector struct {
	c    *Client
	self deadlock.Wait
	body string // self, as JSON
	ttl  time.Duration
	off  bool   // its record could not be written: it checks nothing
	what string // the primitive, for telemetry
	// checks counts the checks made, and readAt is the one that reads
	// the graph next (readGraph).
	checks, readAt int
}

// detectorFor returns the detection of an acquire that may wait for the
// locks fors gives (permits of a Semaphore), or nil when it needs none:
// ctx carries no lease of c, or c does not detect. fors is called only
// when a detector is made.
func (c *Client) detectorFor(ctx context.Context, what, token string, fors func() []deadlock.Lock, permits int, cfg lockConfig) acquisition.Detector {
	if c.deadlockDelay == 0 {
		return nil
	}
	head, _ := ctx.Value(carrying{}).(*carried)
	if head == nil {
		return nil
	}
	var holds []deadlock.Held
	for p := head; p != nil; p = p.next {
		for _, l := range p.l.Parts() {
			h := l.of.First()
			if h.Keeper() != c.holds || l.Err() != nil ||
				slices.ContainsFunc(holds, func(x deadlock.Held) bool { return x.Token == h.Token() }) {
				continue
			}
			holds = append(holds, deadlock.Held{Lock: lockOf(h), Token: h.Token()})
		}
	}
	if len(holds) == 0 {
		return nil
	}
	d := &detector{c: c, what: what, self: deadlock.Wait{Token: token, For: fors(),
		Permits: int64(permits), Holds: holds, Label: cfg.Label}}
	d.ttl = max(3*c.deadlockDelay, cfg.QueueTTL)
	d.self.Every, d.self.TTL = c.deadlockDelay.Milliseconds(), d.ttl.Milliseconds()
	return d
}

// lockOf is the lock a hold is of, as the graph names it.
func lockOf(h *hold.Hold) deadlock.Lock {
	return deadlock.Lock{Kind: string(kindOfWhat(h.What())), Name: h.Keys().Name, Side: sideName(h.Side())}
}

// sideName is an RWMutex side as inspection writes it.
func sideName(s string) string {
	switch s {
	case "r":
		return "read"
	case "w":
		return "write"
	}
	return ""
}

// Next is the pause before the next check: the delay. Each check writes
// the records again (a record not written for two delays counts as left
// behind: deadlock.Wait.Stale); the graph is read at the first
// check, then at checks whose gaps double up to eight delays (readGraph).
// Reads after the first only serve where a victim failed to look (a
// failed read) or clocks disagree on who is youngest: a cycle is closed by
// a wait that begins, the youngest, whose first check finds it
// (internal/deadlock's doc, "One victim").
func (d *detector) Next() time.Duration { return d.c.deadlockDelay }

// readGraph reports whether this check reads the graph: checks 1, 2, 4,
// 8, then every eighth.
func (d *detector) readGraph() bool {
	d.checks++
	if d.checks < d.readAt {
		return false
	}
	d.readAt = d.checks + min(max(d.checks, 1), 8)
	return true
}

// Record writes the wait's record under each token it holds; its Since
// is now, when the wait begins (its first attempt has failed).
func (d *detector) Record(ctx context.Context) {
	d.self.Since = time.Now().UnixMilli()
	b, _ := json.Marshal(&d.self) // (strings and numbers: never fails)
	d.body = string(b)
	if err := d.write(ctx); err != nil && ctx.Err() == nil {
		d.off = true
		d.c.dep.WarnOnce("deadlock records", "dlock: a wait that holds leases could not record itself: no deadlock "+
			"through it can be found (an ACL user needs ~<prefix>:wait:*: docs/deployments.md)", "lock", d.self.For[0].Name, "err", err)
	}
}

// write sets the wait's records, for ttl.
func (d *detector) write(ctx context.Context) error {
	cmds := make([]driver.Command, 0, len(d.self.Holds))
	for _, h := range d.self.Holds {
		cmds = append(cmds, protocol.Keyed("SET", waitKey(d.c.prefix, h.Token), d.body, "PX", d.ttl.Milliseconds()))
	}
	return backend.FirstErr(d.c.rdb.Pipeline(ctx, cmds))
}

// Done deletes the wait's records, within a short grace once ctx has
// ended; those it cannot delete expire.
func (d *detector) Done(ctx context.Context) {
	ctx, cancel := hold.Graced(ctx)
	defer cancel()
	cmds := make([]driver.Command, 0, len(d.self.Holds))
	for _, h := range d.self.Holds {
		cmds = append(cmds, protocol.Keyed("DEL", waitKey(d.c.prefix, h.Token)))
	}
	_ = backend.FirstErr(d.c.rdb.Pipeline(ctx, cmds))
}

// Check reads the graph; the victim of a cycle gets its error.
func (d *detector) Check(ctx context.Context) error {
	if d.off {
		return nil
	}
	if err := d.write(ctx); err != nil || !d.readGraph() { // (write lengthens the records)
		return nil
	}
	cycle, victim, err := deadlock.Find(ctx, graphReader{d.c}, &d.self)
	if err != nil || victim == nil || victim.Token != d.self.Token {
		return nil
	}
	dl := Deadlock{Victim: victim.Token, At: time.Now()}
	for _, w := range cycle {
		dl.Waits = append(dl.Waits, d.c.publicWait(ctx, w))
	}
	d.c.tel.Log.Warn("dlock: deadlock: this acquire gives up", "lock", d.self.For[0].Name, "cycle", dl.String())
	d.c.tel.Deadlock(d.what, d.self.For[0].Name)
	d.c.recordBroken(ctx, &dl, cycle)
	return &DeadlockError{Deadlock: dl}
}

// recordBroken records a deadlock its victim broke, for an hour.
func (c *Client) recordBroken(ctx context.Context, dl *Deadlock, cycle []*deadlock.Wait) {
	ctx, cancel := hold.Graced(ctx)
	defer cancel()
	b, _ := json.Marshal(brokenRecord{At: dl.At.UnixMilli(), Victim: dl.Victim, Waits: cycle})
	_ = c.rdb.Do(ctx, protocol.Keyed("SET", brokenKey(c.prefix, dl.Victim), string(b), "PX", brokenTTL.Milliseconds())).Err
}

// brokenRecord is a broken deadlock as recorded (JSON).
type brokenRecord struct {
	At     int64            `json:"at"` // Unix ms
	Victim string           `json:"v"`
	Waits  []*deadlock.Wait `json:"w"`
}

// publicWait turns a wait's record into a Wait, its owner read through
// the Client's owner cache (nil when it cannot be read).
func (c *Client) publicWait(ctx context.Context, w *deadlock.Wait) Wait {
	out := Wait{Token: w.Token, Since: time.UnixMilli(w.Since), Permits: w.Permits, Label: w.Label}
	for _, l := range w.For {
		out.For = append(out.For, LockRef{Kind: Kind(l.Kind), Name: l.Name, Side: l.Side})
	}
	for _, h := range w.Holds {
		out.Holds = append(out.Holds, HeldLock{LockRef: LockRef{Kind: Kind(h.Kind), Name: h.Name, Side: h.Side}, Token: h.Token})
	}
	if len(w.Token) >= 16 {
		info := &LockInfo{Holders: []Holder{{Token: w.Token}}}
		if c.fillOwners(ctx, c.rdb, info, &c.owners) == nil {
			out.Owner = info.Holders[0].Owner
		}
	}
	return out
}

// graphReader reads the graph for internal/deadlock: holders by
// inspection (owners through the Client's cache), waits by their records.
type graphReader struct{ c *Client }

func (g graphReader) State(ctx context.Context, l deadlock.Lock) (deadlock.State, error) {
	info, err := g.c.inspect(ctx, Kind(l.Kind), l.Name, &g.c.owners)
	if err != nil {
		return deadlock.State{}, err
	}
	st := deadlock.State{Semaphore: info.Kind == KindSemaphore, Free: info.Free}
	for _, h := range info.Holders {
		st.Holders = append(st.Holders, deadlock.Holder{Token: h.Token, Permits: h.Holds})
	}
	for _, w := range info.Waiters {
		if w.Expires > 0 { // (a place past its expiry is a wait gone)
			st.Waiters = append(st.Waiters, w.Token)
		}
	}
	return st, nil
}

// WaitOf reads the wait recorded under token, with its record's PTTL: a
// record left behind by a wait that ended (deadlock.Wait.Stale) is no wait.
func (g graphReader) WaitOf(ctx context.Context, token string) (*deadlock.Wait, error) {
	key := waitKey(g.c.prefix, token)
	rs := g.c.rdb.Pipeline(ctx, []driver.Command{protocol.Keyed("GET", key), protocol.Keyed("PTTL", key)})
	if err := backend.FirstErr(rs); err != nil {
		return nil, redisErr("deadlock check", key, err)
	}
	w := parseWait(rs[0])
	if w == nil {
		return nil, nil
	}
	if pttl, err := rs[1].Int64(); err == nil && w.Stale(pttl) {
		return nil, nil
	}
	return w, nil
}

// parseWait reads a wait's record from a GET's reply: nil if there is
// none, or it is not one.
func parseWait(r driver.Reply) *deadlock.Wait {
	v, err := r.Text()
	if err != nil {
		return nil
	}
	var w deadlock.Wait
	if json.Unmarshal([]byte(v), &w) != nil || w.Token == "" || len(w.For) == 0 {
		return nil
	}
	return &w
}

// lockFor is what a request's acquire waits for, as the graph names it.
func lockFor(r *request) []deadlock.Lock {
	return []deadlock.Lock{{Kind: string(kindOfWhat(r.What)), Name: r.K.Name, Side: sideName(r.Side)}}
}
