package torture

import (
	"testing"
	"time"
)

// TestCheckSelfWaits: a nested acquire that gave up after its whole ctx
// while its outer lease was held throughout waited on its own hold; one
// refused at once, or whose outer was not known held at its end, did not.
func TestCheckSelfWaits(t *testing.T) {
	nestedCall := func(b *hist, outer, call, end int64, ek string, belief int64) {
		b.op++
		b.events = append(b.events,
			Event{T: call * ms, K: kCall, W: "w1", Op: b.op, Names: []string{"s0"}, Permits: 1, Wait: true, Reent: true,
				Lease: outer, TTLs: []int64{us(time.Second)}, Scn: "nested"},
			Event{T: end * ms, K: kFail, W: "w1", Op: b.op, EK: ek})
		b.add("w1", kBelief, outer, belief, "")
	}
	var b hist
	outer := b.grant("w1", "s0", "", "A", 1, 0, 10, time.Second, true)
	nestedCall(&b, outer, 20, 2020, "ctx", 2021)
	b.add("w1", kUnlock, outer, 2030, "")
	wantKinds(t, b.check(3000), "wait")

	var ok hist
	outer = ok.grant("w1", "s0", "", "A", 1, 0, 10, time.Second, true)
	nestedCall(&ok, outer, 20, 25, "invalid", 26) // refused at once
	nestedCall(&ok, outer, 30, 2030, "ctx", 28)   // the outer not known held at the end
	ok.add("w1", kUnlock, outer, 2040, "")
	wantKinds(t, ok.check(3000))
}

// TestCheckFIFO: a FairMutex waiter seen in the queue must be served
// before an acquire called after that.
func TestCheckFIFO(t *testing.T) {
	round := func(aFirst bool) []Violation {
		var b hist
		h := b.grant("w1", "fq0.1", "", "H", 1, 0, 1, time.Second, true)
		b.add("w1", kUnlock, h, 590, "")
		b.op++
		opA := b.op
		b.events = append(b.events,
			Event{T: 10 * ms, K: kCall, W: "w1", Op: opA, Names: []string{"fq0.1"}, Wait: true, DL: 8010 * ms, TTLs: []int64{us(time.Second)}},
			Event{T: 12 * ms, K: kQueued, W: "w1", Op: opA, Names: []string{"fq0.1"}, Owners: []string{"A"}})
		aAt, aFence, cAt, cFence := int64(595), int64(2), int64(610), int64(3)
		if !aFirst {
			aAt, aFence, cAt, cFence = 620, 3, 595, 2
		}
		c := b.grant("w1", "fq0.1", "", "C", cFence, 500, cAt, time.Second, true)
		b.add("w1", kUnlock, c, cAt+3, "")
		b.events = append(b.events, Event{T: aAt * ms, K: kGrant, W: "w1", Op: opA, Lease: 99, Names: []string{"fq0.1"},
			Owners: []string{"A"}, Fences: []int64{aFence}, TTLs: []int64{us(time.Second)}})
		b.add("w1", kUnlock, 99, aAt+3, "")
		return b.check(1000)
	}
	wantKinds(t, round(false), "order")
	wantKinds(t, round(true))
}

// latchHist builds a latch's history: set(p, n) at t, count-downs.
type latchHist struct{ hist }

func (b *latchHist) ev(k string, p int64, t, end int64, msg string, rest ...int64) {
	e := Event{T: t * ms, End: end * ms, K: k, W: "w1", Names: []string{"L0"}, Fences: append([]int64{p}, rest...), Msg: msg}
	b.events = append(b.events, e)
}

func (b *latchHist) set(p int64, n int, t int64, msg string) {
	b.events = append(b.events, Event{T: t * ms, End: (t + 1) * ms, K: kLatchSet, W: "w1", Names: []string{"L0"},
		Fences: []int64{p}, Permits: n, D: us(latchTTL), Msg: msg})
}

// TestCheckLatches: a count lower than the count-downs allow (a re-sent
// CountDown), a count-down of phase 1 landing in phase 2, a latch open
// too early, a TrySetCount refused on an open latch, a Wait not woken.
func TestCheckLatches(t *testing.T) {
	// Counted twice: n=3, one CountDown returns 1.
	var twice latchHist
	twice.set(1, 3, 0, "set")
	twice.ev(kLatchDown, 1, 10, 20, "", 1)
	wantKinds(t, twice.check(100), "latch")

	// Phase 2 (n=2): its first CountDownOnce returns 0 (a late one of
	// phase 1 counted there), and its Wait finds it open after one.
	var late latchHist
	late.set(1, 1, 0, "set")
	late.ev(kLatchDown, 1, 10, 20, "p1.0", 0)
	late.ev(kLatchWait, 1, 5, 21, "")
	late.set(2, 2, 30, "set")
	late.ev(kLatchDown, 2, 40, 50, "p2.0", 0)
	late.ev(kLatchWait, 2, 35, 51, "")
	wantKinds(t, late.check(100), "latch", "latch")

	// Correct: retries with one id, counts as they should be.
	var ok latchHist
	ok.set(1, 2, 0, "set")
	ok.ev(kLatchDown, 1, 10, 11, "p1.0", 1)
	ok.ev(kLatchDown, 1, 12, 13, "p1.0", 1)
	ok.ev(kLatchCount, 1, 14, 15, "", 1)
	ok.ev(kLatchDown, 1, 16, 17, "p1.1", 0)
	ok.ev(kLatchWait, 1, 5, 18, "")
	ok.set(2, 1, 30, "set")
	wantKinds(t, ok.check(100))

	// TrySetCount false after the previous phase opened; and a Wait
	// that gave up 2 s after the last count-down.
	var refused latchHist
	refused.set(1, 1, 0, "set")
	refused.ev(kLatchDown, 1, 10, 11, "", 0)
	refused.ev(kLatchWait, 1, 5, 12, "")
	refused.set(2, 1, 20, "notset")
	var stuck latchHist
	stuck.set(1, 1, 0, "set")
	stuck.ev(kLatchDown, 1, 10, 11, "", 0)
	stuck.events = append(stuck.events, Event{T: 5 * ms, End: 3000 * ms, K: kLatchWait, W: "w1", Names: []string{"L0"},
		Fences: []int64{1}, EK: "ctx"})
	wantKinds(t, refused.check(100), "latch")
	wantKinds(t, stuck.check(4000), "latch")
}
