package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

func TestLockAllHoldsEveryLock(t *testing.T) {
	ctx := context.Background()
	c, rec := countedClient(t)
	name := lockName(t)
	ms := []dlock.Locker{c.Mutex(name + "-c"), c.Mutex(name + "-a"), c.Mutex(name + "-b")}
	warm, err := dlock.LockAll(ctx, ms...)
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	rec.take()
	set, err := dlock.LockAll(ctx, ms...)
	if err != nil {
		t.Fatal(err)
	}
	if calls := rec.take(); len(calls) != 1 {
		t.Fatalf("LockAll of 3 mutexes on one node sent %v; want one round trip", calls)
	}
	parts := set.Parts()
	if len(parts) != 3 || parts[0].Name() != name+"-a" || parts[2].Name() != name+"-c" {
		t.Fatalf("parts %v; want the three locks in key order", set.Name())
	}
	other := client(t)
	for _, n := range []string{"-a", "-b", "-c"} {
		if _, err := other.Mutex(name + n).TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
			t.Fatalf("%s free while the set holds it: %v", n, err)
		}
	}
	if err := set.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(set.Err(), dlock.ErrUnlocked) {
		t.Fatalf("set Err %v", set.Err())
	}
	for _, n := range []string{"-a", "-b", "-c"} {
		unlock(t, mustLock(t, other.Mutex(name+n), ctx))
	}
}

func TestLockAllOppositeOrdersNeverDeadlock(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	name := lockName(t)
	for _, mixed := range []bool{false, true} {
		var wg sync.WaitGroup
		for g := range 4 {
			c := client(t) // here: t.Fatal must not run in a goroutine of the test's
			wg.Add(1)
			go func() {
				defer wg.Done()
				var x, y dlock.Locker = c.Mutex(name + "-x"), c.Mutex(name + "-y")
				if mixed {
					// Different kinds take the lock-by-lock path.
					x = c.FairMutex(name + "-fx")
				}
				for range 10 {
					order := []dlock.Locker{x, y}
					if g%2 == 1 {
						order = []dlock.Locker{y, x}
					}
					set, err := dlock.LockAll(ctx, order...)
					if err != nil {
						t.Errorf("mixed=%v: %v", mixed, err)
						return
					}
					if err := set.Unlock(ctx); err != nil {
						t.Error(err)
					}
				}
			}()
		}
		wg.Wait()
	}
}

func TestLockAllFailureLeavesNothingHeld(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	c, other := client(t), client(t)
	held := mustLock(t, other.Mutex(name+"-b"), ctx)
	defer unlock(t, held)
	for _, first := range []dlock.Locker{c.Mutex(name + "-a"), c.FairMutex(name + "-a")} {
		tctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		_, err := dlock.LockAll(tctx, c.Mutex(name+"-b"), first)
		cancel()
		if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("LockAll with one lock held elsewhere: %v", err)
		}
		// Released as LockAll returns, or, if Redis is slow to answer,
		// just after, in the background.
		var l *dlock.Lease
		waitFor(t, fmt.Sprintf("%T: the lock a failed LockAll took released", first), func() bool {
			l, err = other.Mutex(name + "-a").TryLock(ctx)
			return err == nil
		})
		unlock(t, l)
	}
}

func TestLockAllWokenByRelease(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	held := mustLock(t, client(t).Mutex(name+"-b"), ctx) // 30 s TTL
	c := client(t)
	got := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		set, err := dlock.LockAll(wctx, c.Mutex(name+"-a"), c.Mutex(name+"-b"))
		if err == nil {
			err = set.Unlock(ctx)
		}
		got <- err
	}()
	time.Sleep(30 * time.Millisecond) // let it wait; correct either way
	a, err := client(t).Mutex(name + "-a").TryLock(ctx)
	if err != nil {
		t.Fatalf("a waiting LockAll holds part of its set: %v", err)
	}
	unlock(t, a)
	unlock(t, held)
	if err := <-got; err != nil {
		t.Fatalf("LockAll after the release: %v", err)
	}
}

func TestLockAllLossOfOnePartEndsTheSet(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	c := client(t)
	set, err := dlock.LockAll(ctx, c.Mutex(name+"-a", dlock.WithLease(100*time.Millisecond)), c.Mutex(name+"-b"))
	if err != nil {
		t.Fatal(err)
	}
	<-set.Done()
	if !errors.Is(set.Err(), dlock.ErrLeaseLost) {
		t.Fatalf("set Err %v, want ErrLeaseLost", set.Err())
	}
	if err := set.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Unlock of a lost set: %v", err)
	}
	// The part still held was released.
	unlock(t, mustLock(t, client(t).Mutex(name+"-b"), ctx))
}

func TestLockAllBadInput(t *testing.T) {
	ctx := context.Background()
	c := client(t)
	var nilMutex *dlock.Mutex
	if _, err := dlock.LockAll(ctx); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("no lockers: %v", err)
	}
	if _, err := dlock.LockAll(ctx, c.Mutex("x"), c.Mutex("x")); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("duplicate: %v", err)
	}
	if _, err := dlock.LockAll(ctx, c.Mutex("x"), nil); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("nil locker: %v", err)
	}
	if _, err := dlock.LockAll(ctx, nilMutex); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("typed nil: %v", err)
	}
	var nilCtx context.Context
	if _, err := dlock.LockAll(nilCtx, c.Mutex("x")); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("nil ctx: %v", err)
	}
}

// Token and every other Lease method work on the lease LockAll returns.
func TestSetLeaseMethods(t *testing.T) {
	ctx := context.Background()
	c := client(t)
	base := lockName(t)
	set, err := dlock.LockAll(ctx, c.Mutex(base+"-a"), c.RWMutex(base+"-b"), c.FairMutex(base+"-c"))
	if err != nil {
		t.Fatal(err)
	}
	parts := set.Parts()
	if set.Token() != parts[0].Token() || set.Token() == "" {
		t.Fatalf("set Token %q; want its first part's %q", set.Token(), parts[0].Token())
	}
	if set.Fence() != parts[0].Fence() {
		t.Fatalf("set Fence %d; want %d", set.Fence(), parts[0].Fence())
	}
	if err := set.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if d, err := set.TTL(ctx); err != nil || d <= 30*time.Second {
		t.Fatalf("set TTL = %v, %v", d, err)
	}
	if set.Err() != nil || set.Name() == "" || set.Context(ctx).Err() != nil {
		t.Fatal("a held set reports itself ended")
	}
	unlock(t, set)
	if !errors.Is(set.Err(), dlock.ErrUnlocked) {
		t.Fatalf("after Unlock, Err = %v", set.Err())
	}
	select {
	case <-set.Done():
	default:
		t.Fatal("Done not closed after Unlock")
	}
}
