package dlock_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// waitQueued waits until Inspect shows n waiters.
func waitQueued(t *testing.T, c *dlock.Client, kd dlock.Kind, name string, n int) *dlock.LockInfo {
	t.Helper()
	var info *dlock.LockInfo
	waitFor(t, "the waiters registered", func() bool {
		var err error
		info, err = c.Inspect(context.Background(), kd, name)
		if err != nil || len(info.Waiters) != n {
			return false
		}
		// A waiter's Client records who it is just after its first
		// attempt has queued it: wait for the record too.
		for _, w := range info.Waiters {
			if w.Owner == nil {
				return false
			}
		}
		return true
	})
	return info
}

func TestInspectMutex(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	a := client(t, dlock.WithOwnerLabel("job-a"))
	b := client(t, dlock.WithOwnerLabel("job-b"))
	outer := mustLock(t, a.Mutex(name), ctx)
	inner := mustLock(t, a.Mutex(name), outer.Context(ctx))
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := b.Mutex(name).Lock(wctx)
		done <- err
	}()
	info := waitQueued(t, a, dlock.KindMutex, name, 1)
	if !info.Held || len(info.Holders) != 1 || info.Fence != outer.Fence() {
		t.Fatalf("info %+v", info)
	}
	h := info.Holders[0]
	if h.Token != outer.Token() || h.Holds != 2 || h.TTL <= 0 || h.Since.IsZero() || time.Since(h.Since) > time.Minute {
		t.Errorf("holder %+v", h)
	}
	host, _ := os.Hostname()
	if h.Owner == nil || h.Owner.Label != "job-a" || h.Owner.PID != os.Getpid() || h.Owner.Host != host {
		t.Errorf("holder's owner %+v", h.Owner)
	}
	if w := info.Waiters[0]; w.Owner == nil || w.Owner.Label != "job-b" || w.Expires <= 0 || w.Since.IsZero() {
		t.Errorf("waiter %+v (owner %+v)", w, w.Owner)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	// The cancelled waiter leaves the queue in the background: an unlock
	// before that would hand the lock to it, and its leave pass it on
	// (with a new fence).
	waitQueued(t, a, dlock.KindMutex, name, 0)
	unlock(t, inner)
	unlock(t, outer)
	info, err := a.Inspect(ctx, dlock.KindMutex, name)
	if err != nil || info.Held || len(info.Waiters) != 0 || info.Fence != 0 {
		t.Fatalf("after unlock: %+v, %v", info, err)
	}
}

func TestInspectEveryKind(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	c := client(t)
	other := client(t)

	rw := c.RWMutex(name)
	r1 := mustLock(t, rw.RLocker(), ctx)
	r2 := mustLock(t, rw.RLocker(), ctx)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _, _ = other.RWMutex(name).Lock(wctx) }()
	info := waitQueued(t, c, dlock.KindRWMutex, name, 1)
	if info.Mode != "read" || len(info.Holders) != 2 || info.Holders[0].Side != "read" || info.Waiters[0].Side != "write" {
		t.Errorf("rwmutex %+v", info)
	}

	sem := c.Semaphore(name, 5)
	p2 := mustAcquire(t, sem, 2)
	p1 := mustAcquire(t, sem, 1)
	go func() { _, _ = other.Semaphore(name, 5).Acquire(wctx, 4) }()
	info = waitQueued(t, c, dlock.KindSemaphore, name, 1)
	if info.Capacity != 5 || info.Free != 2 || len(info.Holders) != 2 || info.Waiters[0].Permits != 4 {
		t.Errorf("semaphore %+v", info)
	}

	latch := c.Latch(name)
	if _, err := latch.TrySetCount(ctx, 3, time.Minute); err != nil {
		t.Fatal(err)
	}
	info, err := c.Inspect(ctx, dlock.KindLatch, name)
	if err != nil || !info.Held || info.Count != 3 {
		t.Errorf("latch %+v, %v", info, err)
	}

	m := mustLock(t, c.Mutex(name), ctx)
	all, err := c.Locks(ctx, lockName(t)[:len(name)-8]+"*")
	if err != nil {
		t.Fatal(err)
	}
	got := map[dlock.Kind]bool{}
	for _, l := range all {
		if l.Name == name {
			got[l.Kind] = true
		}
	}
	if len(got) != 4 {
		t.Errorf("Locks found kinds %v of %q; want all four", got, name)
	}
	if _, err := c.Inspect(ctx, "table", name); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("Inspect of an unknown kind: %v", err)
	}
	cancel()
	for _, l := range []*dlock.Lease{r1, r2, p2, p1, m} {
		unlock(t, l)
	}
	if _, err := latch.CountDown(ctx); err != nil {
		t.Fatal(err)
	}
}

