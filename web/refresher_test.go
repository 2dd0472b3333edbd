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

// countingRefresher is a refresher whose reads are counted and instant, in a
// synctest bubble's virtual time.
func countingRefresher(interval time.Duration, reads *atomic.Int64, fail *atomic.Bool) *refresher {
	return newRefresher(interval, 10*time.Second, quiet, func(context.Context) (*dlock.Snapshot, error) {
		reads.Add(1)
		if fail != nil && fail.Load() {
			return nil, errors.New("redis is down")
		}
		return &dlock.Snapshot{At: time.Now()}, nil
	}, func(*state) []byte { return []byte("{}") })
}

// TestRefresherOneReadPerIntervalForEveryone: fifty open pages and ten clients
// asking the API or the metrics ten times an interval cost one Snapshot
// an interval, as one page does; every page sees every refresh.
func TestRefresherOneReadPerIntervalForEveryone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var reads atomic.Int64
		h := countingRefresher(time.Second, &reads, nil)
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		seen := make([]int, 50)
		for i := range seen {
			wg.Go(func() {
				var last *state
				_ = h.follow(ctx, func(st *state) error {
					if st != last {
						last = st
						seen[i]++
					}
					return nil
				})
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
	})
}

// TestRefresherIdleReadsNothing: nobody looking, no read; a scrape reads once
// and a second within the interval reads nothing; a page reads once an
// interval while it is open, and nothing after.
func TestRefresherIdleReadsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var reads atomic.Int64
		h := countingRefresher(time.Second, &reads, nil)
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
		// a page opens: reads start again, and stop once it closes
		before := reads.Load()
		ctx, closePage := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = h.follow(ctx, func(*state) error { return nil })
		}()
		time.Sleep(5*time.Second - time.Millisecond)
		synctest.Wait()
		if n := reads.Load() - before; n != 5 {
			t.Errorf("%d reads in 5 intervals with a page open, want 5", n)
		}
		closePage()
		<-done
		after := reads.Load()
		time.Sleep(time.Minute)
		synctest.Wait()
		if reads.Load() != after {
			t.Errorf("reads went on after the page closed: %d, then %d", after, reads.Load())
		}
	})
}

// TestRefresherKeepsTheLastGoodSnapshot: a failed refresh is counted and
// shown beside the last good snapshot, which is not lost.
func TestRefresherKeepsTheLastGoodSnapshot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var (
			reads atomic.Int64
			fail  atomic.Bool
		)
		h := countingRefresher(time.Second, &reads, &fail)
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
	})
}

// TestRefresherFreshEndsWithItsContext: a request that waits for another's
// read returns when its context ends; the read goes on for the others,
// bounded by the timeout, and its state is kept.
func TestRefresherFreshEndsWithItsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		h := newRefresher(time.Second, 10*time.Second, quiet, func(ctx context.Context) (*dlock.Snapshot, error) {
			select {
			case <-release:
				return &dlock.Snapshot{}, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}, func(*state) []byte { return nil })
		first := make(chan *state)
		go func() {
			st, _ := h.fresh(t.Context())
			first <- st
		}()
		synctest.Wait() // the first request reads, stalled
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		if _, err := h.fresh(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("fresh waiting on a stalled read: %v, want context.DeadlineExceeded", err)
		}
		close(release)
		if st := <-first; st == nil || st.err != nil {
			t.Errorf("the stalled read's state: %+v", st)
		}
		// a read that stalls past the timeout ends with an error
		h2 := newRefresher(time.Second, 3*time.Second, quiet, func(ctx context.Context) (*dlock.Snapshot, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		}, func(*state) []byte { return nil })
		began := time.Now()
		st, err := h2.fresh(t.Context())
		if err != nil || !errors.Is(st.err, context.DeadlineExceeded) || time.Since(began) != 3*time.Second {
			t.Errorf("a stalled read: %v, %v after %v; want its timeout's error after 3s", err, st.err, time.Since(began))
		}
	})
}
