package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// A Lock through a lease's context never waits on that lease, on a Mutex
// or a FairMutex, whoever waits in the queue: it re-enters (same token and
// fence), whichever of the two handles took the outer lease (they are one
// lock). Through the context of a lease that has ended it is refused with
// ErrNotHeld, at once. (Issue 23: "a nested acquire never waits on
// itself".)
func TestNestedLockNeverWaitsOnItself(t *testing.T) {
	ctx := context.Background()
	lockers := map[string]func(c *dlock.Client, name string) dlock.Locker{
		"Mutex":     func(c *dlock.Client, name string) dlock.Locker { return c.Mutex(name) },
		"FairMutex": func(c *dlock.Client, name string) dlock.Locker { return c.FairMutex(name) },
	}
	for outerKind, outerOf := range lockers {
		for innerKind, innerOf := range lockers {
			t.Run(outerKind+"In"+innerKind, func(t *testing.T) {
				name := lockName(t)
				admin := newRedis(t, srv)
				qlen := queueLen(admin, name)
				c := client(t)
				outer := mustLock(t, outerOf(c, name), ctx)
				// Another waiter queues, first in line for the lock.
				wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
				defer wcancel()
				waiter := make(chan error, 1)
				go func() {
					l, err := client(t).FairMutex(name).Lock(wctx)
					if err == nil {
						err = l.Unlock(ctx)
					}
					waiter <- err
				}()
				waitFor(t, "the waiter to queue", func() bool { return qlen() == 1 })

				octx, cancel := context.WithTimeout(outer.Context(ctx), nestedBound)
				defer cancel()
				for _, try := range []bool{false, true} {
					lock := innerOf(c, name).Lock
					if try {
						lock = innerOf(c, name).TryLock
					}
					inner, err := lock(octx)
					if err != nil {
						t.Fatalf("nested (try %v) through the lease's context: %v", try, err)
					}
					if inner.Fence() != outer.Fence() || inner.Token() != outer.Token() {
						t.Fatal("the nested lease is not a re-entry of the outer")
					}
					unlock(t, inner)
				}
				ended := context.WithoutCancel(octx)
				unlock(t, outer)
				if err := <-waiter; err != nil {
					t.Fatalf("the waiter: %v", err)
				}
				ectx, ecancel := context.WithTimeout(ended, nestedBound)
				defer ecancel()
				if _, err := innerOf(c, name).Lock(ectx); !errors.Is(err, dlock.ErrNotHeld) {
					t.Fatalf("Lock through an ended lease's context: %v; want ErrNotHeld", err)
				}
			})
		}
	}
}