// unlock --force frees a lock held by a Client that cannot be reached:
// the waiter gets it at once, and the holder learns of the loss.
func TestForceUnlock(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	holder := client(t)
	l := mustLock(t, holder.Mutex(name), ctx, dlock.WithTTL(300*time.Millisecond))
	got := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		w, err := client(t).Mutex(name).Lock(wctx)
		if err == nil {
			err = w.Unlock(ctx)
		}
		got <- err
	}()
	admin := client(t)
	waitQueued(t, admin, dlock.KindMutex, name, 1)
	before, err := admin.ForceUnlock(ctx, dlock.KindMutex, name)
	if err != nil || len(before.Holders) != 1 || before.Holders[0].Token != l.Token() {
		t.Fatalf("ForceUnlock: %+v, %v", before, err)
	}
	if err := <-got; err != nil {
		t.Fatalf("the waiter after the forced unlock: %v", err)
	}
	<-l.Done()
	if !errors.Is(l.Err(), dlock.ErrLeaseLost) {
		t.Fatalf("the holder's lease: %v; want lost", l.Err())
	}
	// Every kind.
	sem := holder.Semaphore(name, 2)
	mustAcquire(t, sem, 2)
	if _, err := admin.ForceUnlock(ctx, dlock.KindSemaphore, name); err != nil {
		t.Fatal(err)
	}
	if _, free, _ := sem.Permits(ctx); free != 2 {
		t.Errorf("after ForceUnlock the semaphore has %d free; want 2", free)
	}
	mustLock(t, holder.RWMutex(name).RLocker(), ctx)
	if _, err := admin.ForceUnlock(ctx, dlock.KindRWMutex, name); err != nil {
		t.Fatal(err)
	}
	w, err := holder.RWMutex(name).TryLock(ctx)
	if err != nil {
		t.Fatalf("writer after ForceUnlock of the readers: %v", err)
	}
	unlock(t, w)
}

func TestInspectBadInput(t *testing.T) {
	c := client(t)
	var nilClient *dlock.Client
	for what, err := range map[string]error{
		"nil ctx":     func() error { _, err := c.Inspect(nil, dlock.KindMutex, "x"); return err }(), //nolint:staticcheck // bad input on purpose
		"empty name":  func() error { _, err := c.Inspect(context.Background(), dlock.KindMutex, ""); return err }(),
		"nil Client":  func() error { _, err := nilClient.Inspect(context.Background(), dlock.KindMutex, "x"); return err }(),
		"bad pattern": func() error { _, err := c.Locks(context.Background(), "["); return err }(),
		"Locks nil":   func() error { _, err := nilClient.Locks(context.Background(), ""); return err }(),
		"force kind":  func() error { _, err := c.ForceUnlock(context.Background(), "table", "x"); return err }(),
	} {
		if !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("%s: %v; want ErrInvalidArgument", what, err)
		}
	}
}

