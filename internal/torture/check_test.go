package torture

import (
	"strings"
	"testing"
	"time"
)

// hist builds synthetic histories for the checker's own tests. Times are
// in milliseconds from the start of the run.
type hist struct {
	events []Event
	op     int64
}

const ms = int64(time.Millisecond)

// grant records an acquire of name by owner, called at call and granted
// at at, with its lease id returned.
func (b *hist) grant(w, name, side, owner string, fence int64, call, at int64, ttl time.Duration, wait bool) int64 {
	b.op++
	b.events = append(b.events,
		Event{T: call * ms, K: kCall, W: w, Op: b.op, Names: []string{name}, Sides: []string{side},
			TTLs: []int64{us(ttl)}, Wait: wait, Permits: 1},
		Event{T: at * ms, K: kGrant, W: w, Op: b.op, Lease: b.op, Names: []string{name}, Sides: []string{side},
			Owners: []string{owner}, Fences: []int64{fence}, TTLs: []int64{us(ttl)}, Permits: 1})
	return b.op
}

func (b *hist) add(w, k string, lease, at int64, ek string) {
	b.events = append(b.events, Event{T: at * ms, K: k, W: w, Lease: lease, EK: ek})
}

// waitFor records a Lock call at call that ended at end (granted or not).
func (b *hist) waitFor(w, name string, call, end int64, granted bool) {
	b.op++
	b.events = append(b.events, Event{T: call * ms, K: kCall, W: w, Op: b.op, Names: []string{name},
		TTLs: []int64{us(500 * time.Millisecond)}, Wait: true})
	if granted {
		b.events = append(b.events, Event{T: end * ms, K: kGrant, W: w, Op: b.op, Lease: b.op, Names: []string{name},
			Owners: []string{"waiter"}, Fences: []int64{99}, TTLs: []int64{us(500 * time.Millisecond)}})
		b.add(w, kUnlock, b.op, end+1, "")
	} else {
		b.events = append(b.events, Event{T: end * ms, K: kFail, W: w, Op: b.op, EK: "ctx"})
	}
}

func (b *hist) check(end int64) []Violation {
	return index(b.events, 0, end*ms).check()
}

func wantKinds(t *testing.T, vs []Violation, want ...string) {
	t.Helper()
	var got []string
	for _, v := range vs {
		got = append(got, v.Kind)
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		for _, v := range vs {
			t.Logf("%s: %s", v.Kind, v.Msg)
		}
		t.Fatalf("violations %v, want %v", got, want)
	}
}

func TestCheckSafety(t *testing.T) {
	// A believes it holds m0 after B, with a higher fence, was granted it.
	var b hist
	a := b.grant("w1", "m0", "", "A", 1, 0, 10, time.Second, false)
	b.add("w1", kBelief, a, 30, "")
	b.add("w1", kUnlock, a, 31, "")
	l := b.grant("w2", "m0", "", "B", 2, 15, 20, time.Second, false)
	b.add("w2", kUnlock, l, 40, "")
	wantKinds(t, b.check(100), "safety")

	// The same, told in time: A's last belief is before B's grant.
	var ok hist
	a = ok.grant("w1", "m0", "", "A", 1, 0, 10, time.Second, false)
	ok.add("w1", kBelief, a, 19, "")
	ok.add("w1", kLost, a, 21, "lost")
	l = ok.grant("w2", "m0", "", "B", 2, 15, 20, time.Second, false)
	ok.add("w2", kBelief, l, 25, "")
	ok.add("w2", kUnlock, l, 40, "")
	wantKinds(t, ok.check(100))

	// RWMutex: two readers at once are fine, a reader and a writer not.
	var rw hist
	r1 := rw.grant("w1", "rw0", "r", "R1", 1, 0, 10, time.Second, false)
	r2 := rw.grant("w2", "rw0", "r", "R2", 2, 0, 12, time.Second, false)
	rw.add("w1", kBelief, r1, 30, "")
	rw.add("w2", kBelief, r2, 30, "")
	rw.add("w1", kUnlock, r1, 31, "")
	rw.add("w2", kUnlock, r2, 31, "")
	wantKinds(t, rw.check(100))
	w := rw.grant("w3", "rw0", "w", "W", 3, 20, 25, time.Second, false)
	rw.add("w3", kUnlock, w, 50, "")
	wantKinds(t, rw.check(100), "safety") // one per later owner: the latest belief
}

func TestCheckFences(t *testing.T) {
	var b hist
	a := b.grant("w1", "m0", "", "A", 5, 0, 10, time.Second, false)
	b.add("w1", kUnlock, a, 11, "")
	l := b.grant("w2", "m0", "", "B", 5, 20, 21, time.Second, false) // same fence
	b.add("w2", kUnlock, l, 22, "")
	c := b.grant("w2", "m0", "", "C", 4, 30, 31, time.Second, false) // lower, called after A returned
	b.add("w2", kUnlock, c, 32, "")
	wantKinds(t, b.check(100), "fence", "fence", "fence")
}

func TestCheckCapacity(t *testing.T) {
	var b hist
	for i, o := range []string{"A", "B", "C"} {
		l := b.grant("w1", "s0", "", o, int64(i+1), 0, int64(10+i), time.Second, false)
		b.add("w1", kBelief, l, 50, "")
		b.add("w1", kUnlock, l, 51, "")
	}
	wantKinds(t, b.check(100), "capacity") // s0 has 2 permits
}

func TestCheckWaits(t *testing.T) {
	// Unlocked at 100 ms; a waiter that only gets the lock 3 s later.
	var b hist
	a := b.grant("w1", "lv0.0.1", "", "A", 1, 0, 10, 8*time.Second, false)
	b.add("w1", kUnlock, a, 100, "")
	b.waitFor("w1", "lv0.0.1", 50, 3100, true)
	wantKinds(t, b.check(4000), "wait")

	// Woken in time.
	var ok hist
	a = ok.grant("w1", "lv0.0.1", "", "A", 1, 0, 10, 8*time.Second, false)
	ok.add("w1", kUnlock, a, 100, "")
	ok.waitFor("w1", "lv0.0.1", 50, 120, true)
	wantKinds(t, ok.check(4000))

	// A holder that gave up after a failed Unlock: the lock may stay a
	// TTL; a waiter granted within TTL + the bound is fine, one that
	// still waits long after is not.
	var gave hist
	a = gave.grant("w1", "m0", "", "A", 1, 0, 10, 800*time.Millisecond, false)
	gave.add("w1", kUnlock, a, 100, "ctxraw")
	gave.add("w1", kAbandon, a, 101, "")
	gave.waitFor("w2", "m0", 50, 1500, true)
	wantKinds(t, gave.check(6000))
	gave.waitFor("w2", "m0", 1600, 5000, false)
	wantKinds(t, gave.check(6000), "wait")

	// A SIGKILLed holder: the lock may stay a TTL after the kill.
	var killed hist
	a = killed.grant("w1", "m0", "", "A", 1, 0, 10, 800*time.Millisecond, false)
	killed.events = append(killed.events, Event{T: 200 * ms, K: kKill, W: "w1"})
	killed.waitFor("w2", "m0", 50, 1900, true)
	wantKinds(t, killed.check(6000))
}
