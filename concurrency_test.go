package dlock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// One Mutex handle shared by many goroutines: each Lock is its own owner.
func TestSharedHandle(t *testing.T) {
	ctx := context.Background()
	m := client(t).Mutex(lockName(t), dlock.WithTTL(time.Second))
	var inside atomic.Int32
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				l, err := m.Lock(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				if n := inside.Add(1); n != 1 {
					t.Errorf("%d owners inside at once", n)
				}
				time.Sleep(100 * time.Microsecond)
				inside.Add(-1)
				if err := l.Unlock(ctx); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
}

// Every Lease method may be called from many goroutines at once; exactly
// one Unlock releases.
func TestLeaseConcurrentUse(t *testing.T) {
	ctx := context.Background()
	m := client(t).Mutex(lockName(t))
	l := mustLock(t, m, ctx, dlock.WithTTL(time.Second))
	var released, notHeld atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_ = l.Err()
			_ = l.Context(ctx)
			_, _ = l.TTL(ctx)
			_ = l.Extend(ctx, time.Second)
			if i%2 == 0 {
				switch err := l.Unlock(ctx); {
				case err == nil:
					released.Add(1)
				case errors.Is(err, dlock.ErrNotHeld):
					notHeld.Add(1)
				default:
					t.Error(err)
				}
			}
			<-l.Done()
		}()
	}
	close(start)
	wg.Wait()
	if released.Load() != 1 || notHeld.Load() != 15 {
		t.Fatalf("%d Unlocks released and %d said ErrNotHeld; want 1 and 15", released.Load(), notHeld.Load())
	}
	if !errors.Is(l.Err(), dlock.ErrUnlocked) {
		t.Fatalf("Err = %v", l.Err())
	}
	unlock(t, mustLock(t, m, ctx))
}

// Re-entered leases released from several goroutines leave the lock free
// exactly when the last one is unlocked.
func TestConcurrentReentry(t *testing.T) {
	ctx := context.Background()
	m := client(t).Mutex(lockName(t))
	outer := mustLock(t, m, ctx)
	lctx := outer.Context(ctx)
	var wg sync.WaitGroup
	inner := make([]*dlock.Lease, 10)
	for i := range inner {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := m.Lock(lctx)
			if err != nil {
				t.Error(err)
				return
			}
			inner[i] = l
		}()
	}
	wg.Wait()
	for i := range inner {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := inner[i].Unlock(ctx); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if _, err := m.TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("free while the outer lease holds it: %v", err)
	}
	unlock(t, outer)
	unlock(t, mustLock(t, m, ctx))
}
