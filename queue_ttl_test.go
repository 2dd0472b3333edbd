package dlock_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// A waiter with a short QueueTTL that gives up must not take an earlier
// waiter's place with it: the queue keys' expiry only grows, so the first
// waiter (a long QueueTTL, renewed only every 2 s) keeps its place and its
// arrival number, and the release goes to it, not to a waiter that came
// later (issue 23, finding 5).
func TestQueueTTLFairOrderKeptWithShortWaiter(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	admin := newRedis(t, srv)
	qlen := queueLen(admin, name)
	f := client(t).FairMutex(name)
	holder := mustLock(t, f, ctx)

	type result struct {
		l   *dlock.Lease
		err error
	}
	start := func(ctx context.Context, queueTTL time.Duration) chan result {
		ch := make(chan result, 1)
		go func() {
			l, err := f.Lock(ctx, dlock.WithQueueTTL(queueTTL))
			ch <- result{l, err}
		}()
		return ch
	}
	actx, acancel := context.WithTimeout(ctx, 10*time.Second)
	defer acancel()
	a := start(actx, 6*time.Second)
	waitFor(t, "A to queue", func() bool { return qlen() == 1 })
	const short = 300 * time.Millisecond
	queue, alive := keysOf(name).Lock+":queue", keysOf(name).Lock+":alive"
	members := func() []string { return admin.ZRange(ctx, queue, 0, -1).Val() }
	aMember := members()[0]
	bctx, bcancel := context.WithCancel(ctx)
	b := start(bctx, short)
	waitFor(t, "B to queue", func() bool { return qlen() == 2 })
	bMember := members()[1]
	if bMember == aMember {
		bMember = members()[0]
	}
	// B renews its place every 100 ms: once it has twice, its last place
	// came after every attempt A made on arrival.
	s0 := admin.ZScore(ctx, alive, bMember).Val()
	waitFor(t, "B to renew its place twice", func() bool { return admin.ZScore(ctx, alive, bMember).Val() >= s0+150 })
	placed := time.Now()
	bcancel()
	if r := <-b; !errors.Is(r.err, dlock.ErrNotObtained) {
		t.Fatalf("B gave up: %v", r.err)
	}
	waitFor(t, "B's place given up", func() bool { return qlen() <= 1 })
	// Past B's place: what it set expires by time alone, nothing signals it.
	// A renews its own place only 2 s after it made it.
	time.Sleep(time.Until(placed.Add(2 * short)))
	cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
	defer ccancel()
	before := members()
	c := start(cctx, 6*time.Second)
	waitFor(t, "C to queue", func() bool {
		for _, m := range admin.ZRange(ctx, queue, 0, -1).Val() {
			if !slices.Contains(before, m) {
				return true
			}
		}
		return false
	})
	unlock(t, holder)
	var first result
	select {
	case first = <-a:
		if first.err != nil {
			t.Fatalf("A: %v", first.err)
		}
	case r := <-c:
		if r.l != nil {
			_ = r.l.Unlock(ctx)
		}
		t.Fatalf("the release went to C (came after A) before A: err %v", r.err)
	}
	unlock(t, first.l)
	r := <-c
	if r.err != nil {
		t.Fatalf("C: %v", r.err)
	}
	unlock(t, r.l)
}

