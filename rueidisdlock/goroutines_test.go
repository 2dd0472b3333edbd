package rueidisdlock_test

import (
	"context"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/rueidisdlock"
	"github.com/redis/rueidis"
)

// No goroutine per call: an uncontended Lock+Unlock whose ctx can end (a
// cancel, as every request's has) runs its calls on its caller's
// goroutine, as on go-redis, not each on a goroutine of its own (issue
// 47: that goroutine per call made dlock on rueidis 0.5–0.8× rueidislock
// at 16 and 64 goroutines). Counted, not timed: the goroutines the
// process created over 200 pairs, which before were two per pair (one
// per script call) and now are what the client's background makes
// meanwhile (rueidis's pings, a timer), a few at most.
func TestNoGoroutinePerCall(t *testing.T) {
	s := redistest.StartT(t, redistest.Options{})
	client := newClient(t, rueidis.ClientOption{InitAddress: []string{s.Addr()}})
	c, err := rueidisdlock.New(client)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := c.Mutex("no-goroutine-per-call")
	pair := func() {
		l, err := m.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	pair() // scripts loaded, connections up
	const pairs = 200
	before := goroutinesCreated()
	for range pairs {
		pair()
	}
	created := goroutinesCreated() - before
	t.Logf("%d Lock+Unlock pairs with a cancellable ctx: %d goroutines created", pairs, created)
	if created > pairs/20 {
		t.Errorf("%d goroutines created over %d Lock+Unlock pairs; want at most %d (none per call)", created, pairs, pairs/20)
	}
}

// goroutinesCreated is how many goroutines the process has created.
func goroutinesCreated() uint64 {
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// The allocations of an uncontended Lock+Unlock with a ctx that can end
// are those with one that cannot, but for those made above the driver (2
// with a cancel, 3 with a deadline) and, with a deadline, 2 more (the ctx
// without it that each of the two calls hands rueidis: see queued).
// Before, with a goroutine per call, it cost 10 and 11 more (its record,
// its channel and the ctx without an end, per call).
func TestCancellableCtxAllocations(t *testing.T) {
	s := redistest.StartT(t, redistest.Options{})
	client := newClient(t, rueidis.ClientOption{InitAddress: []string{s.Addr()}})
	c, err := rueidisdlock.New(client)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	m := c.Mutex("allocations")
	count := func(ctx context.Context) float64 {
		pair := func() {
			l, err := m.Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
		pair()
		return testing.AllocsPerRun(200, pair)
	}
	plain := count(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cancellable := count(ctx)
	ctx, cancel = context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	timed := count(ctx)
	t.Logf("an uncontended Lock+Unlock: %.0f allocations with context.Background, %.0f with a cancel, %.0f with a deadline", plain, cancellable, timed)
	// 2 more than measured: AllocsPerRun counts the whole process's, and
	// the client's background (a ping, a timer) may fall in a run.
	if cancellable > plain+4 || timed > plain+7 {
		t.Errorf("a ctx that can end costs %.0f (a cancel) and %.0f (a deadline) allocations more than context.Background; want at most 4 and 7", cancellable-plain, timed-plain)
	}
}
