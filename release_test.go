package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// An Unlock that fails (its ctx had already ended) ends the lease, stops
// its renewal, and frees the lock in the background: another client gets
// it long before the TTL.
func TestFailedUnlockDoesNotPin(t *testing.T) {
	for _, kind := range allKinds {
		t.Run(kind.name, func(t *testing.T) {
			ctx := context.Background()
			a, b := client(t), client(t)
			name := lockName(t)
			l, err := kind.lock(a, name, ctx, dlock.WithTTL(10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			ended, cancel := context.WithCancel(ctx)
			cancel()
			if err := l.Unlock(ended); err == nil {
				t.Fatal("Unlock with an ended context reported success")
			}
			if !errors.Is(l.Err(), dlock.ErrUnlocked) {
				t.Fatalf("after a failed Unlock, Err = %v; want ErrUnlocked", l.Err())
			}
			// Freed by the background release, not by the 10 s TTL.
			wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
			defer wcancel()
			l2, err := kind.lock(b, name, wctx)
			if err != nil {
				t.Fatalf("another client could not take the lock after the failed Unlock: %v", err)
			}
			unlock(t, l2)
		})
	}
}

// An Unlock that fails because Redis is unreachable is retried in the
// background once Redis answers again.
func TestUnlockDuringOutageRetriedInBackground(t *testing.T) {
	ctx := context.Background()
	rdb, p := proxied(t, 0)
	a := newClient(t, rdb)
	b := client(t)
	name := lockName(t)
	l := mustLock(t, a.Mutex(name), ctx, dlock.WithTTL(10*time.Second))
	p.SetDown(true)
	uctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	err := l.Unlock(uctx)
	cancel()
	if err == nil {
		t.Fatal("Unlock through a downed link reported success")
	}
	p.SetDown(false)
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	defer wcancel()
	l2, err := b.Mutex(name).Lock(wctx)
	if err != nil {
		t.Fatalf("the lock was not freed once Redis answered again: %v", err)
	}
	unlock(t, l2)
}
