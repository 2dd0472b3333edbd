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

func TestSemaphoreNeverMoreThanN(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	const permits, workers, rounds = 3, 12, 6
	var inside, peak atomic.Int32
	var wg sync.WaitGroup
	clients := []*dlock.Client{client(t), client(t), client(t)}
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := clients[i%len(clients)].Semaphore(name, permits)
			for range rounds {
				l, err := s.Acquire(ctx, 1)
				if err != nil {
					t.Error(err)
					return
				}
				n := inside.Add(1)
				for {
					p := peak.Load()
					if n <= p || peak.CompareAndSwap(p, n) {
						break
					}
				}
				time.Sleep(time.Millisecond)
				inside.Add(-1)
				if err := l.Unlock(ctx); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if p := peak.Load(); p > permits {
		t.Fatalf("%d holders at once with %d permits", p, permits)
	}
	if p := peak.Load(); p < 2 {
		t.Fatalf("peak %d: the permits were never shared, the test proves nothing", p)
	}
}

func TestSemaphoreAcrossProcesses(t *testing.T) {
	name := lockName(t)
	var hs []*helper
	for range 4 {
		hs = append(hs, startHelper(t, "semaphore", addrEnv+"="+srv.Addr(), nameEnv+"="+name,
			ttlEnv+"=2s", roundsEnv+"=8", workersEnv+"=4"))
	}
	for i, h := range hs {
		if err := h.cmd.Wait(); err != nil {
			t.Fatalf("helper %d: %v (see its stderr above)", i, err)
		}
	}
}

func TestSemaphoreWeightsAndCapacity(t *testing.T) {
	ctx := context.Background()
	s := client(t).Semaphore(lockName(t), 4)
	a, err := s.TryAcquire(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.TryAcquire(ctx, 2); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("3+2 of 4: %v", err)
	}
	b, err := s.TryAcquire(ctx, 1)
	if err != nil {
		t.Fatalf("3+1 of 4: %v", err)
	}
	if capacity, free, err := s.Permits(ctx); capacity != 4 || free != 0 || err != nil {
		t.Fatalf("Permits = %d, %d, %v; want 4, 0", capacity, free, err)
	}
	// Lowering the capacity takes nothing away; raising it lets waiters in.
	if err := s.SetPermits(ctx, 2); err != nil {
		t.Fatal(err)
	}
	unlock(t, b)
	if _, err := s.TryAcquire(ctx, 1); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("acquired above the lowered capacity: %v", err)
	}
	got := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		l, err := s.Acquire(wctx, 2)
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	time.Sleep(30 * time.Millisecond) // let it wait; correct either way
	if err := s.SetPermits(ctx, 5); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter after the capacity grew: %v", err)
	}
	unlock(t, a)
	if err := a.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("second release: %v", err)
	}
}

func TestSemaphoreBadInput(t *testing.T) {
	ctx := context.Background()
	c := client(t)
	s := c.Semaphore(lockName(t), 2)
	for _, n := range []int{0, -1, 3} {
		if _, err := s.Acquire(ctx, n); !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("Acquire(%d) of 2: %v, want ErrInvalidArgument", n, err)
		}
	}
	if _, err := c.Semaphore(lockName(t), 0).TryAcquire(ctx, 1); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("capacity 0: %v", err)
	}
	if err := s.SetPermits(ctx, 0); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("SetPermits(0): %v", err)
	}
	if _, err := c.Semaphore("", 1).Acquire(ctx, 1); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("empty name: %v", err)
	}
}

