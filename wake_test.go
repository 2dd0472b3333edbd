package dlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// Lock calls that give up at once must not leave the wake-up machinery
// thinking a later subscription is not yet confirmed.
func TestNoLostWakeUpAfterWaitersGiveUp(t *testing.T) {
	ctx := context.Background()
	a := client(t)
	m := a.Mutex(lockName(t), dlock.WithTTL(10*time.Second))
	for round := range 200 {
		holder := mustLock(t, m, ctx)
		for i := range 5 {
			gctx, cancel := context.WithTimeout(ctx, time.Duration(50+400*i)*time.Microsecond)
			if l, err := m.Lock(gctx); err == nil {
				t.Fatalf("a Lock got a held lock: %v", l)
			}
			cancel()
		}
		got := make(chan error, 1)
		go func() {
			wctx, cancel := context.WithTimeout(ctx, 3*time.Second) // far below the 10 s lease
			defer cancel()
			l, err := m.Lock(wctx)
			if err == nil {
				err = l.Unlock(ctx)
			}
			got <- err
		}()
		// Unlock before, while or after the waiter subscribes: a sweep
		// through the window between its first attempt and its SUBSCRIBE.
		time.Sleep(time.Duration(round%20) * 50 * time.Microsecond)
		unlock(t, holder)
		if err := <-got; err != nil {
			t.Fatalf("round %d: the waiter did not get the free lock: %v", round, err)
		}
	}
}

// After the pub/sub connection is killed and go-redis resubscribes, every
// waiter re-checks: a release published while the connection was down is
// not lost for the holder's whole TTL.
func TestWakeUpAcrossPubSubReconnect(t *testing.T) {
	ctx := context.Background()
	admin := newRedis(t, srv)
	a, b := client(t), client(t)
	for _, kind := range []lockKind{allKinds[0], allKinds[4]} { // Mutex, Semaphore
		t.Run(kind.name, func(t *testing.T) {
			name := lockName(t)
			holder, err := kind.lock(b, name, ctx, dlock.WithTTL(10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			waiting := make(chan struct{})
			got := make(chan error, 1)
			go func() {
				wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
				close(waiting)
				l, err := kind.lock(a, name, wctx, dlock.WithTTL(10*time.Second))
				if err == nil {
					err = l.Unlock(ctx)
				}
				got <- err
			}()
			<-waiting
			waitForSubscribers(t, admin, 1)
			if err := admin.ClientKillByFilter(ctx, "TYPE", "pubsub").Err(); err != nil {
				t.Fatal(err)
			}
			unlock(t, holder) // published while nobody is subscribed
			if err := <-got; err != nil {
				t.Fatalf("the waiter did not get the lock released during the reconnect: %v", err)
			}
		})
	}
}
