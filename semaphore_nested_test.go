package dlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// nestedBound bounds a nested acquire in these tests: one that waits on
// itself fails with its deadline instead of hanging the test.
const nestedBound = 2 * time.Second

// A nested Acquire (its ctx carries a permit of the same semaphore) takes
// permits that are free, and never waits: when none is free it is refused
// at once (issue 23, "a nested acquire never waits on itself").
func TestSemaphoreNestedAcquireNeverWaits(t *testing.T) {
	ctx := context.Background()
	s := client(t).Semaphore(lockName(t), 2)
	outer := mustAcquire(t, s, 1)
	octx, cancel := context.WithTimeout(outer.Context(ctx), nestedBound)
	defer cancel()
	inner, err := s.Acquire(octx, 1)
	if err != nil {
		t.Fatalf("nested Acquire with a permit free: %v", err)
	}
	if inner.Token() == outer.Token() {
		t.Fatal("the nested permit shares the outer's token: releasing one would release both")
	}
	// Every permit is held through octx: waiting would wait on itself.
	start := time.Now()
	_, err = s.Acquire(inner.Context(octx), 1)
	if !errors.Is(err, dlock.ErrNotObtained) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("nested Acquire with no permit free: %v; want ErrNotObtained at once", err)
	}
	if !strings.Contains(err.Error(), "nested") {
		t.Fatalf("error %q does not say the acquire was nested", err)
	}
	if d := time.Since(start); d > nestedBound/2 {
		t.Fatalf("refused after %v; want at once", d)
	}
	unlock(t, inner)
	unlock(t, outer)
	if _, free, err := s.Permits(ctx); err != nil || free != 2 {
		t.Fatalf("Permits: %d free, %v; want 2", free, err)
	}
}

// The case a nested wait cannot see: a waiter ahead of it (another
// process) waits for the permits the outer hold keeps, and the permits
// that are free are kept for that waiter. A nested Acquire that waited
// would wait for the waiter, which waits for the outer hold, which waits
// for the nested Acquire. It is refused at once instead.
func TestSemaphoreNestedAcquireBehindAWaiter(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	admin := newRedis(t, srv)
	qlen := queueLenOf(admin, keysOf(name).Lock+":sem:queue")
	s := client(t).Semaphore(name, 2)
	outer := mustAcquire(t, s, 1)
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	got := make(chan error, 1)
	go func() {
		l, err := client(t).Semaphore(name, 2).Acquire(wctx, 2)
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	waitFor(t, "the big waiter to queue", func() bool { return qlen() == 1 })
	octx, cancel := context.WithTimeout(outer.Context(ctx), nestedBound)
	defer cancel()
	if _, err := s.Acquire(octx, 1); !errors.Is(err, dlock.ErrNotObtained) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("nested Acquire behind a waiter for the outer's permit: %v; want ErrNotObtained at once", err)
	}
	unlock(t, outer)
	if err := <-got; err != nil {
		t.Fatalf("the big waiter: %v", err)
	}
}

// Through the context of a permit that has been released, an Acquire is
// not nested any more: it waits as any other.
func TestSemaphoreAcquireAfterOuterReleasedWaits(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	s := client(t).Semaphore(name, 1)
	outer := mustAcquire(t, s, 1)
	octx := context.WithoutCancel(outer.Context(ctx))
	unlock(t, outer)
	other := mustAcquire(t, client(t).Semaphore(name, 1), 1)
	wctx, cancel := context.WithTimeout(octx, 200*time.Millisecond)
	defer cancel()
	if _, err := s.Acquire(wctx, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire through a released permit's context: %v; want a wait that times out", err)
	}
	unlock(t, other)
}
