package web

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dlock-go/dlock"
)

// countingHub is a hub whose reads are counted and instant, in a
// synctest bubble's virtual time.
func countingHub(interval time.Duration, reads *atomic.Int64, fail *atomic.Bool) *hub {
	return newHub(interval, 10*time.Second, quiet, func(context.Context) (*dlock.Snapshot, error) {
		reads.Add(1)
		if fail != nil && fail.Load() {
			return nil, errors.New("redis is down")
		}
		return &dlock.Snapshot{At: time.Now()}, nil
	}, func(*state) []byte { return []byte("{}") })
}

// TestHubOneReadPerIntervalForEveryone: fifty open pages and ten clients
// asking the API or the metrics ten times an interval cost one Snapshot
// an interval, as one page does; every page sees every refresh.
func TestHubOneReadPerIntervalForEveryone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var reads atomic.Int64
		h := countingHub(time.Second, &reads, nil)
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		seen := make([]int, 50)
		for i := range seen {
			stop := h.watch()
			wg.Go(func() {
				defer stop()
				var last *state
				for {
					st, next := h.latest()
					if st != nil && st != last {
						last = st
						seen[i]++
					}
					select {
					case <-ctx.Done():
						return
					case <-next:
					}
				}
			})
		}
		for range 10 {
			wg.Go(func() {
				for ctx.Err() == nil {
					if _, err := h.fresh(ctx); err != nil && ctx.Err() == nil {
						t.Errorf("fresh: %v", err)
					}
					time.Sleep(100 * time.Millisecond)
				}
			})
		}
		time.Sleep(10*time.Second - time.Millisecond)
		synctest.Wait()
		// reads at 0s, 1s, ..., 9s
		if n := reads.Load(); n != 10 {
			t.Errorf("%d reads in 10 intervals with 50 pages and 10 API clients open, want 10", n)
		}
		cancel()
		wg.Wait()
		for i, n := range seen {
			if n != 10 {
				t.Errorf("page %d saw %d refreshes, want 10", i, n)
			}
		}
		time.Sleep(3 * time.Second) // the loop ends by itself (or the bubble panics)
		synctest.Wait()
	})
}

// TestHubIdleReadsNothing: nobody looking, no read; the loop ends within
// an interval of the last look, and the next look starts it again.
func TestHubIdleReadsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var reads atomic.Int64
		h := countingHub(time.Second, &reads, nil)
		time.Sleep(time.Minute)
		synctest.Wait()
		if n := reads.Load(); n != 0 {
			t.Fatalf("%d reads with nobody looking, want 0", n)
		}
		// one scrape: one read, which it waits for
		st, err := h.fresh(t.Context())
		if err != nil || st == nil || st.snap == nil {
			t.Fatalf("fresh: %v, %+v", err, st)
		}
		// a second within the interval: the same state, no read
		time.Sleep(500 * time.Millisecond)
		if st2, _ := h.fresh(t.Context()); st2 != st {
			t.Error("a second scrape within the interval got another snapshot")
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		if n := reads.Load(); n > 2 {
			t.Errorf("%d reads after two scrapes and a minute of nobody looking, want at most 2", n)
		}
		h.mu.Lock()
		running := h.running
		h.mu.Unlock()
		if running {
			t.Error("the refresh loop still runs a minute after the last look")
		}
		// a page opens: reads start again, and stop once it closes
		before := reads.Load()
		stop := h.watch()
		time.Sleep(5*time.Second - time.Millisecond)
		synctest.Wait()
		if n := reads.Load() - before; n != 5 {
			t.Errorf("%d reads in 5 intervals with a page open, want 5", n)
		}
		stop()
		time.Sleep(2 * time.Second)
		synctest.Wait()
		after := reads.Load()
		time.Sleep(time.Minute)
		synctest.Wait()
		if reads.Load() != after {
			t.Errorf("reads went on after the page closed: %d, then %d", after, reads.Load())
		}
	})
}

// TestHubKeepsTheLastGoodSnapshot: a failed refresh is counted and
// shown beside the last good snapshot, which is not lost.
func TestHubKeepsTheLastGoodSnapshot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var (
			reads atomic.Int64
			fail  atomic.Bool
		)
		h := countingHub(time.Second, &reads, &fail)
		good, err := h.fresh(t.Context())
		if err != nil || good.err != nil {
			t.Fatalf("first refresh: %v %v", err, good.err)
		}
		fail.Store(true)
		time.Sleep(2 * time.Second)
		bad, err := h.fresh(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if bad.err == nil || bad.snap != good.snap || bad.errors != 1 || bad.refreshes != 2 {
			t.Errorf("after a failed refresh: err %v, same snapshot %v, errors %d, refreshes %d; want an error, the last good snapshot, 1, 2",
				bad.err, bad.snap == good.snap, bad.errors, bad.refreshes)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
	})
}

// TestHubFreshEndsWithItsContext: a request whose context ends while it
// waits for a refresh returns the context's error.
func TestHubFreshEndsWithItsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		h := newHub(time.Second, 10*time.Second, quiet, func(ctx context.Context) (*dlock.Snapshot, error) {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return &dlock.Snapshot{}, nil
		}, func(*state) []byte { return nil })
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		if _, err := h.fresh(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("fresh on a stalled read: %v, want context.DeadlineExceeded", err)
		}
		close(release)
		time.Sleep(time.Minute)
		synctest.Wait()
	})
}
