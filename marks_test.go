package dlock_test

// Marks on one token meeting in the lock's :dead set, the one ledger
// (docs/how-it-works.md, "Marks"): a burial (bury.lua: the token's late
// acquires are refused), a release's receipt (a copy of the release
// answers done) and a force's receipt. A later mark never shortens an
// earlier one, and a burial never reads as a release.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/protocol"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// markKind is a kind of hold as the marks tests take it.
type markKind struct {
	kind  dlock.Kind
	queue string // its waiters' queue key, after the lock key
	take  func(ctx context.Context, c *dlock.Client, name string, ttl time.Duration) (*dlock.Lease, error)
}

var markKinds = map[string]markKind{
	"Mutex": {dlock.KindMutex, ":queue", func(ctx context.Context, c *dlock.Client, name string, ttl time.Duration) (*dlock.Lease, error) {
		return c.Mutex(name).Lock(ctx, dlock.WithTTL(ttl))
	}},
	"RWMutex": {dlock.KindRWMutex, ":rw:queue", func(ctx context.Context, c *dlock.Client, name string, ttl time.Duration) (*dlock.Lease, error) {
		return c.RWMutex(name).Lock(ctx, dlock.WithTTL(ttl))
	}},
	"Semaphore": {dlock.KindSemaphore, ":sem:queue", func(ctx context.Context, c *dlock.Client, name string, ttl time.Duration) (*dlock.Lease, error) {
		return c.Semaphore(name, 1).Acquire(ctx, 1, dlock.WithTTL(ttl))
	}},
}

// slowLease takes name through a lateDriver whose go-redis-like re-send
// made the acquire slow (its first copy held back, its second took the
// lock): the lease buries its token before its final release. The held
// first copy is d's to deliver.
func slowLease(t *testing.T, k markKind, name string, ttl time.Duration) (*dlock.Lease, *lateDriver) {
	t.Helper()
	ctx := context.Background()
	d := &lateDriver{Driver: goRedisDriver(t, newRedis(t, srv)), resend: 20 * time.Millisecond}
	c, err := dlock.NewWithDriver(d)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	warm, err := k.take(ctx, c, name, time.Second) // the server has the script: the late EVALSHA runs
	if err != nil {
		t.Fatal(err)
	}
	unlock(t, warm)
	d.hold(strconv.FormatInt(ttl.Milliseconds(), 10)) // the attempt, by its TTL
	l, err := k.take(ctx, c, name, ttl)
	if err != nil {
		t.Fatal(err)
	}
	return l, d
}

// waiter starts take on a Client of its own and waits until it is queued
// (n waiters in all); the returned func waits for its lease.
func waiter(t *testing.T, k markKind, name string, n int64) func() *dlock.Lease {
	t.Helper()
	ctx := context.Background()
	type result struct {
		l   *dlock.Lease
		err error
	}
	got := make(chan result, 1)
	c := client(t)
	go func() {
		bounded, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		l, err := k.take(bounded, c, name, 10*time.Second)
		got <- result{l, err}
	}()
	waitFor(t, "the waiter queued", func() bool {
		m, _ := newRedis(t, srv).ZCard(ctx, keysOf(name).Lock+k.queue).Result()
		return m == n
	})
	return func() *dlock.Lease {
		t.Helper()
		r := <-got
		if r.err != nil {
			t.Fatal(r.err)
		}
		return r.l
	}
}

// serverMS is the server's clock in milliseconds.
func serverMS(t *testing.T) int64 {
	t.Helper()
	now, err := newRedis(t, srv).Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now.UnixMilli()
}

