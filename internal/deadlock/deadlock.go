// Package deadlock finds deadlocks among waits that hold locks: the
// wait-for graph, read from Redis through a Reader, and the rule that
// picks the one wait of a cycle that gives up.
//
// # The graph
//
// A wait is an acquire that waits while it holds leases (carried in its
// ctx: Lease.Context, or a LockAll's parts taken so far); it records in
// Redis what it holds and what it waits for (Wait), under each token it
// holds. From a wait, the graph goes to the locks it waits for, from a
// lock to its holders, and from a holder's token to the wait recorded
// under it, if any. A holder with no wait recorded is running: it will
// release, as far as anyone here can tell.
//
// # Deadlocked waits
//
// A wait is deadlocked when it cannot be served unless a deadlocked wait
// gives up. Find computes the largest such set among the waits it has
// read (a greatest fixed point): it starts from all of them and drops,
// until none is dropped, every wait that the rest cannot block:
//
//   - a wait for a Mutex, FairMutex, Election, an RWMutex's either side,
//     or a LockAll's set is blocked while one holder of one of its locks
//     is in the set (an RWMutex's writer needs every reader gone; a
//     reader queued behind a writer needs what the writer needs);
//   - a wait for n permits of a Semaphore is blocked while the permits
//     that are free, with those of the holders outside the set, are fewer
//     than n (any holder's release may serve it);
//   - a lock with no holder (free, or kept for a waiter that is about to
//     take it) blocks nothing.
//
// A wait the exploration did not reach (past its bound), or whose record
// could not be read, counts as running; so does a wait whose record is
// read but which is queued for none of its locks (no live place in any
// of their queues): a record outlives its wait when its DEL fails (a
// connection lost, a server stalled, as the wait ended), for up to its
// TTL, and such a record says its owner waits while it runs — with a
// lock it has since released and another has taken, a cycle that is not
// there (deadlock_attack_test.go, StaleRecordNoReport). A live wait
// keeps its place in its lock's queue until it ends, and loses it (takes
// the lock, or leaves) before its record is deleted (Run's undo runs
// after the detector's Done). A record not written again for more than
// two of its writer's delays is one left behind too (Wait.Stale): a
// connection cut as its wait ended loses the DEL and the leave alike.
// Within those two delays of its end such a record can still be read,
// as any record can between its wait's end and its DEL: the cycle it
// completes was real at most two delays before (below). So a wait is reported only when
// every way it could be served passes through waits that are themselves
// blocked as read: a chain that ends in a running holder is never
// reported, however long.
//
// # One victim
//
// The cycle is the strongly connected part of the set that holds the
// wait that looks (every member of a cycle reaches every other). Its
// victim is the youngest wait — the greatest Since, then the greatest
// Token — which every member computes alike from the same records, so
// that of the members that look, one alone finds itself the victim. The
// victim began waiting last, so it is the last to look (at its Since
// plus the delay): the others' records are all written by then. A member
// that finds another the victim goes on waiting, and looks again later:
// should the victim not give up (its check failed), it is found again.
//
// What the reads cannot see: they are not one snapshot. A record read
// after its wait ended by a timeout, before its record was deleted, may
// complete a cycle that has just dissolved; the cycle was real while the
// wait lasted. A chain of waits whose locks are all taken in one order
// has no cycle in any mix of old and new records (each record, on its
// own, holds only locks below the one it waits for), which the torture
// test's mix attacks.
package deadlock

import (
	"cmp"
	"context"
	"slices"
)

// Lock is one lock as the graph knows it.
type Lock struct {
	Kind string `json:"k"` // the inspection kind: "mutex", "rwmutex", ...
	Name string `json:"n"`
	Side string `json:"s,omitempty"` // an RWMutex's "read" or "write"
}

// Held is one lease that a wait holds.
type Held struct {
	Lock
	Token string `json:"t"`
}

