package dlock

import (
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/backend"
	"github.com/dlock-go/dlock/internal/protocol"
)

// An Extend given up on, which may still set the lease to d on the server
// (a shorter lease, say), caps every confirmation of a command placed
// before it in the hold's sequence — such a command may run first, and the
// late Extend after it — and none of a command placed after it: once that
// has run, the server refuses the late Extend (hold.go, "Late commands").
func TestUnsureExtendCapsEarlierCommandsOnly(t *testing.T) {
	c, _ := serverClient(t)
	const short, long = 300 * time.Millisecond, time.Minute
	t0 := time.Now()
	h := newHold(c, c.keys(protocol.MutexKind, "x"), "Mutex", mutexProto{}, "tok", 1, lockConfig{TTL: long, Renew: true}, t0)
	h.mayHaveSet(t0, short, 2, make(chan struct{}))
	h.mu.Lock()
	defer h.mu.Unlock()
	if limit := t0.Add(short); h.deadline.After(limit) {
		t.Fatalf("after the unsure Extend the deadline is %v past what the server may give", h.deadline.Sub(limit))
	}

	// A renewal placed before the Extend (1), answering after it.
	t1 := t0.Add(10 * time.Millisecond)
	h.deadline = time.Time{}
	h.confirmed(t1, long, 1)
	if limit := t1.Add(short); h.deadline.After(limit) {
		t.Fatalf("a confirmation placed before a pending Extend counted %v past it", h.deadline.Sub(limit))
	}

	// A command placed after it (3) has run: it counts in full.
	t2 := time.Now().Add(time.Millisecond)
	h.confirmed(t2, long, 3)
	if want := t2.Add(long - c.drift.Of(long)); h.deadline.Before(want) {
		t.Fatalf("a confirmation placed after the late Extend still capped: deadline %v short", want.Sub(h.deadline))
	}
	if len(h.unsure) != 0 {
		t.Fatalf("%d unsure Extends kept after a later command ran", len(h.unsure))
	}
}

// Without scripts the server keeps no hold sequence: an Extend given up on
// caps every confirmation sent before the client library was seen done
// with it, whatever its place, and none sent after.
func TestUnsureExtendWithoutScriptsCapsUntilDone(t *testing.T) {
	c, _ := serverClient(t)
	const short, long = 300 * time.Millisecond, time.Minute
	t0 := time.Now()
	h := newHold(c, c.keys(protocol.MutexKind, "x"), "Mutex", backend.PlainOps(nil, nil), "tok", 1, lockConfig{TTL: long, Renew: true}, t0)
	done := make(chan struct{})
	h.mayHaveSet(t0, short, 2, done)
	h.mu.Lock()
	defer h.mu.Unlock()
	t1 := t0.Add(10 * time.Millisecond)
	h.deadline = time.Time{}
	h.confirmed(t1, long, 3) // a later place, but the server does not order it
	if limit := t1.Add(short); h.deadline.After(limit) {
		t.Fatalf("a confirmation sent while the Extend could still run counted %v past it", h.deadline.Sub(limit))
	}
	close(done)
	h.confirmed(t1, long, 4) // sees it done
	t2 := time.Now().Add(time.Millisecond)
	h.confirmed(t2, long, 5)
	if want := t2.Add(long - c.drift.Of(long)); h.deadline.Before(want) {
		t.Fatalf("a confirmation sent after the Extend was done still capped: deadline %v short", want.Sub(h.deadline))
	}
	if len(h.unsure) != 0 {
		t.Fatalf("%d unsure Extends kept after they were done and superseded", len(h.unsure))
	}
}

// A hold ends in two steps: the hold first (under its mu), then each of
// its leases is told, outside the mu (their callbacks may run user code).
// Between the two a Lease's Err must already see the end: a goroutine that
// reads Err as the watchdog ends the hold (both wake when a stopped
// process resumes) must not be told the lock is held after its deadline.
// The 10-minute torture found this: a reader SIGSTOPped past its TTL read
// Err() == nil after resuming, while a writer held the lock.
func TestErrSeesAnEndBeforeItsLeasesAreTold(t *testing.T) {
	c, _ := serverClient(t)
	ended := lost(reasonDeadline, "x", "test")
	newLeased := func(name string) (*hold, *Lease) {
		h := newHold(c, c.keys(protocol.MutexKind, name), "Mutex", mutexProto{}, "tok-"+name, 1, lockConfig{TTL: time.Minute}, time.Now())
		l, err := h.newLease()
		if err != nil {
			t.Fatal(err)
		}
		return h, l
	}

	// The hold has ended; its lease is not told yet.
	h, l := newLeased("a")
	h.mu.Lock()
	h.err = ended
	h.mu.Unlock()
	if err := l.Err(); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Err() = %v after its hold ended, want ErrLeaseLost", err)
	}
	select {
	case <-l.Done():
	default:
		t.Fatal("Err reported the end but Done is still open")
	}

	// A set: one part's lease has ended, the set's lease is not told yet.
	_, p1 := newLeased("b")
	_, p2 := newLeased("c")
	s := newSet([]*Lease{p1, p2})
	p2.mu.Lock()
	p2.err = ended // finish's first step, before the callbacks that end the set
	p2.mu.Unlock()
	if err := s.Err(); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("a set's Err() = %v after one of its parts ended, want ErrLeaseLost", err)
	}
}
