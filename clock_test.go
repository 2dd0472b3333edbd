package dlock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/fence/redisfence"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// The server's clock. These tests run on a redis-server whose wall clock
// the test moves (redistest's clock shim: frozen, stepped forward, stepped
// back; its monotonic clock untouched), as NTP stepping a server's clock,
// a VM restored from a snapshot or an operator's `date -s` would.

// clockServer starts a server under the clock shim (skipped, and said,
// without a C compiler).
func clockServer(t *testing.T) *redistest.Server {
	t.Helper()
	return redistest.StartT(t, redistest.Options{ShimClock: true})
}

// clockKind is one kind that queues its waiters, as a test of order
// needs it: take holds it (a fresh Client each: an Election's Client
// that leads would proclaim instead of waiting), queue is its queue key.
type clockKind struct {
	name  string
	take  func(ctx context.Context, c *dlock.Client, name string) (release func() error, err error)
	queue func(name string) string
}

var queueingKinds = []clockKind{
	{"FairMutex", func(ctx context.Context, c *dlock.Client, name string) (func() error, error) {
		return leaseRelease(c.FairMutex(name).Lock(ctx))
	}, func(name string) string { return keysOf(name).Lock + ":queue" }},
	{"Mutex", func(ctx context.Context, c *dlock.Client, name string) (func() error, error) {
		return leaseRelease(c.Mutex(name).Lock(ctx))
	}, func(name string) string { return keysOf(name).Lock + ":queue" }},
	{"LockAll", func(ctx context.Context, c *dlock.Client, name string) (func() error, error) {
		return leaseRelease(dlock.LockAll(ctx, c.Mutex(name), c.FairMutex(name+"/2")))
	}, func(name string) string { return keysOf(name+"/2").Lock + ":queue" }}, // '/' sorts before '}': LockAll stops at name/2
	{"Semaphore", func(ctx context.Context, c *dlock.Client, name string) (func() error, error) {
		return leaseRelease(c.Semaphore(name, 1).Acquire(ctx, 1))
	}, func(name string) string { return keysOf(name).Lock + ":sem:queue" }},
	{"RWMutexWriter", func(ctx context.Context, c *dlock.Client, name string) (func() error, error) {
		return leaseRelease(c.RWMutex(name).Lock(ctx))
	}, func(name string) string { return keysOf(name).Lock + ":rw:queue" }},
	{"Election", func(ctx context.Context, c *dlock.Client, name string) (func() error, error) {
		ld, err := c.Election(name).Campaign(ctx, "candidate")
		if err != nil {
			return nil, err
		}
		return func() error { return ld.Resign(context.Background()) }, nil
	}, func(name string) string { return keysOf(name).Lock + ":election:queue" }},
}

// eachQueueingKind runs f for each kind that queues, on a server under
// the clock shim (its clock put back after each), with a ctx of 30 s, an
// admin client of the server and a name of the subtest's own.
func eachQueueingKind(t *testing.T, f func(t *testing.T, s *redistest.Server, kd clockKind, ctx context.Context, admin *redis.Client, name string)) {
	s := clockServer(t)
	for _, kd := range queueingKinds {
		t.Run(kd.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			t.Cleanup(func() { _ = s.SetClock(redistest.Clock{}) })
			f(t, s, kd, ctx, newRedis(t, s), lockName(t))
		})
	}
}

func leaseRelease(l *dlock.Lease, err error) (func() error, error) {
	if err != nil {
		return nil, err
	}
	return func() error { return l.Unlock(context.Background()) }, nil
}

// Issue 33, item 11: a waiter that arrives after another is served after
// it, whatever the server's clock did between the two arrivals. (Queue
// order was the server's TIME at arrival: after a backward step the later
// arrival came first, for every kind that queues; LockAll waits in the
// queue of the Mutex that stops it.)
func TestLaterArrivalServedLaterAfterTheServerClockStepsBack(t *testing.T) {
	eachQueueingKind(t, func(t *testing.T, s *redistest.Server, kd clockKind, ctx context.Context, admin *redis.Client, name string) {
		queue := kd.queue(name)
		release, err := kd.take(ctx, newClient(t, newRedis(t, s)), name)
		if err != nil {
			t.Fatal(err)
		}

		// A and B wait in turn; each, once served, says so and holds
		// until told to let go.
		served := make(chan string, 2)
		letGo := map[string]chan struct{}{"A": make(chan struct{}), "B": make(chan struct{})}
		var wg sync.WaitGroup
		wait := func(who string) {
			c := newClient(t, newRedis(t, s))
			wg.Go(func() {
				rel, err := kd.take(ctx, c, name)
				if err != nil {
					t.Errorf("%s: %v", who, err)
					served <- who + " failed"
					return
				}
				served <- who
				<-letGo[who]
				if err := rel(); err != nil {
					t.Errorf("%s's release: %v", who, err)
				}
			})
		}
		wait("A")
		waitFor(t, "A queued", func() bool { return admin.ZCard(ctx, queue).Val() == 1 })
		if err := s.StepClock(-10 * time.Second); err != nil {
			t.Fatal(err)
		}
		wait("B")
		waitFor(t, "B queued", func() bool { return admin.ZCard(ctx, queue).Val() == 2 })

		if err := release(); err != nil {
			t.Fatal(err)
		}
		first := <-served
		close(letGo[first])
		second := <-served
		if second != "A" && second != "B" {
			t.Fatal(second)
		}
		close(letGo[second])
		wg.Wait()
		if first != "A" {
			t.Fatalf("served %s then %s: the later arrival (B, after the server's clock stepped back 10 s) came first", first, second)
		}
	})
}