// Wait is one wait's record, as stored in Redis (JSON).
type Wait struct {
	Token   string `json:"t"`           // the waiting acquire's token
	Since   int64  `json:"a"`           // when it began waiting: Unix ms, its Client's clock
	For     []Lock `json:"f"`           // what it waits for (a LockAll's script: all of them)
	Permits int64  `json:"p,omitempty"` // a Semaphore wait's
	Holds   []Held `json:"h"`           // the leases it holds
	Label   string `json:"l,omitempty"`
	// Every is how often the wait writes its record again (its Client's
	// delay, ms), and TTL the record's TTL at each write (ms): a reader
	// tells from the record's PTTL how long ago it was last written.
	Every int64 `json:"e,omitempty"`
	TTL   int64 `json:"x,omitempty"`
}

// Stale reports whether a record whose TTL left is pttl (ms, as the
// server says) was last written more than two of its writer's delays
// ago: its wait has ended (or its owner stopped) without deleting it —
// a connection cut as the wait ended loses the DEL and the queue's leave
// alike, and both outlive the wait by up to the queue TTL. Such a wait
// counts as running (the package's doc, "Deadlocked waits"). A live wait
// writes its record at each check, every delay; two of them cover a
// check that starts late (its attempt's round trip, a busy process).
func (w *Wait) Stale(pttl int64) bool {
	return w.Every > 0 && w.TTL > 0 && pttl >= 0 && w.TTL-pttl > 2*w.Every+StaleSlack
}

// StaleSlack is Stale's margin beyond two delays (ms).
const StaleSlack = 50

// Younger reports whether w began waiting after x (the victim rule's
// order: Since, then Token).
func (w *Wait) Younger(x *Wait) bool {
	return cmp.Or(cmp.Compare(w.Since, x.Since), cmp.Compare(w.Token, x.Token)) > 0
}

// Holder is one holder of a lock, as read.
type Holder struct {
	Token   string
	Permits int64 // a Semaphore holder's
}

// State is a lock's holders as read at one moment.
type State struct {
	Holders []Holder
	// Waiters are the tokens of the waits queued for the lock, any side,
	// whose places live.
	Waiters   []string
	Semaphore bool
	Free      int64 // a Semaphore's free permits
}

// Reader reads the graph.
type Reader interface {
	// State reads a lock's holders (any side).
	State(ctx context.Context, l Lock) (State, error)
	// WaitOf reads the wait recorded under a held token: nil if none.
	WaitOf(ctx context.Context, token string) (*Wait, error)
}

// Limit bounds an exploration: the waits it reads.
const Limit = 256

// node is a wait as explored: the waits that block it, per lock.
type node struct {
	w  *Wait
	on []edges // one per w.For
}

// edges are a lock's holders as read, each with its wait (nil: running).
type edges struct {
	st    State
	waits []*node // per st.Holders
}

// Find looks for a deadlock that self is in. It returns the cycle's waits
// (self's strongly connected part of the deadlocked set, in an order that
// follows the wait-for edges from self) and the victim, or nil when self
// is not deadlocked as read. An error from r ends the search (nothing is
// reported on half a read).
func Find(ctx context.Context, r Reader, self *Wait) (cycle []*Wait, victim *Wait, err error) {
	nodes, err := explore(ctx, r, self)
	if err != nil {
		return nil, nil, err
	}
	in := deadlocked(nodes)
	me := nodes[0]
	if !in[me] {
		return nil, nil, nil
	}
	comp := component(me, in)
	if len(comp) == 0 {
		return nil, nil, nil
	}
	victim = comp[0].w
	for _, n := range comp {
		cycle = append(cycle, n.w)
		if n.w.Younger(victim) {
			victim = n.w
		}
	}
	return cycle, victim, nil
}

