package dlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// WithMaxHold: the watchdog renews a lease past its TTL, but not past the
// max hold; then the lease ends as lost, saying why, and the lock is free
// for another owner. Extend is cut to the limit, and refused after it.
func TestMaxHold(t *testing.T) {
	ctx := context.Background()
	a, b := client(t), client(t)
	for _, kind := range []string{"Mutex", "Election"} {
		t.Run(kind, func(t *testing.T) {
			name := lockName(t)
			const ttl, maxHold = 60 * time.Millisecond, 400 * time.Millisecond
			start := time.Now()
			var done <-chan struct{}
			var errOf func() error
			var extend func(time.Duration) error
			switch kind {
			case "Mutex":
				l := mustLock(t, a.Mutex(name, dlock.WithTTL(ttl), dlock.WithMaxHold(maxHold)), ctx)
				done, errOf, extend = l.Done(), l.Err, func(d time.Duration) error { return l.Extend(ctx, d) }
			case "Election":
				ld, err := a.Election(name, dlock.WithTTL(ttl), dlock.WithMaxHold(maxHold)).Campaign(ctx, "v")
				if err != nil {
					t.Fatal(err)
				}
				done, errOf, extend = ld.Done(), ld.Err, nil
			}
			if extend != nil {
				if err := extend(time.Hour); err != nil { // cut to the max hold
					t.Fatalf("Extend past the max hold: %v", err)
				}
			}
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("the lease outlived its max hold by seconds")
			}
			// Renewed past its TTL (several times over): the watchdog did
			// renew it; and not for ever.
			if held := time.Since(start); held < 3*ttl {
				t.Errorf("the lease ended %v after it was taken: before its renewals could carry it past its TTL %v", held, ttl)
			}
			if err := errOf(); !errors.Is(err, dlock.ErrLeaseLost) || !strings.Contains(err.Error(), "max hold") {
				t.Fatalf("Err %v; want ErrLeaseLost saying the max hold ran out", err)
			}
			if extend != nil {
				if err := extend(time.Second); !errors.Is(err, dlock.ErrNotHeld) {
					t.Errorf("Extend after the max hold: %v; want ErrNotHeld", err)
				}
			}
			// free in Redis for another owner (at the limit; the holder's
			// deadline kept its drift margin before it)
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			switch kind {
			case "Mutex":
				unlock(t, mustLock(t, b.Mutex(name), wctx))
			case "Election":
				ld, err := b.Election(name).Campaign(wctx, "w")
				if err != nil {
					t.Fatal(err)
				}
				_ = ld.Resign(ctx)
			}
		})
	}
	if _, err := a.Mutex(lockName(t), dlock.WithMaxHold(time.Microsecond)).TryLock(ctx); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("a max hold below 1ms: %v", err)
	}
}
