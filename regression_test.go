package dlock_test

// Regression tests for the holes in exclusion and liveness found by tests
// written from outside (issue 7). Each one failed on the code before its
// fix.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// Extend to far more than the TTL while a watchdog renewal is in flight:
// the renewal must not shorten the lease again on the server, or the key
// expires while the lease still reports itself held.
func TestExtendRacingRenewalNeverShortens(t *testing.T) {
	ctx := context.Background()
	holder, other := client(t), client(t)
	const n = 300
	base := lockName(t)
	leases := make([]*dlock.Lease, n)
	for i := range leases {
		leases[i] = mustLock(t, holder.Mutex(fmt.Sprintf("%s-%d", base, i)), ctx, dlock.WithTTL(60*time.Millisecond))
	}
	// Extend them spread over a few renewal periods, so that many meet a
	// renewal in flight.
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := g; i < n; i += 4 {
				_ = leases[i].Extend(ctx, 10*time.Second) // a lost lease may fail: checked below
				time.Sleep(100 * time.Microsecond)
			}
		})
	}
	wg.Wait()
	time.Sleep(200 * time.Millisecond) // three times the old TTL: a shortened key is gone
	twice := 0
	for i, l := range leases {
		if l.Err() != nil {
			continue // lost and told: allowed
		}
		if o, err := other.Mutex(l.Name()).TryLock(ctx); err == nil {
			twice++
			if twice <= 3 {
				t.Errorf("lease %d still reports itself held, but another owner got the lock (fence %d after %d)", i, o.Fence(), l.Fence())
			}
			_ = o.Unlock(ctx)
		} else if !errors.Is(err, dlock.ErrNotObtained) {
			t.Fatal(err)
		}
	}
	if twice > 0 {
		t.Fatalf("%d of %d locks granted twice after Extend", twice, n)
	}
	for _, l := range leases {
		_ = l.Unlock(ctx)
	}
}

