package torture

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// Checks of the API shapes (shapes.go): a nested acquire that waits on
// its own hold, a FairMutex waiter passed over by a later arrival, and a
// latch whose answers its count-downs cannot explain.

// selfWaitBound is how long a nested acquire may take before it counts as
// waiting on its own hold: its outer lease excludes everybody else, so a
// correct library answers it (grant, refusal) in a round trip or two.
const selfWaitBound = time.Second

// checkShapes runs the checks of the shapes.
func (h *history) checkShapes() []Violation {
	var vs []Violation
	vs = append(vs, h.checkSelfWaits()...)
	vs = append(vs, h.checkFIFO()...)
	vs = append(vs, h.checkLatches()...)
	vs = append(vs, h.checkDeadlocks()...)
	return vs
}

// disturbed reports whether worker w's process was stopped or killed, or
// a server fault happened, during [from, to]: what the shape checks
// assume (places renewed, wake-ups delivered) may then not hold.
func (h *history) disturbed(w string, from, to int64) bool {
	if h.serverFaultIn(from, to) {
		return true
	}
	if k, ok := h.killed[w]; ok && k <= to {
		return true
	}
	return slices.ContainsFunc(h.stops(w), func(f fault) bool { return f.T <= to && f.End >= from })
}

// sortedCalls returns the calls in call order.
func (h *history) sortedCalls() []*callRec {
	out := make([]*callRec, 0, len(h.calls))
	for _, c := range h.calls {
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b *callRec) int {
		if c := cmpInt(a.call.T, b.call.T); c != 0 {
			return c
		}
		return strings.Compare(callKey(a.call.W, a.call.Op), callKey(b.call.W, b.call.Op))
	})
	return out
}

// checkSelfWaits: a nested acquire (made through a lease's context, or a
// second Campaign of a Client that leads; recorded with its outer lease)
// that gave up on its ctx after selfWaitBound or more, while its outer
// lease was held from before the call until after it returned (a belief
// recorded right after), waited on its own hold: nobody else could have
// held the lock (the outer is exclusive: a Mutex, FairMutex, write lock,
// leadership, or every permit of a semaphore), or, for an upgrade, it
// must be refused at once.
func (h *history) checkSelfWaits() []Violation {
	var vs []Violation
	for _, c := range h.sortedCalls() {
		e, r := c.call, c.result
		if !e.Reent || e.Lease == 0 || r == nil || r.K != kFail || r.EK != "ctx" || len(e.Names) != 1 {
			continue
		}
		if r.T-e.T < int64(selfWaitBound) {
			continue
		}
		outer := h.leases[leaseKey(e.W, e.Lease)]
		if outer == nil || outer.belief < r.T || h.disturbed(e.W, e.T, r.T) {
			continue
		}
		name := e.Names[0]
		what := acquireWord(e)
		if len(e.Sides) == 1 && e.Sides[0] != "" {
			what += map[string]string{"r": " (read)", "w": " (write)"}[e.Sides[0]]
		}
		outerSide := ""
		if i := slices.Index(outer.grant.Names, name); i >= 0 && i < len(outer.grant.Sides) && outer.grant.Sides[i] != "" {
			outerSide = " " + outer.grant.Sides[i]
		}
		vs = append(vs, Violation{Kind: "wait", Cat: fmt.Sprintf("wait: a nested %s %s waited on its own%s hold", lockKind(name), what, outerSide),
			T: e.T + int64(selfWaitBound), Leases: []string{outer.key}, Related: []Event{e, *r},
			Msg: fmt.Sprintf("%q: a %s through lease %s's context (%s, scenario %s, called %s) waited %v until its ctx ended (%s), "+
				"while lease %s (granted %s) still held the lock (Err() nil at %s): a nested acquire waited on its own hold",
				name, what, outer.key, callKey(e.W, e.Op), e.Scn, h.rel(e.T), time.Duration(r.T-e.T).Round(time.Millisecond), r.Err,
				outer.key, h.rel(outer.grant.T), h.rel(outer.belief))})
	}
	return vs
}

// grantFence is the fence a grant event gave name, 0 if none.
func grantFence(e *Event, name string) int64 {
	if i := slices.Index(e.Names, name); i >= 0 && i < len(e.Fences) {
		return e.Fences[i]
	}
	return 0
}

