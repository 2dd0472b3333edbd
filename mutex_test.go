package dlock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

func TestLockUnlock(t *testing.T) {
	ctx := context.Background()
	c := client(t)
	m := c.Mutex(lockName(t))

	l := mustLock(t, m, ctx)
	if len(l.Token()) != 32 {
		t.Errorf("token %q: want 32 hex digits", l.Token())
	}
	if l.Fence() < 1 {
		t.Errorf("fence %d: want >= 1", l.Fence())
	}
	if err := l.Err(); err != nil {
		t.Fatalf("Err of a held lease: %v", err)
	}
	ttl, err := l.TTL(ctx)
	if err != nil || ttl <= 0 || ttl > dlock.DefaultTTL {
		t.Fatalf("TTL = %v, %v; want (0, %v]", ttl, err, dlock.DefaultTTL)
	}
	if _, err := m.TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("TryLock of a held lock: %v, want ErrNotObtained", err)
	}
	unlock(t, l)
	select {
	case <-l.Done():
	default:
		t.Fatal("Done not closed after Unlock")
	}
	if err := l.Err(); !errors.Is(err, dlock.ErrUnlocked) {
		t.Fatalf("Err after Unlock = %v, want ErrUnlocked", err)
	}
	if err := l.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("second Unlock = %v, want ErrNotHeld", err)
	}
	if _, err := l.TTL(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("TTL after Unlock = %v, want ErrNotHeld", err)
	}

	l2 := mustLock(t, m, ctx)
	if l2.Fence() <= l.Fence() {
		t.Fatalf("fence went from %d to %d; want strictly increasing", l.Fence(), l2.Fence())
	}
	if l2.Token() == l.Token() {
		t.Fatal("two owners share a token")
	}
	unlock(t, l2)
}

func TestTryLockStorm(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	clients := []*dlock.Client{client(t), client(t), client(t), client(t)}
	var wins, losses atomic.Int32
	var mu sync.Mutex
	var leases []*dlock.Lease
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			l, err := clients[i%len(clients)].Mutex(name).TryLock(ctx)
			switch {
			case err == nil:
				wins.Add(1)
				mu.Lock()
				leases = append(leases, l)
				mu.Unlock()
			case errors.Is(err, dlock.ErrNotObtained):
				losses.Add(1)
			default:
				t.Errorf("TryLock: %v", err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if wins.Load() != 1 || losses.Load() != 99 {
		t.Fatalf("%d winners, %d losers; want exactly 1 and 99", wins.Load(), losses.Load())
	}
	unlock(t, leases[0])
}

func TestReentry(t *testing.T) {
	ctx := context.Background()
	c := client(t)
	m := c.Mutex(lockName(t))
	outer := mustLock(t, m, ctx)
	inner := mustLock(t, m, outer.Context(ctx))
	if inner.Fence() != outer.Fence() || inner.Token() != outer.Token() {
		t.Fatalf("re-entry: fence %d token %s, want %d %s", inner.Fence(), inner.Token(), outer.Fence(), outer.Token())
	}
	// Deeper: a context derived from the inner lease's context.
	dctx, cancel := context.WithCancel(inner.Context(ctx))
	defer cancel()
	third := mustLock(t, m, dctx)

	// An unrelated context is another owner.
	if _, err := m.TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("TryLock from an unrelated context: %v, want ErrNotObtained", err)
	}
	unlock(t, inner)
	unlock(t, third)
	if _, err := m.TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("lock free while the outer lease holds it: %v", err)
	}
	if err := outer.Err(); err != nil {
		t.Fatalf("outer lease ended by inner unlocks: %v", err)
	}
	unlock(t, outer)
	l := mustLock(t, m, ctx)
	unlock(t, l)
}

func TestReentryUnlockOuterFirst(t *testing.T) {
	ctx := context.Background()
	m := client(t).Mutex(lockName(t))
	outer := mustLock(t, m, ctx)
	inner := mustLock(t, m, outer.Context(ctx))
	unlock(t, outer)
	if _, err := m.TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("lock free while the inner lease holds it: %v", err)
	}
	unlock(t, inner)
	unlock(t, mustLock(t, m, ctx))
}

func TestLeaseContext(t *testing.T) {
	ctx := context.Background()
	m := client(t).Mutex(lockName(t))
	l := mustLock(t, m, ctx)
	lctx := l.Context(ctx)
	unlock(t, l)
	<-lctx.Done()
	if !errors.Is(context.Cause(lctx), dlock.ErrUnlocked) {
		t.Fatalf("cause %v, want ErrUnlocked", context.Cause(lctx))
	}
	// A context made after the end is born cancelled, and does not re-enter.
	late := l.Context(ctx)
	if late.Err() == nil {
		t.Fatal("context of an ended lease is not cancelled")
	}
	if _, err := m.Lock(late); !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Lock with an ended lease's context: %v", err)
	}
}

