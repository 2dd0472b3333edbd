package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// queueLen returns a function reporting the length of a fair lock's queue.
func queueLen(rdb *redis.Client, name string) func() int64 {
	return queueLenOf(rdb, keysOf(name).Lock+":queue")
}

// queueLenOf returns a function reporting the length of the queue at key.
func queueLenOf(rdb *redis.Client, key string) func() int64 {
	return func() int64 { return rdb.ZCard(context.Background(), key).Val() }
}

func TestFairFIFOAcrossProcesses(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	admin := newRedis(t, srv)
	qlen := queueLen(admin, name)
	holder := mustLock(t, client(t).FairMutex(name), ctx)
	const procs, waiters = 4, 16
	var hs []*helper
	for range procs {
		hs = append(hs, startHelper(t, "fairwait", addrEnv+"="+srv.Addr(), nameEnv+"="+name, ttlEnv+"=2s"))
	}
	// Waiter i arrives only once waiter i-1 is in the queue: arrival order
	// is 0..15, spread over the processes.
	for i := range waiters {
		hs[i%procs].send(t, fmt.Sprint("wait ", i))
		waitFor(t, fmt.Sprintf("waiter %d to queue", i), func() bool { return qlen() == int64(i+1) })
	}
	unlock(t, holder)
	type grant struct{ id, fence int64 }
	var grants []grant
	for _, h := range hs {
		for range waiters / procs {
			line := h.expect(t, "granted", 10*time.Second)
			f := strings.Fields(line)
			id, _ := strconv.ParseInt(f[1], 10, 64)
			fence, _ := strconv.ParseInt(f[2], 10, 64)
			grants = append(grants, grant{id, fence})
		}
		_ = h.stdin.Close()
	}
	slices.SortFunc(grants, func(a, b grant) int { return int(a.fence - b.fence) })
	for i, g := range grants {
		if g.id != int64(i) {
			t.Fatalf("grant order (by fence) %v; want arrival order 0..%d", grants, waiters-1)
		}
	}
}

func TestFairKilledHeadWaiterDoesNotStall(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	const queueTTL = 300 * time.Millisecond
	admin := newRedis(t, srv)
	qlen := queueLen(admin, name)
	c := client(t)
	f := c.FairMutex(name, dlock.WithQueueTTL(queueTTL))
	holder := mustLock(t, f, ctx)

	dead := startHelper(t, "fairwait", addrEnv+"="+srv.Addr(), nameEnv+"="+name, ttlEnv+"="+queueTTL.String())
	dead.send(t, "wait 0")
	waitFor(t, "the doomed waiter to queue", func() bool { return qlen() == 1 })
	got := make(chan *dlock.Lease, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		l, err := f.Lock(wctx)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitFor(t, "the second waiter to queue", func() bool { return qlen() == 2 })
	if err := dead.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = dead.cmd.Wait()
	unlock(t, holder) // wakes the dead head; nobody answers
	l := <-got
	if l == nil {
		t.Fatal("the waiter behind a dead head never got the lock")
	}
	if l.Fence() <= holder.Fence() {
		t.Fatalf("fence %d after %d", l.Fence(), holder.Fence())
	}
	unlock(t, l)
}

func TestFairCancelInTheMiddle(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	admin := newRedis(t, srv)
	qlen := queueLen(admin, name)
	// Places that outlive the test: only an explicit leave can free them.
	f := client(t).FairMutex(name, dlock.WithQueueTTL(time.Minute))
	holder := mustLock(t, f, ctx)

	type result struct {
		l   *dlock.Lease
		err error
	}
	start := func(ctx context.Context) chan result {
		ch := make(chan result, 1)
		go func() {
			l, err := f.Lock(ctx)
			ch <- result{l, err}
		}()
		return ch
	}
	first := start(ctx)
	waitFor(t, "waiter 1", func() bool { return qlen() == 1 })
	mctx, cancel := context.WithCancel(ctx)
	middle := start(mctx)
	waitFor(t, "waiter 2", func() bool { return qlen() == 2 })
	lctx, lcancel := context.WithTimeout(ctx, 10*time.Second)
	defer lcancel()
	last := start(lctx)
	waitFor(t, "waiter 3", func() bool { return qlen() == 3 })

	cancel()
	if r := <-middle; !errors.Is(r.err, dlock.ErrNotObtained) || !errors.Is(r.err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v", r.err)
	}
	// It gives its place up as it returns, or, if Redis is slow to answer,
	// just after, in the background.
	waitFor(t, "the cancelled waiter's place given up", func() bool { return qlen() == 2 })
	unlock(t, holder)
	r1 := <-first
	if r1.err != nil {
		t.Fatal(r1.err)
	}
	unlock(t, r1.l)
	// The last waiter is next: with minute-long places, it would wait a
	// minute had the cancelled waiter kept its place.
	r3 := <-last
	if r3.err != nil {
		t.Fatalf("last waiter: %v", r3.err)
	}
	if r3.l.Fence() != r1.l.Fence()+1 {
		t.Fatalf("fences %d then %d", r1.l.Fence(), r3.l.Fence())
	}
	unlock(t, r3.l)
}

func TestFairTryLockNeverJumpsTheQueue(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	admin := newRedis(t, srv)
	f := client(t).FairMutex(name)
	holder := mustLock(t, f, ctx)
	// A live waiter's place, made by hand so that it never takes its turn.
	far := float64(time.Now().Add(time.Hour).UnixMilli())
	admin.ZAdd(ctx, keysOf(name).Lock+":queue", redis.Z{Score: 1, Member: "someone"})
	admin.ZAdd(ctx, keysOf(name).Lock+":alive", redis.Z{Score: far, Member: "someone"})
	unlock(t, holder)
	if _, err := f.TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("TryLock with a waiter queued: %v; want ErrNotObtained", err)
	}
	if n := admin.ZCard(ctx, keysOf(name).Lock+":queue").Val(); n != 1 {
		t.Fatalf("TryLock took a place: queue length %d", n)
	}
	// The release kept the lock for that waiter; it gives up.
	if got := fieldsOf(t, admin, keysOf(name).Lock)["@next"]; got != "someone" {
		t.Fatalf("the free lock is kept for %q; want the waiter", got)
	}
	admin.ZRem(ctx, keysOf(name).Lock+":queue", "someone")
	admin.Del(ctx, keysOf(name).Lock)
	l, err := f.TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock on a free lock with nobody waiting: %v", err)
	}
	unlock(t, l)
}