// TestInspectDropsExpiredHolders: an RWMutex reader or a Semaphore
// permit whose own lease has run out on the server, while another keeps
// the lock's key alive, is not a holder any more — the scripts drop it
// before they grant anything — and Inspect does not show it: not as a
// holder with a negative TTL, nor in the mode, nor in the permits used.
func TestInspectDropsExpiredHolders(t *testing.T) {
	ctx := context.Background()
	admin := newRedis(t, srv)
	const fixed = 150 * time.Millisecond
	// ranOut waits until the server's clock has passed the end of the
	// fixed lease of token, taken at since (server ms, from Inspect).
	ranOut := func(l *dlock.Lease, since time.Time) {
		<-l.Done() // its local deadline: before the server's
		waitFor(t, "the lease's end on the server", func() bool {
			now, err := admin.Time(ctx).Result()
			return err == nil && now.UnixMilli() > since.Add(fixed).UnixMilli()+1
		})
	}
	since := func(info *dlock.LockInfo, tok string) time.Time {
		for _, h := range info.Holders {
			if h.Token == tok {
				return h.Since
			}
		}
		t.Fatalf("%s not a holder: %+v", tok, info.Holders)
		return time.Time{}
	}
	t.Run("reader", func(t *testing.T) {
		name := lockName(t)
		c := client(t)
		short := mustLock(t, c.RWMutex(name).RLocker(), ctx, dlock.WithLease(fixed))
		long := mustLock(t, client(t).RWMutex(name).RLocker(), ctx)
		defer func() { _ = long.Unlock(ctx) }()
		info, err := c.Inspect(ctx, dlock.KindRWMutex, name)
		if err != nil {
			t.Fatal(err)
		}
		ranOut(short, since(info, short.Token()))
		info, err = c.Inspect(ctx, dlock.KindRWMutex, name)
		if err != nil {
			t.Fatal(err)
		}
		if len(info.Holders) != 1 || info.Holders[0].Token != long.Token() || info.Mode != "read" || !info.Held {
			t.Fatalf("after a reader's lease ran out: held %v, mode %q, holders %+v; want only the live reader", info.Held, info.Mode, info.Holders)
		}
		if err := long.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		// The last reader's lease ran out too (a crash, say): the lock
		// reads free, as a writer finds it.
		crashed := mustLock(t, client(t).RWMutex(name).RLocker(), ctx, dlock.WithLease(fixed))
		keep := mustLock(t, client(t).RWMutex(name).RLocker(), ctx, dlock.WithLease(fixed+100*time.Millisecond))
		info, err = c.Inspect(ctx, dlock.KindRWMutex, name)
		if err != nil {
			t.Fatal(err)
		}
		s0 := since(info, crashed.Token())
		ranOut(crashed, s0)
		info, err = c.Inspect(ctx, dlock.KindRWMutex, name)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range info.Holders {
			if h.Token == crashed.Token() || h.TTL < 0 {
				t.Fatalf("a reader whose lease ran out is still shown: %+v", info.Holders)
			}
		}
		_ = keep.Unlock(ctx)
	})
	t.Run("permit", func(t *testing.T) {
		name := lockName(t)
		c := client(t)
		short, err := c.Semaphore(name, 2).Acquire(ctx, 1, dlock.WithLease(fixed))
		if err != nil {
			t.Fatal(err)
		}
		long, err := client(t).Semaphore(name, 2).Acquire(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = long.Unlock(ctx) }()
		info, err := c.Inspect(ctx, dlock.KindSemaphore, name)
		if err != nil {
			t.Fatal(err)
		}
		ranOut(short, since(info, short.Token()))
		info, err = c.Inspect(ctx, dlock.KindSemaphore, name)
		if err != nil {
			t.Fatal(err)
		}
		if len(info.Holders) != 1 || info.Holders[0].Token != long.Token() || info.Free != 1 || info.Capacity != 2 {
			t.Fatalf("after a permit's lease ran out: free %d of %d, holders %+v; want 1 free, only the live permit", info.Free, info.Capacity, info.Holders)
		}
		capacity, free, err := c.Semaphore(name, 2).Permits(ctx)
		if err != nil || capacity != 2 || free != 1 {
			t.Fatalf("Permits: %d free of %d, %v; want 1 of 2", free, capacity, err)
		}
	})
}