func TestOwnership(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	a, b := client(t), client(t)

	// A stale lease (expired, lock taken by another) cannot touch the new
	// owner's lock.
	stale := mustLock(t, a.Mutex(name), ctx, dlock.WithLease(50*time.Millisecond))
	<-stale.Done()
	if !errors.Is(stale.Err(), dlock.ErrLeaseLost) {
		t.Fatalf("expired fixed lease Err = %v, want ErrLeaseLost", stale.Err())
	}
	cur := mustLock(t, b.Mutex(name), ctx)
	if err := stale.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("stale Unlock = %v, want ErrNotHeld", err)
	}
	if err := stale.Extend(ctx, time.Minute); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("stale Extend = %v, want ErrNotHeld", err)
	}
	if _, err := a.Mutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("the stale owner's calls freed the lock: TryLock = %v", err)
	}
	if err := cur.Err(); err != nil {
		t.Fatalf("current owner's lease ended: %v", err)
	}
	unlock(t, cur)
}

func TestFixedLeaseExpires(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	l := mustLock(t, client(t).Mutex(name), ctx, dlock.WithLease(150*time.Millisecond))
	waiter := client(t).Mutex(name)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	l2 := mustLock(t, waiter, wctx)
	// The holder was told before the waiter could get the lock (Err reads
	// the local deadline, which precedes the server's expiry).
	if !errors.Is(l.Err(), dlock.ErrLeaseLost) {
		t.Fatalf("new owner acquired while the old lease says %v; want ErrLeaseLost", l.Err())
	}
	<-l.Done()
	if l2.Fence() <= l.Fence() {
		t.Fatalf("fence %d after %d", l2.Fence(), l.Fence())
	}
	unlock(t, l2)
}

func TestExtend(t *testing.T) {
	ctx := context.Background()
	m := client(t).Mutex(lockName(t))
	l := mustLock(t, m, ctx, dlock.WithLease(time.Second))
	if err := l.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	ttl, err := l.TTL(ctx)
	if err != nil || ttl < 30*time.Second {
		t.Fatalf("TTL after Extend(1m) = %v, %v", ttl, err)
	}
	if err := l.Extend(ctx, 0); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Fatalf("Extend(0) = %v", err)
	}
	unlock(t, l)
}

func TestWatchdogKeepsLongHold(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	const ttl = renewTTL
	l := mustLock(t, client(t).Mutex(name), ctx, dlock.WithTTL(ttl))
	other := client(t).Mutex(name)
	// Hold for five TTLs: the lock must never be free nor the lease lost.
	end := time.Now().Add(5 * ttl)
	tries := 0
	for time.Now().Before(end) {
		tries++
		if _, err := other.TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
			t.Fatalf("lock free while renewed (try %d): %v", tries, err)
		}
		time.Sleep(ttl / 10) // sampling, not synchronisation
	}
	if err := l.Err(); err != nil {
		t.Fatalf("lease lost while renewed: %v", err)
	}
	unlock(t, l)
}

func TestLeaseLostWhenKeyVanishes(t *testing.T) {
	ctx := context.Background()
	const ttl = time.Second
	c := client(t, dlock.WithPrefix("vanish"))
	name := lockName(t)
	l := mustLock(t, c.Mutex(name), ctx, dlock.WithTTL(ttl))
	if err := newRedis(t, srv).Del(ctx, "vanish:{"+name+"}").Err(); err != nil {
		t.Fatal(err)
	}
	// The next renewal (within TTL/3) finds it gone; the deadline would
	// only come at TTL − drift (988 ms).
	select {
	case <-l.Done():
	case <-time.After(800 * time.Millisecond):
		t.Fatal("lease not declared lost by a renewal (within TTL/3 + margin) of the key vanishing")
	}
	if !errors.Is(l.Err(), dlock.ErrLeaseLost) {
		t.Fatalf("Err = %v, want ErrLeaseLost", l.Err())
	}
	if err := l.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) || !errors.Is(err, dlock.ErrLeaseLost) {
		t.Fatalf("Unlock of a lost lease = %v", err)
	}
}

