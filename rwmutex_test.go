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

func TestRWManyReaders(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	var leases []*dlock.Lease
	for range 10 {
		l, err := client(t).RWMutex(name).TryRLock(ctx)
		if err != nil {
			t.Fatalf("reader %d: %v", len(leases), err)
		}
		leases = append(leases, l)
	}
	fences := map[int64]bool{}
	for _, l := range leases {
		if fences[l.Fence()] {
			t.Fatalf("two readers share fence %d", l.Fence())
		}
		fences[l.Fence()] = true
	}
	rw := client(t).RWMutex(name)
	if _, err := rw.TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("writer got in among readers: %v", err)
	}
	for _, l := range leases {
		unlock(t, l)
	}
	w, err := rw.TryLock(ctx)
	if err != nil {
		t.Fatalf("writer after the readers left: %v", err)
	}
	for f := range fences {
		if w.Fence() <= f {
			t.Fatalf("writer's fence %d is not above reader's %d", w.Fence(), f)
		}
	}
	unlock(t, w)
}

func TestRWWriterExclusionNoTornReads(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	rdb := newRedis(t, srv)
	a, b := name+":a", name+":b"
	clients := []*dlock.Client{client(t), client(t), client(t)}
	const writers, rounds, readers = 4, 8, 6
	var wg sync.WaitGroup
	var torn, reads atomic.Int32
	stop := make(chan struct{})
	for i := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rw := clients[i%len(clients)].RWMutex(name)
			for {
				select {
				case <-stop:
					return
				default:
				}
				l, err := rw.RLock(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				va, _ := rdb.Get(ctx, a).Int64()
				time.Sleep(200 * time.Microsecond)
				vb, _ := rdb.Get(ctx, b).Int64()
				if va != vb {
					torn.Add(1)
				}
				reads.Add(1)
				if err := l.Unlock(ctx); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	var ww sync.WaitGroup
	for i := range writers {
		ww.Add(1)
		go func() {
			defer ww.Done()
			rw := clients[i%len(clients)].RWMutex(name)
			for range rounds {
				l, err := rw.Lock(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				v, _ := rdb.Get(ctx, a).Int64()
				rdb.Set(ctx, a, v+1, 0)
				time.Sleep(300 * time.Microsecond)
				rdb.Set(ctx, b, v+1, 0)
				if err := l.Unlock(ctx); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	ww.Wait()
	close(stop)
	wg.Wait()
	if v, _ := rdb.Get(ctx, a).Int64(); v != writers*rounds {
		t.Fatalf("counter %d after %d writes: lost updates", v, writers*rounds)
	}
	if torn.Load() > 0 {
		t.Fatalf("%d of %d reads saw a half-done write", torn.Load(), reads.Load())
	}
	if reads.Load() == 0 {
		t.Fatal("no reads happened")
	}
}

func TestRWWaitingWriterBlocksNewReaders(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	admin := newRedis(t, srv)
	qlen := queueLenOf(admin, keysOf(name).Lock+":rw:queue")
	r1 := mustLock(t, client(t).RWMutex(name).RLocker(), ctx)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	got := make(chan *dlock.Lease, 1)
	writer := client(t).RWMutex(name) // here: t.Fatal must not run in a goroutine of the test's
	go func() {
		l, err := writer.Lock(wctx)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitFor(t, "the writer to queue", func() bool { return qlen() == 1 })
	if _, err := client(t).RWMutex(name).TryRLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("a new reader got in while a writer waits: %v", err)
	}
	// With reader preference, readers do not wait for writers.
	r2, err := client(t).RWMutex(name, dlock.WithReaderPreference()).TryRLock(ctx)
	if err != nil {
		t.Fatalf("reader-preferring reader: %v", err)
	}
	unlock(t, r1)
	unlock(t, r2) // the last reader's release wakes the writer
	w := <-got
	if w == nil {
		t.FailNow()
	}
	unlock(t, w)
}

func TestRWWriterNotStarvedByReaders(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		rw := client(t).RWMutex(name) // here: t.Fatal must not run in a goroutine of the test's
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				l, err := rw.RLock(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				time.Sleep(5 * time.Millisecond)
				_ = l.Unlock(ctx)
			}
		}()
	}
	// Readers overlap all the time; the writer must still get its turn.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for range 3 {
		w, err := client(t).RWMutex(name).Lock(wctx)
		if err != nil {
			close(stop)
			wg.Wait()
			t.Fatalf("writer starved by a stream of readers: %v", err)
		}
		unlock(t, w)
	}
	close(stop)
	wg.Wait()
}

func TestRWCrashedReaderExpiresOnItsOwn(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	// A reader whose client stops renewing and never releases: a crash.
	crashed, crash := crashingClient(t)
	_ = mustLock(t, crashed.RWMutex(name).RLocker(), ctx, dlock.WithTTL(300*time.Millisecond))
	crash()
	// A live reader with a long TTL stretches the lock's key to 30 s, and
	// leaves at once.
	live := mustLock(t, client(t).RWMutex(name).RLocker(), ctx, dlock.WithTTL(30*time.Second))
	unlock(t, live)
	// The writer waits only for the crashed reader's own 300 ms.
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	unlock(t, mustLock(t, client(t).RWMutex(name), wctx))
}

func TestRWDowngrade(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	rw := client(t).RWMutex(name)
	other := client(t).RWMutex(name)
	w := mustLock(t, rw, ctx)
	r := mustLock(t, rw.RLocker(), w.Context(ctx)) // read inside write
	if r.Fence() <= w.Fence() {
		t.Fatalf("read inside write: fence %d, want one of its own above the writer's %d", r.Fence(), w.Fence())
	}
	if _, err := other.TryRLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("another reader got in while the writer holds: %v", err)
	}
	unlock(t, w) // downgrade: still reading
	r2, err := other.TryRLock(ctx)
	if err != nil {
		t.Fatalf("reader after the downgrade: %v", err)
	}
	if _, err := other.TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("writer got in while downgraded readers hold: %v", err)
	}
	unlock(t, r)
	unlock(t, r2)
	w2, err := other.TryLock(ctx)
	if err != nil {
		t.Fatalf("writer after every reader left: %v", err)
	}
	unlock(t, w2)
}

func TestRWNoUpgradeAndReentry(t *testing.T) {
	ctx := context.Background()
	rw := client(t).RWMutex(lockName(t))
	r := mustLock(t, rw.RLocker(), ctx)
	if _, err := rw.Lock(r.Context(ctx)); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Fatalf("upgrade: %v, want ErrInvalidArgument", err)
	}
	r2 := mustLock(t, rw.RLocker(), r.Context(ctx))
	if r2.Fence() != r.Fence() || r2.Token() != r.Token() {
		t.Fatal("read re-entry got a new owner")
	}
	unlock(t, r)
	if _, err := rw.TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("writer in while the re-entered read is held: %v", err)
	}
	unlock(t, r2)
	w := mustLock(t, rw, ctx)
	w2 := mustLock(t, rw, w.Context(ctx))
	unlock(t, w2)
	if _, err := rw.TryRLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("reader in while the outer write is held: %v", err)
	}
	unlock(t, w)
}