// checkFIFO: on a FairMutex, a waiter A seen in the queue (a queued
// event: Inspect listed its place) must be served before any acquire C
// called after that, as long as A kept waiting with a live place: A's
// process ran (no stop, no kill) and the server did not stall, so A
// renewed its place in time. A was passed over when C was granted
// (returned at tC) and A was granted afterwards with a higher fence, or
// A gave up on a ctx whose deadline came after tC (it was still waiting
// when C was granted at the server, before tC).
func (h *history) checkFIFO() []Violation {
	byName := map[string][]Event{}
	for _, e := range h.events {
		if e.K == kQueued && len(e.Names) == 1 && lockKind(e.Names[0]) == "fair" {
			byName[e.Names[0]] = append(byName[e.Names[0]], e)
		}
	}
	var vs []Violation
	for _, name := range sortedKeys(byName) {
		calls := h.callsOf(name)
		slices.SortFunc(calls, func(a, b *callRec) int { return cmpInt(a.call.T, b.call.T) })
		for _, q := range byName[name] {
			a := h.calls[callKey(q.W, q.Op)]
			if a == nil || a.result == nil {
				continue
			}
			ra := a.result
			for _, c := range calls {
				rc := c.result
				if c == a || c.call.Reent || c.call.T <= q.T || rc == nil || rc.K != kGrant {
					continue
				}
				tC, fC := rc.T, grantFence(rc, name)
				var how string
				switch {
				case ra.K == kGrant && grantFence(ra, name) > fC:
					how = fmt.Sprintf("A was granted after it, fence %d > %d, at %s", grantFence(ra, name), fC, h.rel(ra.T))
				case ra.K == kFail && ra.EK == "ctx" && a.call.DL > tC:
					how = fmt.Sprintf("A gave up at %s on a ctx that ended at %s", h.rel(ra.T), h.rel(a.call.DL))
				default:
					continue
				}
				if h.disturbed(q.W, q.T, tC) || h.disturbed(c.call.W, q.T, tC) {
					continue
				}
				vs = append(vs, Violation{Kind: "order", Cat: "order: a FairMutex waiter passed over by a later arrival",
					T: tC, Related: []Event{a.call, q, *ra, c.call, *rc},
					Msg: fmt.Sprintf("%q: waiter A (%s, scenario %s, called %s) was in the queue at %s; "+
						"%s (%s, scenario %s), called later at %s, was granted fence %d at %s while A still waited; %s",
						name, callKey(a.call.W, a.call.Op), a.call.Scn, h.rel(a.call.T), h.rel(q.T),
						acquireWord(c.call), callKey(c.call.W, c.call.Op), c.call.Scn, h.rel(c.call.T), fC, h.rel(tC), how)})
				break // one violation per waiter passed over
			}
		}
	}
	return vs
}

// latchPhase is one phase of a latch: its TrySetCount and what was done
// to it in that phase.
type latchPhase struct {
	set   Event
	downs []Event // CountDown / CountDownOnce calls of the phase (any outcome)
	reads []Event // count-downs and Counts that returned a count
	waits []Event
}

// contributors is how many count-downs of the phase may have counted by
// t: distinct ids of CountDownOnce, every CountDown, called before t.
func (p *latchPhase) contributors(t int64) int {
	ids := map[string]bool{}
	n := 0
	for _, d := range p.downs {
		if d.T >= t {
			continue
		}
		if d.Msg == "" {
			n++
		} else if !ids[d.Msg] {
			ids[d.Msg] = true
			n++
		}
	}
	return n
}

// openedBy is when the phase's count-downs that succeeded had counted n
// distinct times (0: never).
func (p *latchPhase) openedBy(n int) int64 {
	ok := slices.DeleteFunc(slices.Clone(p.downs), func(d Event) bool { return d.EK != "" })
	slices.SortFunc(ok, func(a, b Event) int { return cmpInt(a.End, b.End) })
	ids := map[string]bool{}
	k := 0
	for _, d := range ok {
		if d.Msg != "" {
			if ids[d.Msg] {
				continue
			}
			ids[d.Msg] = true
		}
		if k++; k >= n {
			return d.End
		}
	}
	return 0
}