func TestWakeOnRelease(t *testing.T) {
	for _, sharded := range []bool{false, true} {
		t.Run(map[bool]string{false: "pubsub", true: "sharded"}[sharded], func(t *testing.T) {
			name := lockName(t)
			opt := dlock.WithShardedPubSub(sharded)
			holder := mustLock(t, client(t, opt).Mutex(name), context.Background()) // 30 s TTL
			checkWokenByRelease(t, client(t, opt).Mutex(name), func() { unlock(t, holder) })
		})
	}
}

func TestCancelMidWait(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	holder := mustLock(t, client(t).Mutex(name), ctx)
	defer unlock(t, holder)
	c := client(t)
	wctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Mutex(name).Lock(wctx)
		errc <- err
	}()
	time.Sleep(50 * time.Millisecond) // let it reach the wait; correct either way
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled Lock = %v; want ErrNotObtained and context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("cancelled Lock did not return")
	}

	tctx, cancel2 := context.WithTimeout(ctx, 30*time.Millisecond)
	defer cancel2()
	if _, err := c.Mutex(name).Lock(tctx); !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("timed-out Lock = %v; want ErrNotObtained and DeadlineExceeded", err)
	}
}

func TestCloseEndsWaitsAndLeases(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	holder := mustLock(t, client(t).Mutex(name), ctx)
	defer unlock(t, holder)
	c, err := dlock.New(newRedis(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	own := mustLock(t, c.Mutex(lockName(t)), ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Mutex(name).Lock(ctx)
		errc <- err
	}()
	time.Sleep(50 * time.Millisecond)
	_ = c.Close()
	if err := <-errc; !errors.Is(err, dlock.ErrClosed) {
		t.Fatalf("wait during Close = %v, want ErrClosed", err)
	}
	<-own.Done()
	if !errors.Is(own.Err(), dlock.ErrClosed) {
		t.Fatalf("held lease after Close: Err = %v, want ErrClosed", own.Err())
	}
	if _, err := c.Mutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrClosed) {
		t.Fatalf("TryLock after Close = %v, want ErrClosed", err)
	}
	_ = c.Close() // twice is fine
}

func TestContendedLostUpdate(t *testing.T) {
	// Many goroutines over several clients: a non-atomic read-modify-write
	// under the lock must lose no update.
	name := lockName(t)
	clients := []*dlock.Client{client(t), client(t), client(t)}
	checkLostUpdates(t, newRedis(t, srv), name+":counter", 16, 10, func(i int) dlock.Locker {
		return clients[i%len(clients)].Mutex(name, dlock.WithTTL(2*time.Second))
	})
}

// Fences past 2^53 (where Lua's numbers stop being exact) still come back
// exact and strictly increasing, for every kind that hands them out. (On
// a server of its own: every lock there shares the counter.)
func TestFencesPast2Pow53(t *testing.T) {
	ctx := context.Background()
	s := redistest.StartT(t, redistest.Options{})
	c := newClient(t, newRedis(t, s))
	admin := newRedis(t, s)
	const start = 1<<53 - 2
	for _, kind := range allKinds {
		t.Run(kind.name, func(t *testing.T) {
			name := lockName(t)
			l, err := kind.lock(c, name, ctx) // the Client's first fence: the fold is done
			if err != nil {
				t.Fatal(err)
			}
			unlock(t, l)
			admin.Set(ctx, keysOf(name).Fence, start, 0)
			for i := int64(1); i <= 4; i++ {
				l, err := kind.lock(c, name, ctx)
				if err != nil {
					t.Fatal(err)
				}
				if l.Fence() != start+i {
					t.Errorf("acquisition %d: fence %d, want %d", i, l.Fence(), start+i)
				}
				// Re-entry returns the same fence, exactly.
				if kind.name != "Semaphore" {
					in, err := kind.lock(c, name, l.Context(ctx))
					if err != nil {
						t.Fatal(err)
					}
					if in.Fence() != l.Fence() {
						t.Errorf("re-entry: fence %d, want %d", in.Fence(), l.Fence())
					}
					unlock(t, in)
				}
				unlock(t, l)
			}
		})
	}
	t.Run("LockAll", func(t *testing.T) {
		a, b := c.Mutex(lockName(t)+"-a"), c.Mutex(lockName(t)+"-b")
		admin.Set(ctx, keysOf(a.Name()).Fence, start, 0)
		for i := int64(0); i < 3; i++ {
			set, err := dlock.LockAll(ctx, a, b)
			if err != nil {
				t.Fatal(err)
			}
			// the parts take the shared counter's next two values
			for j, p := range set.Parts() {
				if want := start + 2*i + int64(j) + 1; p.Fence() != want {
					t.Errorf("%s: fence %d, want %d", p.Name(), p.Fence(), want)
				}
			}
			unlock(t, set)
		}
	})
}