func TestRWWriteReleaseWakesAllReaders(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	w := mustLock(t, client(t).RWMutex(name), ctx) // 30 s TTL: only a wake-up is quick
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	const n = 5
	got := make(chan error, n)
	c := client(t)
	for range n {
		go func() {
			l, err := c.RWMutex(name).RLock(wctx)
			if err == nil {
				defer l.Unlock(ctx)
			}
			got <- err
		}()
	}
	time.Sleep(50 * time.Millisecond) // let them wait; correct either way
	unlock(t, w)
	for range n {
		if err := <-got; err != nil {
			t.Fatalf("waiting reader: %v", err)
		}
	}
}

func TestRWWatchdogRenewsReaders(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	const ttl = renewTTL
	r := mustLock(t, client(t).RWMutex(name).RLocker(), ctx, dlock.WithTTL(ttl))
	w := mustLock(t, client(t).RWMutex(name+"-w"), ctx, dlock.WithTTL(ttl))
	time.Sleep(5 * ttl)
	if r.Err() != nil || w.Err() != nil {
		t.Fatalf("renewed RW leases lost: %v, %v", r.Err(), w.Err())
	}
	if _, err := client(t).RWMutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("renewed reader's hold expired: %v", err)
	}
	ttlLeft, err := r.TTL(ctx)
	if err != nil || ttlLeft <= 0 || ttlLeft > ttl {
		t.Fatalf("reader TTL %v %v", ttlLeft, err)
	}
	unlock(t, r)
	unlock(t, w)
}