// checkLatches: in each phase of a latch (a TrySetCount(n) that set it,
// and the count-downs, Counts and Waits made after it and before the next
// phase), within the latch's TTL:
//   - a count returned (CountDown, CountDownOnce, Count) is at least n
//     minus the count-downs that may have counted by its return (distinct
//     ids of CountDownOnce, every CountDown call, whatever its outcome):
//     less is a count-down counted twice, or one of another phase;
//   - a Wait finds it open only once n count-downs may have counted;
//   - a Wait that gave up more than waitBound after n distinct
//     count-downs had succeeded, with no fault around, was not woken;
//   - a TrySetCount on a latch whose previous phase was seen open (and
//     that nobody else sets: each latch belongs to one goroutine) sets
//     it, unless an earlier TrySetCount of it failed (it may land late).
func (h *history) checkLatches() []Violation {
	byName := map[string][]Event{}
	for _, e := range h.events {
		switch e.K {
		case kLatchSet, kLatchDown, kLatchWait, kLatchCount:
			if len(e.Names) == 1 && len(e.Fences) >= 1 {
				byName[e.Names[0]] = append(byName[e.Names[0]], e)
			}
		}
	}
	var vs []Violation
	for _, name := range sortedKeys(byName) {
		evs := byName[name]
		sort.SliceStable(evs, func(i, j int) bool { return evs[i].T < evs[j].T })
		phases := map[int64]*latchPhase{}
		setErr := false
		for _, e := range evs {
			p := e.Fences[0]
			if e.K == kLatchSet {
				if e.EK != "" {
					setErr = true
				}
				if e.EK == "" && e.Msg == "set" {
					phases[p] = &latchPhase{set: e}
					continue
				}
				if e.EK == "" && !setErr {
					if prev := phases[p-1]; prev != nil && slices.ContainsFunc(prev.waits, func(w Event) bool { return w.EK == "" && w.End < e.T }) {
						vs = append(vs, Violation{Kind: "latch", Cat: "latch: TrySetCount refused on an open latch", T: e.End, Related: []Event{e},
							Msg: fmt.Sprintf("latch %q: TrySetCount(%d) of phase %d (called %s) returned false, after phase %d was seen open, "+
								"and no other TrySetCount of it was made or failed", name, e.Permits, p, h.rel(e.T), p-1)})
					}
				}
				continue
			}
			ph := phases[p]
			if ph == nil {
				continue
			}
			switch e.K {
			case kLatchDown:
				ph.downs = append(ph.downs, e)
				if e.EK == "" && len(e.Fences) >= 2 {
					ph.reads = append(ph.reads, e)
				}
			case kLatchCount:
				if e.EK == "" && len(e.Fences) >= 2 {
					ph.reads = append(ph.reads, e)
				}
			case kLatchWait:
				ph.waits = append(ph.waits, e)
			}
		}
		for _, p := range sortedPhases(phases) {
			ph := phases[p]
			n := ph.set.Permits
			expire := ph.set.T + ph.set.D*int64(time.Microsecond)
			for _, e := range ph.reads {
				if e.End > expire {
					continue
				}
				if k := ph.contributors(e.End); e.Fences[1] < int64(n-k) {
					what := "Count"
					if e.K == kLatchDown {
						what = "CountDown"
						if e.Msg != "" {
							what = fmt.Sprintf("CountDownOnce(%q)", e.Msg)
						}
					}
					vs = append(vs, Violation{Kind: "latch", Cat: "latch: a count below what its count-downs allow", T: e.End,
						Related: append([]Event{ph.set, e}, ph.downs...),
						Msg: fmt.Sprintf("latch %q, phase %d (TrySetCount(%d) at %s): %s (called %s) returned %d at %s, "+
							"but only %d count-down(s) of the phase had been called by then (at least %d left): a count-down counted twice or in another phase",
							name, p, n, h.rel(ph.set.T), what, h.rel(e.T), e.Fences[1], h.rel(e.End), k, n-k)})
				}
			}
			openBy := ph.openedBy(n)
			for _, w := range ph.waits {
				if w.End > expire || w.T < ph.set.End {
					continue
				}
				if k := ph.contributors(w.End); w.EK == "" && k < n {
					vs = append(vs, Violation{Kind: "latch", Cat: "latch: opened before its count-downs", T: w.End,
						Related: append([]Event{ph.set, w}, ph.downs...),
						Msg: fmt.Sprintf("latch %q, phase %d (TrySetCount(%d) at %s): Wait (called %s) found it open at %s, "+
							"when only %d count-down(s) of the phase had been called", name, p, n, h.rel(ph.set.T), h.rel(w.T), h.rel(w.End), k)})
				}
				if w.EK == "ctx" && openBy != 0 && w.End > openBy+int64(waitBound) && !h.serverFaultIn(ph.set.T, w.End) &&
					!h.faultIn(openBy-int64(time.Second), w.End) {
					vs = append(vs, Violation{Kind: "latch", Cat: "latch: not open after its count-downs", T: openBy + int64(waitBound),
						Related: append([]Event{ph.set, w}, ph.downs...),
						Msg: fmt.Sprintf("latch %q, phase %d (TrySetCount(%d) at %s): %d distinct count-downs had succeeded by %s, "+
							"and a Wait (called %s) gave up at %s (%s)", name, p, n, h.rel(ph.set.T), n, h.rel(openBy), h.rel(w.T), h.rel(w.End), w.Err)})
				}
			}
		}
	}
	return vs
}

// faultIn reports whether any fault overlaps [from, to].
func (h *history) faultIn(from, to int64) bool {
	for _, f := range h.faults {
		if f.T <= to && f.End >= from {
			return true
		}
	}
	return false
}

func sortedPhases(m map[int64]*latchPhase) []int64 {
	var out []int64
	for p := range m {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}