func TestFairReentryAndExclusion(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	f := client(t).FairMutex(name)
	outer := mustLock(t, f, ctx)
	inner := mustLock(t, f, outer.Context(ctx))
	if inner.Fence() != outer.Fence() {
		t.Fatal("re-entry changed the fence")
	}
	unlock(t, inner)
	if _, err := client(t).FairMutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("free while the outer lease holds it: %v", err)
	}
	unlock(t, outer)
	if _, err := f.Lock(ctx, dlock.WithQueueTTL(time.Millisecond)); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Fatalf("queue TTL 1ms: %v", err)
	}
}

// Waiters with different QueueTTLs share one queue: a short one must not
// shorten the queue keys' life and take the longer places (and arrival
// times) with them. The release goes to the first arrival.
func TestFairMixedQueueTTLsKeepOrder(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	admin := newRedis(t, srv)
	qlen := queueLen(admin, name)
	holder := mustLock(t, client(t).FairMutex(name), ctx)

	type result struct {
		who string
		l   *dlock.Lease
		err error
	}
	got := make(chan result, 2)
	wait := func(who string, ctx context.Context, ttl time.Duration) {
		l, err := client(t).FairMutex(name).Lock(ctx, dlock.WithQueueTTL(ttl))
		got <- result{who, l, err}
	}
	bounded, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	go wait("A", bounded, 6*time.Second)
	waitFor(t, "A queued", func() bool { return qlen() == 1 })

	bctx, bcancel := context.WithCancel(ctx)
	bdone := make(chan error, 1)
	go func() {
		_, err := client(t).FairMutex(name).Lock(bctx, dlock.WithQueueTTL(300*time.Millisecond))
		bdone <- err
	}()
	waitFor(t, "B queued", func() bool { return qlen() == 2 })
	if left := pttl(t, keysOf(name).Lock+":queue"); left < time.Second {
		t.Fatalf("B's 300ms place set the queue's expiry to %v: A's 6s place goes with it", left)
	}
	bcancel()
	<-bdone
	waitFor(t, "B gone", func() bool { return qlen() == 1 })

	go wait("C", bounded, 6*time.Second)
	waitFor(t, "C queued", func() bool { return qlen() == 2 })
	unlock(t, holder)
	first := <-got
	if first.err != nil || first.who != "A" {
		t.Fatalf("the release went to %s (%v), not to A, which queued first", first.who, first.err)
	}
	unlock(t, first.l)
	second := <-got
	if second.err != nil {
		t.Fatal(second.err)
	}
	unlock(t, second.l)
}