// The same race on the primitives whose holds have their own expiry in
// Redis (semaphore permits, read holds).
func TestExtendRacingRenewalOtherKinds(t *testing.T) {
	ctx := context.Background()
	c := client(t)
	const n = 100
	base := lockName(t)
	ttl := dlock.WithTTL(60 * time.Millisecond)
	type held struct {
		l     *dlock.Lease
		probe func() error // nil when the hold is still there
	}
	var hs []held
	for i := range n {
		s := c.Semaphore(fmt.Sprintf("%s-s%d", base, i), 1)
		hs = append(hs, held{mustAcquire(t, s, 1, ttl), func() error {
			l, err := s.TryAcquire(ctx, 1)
			if err == nil {
				_ = l.Unlock(ctx)
				return errors.New("a permit was free")
			}
			return nil
		}})
		rw := c.RWMutex(fmt.Sprintf("%s-r%d", base, i))
		hs = append(hs, held{mustLock(t, rw.RLocker(), ctx, ttl), func() error {
			l, err := rw.TryLock(ctx)
			if err == nil {
				_ = l.Unlock(ctx)
				return errors.New("a writer got in")
			}
			return nil
		}})
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := g; i < len(hs); i += 4 {
				_ = hs[i].l.Extend(ctx, 10*time.Second)
				time.Sleep(100 * time.Microsecond)
			}
		})
	}
	wg.Wait()
	time.Sleep(200 * time.Millisecond)
	bad := 0
	for _, h := range hs {
		if h.l.Err() != nil {
			continue
		}
		if err := h.probe(); err != nil {
			bad++
			if bad <= 3 {
				t.Errorf("%s: still reports itself held, but %v", h.l.Name(), err)
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d holds shortened by a renewal after Extend", bad, len(hs))
	}
	for _, h := range hs {
		_ = h.l.Unlock(ctx)
	}
}

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

// waitForSubscribers waits until the server has at least n pub/sub
// channels with subscribers.
func waitForSubscribers(t *testing.T, admin *redis.Client, n int) {
	t.Helper()
	for range 500 {
		chs, err := admin.PubSubChannels(context.Background(), "*").Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(chs) >= n {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("no subscriber appeared")
}

// Close releases what the Client still holds, so another client gets it at
// once, not after the TTL.
func TestCloseReleasesHeldLocks(t *testing.T) {
	ctx := context.Background()
	for _, kind := range allKinds {
		t.Run(kind.name, func(t *testing.T) {
			rdb := newRedis(t, srv)
			a, err := dlock.New(rdb)
			if err != nil {
				t.Fatal(err)
			}
			b := client(t)
			name := lockName(t)
			l, err := kind.lock(a, name, ctx, dlock.WithTTL(10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
			if !errors.Is(l.Err(), dlock.ErrClosed) {
				t.Fatalf("after Close, Err = %v; want ErrClosed", l.Err())
			}
			l2, err := kind.probe(b, name, ctx)
			if err != nil {
				t.Fatalf("after the holder's Client closed, the lock is still held: %v", err)
			}
			unlock(t, l2)
		})
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

// lockKind is one kind of lock, taken through its own API.
type lockKind struct {
	name string
	lock func(c *dlock.Client, name string, ctx context.Context, opts ...dlock.LockOption) (*dlock.Lease, error)
	// try makes one attempt at an acquire of the kind itself.
	try func(c *dlock.Client, name string, ctx context.Context) (*dlock.Lease, error)
	// probe makes one attempt at an acquire that the kind's hold excludes
	// (for a read hold: a writer's).
	probe func(c *dlock.Client, name string, ctx context.Context) (*dlock.Lease, error)
}

// allKinds are the exclusive-or-counted kinds: Mutex, FairMutex, the two
// sides of an RWMutex, and a Semaphore of one permit.
var allKinds = []lockKind{
	{"Mutex",
		func(c *dlock.Client, n string, ctx context.Context, o ...dlock.LockOption) (*dlock.Lease, error) {
			return c.Mutex(n).Lock(ctx, o...)
		},
		func(c *dlock.Client, n string, ctx context.Context) (*dlock.Lease, error) {
			return c.Mutex(n).TryLock(ctx)
		},
		func(c *dlock.Client, n string, ctx context.Context) (*dlock.Lease, error) {
			return c.Mutex(n).TryLock(ctx)
		}},
	{"FairMutex",
		func(c *dlock.Client, n string, ctx context.Context, o ...dlock.LockOption) (*dlock.Lease, error) {
			return c.FairMutex(n).Lock(ctx, o...)
		},
		func(c *dlock.Client, n string, ctx context.Context) (*dlock.Lease, error) {
			return c.FairMutex(n).TryLock(ctx)
		},
		func(c *dlock.Client, n string, ctx context.Context) (*dlock.Lease, error) {
			return c.FairMutex(n).TryLock(ctx)
		}},
	{"RWMutex.RLock",
		func(c *dlock.Client, n string, ctx context.Context, o ...dlock.LockOption) (*dlock.Lease, error) {
			return c.RWMutex(n).RLock(ctx, o...)
		},
		func(c *dlock.Client, n string, ctx context.Context) (*dlock.Lease, error) {
			return c.RWMutex(n).TryRLock(ctx)
		},
		func(c *dlock.Client, n string, ctx context.Context) (*dlock.Lease, error) {
			return c.RWMutex(n).TryLock(ctx)
		}},
	{"RWMutex.Lock",
		func(c *dlock.Client, n string, ctx context.Context, o ...dlock.LockOption) (*dlock.Lease, error) {
			return c.RWMutex(n).Lock(ctx, o...)
		},
		func(c *dlock.Client, n string, ctx context.Context) (*dlock.Lease, error) {
			return c.RWMutex(n).TryLock(ctx)
		},
		func(c *dlock.Client, n string, ctx context.Context) (*dlock.Lease, error) {
			return c.RWMutex(n).TryLock(ctx)
		}},
	{"Semaphore",
		func(c *dlock.Client, n string, ctx context.Context, o ...dlock.LockOption) (*dlock.Lease, error) {
			return c.Semaphore(n, 1).Acquire(ctx, 1, o...)
		},
		func(c *dlock.Client, n string, ctx context.Context) (*dlock.Lease, error) {
			return c.Semaphore(n, 1).TryAcquire(ctx, 1)
		},
		func(c *dlock.Client, n string, ctx context.Context) (*dlock.Lease, error) {
			return c.Semaphore(n, 1).TryAcquire(ctx, 1)
		}},
}

// Locks of different kinds called alike are different locks: each kind
// has its own keys, so none is granted beside a holder of its own kind,
// none reads another kind's keys (no WRONGTYPE, no miscounted permits),
// and Mutex and FairMutex, one kind, exclude each other.
func TestKindsOnOneName(t *testing.T) {
	ctx := context.Background()
	a, b := client(t), client(t)
	family := map[string]string{"Mutex": "m", "FairMutex": "m", "RWMutex.RLock": "rw", "RWMutex.Lock": "rw", "Semaphore": "s"}
	for _, first := range allKinds {
		for _, second := range allKinds {
			t.Run(first.name+"/"+second.name, func(t *testing.T) {
				name := lockName(t)
				held, err := first.lock(a, name, ctx)
				if err != nil {
					t.Fatal(err)
				}
				l, err := second.try(b, name, ctx)
				shared := first.name == "RWMutex.RLock" && second.name == "RWMutex.RLock"
				switch {
				case family[first.name] == family[second.name] && !shared:
					if !errors.Is(err, dlock.ErrNotObtained) {
						t.Fatalf("granted beside a holder of the same lock: %v", err)
					}
				case err != nil:
					t.Fatalf("a lock of another kind (its own lock) was refused: %v", err)
				default:
					// Each sees only its own holder: the second's probe
					// is refused while it holds.
					if p, err := second.probe(a, name, ctx); !errors.Is(err, dlock.ErrNotObtained) {
						t.Fatalf("the second holder's own lock was free to another: %v %v", p, err)
					}
					unlock(t, l)
				}
				if held.Err() != nil {
					t.Fatalf("the first holder lost its lease: %v", held.Err())
				}
				unlock(t, held)
			})
		}
	}
	// A Latch called like a held Mutex is a latch of its own.
	name := lockName(t)
	held := mustLock(t, a.Mutex(name), ctx)
	if ok, err := b.Latch(name).TrySetCount(ctx, 2, time.Minute); !ok || err != nil {
		t.Fatalf("TrySetCount on a latch called like a held Mutex: %v %v", ok, err)
	}
	if n, err := b.Latch(name).CountDown(ctx); n != 1 || err != nil {
		t.Fatalf("CountDown: %d %v", n, err)
	}
	unlock(t, held)
}

// Fences past 2^53 (where Lua's numbers stop being exact) still come back
// exact and strictly increasing, for every kind that hands them out.
func TestFencesPast2Pow53(t *testing.T) {
	ctx := context.Background()
	c := client(t)
	admin := newRedis(t, srv)
	const start = 1<<53 - 2
	for _, kind := range allKinds {
		t.Run(kind.name, func(t *testing.T) {
			name := lockName(t)
			// Find the kind's fence counter: the one key named *fence
			// that its first acquisition makes.
			l, err := kind.lock(c, name, ctx)
			if err != nil {
				t.Fatal(err)
			}
			unlock(t, l)
			keys, err := admin.Keys(ctx, keysOf(name).Lock+"*fence").Result()
			if err != nil || len(keys) != 1 {
				t.Fatalf("fence keys %v, %v", keys, err)
			}
			admin.Set(ctx, keys[0], start, 0)
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
		for _, m := range []*dlock.Mutex{a, b} {
			k, _ := dlock.KeysOf("dlock", m.Name())
			admin.Set(ctx, k.Fence, start, 0)
		}
		for i := int64(1); i <= 3; i++ {
			set, err := dlock.LockAll(ctx, a, b)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range set.Parts() {
				if p.Fence() != start+i {
					t.Errorf("%s: fence %d, want %d", p.Name(), p.Fence(), start+i)
				}
			}
			unlock(t, set)
		}
	})
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

// RedLock's fence write-back compares fences past 2^53 exactly.
func TestQuorumFencesPast2Pow53(t *testing.T) {
	ctx := context.Background()
	_, nodes := quorumNodes(t, 3)
	c := quorumClient(t, nodes)
	name := lockName(t)
	k, _ := dlock.KeysOf("dlock", name)
	const base = 1 << 53
	for i, v := range []int64{base + 3, base + 1, base + 1} {
		nodes[i].Set(ctx, k.Fence, v, 0)
	}
	want := int64(base + 4)
	for range 3 {
		l := mustLock(t, c.Mutex(name), ctx)
		if l.Fence() != want {
			t.Fatalf("fence %d, want %d", l.Fence(), want)
		}
		unlock(t, l)
		want++
	}
}

// With one of three RedLock masters hung, quorum leases are renewed by the
// other two: renewals go to each node as one batch, side by side, and a
// lease counts as renewed once a majority confirmed it.
func TestQuorumRenewalsPastAHungNode(t *testing.T) {
	ctx := context.Background()
	servers, nodes := quorumNodes(t, 3)
	c := quorumClient(t, nodes, dlock.WithNodeTimeout(500*time.Millisecond))
	const n = 30
	base := lockName(t)
	leases := make([]*dlock.Lease, n)
	for i := range leases {
		leases[i] = mustLock(t, c.Mutex(fmt.Sprintf("%s-%d", base, i)), ctx, dlock.WithTTL(2*time.Second))
	}
	hung := servers[2].Client()
	defer hung.Close()
	if err := hung.Do(ctx, "DEBUG", "SLEEP", "4").Err(); err != nil { // blocks the node for 4 s
		t.Fatal(err)
	}
	// Two TTLs have passed with one node hung.
	lost := 0
	for _, l := range leases {
		if l.Err() != nil {
			lost++
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d quorum leases lost while a majority of nodes was healthy", lost, n)
	}
	for _, l := range leases {
		unlock(t, l)
	}
}

// Every Lease method works on every kind of lease, held and ended: the
// lease of each primitive, a re-entered lease, a LockAll set, a quorum
// lease and a script-free one.
func TestLeaseMethodsOnEveryKind(t *testing.T) {
	ctx := context.Background()
	c := client(t)
	_, nodes := quorumNodes(t, 3)
	q := quorumClient(t, nodes)
	plain := client(t, dlock.WithoutScripts())
	type maker struct {
		name string
		take func(name string) (*dlock.Lease, error)
	}
	makers := []maker{
		{"reentered", func(n string) (*dlock.Lease, error) {
			outer, err := c.Mutex(n).Lock(ctx)
			if err != nil {
				return nil, err
			}
			t.Cleanup(func() { _ = outer.Unlock(ctx) })
			return c.Mutex(n).Lock(outer.Context(ctx))
		}},
		{"LockAll", func(n string) (*dlock.Lease, error) {
			return dlock.LockAll(ctx, c.Mutex(n+"-a"), c.RWMutex(n+"-b").RLocker(), c.FairMutex(n+"-c"))
		}},
		{"quorum", func(n string) (*dlock.Lease, error) { return q.Mutex(n).Lock(ctx) }},
		{"WithoutScripts", func(n string) (*dlock.Lease, error) { return plain.Mutex(n).Lock(ctx) }},
	}
	for _, k := range allKinds {
		makers = append(makers, maker{k.name, func(n string) (*dlock.Lease, error) { return k.lock(c, n, ctx) }})
	}
	for _, m := range makers {
		t.Run(m.name, func(t *testing.T) {
			l, err := m.take(lockName(t))
			if err != nil {
				t.Fatal(err)
			}
			if l.Name() == "" || len(l.Token()) != 32 || l.Fence() < 1 || len(l.Parts()) < 1 {
				t.Fatalf("Name %q Token %q Fence %d Parts %d", l.Name(), l.Token(), l.Fence(), len(l.Parts()))
			}
			lctx := l.Context(ctx)
			if l.Err() != nil || lctx.Err() != nil {
				t.Fatalf("held lease: Err %v, Context %v", l.Err(), lctx.Err())
			}
			select {
			case <-l.Done():
				t.Fatal("Done closed while held")
			default:
			}
			if err := l.Extend(ctx, time.Minute); err != nil {
				t.Fatalf("Extend: %v", err)
			}
			if d, err := l.TTL(ctx); err != nil || d <= 30*time.Second || d > time.Minute {
				t.Fatalf("TTL after Extend(1m) = %v, %v", d, err)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatalf("Unlock: %v", err)
			}
			<-l.Done()
			if !errors.Is(l.Err(), dlock.ErrUnlocked) || !errors.Is(context.Cause(lctx), dlock.ErrUnlocked) {
				t.Fatalf("after Unlock: Err %v, Context cause %v", l.Err(), context.Cause(lctx))
			}
			if err := l.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
				t.Fatalf("second Unlock: %v", err)
			}
			if err := l.Extend(ctx, time.Minute); !errors.Is(err, dlock.ErrNotHeld) {
				t.Fatalf("Extend after Unlock: %v", err)
			}
			if _, err := l.TTL(ctx); !errors.Is(err, dlock.ErrNotHeld) {
				t.Fatalf("TTL after Unlock: %v", err)
			}
			if l.Token() == "" || l.Name() == "" {
				t.Fatal("Token or Name gone after Unlock")
			}
		})
	}
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

// An option is refused where it means nothing, not ignored.
func TestOptionsRefusedWhereMeaningless(t *testing.T) {
	ctx := context.Background()
	c := client(t)
	name := lockName(t)
	for _, tc := range []struct {
		what string
		try  func() error
	}{
		{"Mutex WithReaderPreference", func() error { _, err := c.Mutex(name).TryLock(ctx, dlock.WithReaderPreference()); return err }},
		{"FairMutex WithReaderPreference", func() error { _, err := c.FairMutex(name).TryLock(ctx, dlock.WithReaderPreference()); return err }},
		{"Semaphore WithReaderPreference", func() error {
			_, err := c.Semaphore(name, 1).TryAcquire(ctx, 1, dlock.WithReaderPreference())
			return err
		}},
		{"New WithNodeTimeout", func() error { _, err := dlock.New(newRedis(t, srv), dlock.WithNodeTimeout(time.Second)); return err }},
		{"New WithRetryJitter", func() error { _, err := dlock.New(newRedis(t, srv), dlock.WithRetryJitter(time.Second)); return err }},
	} {
		if err := tc.try(); !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("%s: %v; want ErrInvalidArgument", tc.what, err)
		}
	}
	// Where they mean something they are taken.
	l, err := c.RWMutex(name, dlock.WithReaderPreference(), dlock.WithQueueTTL(time.Second)).TryRLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	unlock(t, l)
	for _, try := range []func() (*dlock.Lease, error){
		func() (*dlock.Lease, error) { return c.Mutex(name, dlock.WithQueueTTL(time.Second)).TryLock(ctx) },
		func() (*dlock.Lease, error) {
			return c.Semaphore(name, 1).TryAcquire(ctx, 1, dlock.WithQueueTTL(time.Second))
		},
	} {
		l, err := try()
		if err != nil {
			t.Fatal(err)
		}
		unlock(t, l)
	}
}
