package dlock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
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

func leaseRelease(l *dlock.Lease, err error) (func() error, error) {
	if err != nil {
		return nil, err
	}
	return func() error { return l.Unlock(context.Background()) }, nil
}

// Issue 33, item 11: a waiter that arrives after another is served after
// it, whatever the server's clock did between the two arrivals. (Queue
// order was the server's TIME at arrival: after a backward step the later
// arrival came first, for every kind that queues.)
func TestLaterArrivalServedLaterAfterTheServerClockStepsBack(t *testing.T) {
	s := clockServer(t)
	for _, kd := range queueingKinds {
		t.Run(kd.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			t.Cleanup(func() { _ = s.SetClock(redistest.Clock{}) })
			admin := newRedis(t, s)
			name := lockName(t)
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
}
