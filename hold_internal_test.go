package dlock

import (
	"testing"
	"time"
)

// A call given up on that may still set the lease to d (an Extend to a
// shorter lease, say) caps every confirmation sent before it is known to
// be done — a later Extend to a minute included, since the late call may
// run after it on the server — and none sent after.
func TestUnsureSetCapsLaterConfirmations(t *testing.T) {
	c, _ := serverClient(t)
	const short, long = 300 * time.Millisecond, time.Minute
	t0 := time.Now()
	h := newHold(c, c.keys(kindMutex, "x"), "Mutex", nil, "tok", 1, lockConfig{ttl: long, renew: true}, t0)
	done := make(chan struct{})
	h.mayHaveSet(t0, short, done)
	h.mu.Lock()
	defer h.mu.Unlock()
	if limit := t0.Add(short); h.deadline.After(limit) {
		t.Fatalf("after the unsure Extend the deadline is %v past what the server may give", h.deadline.Sub(limit))
	}

	// An Extend to a minute, sent while the short one may still run.
	t1 := t0.Add(10 * time.Millisecond)
	h.deadline = time.Time{}
	h.confirmed(t1, long)
	if limit := t1.Add(short); h.deadline.After(limit) {
		t.Fatalf("a confirmation sent while a shorter set was pending counted %v past it", h.deadline.Sub(limit))
	}

	// Once the late call is done, what is sent afterwards counts in full.
	close(done)
	h.confirmed(t1, long) // sees it done
	t2 := time.Now().Add(time.Millisecond)
	h.confirmed(t2, long)
	if want := t2.Add(long - c.drift.of(long)); h.deadline.Before(want) {
		t.Fatalf("a confirmation sent after the late call was done still capped: deadline %v short", want.Sub(h.deadline))
	}
	if len(h.unsure) != 0 {
		t.Fatalf("%d unsure calls kept after they were done and superseded", len(h.unsure))
	}
}
