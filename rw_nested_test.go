package dlock_test

// Reads taken inside a write hold: each is a hold of its own, so
// releasing or undoing one never ends another, and a downgrade keeps the
// lock read-held by the reads that remain. Each test failed on the code in
// which such reads shared the writer's token.

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// refuseWriter checks that another Client cannot take the write side
// while lease (a read) says it holds.
func refuseWriter(t *testing.T, name string, lease *dlock.Lease) {
	t.Helper()
	ctx := context.Background()
	w, err := client(t).RWMutex(name).TryLock(ctx)
	if err == nil {
		_ = w.Unlock(ctx)
		t.Fatalf("another Client's writer got fence %d while a read (fence %d, Err %v) says it holds", w.Fence(), lease.Fence(), lease.Err())
	}
	if !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatal(err)
	}
	if lease.Err() != nil {
		t.Fatalf("the read lost its hold: %v", lease.Err())
	}
}

// Two reads inside one write hold, released in either order around the
// writer's own release (a downgrade): the read still held keeps the lock.
func TestReadsInsideWriteAreHoldsOfTheirOwn(t *testing.T) {
	ctx := context.Background()
	for _, order := range []string{"r1 w", "w r1"} {
		t.Run(order, func(t *testing.T) {
			rw := client(t).RWMutex(lockName(t))
			w := mustLock(t, rw, ctx)
			wctx := w.Context(ctx)
			r1 := mustLock(t, rw.RLocker(), wctx)
			r2 := mustLock(t, rw.RLocker(), wctx)
			if r1.Fence() <= w.Fence() || r2.Fence() <= r1.Fence() {
				t.Fatalf("reads inside a write have fences %d, %d; the writer's is %d: want each above the one before", r1.Fence(), r2.Fence(), w.Fence())
			}
			for _, l := range map[string][]*dlock.Lease{"r1 w": {r1, w}, "w r1": {w, r1}}[order] {
				unlock(t, l)
			}
			refuseWriter(t, rw.Name(), r2)
			if r1.Token() == r2.Token() {
				t.Fatalf("two reads inside a write share a token: %s", r1.Token())
			}
			unlock(t, r2)
			w2, err := client(t).RWMutex(rw.Name()).TryLock(ctx)
			if err != nil {
				t.Fatalf("the last read released, a writer still cannot take the lock: %v", err)
			}
			if w2.Fence() <= r2.Fence() {
				t.Fatalf("the next writer's fence %d is not above %d", w2.Fence(), r2.Fence())
			}
			unlock(t, w2)
		})
	}
}

// A read inside a write that is given up on (its reply never came) is
// undone by its own token: a sibling read keeps its hold. Its attempt,
// still on its way, lands after the undo and takes nothing (bury.lua).
func TestGivenUpReadInsideWriteLeavesSiblings(t *testing.T) {
	ctx := context.Background()
	c, d := lateClient(t)
	rw := c.RWMutex(lockName(t))
	w := mustLock(t, rw, ctx)
	wctx := w.Context(ctx)
	r1 := mustLock(t, rw.RLocker(), wctx)

	// Hold back the next rw_read.lua call (7 or 8 keys) made inside w: its
	// caller gives up, and the call runs on the server later, followed
	// by its undo.
	d.hold(w.Token())
	d.mu.Lock()
	pick := d.pick
	d.pick = func(args []any) bool {
		return len(args) > 2 && (fmt.Sprint(args[2]) == "7" || fmt.Sprint(args[2]) == "8") && pick(args)
	}
	d.block, d.go_ = true, make(chan struct{})
	d.mu.Unlock()
	undone := d.seen(func(args []any) bool { return len(args) > 2 && fmt.Sprint(args[2]) == "6" }) // rw_unlock.lua
	short, cancel := context.WithTimeout(wctx, 50*time.Millisecond)
	_, err := rw.RLock(short, dlock.WithTTL(300*time.Millisecond))
	cancel()
	if err == nil {
		t.Fatal("the held read returned nil")
	}
	select {
	case <-undone:
	case <-time.After(10 * time.Second):
		d.deliver(t)
		t.Fatal("the given-up read was not undone while its attempt was still on its way")
	}
	d.deliver(t) // the read lands after its undo
	unlock(t, w)
	refuseWriter(t, rw.Name(), r1)
	unlock(t, r1)
	// the late read took nothing: a writer gets in at once
	w2, err := client(t).RWMutex(rw.Name()).TryLock(ctx)
	if err != nil {
		t.Fatalf("the read that landed after its undo holds the lock for nobody: %v", err)
	}
	unlock(t, w2)
}

// A reader cannot upgrade: Lock through a read lease's context is refused
// at once rather than wait for itself.
func TestUpgradeRefused(t *testing.T) {
	ctx := context.Background()
	rw := client(t).RWMutex(lockName(t))
	r := mustLock(t, rw.RLocker(), ctx)
	defer unlock(t, r)
	short, cancel := context.WithTimeout(r.Context(ctx), 5*time.Second)
	defer cancel()
	_, err := rw.Lock(short)
	if !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Fatalf("upgrade: %v, want ErrInvalidArgument", err)
	}
}

// LockAll through a lease's context re-enters the lock that lease holds,
// as Lock does, instead of waiting for the caller's own hold (its one-
// script path took every lock with a new token).
func TestLockAllInsideHoldReenters(t *testing.T) {
	ctx := context.Background()
	c := client(t)
	a, b := c.Mutex(lockName(t)+"-a"), c.Mutex(lockName(t)+"-b")
	la := mustLock(t, a, ctx)
	defer unlock(t, la)
	bounded, cancel := context.WithTimeout(la.Context(ctx), 5*time.Second)
	defer cancel()
	set, err := dlock.LockAll(bounded, a, b)
	if err != nil {
		t.Fatalf("LockAll inside a's hold: %v", err)
	}
	if set.Parts()[0].Fence() != la.Fence() && set.Parts()[1].Fence() != la.Fence() {
		t.Fatalf("LockAll inside a's hold did not re-enter it: fences %d, %d; a's %d",
			set.Parts()[0].Fence(), set.Parts()[1].Fence(), la.Fence())
	}
	unlock(t, set)
	if la.Err() != nil {
		t.Fatalf("the outer hold ended with the set: %v", la.Err())
	}
}