// Every queue's keys live as long as their longest place, whatever mix of
// QueueTTLs the waiters use: a waiter with a short one, renewing its place
// after one with a long one came, does not shorten the keys' expiry
// (Mutex, FairMutex, an RWMutex's writers and readers, Semaphore,
// Election).
func TestQueueTTLOnlyGrows(t *testing.T) {
	ctx := context.Background()
	const long, short = 6 * time.Second, 300 * time.Millisecond
	type prim struct {
		// hold takes what the waiters wait for; wait waits with a QueueTTL
		hold func(t *testing.T, c *dlock.Client, name string) *dlock.Lease
		wait func(ctx context.Context, c *dlock.Client, name string, q time.Duration) error
		// the queue's keys, the first holding one member per waiter
		keys func(name string) []string
	}
	lockWait := func(l func(c *dlock.Client, name string) dlock.Locker) func(context.Context, *dlock.Client, string, time.Duration) error {
		return func(ctx context.Context, c *dlock.Client, name string, q time.Duration) error {
			_, err := l(c, name).Lock(ctx, dlock.WithQueueTTL(q))
			return err
		}
	}
	mutexKeys := func(suffix string) func(string) []string {
		return func(name string) []string {
			k := keysOf(name).Lock + suffix
			return []string{k + ":queue", k + ":alive"}
		}
	}
	mutex := func(c *dlock.Client, name string) dlock.Locker { return c.Mutex(name) }
	fair := func(c *dlock.Client, name string) dlock.Locker { return c.FairMutex(name) }
	writer := func(c *dlock.Client, name string) dlock.Locker { return c.RWMutex(name) }
	reader := func(c *dlock.Client, name string) dlock.Locker { return c.RWMutex(name).RLocker() }
	holdLock := func(l func(c *dlock.Client, name string) dlock.Locker) func(*testing.T, *dlock.Client, string) *dlock.Lease {
		return func(t *testing.T, c *dlock.Client, name string) *dlock.Lease { return mustLock(t, l(c, name), ctx) }
	}
	prims := map[string]prim{
		"Mutex":         {holdLock(mutex), lockWait(mutex), mutexKeys("")},
		"FairMutex":     {holdLock(fair), lockWait(fair), mutexKeys("")},
		"RWMutexWriter": {holdLock(writer), lockWait(writer), mutexKeys(":rw")},
		"RWMutexReader": {holdLock(writer), lockWait(reader), func(name string) []string {
			return []string{keysOf(name).Lock + ":rw:rqueue"}
		}},
		"Semaphore": {
			func(t *testing.T, c *dlock.Client, name string) *dlock.Lease {
				return mustAcquire(t, c.Semaphore(name, 1), 1)
			},
			func(ctx context.Context, c *dlock.Client, name string, q time.Duration) error {
				_, err := c.Semaphore(name, 1).Acquire(ctx, 1, dlock.WithQueueTTL(q))
				return err
			},
			mutexKeys(":sem")},
		"Election": {
			func(t *testing.T, c *dlock.Client, name string) *dlock.Lease {
				// the election's leader holds its lock: a FairMutex hold
				// under the election's keys, which Campaign takes
				// (on a Client of its own: a Campaign on the leader's
				// Client would proclaim, not queue)
				ld, err := client(t).Election(name).Campaign(ctx, "leader")
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = ld.Resign(ctx) })
				return nil
			},
			func(ctx context.Context, c *dlock.Client, name string, q time.Duration) error {
				_, err := c.Election(name, dlock.WithQueueTTL(q)).Campaign(ctx, "candidate")
				return err
			},
			mutexKeys(":election")},
	}
	for what, p := range prims {
		t.Run(what, func(t *testing.T) {
			name := lockName(t)
			admin := newRedis(t, srv)
			c := client(t)
			if l := p.hold(t, c, name); l != nil {
				defer unlock(t, l)
			}
			keys := p.keys(name)
			members := func() []string { return admin.ZRange(ctx, keys[0], 0, -1).Val() }
			wctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 2)
			defer func() {
				cancel()
				for range 2 {
					if err := <-done; !errors.Is(err, dlock.ErrNotObtained) {
						t.Errorf("waiter: %v; want ErrNotObtained", err)
					}
				}
			}()
			go func() { done <- p.wait(wctx, c, name, long) }()
			waitFor(t, "the first waiter to queue", func() bool { return len(members()) == 1 })
			first := members()[0]
			go func() { done <- p.wait(wctx, client(t), name, short) }()
			waitFor(t, "the second waiter to queue", func() bool { return len(members()) == 2 })
			second := members()[0]
			if second == first {
				second = members()[1]
			}
			// The second renews its place every 100 ms: after two
			// renewals its place came last.
			s0 := admin.ZScore(ctx, keys[0], second).Val()
			if len(keys) > 1 {
				s0 = admin.ZScore(ctx, keys[1], second).Val()
			}
			waitFor(t, "the second waiter to renew twice", func() bool {
				return admin.ZScore(ctx, keys[len(keys)-1], second).Val() >= s0+150
			})
			for _, k := range keys {
				if pttl := admin.PTTL(ctx, k).Val(); pttl < long/2 {
					t.Errorf("%s expires in %v; want about %v (the first waiter's place)", k, pttl, long)
				}
			}
		})
	}
}