// explore reads the graph from self, breadth first, up to Limit waits;
// nodes[0] is self's. The waits past the bound are left unexplored (their
// on is nil): deadlocked treats them as running.
func explore(ctx context.Context, r Reader, self *Wait) ([]*node, error) {
	byHeld := map[string]*node{} // held token -> its wait
	add := func(w *Wait) *node {
		n := &node{w: w}
		for _, h := range w.Holds {
			byHeld[h.Token] = n
		}
		return n
	}
	nodes := []*node{add(self)}
	states := map[Lock]State{}
	for i := 0; i < len(nodes) && i < Limit; i++ {
		n := nodes[i]
		n.on = make([]edges, len(n.w.For))
		for j, l := range n.w.For {
			key := Lock{Kind: l.Kind, Name: l.Name} // every side's holders
			st, ok := states[key]
			if !ok {
				var err error
				if st, err = r.State(ctx, key); err != nil {
					return nil, err
				}
				states[key] = st
			}
			e := edges{st: st, waits: make([]*node, len(st.Holders))}
			for k, h := range st.Holders {
				x, ok := byHeld[h.Token]
				if !ok {
					w, err := r.WaitOf(ctx, h.Token)
					if err != nil {
						return nil, err
					}
					if w != nil && slices.ContainsFunc(w.Holds, func(hd Held) bool { return hd.Token == h.Token }) {
						if len(nodes) < Limit {
							x = add(w)
							nodes = append(nodes, x)
						}
					}
					if x == nil {
						byHeld[h.Token] = nil // running (or past the bound): not read again
					}
				}
				e.waits[k] = x
			}
			n.on[j] = e
		}
	}
	return nodes, nil
}

// deadlocked returns the largest set of explored waits that block one
// another (the package's doc, "Deadlocked waits").
func deadlocked(nodes []*node) map[*node]bool {
	in := map[*node]bool{}
	for i, n := range nodes {
		if n.on != nil && (i == 0 || queued(n)) { // (nodes[0] is self: it waits)
			in[n] = true
		}
	}
	for changed := true; changed; {
		changed = false
		for _, n := range nodes {
			if in[n] && !blocked(n, in) {
				delete(in, n)
				changed = true
			}
		}
	}
	return in
}

// queued reports whether n's wait is queued for one of its locks, as
// read: else its record outlived it (the package's doc, "Deadlocked
// waits").
func queued(n *node) bool {
	for _, e := range n.on {
		if slices.Contains(e.st.Waiters, n.w.Token) {
			return true
		}
	}
	return false
}

// blocked reports whether the set in blocks n's wait.
func blocked(n *node, in map[*node]bool) bool {
	for _, e := range n.on {
		if e.st.Semaphore {
			need := max(n.w.Permits, 1)
			could := e.st.Free
			for k, h := range e.st.Holders {
				if !in[e.waits[k]] {
					could += max(h.Permits, 1)
				}
			}
			if could < need {
				return true
			}
			continue
		}
		if slices.ContainsFunc(e.waits, func(x *node) bool { return x != nil && in[x] }) {
			return true
		}
	}
	return false
}

// component returns the waits of the set that reach me and that me
// reaches, me first, then in the order a breadth-first walk from me
// meets them.
func component(me *node, in map[*node]bool) []*node {
	next := func(n *node, yield func(*node)) {
		for _, e := range n.on {
			for _, x := range e.waits {
				if x != nil && in[x] {
					yield(x)
				}
			}
		}
	}
	// forward, in breadth-first order
	order := []*node{me}
	fwd := map[*node]bool{me: true}
	for i := 0; i < len(order); i++ {
		next(order[i], func(x *node) {
			if !fwd[x] {
				fwd[x] = true
				order = append(order, x)
			}
		})
	}
	// backward: the forward set's nodes that reach me
	back := map[*node]bool{}
	for changed := true; changed; {
		changed = false
		for _, n := range order {
			if back[n] {
				continue
			}
			reaches := false
			next(n, func(x *node) { reaches = reaches || x == me || back[x] })
			if reaches {
				back[n] = true
				changed = true
			}
		}
	}
	if !back[me] {
		return nil
	}
	return slices.DeleteFunc(order, func(n *node) bool { return !back[n] })
}