// Issue 45, 7: a lease whose acquire was slow buries its token before its
// final release, for twice the longer of TTL and QueueTTL; its release's
// receipt, for the lease's TTL, must not cut that burial short. The
// release hands the lock to a waiter; once the receipt's time has passed,
// the next release on the lock (handing it to a second waiter) drops the
// entries past their time; the second waiter releases; then the first
// copy of the slow acquire lands. It must take nothing: another Client
// then takes the lock at once. On the code where the receipt overwrote
// the burial, the late copy held the lock for nobody.
func TestReceiptKeepsTheBurial(t *testing.T) {
	ctx := context.Background()
	const ttl = 1500 * time.Millisecond
	for kn, k := range markKinds {
		t.Run(kn, func(t *testing.T) {
			name := lockName(t)
			a, d := slowLease(t, k, name, ttl)
			first := waiter(t, k, name, 1)
			second := waiter(t, k, name, 2)
			released := serverMS(t)
			unlock(t, a) // burial, then the release's receipt; handed to first
			w1 := first()
			waitFor(t, "the receipt's time passed", func() bool {
				return serverMS(t) > released+ttl.Milliseconds()+100
			})
			unlock(t, w1) // a receipt of its own; handed to second
			unlock(t, second())
			d.deliver(t) // the slow acquire's first copy lands
			// within a third of the late copy's TTL, which a Lock would wait out
			short, cancel := context.WithTimeout(ctx, ttl/3)
			defer cancel()
			l, err := k.take(short, client(t), name, time.Second)
			if err != nil {
				t.Fatalf("the first copy of a slow acquire, landed after its lease's release, holds the %s for nobody: %v", kn, err)
			}
			unlock(t, l)
		})
	}
}

// Issue 45, 8: the same slow-acquired lease, force-unlocked by an
// operator; another owner takes the lock (a higher fence) and releases
// it; then the first lease's Unlock must report ErrNotHeld. Its own
// burial, made just before its release, is not a release that ran. On
// the code where the burial read as the release's receipt, Unlock
// returned nil.
func TestBurialIsNotARelease(t *testing.T) {
	ctx := context.Background()
	for kn, k := range markKinds {
		t.Run(kn, func(t *testing.T) {
			name := lockName(t)
			a, _ := slowLease(t, k, name, 31*time.Second)
			if _, err := client(t).ForceUnlock(ctx, k.kind, name); err != nil {
				t.Fatal(err)
			}
			b, err := k.take(ctx, client(t), name, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if b.Fence() <= a.Fence() {
				t.Fatalf("the next owner's fence %d is not above the forced lease's %d", b.Fence(), a.Fence())
			}
			unlock(t, b)
			if err := a.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
				t.Fatalf("the Unlock of a %s lease that was forced, then held and released by another owner, returned %v; want ErrNotHeld", kn, err)
			}
		})
	}
}