// Issue 33, item 12, said, not fixed: a step forward of the server's clock
// expires a lock whose holder still counts on its lease — two owners, as
// guarantees.md ("The server's clock") says — and the fence guard still
// refuses the old holder's write once the new owner has written. The old
// holder has a fixed lease (WithLease), which nothing renews, so that it
// still says held when the new owner is granted.
func TestForwardStepTwoOwnersFenceGuardRefusesTheStale(t *testing.T) {
	s := clockServer(t)
	ctx := context.Background()
	name := lockName(t)
	guard := redisfence.New(newRedis(t, s))
	const resource = "clock-resource"
	key := "{" + resource + "}:value"

	old, err := newClient(t, newRedis(t, s)).Mutex(name, dlock.WithLease(30*time.Second)).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := guard.Set(ctx, old, resource, key, "old", 0); err != nil {
		t.Fatalf("the first holder's write: %v", err)
	}
	if err := s.StepClock(time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.SetClock(redistest.Clock{}) })
	next, err := newClient(t, newRedis(t, s)).Mutex(name).TryLock(ctx)
	if err != nil {
		t.Fatalf("after a forward step past the first lease, TryLock: %v", err)
	}
	defer unlock(t, next)
	if err := old.Err(); err != nil {
		t.Fatalf("the first holder was told (%v): the forward step made no second owner", err)
	}
	if next.Fence() <= old.Fence() {
		t.Fatalf("the new owner's fence %d is not above the old one's %d", next.Fence(), old.Fence())
	}
	if err := guard.Set(ctx, next, resource, key, "next", 0); err != nil {
		t.Fatalf("the new owner's write: %v", err)
	}
	if err := guard.Set(ctx, old, resource, key, "stale", 0); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("the old holder's write after the new owner's = %v; want fence.ErrStale", err)
	}
	if v := newRedis(t, s).Get(ctx, key).Val(); v != "next" {
		t.Fatalf("the resource holds %q; want the new owner's write", v)
	}
	_ = old.Unlock(ctx) // ErrNotHeld: its hold is gone
}

// A release's receipt (the proof, for a copy of the release sent again,
// that it ran: receipt in lib_queue.lua) lasts its lease's TTL; the dead
// set that keeps receipts must not keep them longer. It lived on as long
// as receipts kept coming — a lock handed on without pause never let it
// expire — and every receipt stayed in it: a lock handed on 600 times a
// second grew it by 600 members a second, forever. Stepping the server's
// clock makes receipts old without waiting for them: hand-offs at t0,
// one at t0+20s (the set's key lives on), one at t0+40s (t0's receipts,
// 30 s ones, have expired); only the last two hand-offs' receipts may
// remain.
func TestExpiredReceiptsLeaveTheDeadSet(t *testing.T) {
	const first = 5 // hand-offs at t0
	eachQueueingKind(t, func(t *testing.T, s *redistest.Server, kd clockKind, ctx context.Context, admin *redis.Client, name string) {
		holder, waiter := newClient(t, newRedis(t, s)), newClient(t, newRedis(t, s))
		// handOff: the holder's release hands the lock to a waiter.
		handOff := func() {
			t.Helper()
			release, err := kd.take(ctx, holder, name)
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan func() error, 1)
			go func() {
				rel, err := kd.take(ctx, waiter, name)
				if err != nil {
					t.Error(err)
				}
				got <- rel
			}()
			waitFor(t, "the waiter's place", func() bool { return admin.ZCard(ctx, kd.queue(name)).Val() == 1 })
			if err := release(); err != nil {
				t.Fatal(err)
			}
			rel := <-got
			if rel == nil {
				t.FailNow()
			}
			if err := rel(); err != nil {
				t.Fatal(err)
			}
		}
		// receipts counts the members of every dead set of the name's keys.
		receipts := func() int64 {
			keys, err := admin.Keys(ctx, "*"+name+"*:dead").Result()
			if err != nil {
				t.Fatal(err)
			}
			var n int64
			for _, k := range keys {
				n += admin.ZCard(ctx, k).Val()
			}
			return n
		}
		for range first {
			handOff()
		}
		each := receipts() / first
		if each == 0 {
			t.Skip("no receipts written by this kind's hand-off")
		}
		for range 2 {
			if err := s.StepClock(20 * time.Second); err != nil {
				t.Fatal(err)
			}
			handOff()
		}
		if n := receipts(); n > 2*each {
			t.Fatalf("%d receipts in the dead sets after %d hand-offs whose receipts expired and 2 that have not (%d each): expired receipts stay", n, first, each)
		}
	})
}