func TestSemaphoreCrashReturnsPermits(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	crashed, crash := crashingClient(t)
	if _, err := crashed.Semaphore(name, 2).Acquire(ctx, 2, dlock.WithTTL(300*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	crash()
	s := client(t).Semaphore(name, 2)
	if _, err := s.TryAcquire(ctx, 1); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("permits free while the crashed holder's lease lasts: %v", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	l, err := s.Acquire(wctx, 2)
	if err != nil {
		t.Fatalf("the crashed holder's permits never came back: %v", err)
	}
	unlock(t, l)
}

func TestSemaphoreRenewedAndFenced(t *testing.T) {
	ctx := context.Background()
	s := client(t).Semaphore(lockName(t), 2)
	const ttl = renewTTL
	a := mustAcquire(t, s, 1, dlock.WithTTL(ttl))
	b := mustAcquire(t, s, 1, dlock.WithTTL(ttl))
	if a.Fence() == b.Fence() {
		t.Fatal("two holders share a fence")
	}
	time.Sleep(4 * ttl)
	if a.Err() != nil || b.Err() != nil {
		t.Fatalf("renewed permits lost: %v %v", a.Err(), b.Err())
	}
	if _, err := s.TryAcquire(ctx, 1); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("renewed permits expired: %v", err)
	}
	if left, err := a.TTL(ctx); err != nil || left <= 0 || left > ttl {
		t.Fatalf("TTL %v %v", left, err)
	}
	unlock(t, a)
	unlock(t, b)
}

func mustAcquire(t *testing.T, s *dlock.Semaphore, n int, opts ...dlock.LockOption) *dlock.Lease {
	t.Helper()
	l, err := s.Acquire(context.Background(), n, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// A semaphore's capacity and a request are bounded where the server's
// arithmetic is exact: beyond, a clear error, never an over-grant.
func TestSemaphoreCapacityBound(t *testing.T) {
	ctx := context.Background()
	c := client(t)
	for _, capacity := range []int{1 << 53, 1<<53 + 1, 1 << 62} {
		if _, err := c.Semaphore(lockName(t), capacity).TryAcquire(ctx, 1); !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("capacity %d: %v; want ErrInvalidArgument", capacity, err)
		}
		if err := c.Semaphore(lockName(t), 2).SetPermits(ctx, capacity); !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("SetPermits(%d): %v; want ErrInvalidArgument", capacity, err)
		}
	}
	s := c.Semaphore(lockName(t), dlock.MaxPermits)
	a := mustAcquire(t, s, dlock.MaxPermits-1)
	b := mustAcquire(t, s, 1)
	if l, err := s.TryAcquire(ctx, 1); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("a permit beyond the capacity %d: %v %v", dlock.MaxPermits, l, err)
	}
	unlock(t, a)
	unlock(t, b)
}

// Permits are not re-entrant: an Acquire under a permit's lease context
// takes permits of its own.
func TestSemaphoreUnderItsLeaseContextTakesMore(t *testing.T) {
	ctx := context.Background()
	s := client(t).Semaphore(lockName(t), 3)
	a := mustAcquire(t, s, 1)
	b, err := s.Acquire(a.Context(ctx), 2)
	if err != nil {
		t.Fatal(err)
	}
	if b.Token() == a.Token() {
		t.Fatal("the second Acquire re-entered the first's hold")
	}
	if _, free, err := s.Permits(ctx); err != nil || free != 0 {
		t.Fatalf("free permits %d, %v; want 0", free, err)
	}
	unlock(t, b)
	unlock(t, a)
}

// The capacity an acquire set lives as long as the semaphore's holds (the
// watchdog's renewals keep it) and goes with them; one SetPermits set
// stays.
func TestSemaphoreCapacityLivesWithItsHolds(t *testing.T) {
	ctx := context.Background()
	c := client(t)
	admin := newRedis(t, srv)
	name := lockName(t)
	const ttl = 150 * time.Millisecond
	p, err := c.Semaphore(name, 2, dlock.WithTTL(ttl)).Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	capKey := keysOf(name).Lock + ":sem:permits"
	// Three TTLs of renewals: the capacity is still the holder's, not the
	// one a later handle brings.
	time.Sleep(3 * ttl) // the passing of time is what is tested
	if capacity, _, err := c.Semaphore(name, 5).Permits(ctx); err != nil || capacity != 2 {
		t.Fatalf("capacity %d (%v) after the holder renewed past its first TTL; want 2", capacity, err)
	}
	if ms := admin.PTTL(ctx, capKey).Val(); ms <= 0 || ms > ttl {
		t.Errorf("the capacity's TTL is %v; want it to follow the hold's (%v)", ms, ttl)
	}
	unlock(t, p)
	waitFor(t, "the capacity to go with the holds", func() bool { return admin.Exists(ctx, capKey).Val() == 0 })

	if err := c.Semaphore(name, 2).SetPermits(ctx, 3); err != nil {
		t.Fatal(err)
	}
	p, err = c.Semaphore(name, 2, dlock.WithTTL(ttl)).Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	unlock(t, p)
	if ms := admin.PTTL(ctx, capKey).Val(); ms != -1 {
		t.Errorf("a capacity SetPermits set has TTL %v; want none", ms)
	}
}