// Issue 45, 5: a release whose reply comes after the client's
// ReadTimeout (the server busy 0.8 s, ReadTimeout 0.5 s) has an unknown
// outcome; the ctx has time, so the release is asked again and Unlock
// returns what happened: nil, and the lock (the permit) is free. On dlock's
// own connections (the default) and through go-redis's pool. On the code
// before, Unlock returned an i/o timeout although it had released.
func TestUnlockAfterReadTimeoutAsksAgain(t *testing.T) {
	for _, pool := range []bool{false, true} {
		for kn, k := range markKinds {
			t.Run(fmt.Sprintf("%s/pool=%v", kn, pool), func(t *testing.T) {
				s := redistest.StartT(t, redistest.Options{})
				ctx := context.Background()
				rdb := newRedis(t, s, func(o *redis.Options) { o.ReadTimeout, o.MaxRetries = 500*time.Millisecond, -1 })
				var opts []dlock.Option
				if pool {
					opts = append(opts, dlock.WithoutOwnConnections())
				}
				c, err := dlock.New(rdb, opts...)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				name := lockName(t)
				warm, err := k.take(ctx, c, name, time.Minute) // the scripts loaded
				if err != nil {
					t.Fatal(err)
				}
				unlock(t, warm)
				l, err := k.take(ctx, c, name, time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				wait := stallOnce(t, s, 800*time.Millisecond)
				uctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				err = l.Unlock(uctx)
				cancel()
				wait()
				if err != nil {
					t.Fatalf("an Unlock whose reply came after the ReadTimeout returned %v", err)
				}
				other, err := dlock.New(newRedis(t, s))
				if err != nil {
					t.Fatal(err)
				}
				defer other.Close()
				short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
				defer cancel()
				l2, err := k.take(short, other, name, time.Second)
				if err != nil {
					t.Fatalf("after the Unlock the %s is not free: %v", kn, err)
				}
				unlock(t, l2)
			})
		}
	}
}

// Issue 45, 5, for a command in a hold's sequence: an Extend whose reply
// comes after the ReadTimeout is asked again with the same place (its
// copy answers "this very call ran") and returns nil, the lease
// lengthened. On the code before, Extend returned an i/o timeout.
func TestExtendAfterReadTimeoutAsksAgain(t *testing.T) {
	for kn, k := range markKinds {
		t.Run(kn, func(t *testing.T) {
			s := redistest.StartT(t, redistest.Options{})
			ctx := context.Background()
			rdb := newRedis(t, s, func(o *redis.Options) { o.ReadTimeout, o.MaxRetries = 500*time.Millisecond, -1 })
			c, err := dlock.New(rdb)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			l, err := k.take(ctx, c, lockName(t), time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Extend(ctx, time.Minute); err != nil { // the script loaded
				t.Fatal(err)
			}
			wait := stallOnce(t, s, 800*time.Millisecond)
			ectx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err = l.Extend(ectx, 2*time.Minute)
			cancel()
			wait()
			if err != nil {
				t.Fatalf("an Extend whose reply came after the ReadTimeout returned %v", err)
			}
			if left, err := l.TTL(ctx); err != nil || left < 90*time.Second {
				t.Fatalf("after the Extend the lease has %v left (%v); want about 2 minutes", left, err)
			}
			unlock(t, l)
		})
	}
}

// TestReceiptKeepsTheBurial for an Election: a Campaign whose attempt was
// slow resigns, handing the lead on; once its receipt's time has passed
// the next leader resigns to a third, who resigns; then the slow
// Campaign's first copy lands. It must take nothing: nobody leads, and a
// new Campaign wins at once. On the code where the receipt overwrote the
// burial, Leader() returned the resigned leader's value.
func TestReceiptKeepsTheBurialElection(t *testing.T) {
	ctx := context.Background()
	const ttl = 1500 * time.Millisecond
	name := lockName(t)
	d := &lateDriver{Driver: goRedisDriver(t, newRedis(t, srv)), resend: 20 * time.Millisecond}
	c, err := dlock.NewWithDriver(d)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	campaign := func(ctx context.Context, c *dlock.Client, value string) (*dlock.Leadership, error) {
		return c.Election(name, dlock.WithTTL(ttl)).Campaign(ctx, value)
	}
	warm, err := campaign(ctx, c, "warm") // the server has the script: the late EVALSHA runs
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	d.hold(protocol.HoldTail("", "slow", true)) // the attempt, by its value in the hold's tail
	a, err := campaign(ctx, c, "slow")
	if err != nil {
		t.Fatal(err)
	}
	queue := keysOf(name).Lock + ":election:queue"
	next := func(value string, n int64) func() *dlock.Leadership {
		got := make(chan *dlock.Leadership, 1)
		errc := make(chan error, 1)
		other := client(t)
		go func() {
			bounded, cancel := context.WithTimeout(ctx, 15*time.Second)
			defer cancel()
			ld, err := campaign(bounded, other, value)
			got <- ld
			errc <- err
		}()
		waitFor(t, "the candidate queued", func() bool {
			m, _ := newRedis(t, srv).ZCard(ctx, queue).Result()
			return m == n
		})
		return func() *dlock.Leadership {
			t.Helper()
			ld := <-got
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			return ld
		}
	}
	first := next("first", 1)
	second := next("second", 2)
	resigned := serverMS(t)
	if err := a.Resign(ctx); err != nil { // burial, then the receipt; first leads
		t.Fatal(err)
	}
	w1 := first()
	waitFor(t, "the receipt's time passed", func() bool { return serverMS(t) > resigned+ttl.Milliseconds()+100 })
	if err := w1.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := second().Resign(ctx); err != nil {
		t.Fatal(err)
	}
	d.deliver(t) // the slow Campaign's first copy lands
	if info, err := client(t).Election(name).Leader(ctx); err == nil {
		t.Fatalf("after every leader resigned, the election says %q leads (term %d)", info.Value, info.Term)
	} else if !errors.Is(err, dlock.ErrNoLeader) {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, ttl/3)
	defer cancel()
	ld, err := campaign(short, client(t), "new")
	if err != nil {
		t.Fatalf("the first copy of a slow Campaign, landed after it resigned, holds the election for nobody: %v", err)
	}
	_ = ld.Resign(ctx)
}

// A burial, then the lease's receipt, then a copy of its release: a
// slow-acquired lease's Unlock that go-redis sent twice (the server runs
// both copies; another lock takes a fence between them, so a Mutex's
// copy cannot lean on the fence counter) reports the release it made.
// The copy finds the release's own mark, not only the burial. (It passed
// before the ledger too, where the burial and the receipt were one
// member; it guards the split.)
func TestSlowLeaseUnlockSentTwiceReportsDone(t *testing.T) {
	ctx := context.Background()
	for kn, k := range markKinds {
		t.Run(kn, func(t *testing.T) {
			name := lockName(t)
			a, d := slowLease(t, k, name, 31*time.Second)
			w := waiter(t, k, name, 1) // a Mutex's release leaves a receipt when it hands on
			other := client(t)
			d.mu.Lock()
			d.resend, d.twice = 0, true
			d.between = func() { unlock(t, mustLock(t, other.Mutex(name+"/other"), ctx)) }
			d.mu.Unlock()
			d.hold(a.Token(), "0") // the final release
			if err := a.Unlock(ctx); err != nil {
				t.Fatalf("the Unlock of a slow-acquired %s, sent twice: %v", kn, err)
			}
			d.mu.Lock()
			armed := d.armed
			d.mu.Unlock()
			if armed {
				t.Fatal("the release was not sent twice: the test shows nothing")
			}
			unlock(t, w())
		})
	}
}

// TestReceiptKeepsTheBurial for a read taken inside a write hold, its
// attempt slow, unlocked before the write: its receipt must not cut its
// burial short, and its first copy, landing once the next release on the
// lock has swept the marks past their time, takes nothing.
func TestReceiptKeepsTheBurialOfAReadInsideAWrite(t *testing.T) {
	ctx := context.Background()
	const ttl = 1500 * time.Millisecond
	name := lockName(t)
	d := &lateDriver{Driver: goRedisDriver(t, newRedis(t, srv)), resend: 20 * time.Millisecond}
	c, err := dlock.NewWithDriver(d)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rw := c.RWMutex(name)
	w := mustLock(t, rw, ctx, dlock.WithTTL(time.Minute))
	unlock(t, mustLock(t, rw.RLocker(), w.Context(ctx), dlock.WithTTL(time.Second))) // the script loaded
	d.hold(strconv.FormatInt(ttl.Milliseconds(), 10))                                // the read's attempt, by its TTL
	r := mustLock(t, rw.RLocker(), w.Context(ctx), dlock.WithTTL(ttl))
	released := serverMS(t)
	unlock(t, r) // burial, then its receipt
	unlock(t, w)
	waitFor(t, "the receipt's time passed", func() bool { return serverMS(t) > released+ttl.Milliseconds()+100 })
	other := client(t)
	unlock(t, mustLock(t, other.RWMutex(name), ctx, dlock.WithTTL(time.Second))) // its receipt sweeps the marks past their time
	d.deliver(t)                                                                 // the read's first copy lands
	short, cancel := context.WithTimeout(ctx, ttl/3)
	defer cancel()
	l, err := other.RWMutex(name).Lock(short, dlock.WithTTL(time.Second))
	if err != nil {
		t.Fatalf("the first copy of a slow read inside a write, landed after its release, holds the RWMutex for nobody: %v", err)
	}
	unlock(t, l)
}
