package bench

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// uncontendedGoroutines are the parallelisms of BenchmarkUncontended.
var uncontendedGoroutines = []int{1, 16, 64}

// BenchmarkUncontended measures Lock+Unlock of a free lock: each goroutine
// has a key of its own, so nobody ever waits. ns/op is the wall time per
// Lock+Unlock pair across all goroutines (with one goroutine, its latency);
// ops/s is the pairs completed per second; stalls counts Locks of a free
// lock that had not returned after stallAfter (0 for a working lock).
func BenchmarkUncontended(b *testing.B) { runCases(b, uncontendedCases()) }

func uncontendedCases() []benchCase {
	var cs []benchCase
	for _, g := range uncontendedGoroutines {
		for _, name := range backendNames {
			cs = append(cs, benchCase{"Uncontended", fmt.Sprintf("g%d", g), name, uncontended(shared(name), g, serverAddr)})
		}
	}
	return cs
}

// uncontended returns the benchmark of the implementation that o opens,
// with g goroutines. A Lock that has not returned after stallAfter (a lost
// wake-up: the lock is free) is cancelled and called again, and counted in
// the stalls metric. With one goroutine and ping set (the address of the
// implementation's one server), it also reports the median Lock latency
// and, measured right after on a client of its own, the median PING's.
func uncontended(o opener, g int, ping func(*testing.B) string) func(*testing.B) {
	return func(b *testing.B) {
		be := o(b)
		name := be.name
		label := newKey("uncontended")
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		warmUp(b, be, g)

		w := newWaits(ctx)
		since := make([]atomic.Int64, g)
		done := make(chan struct{})
		stalls := longWaitWatch(since, done, w.unstick)
		defer close(done)
		// cycle takes m and releases it; it returns how long the Lock took.
		cycle := func(m mutex, slot *atomic.Int64) (time.Duration, error) {
			start := time.Now()
			slot.Store(start.UnixNano())
			err := w.lock(m)
			took := time.Since(start)
			slot.Store(0)
			if err != nil {
				return took, fmt.Errorf("lock: %w", err)
			}
			if err := m.Unlock(ctx); err != nil {
				return took, fmt.Errorf("unlock: %w", err)
			}
			return took, nil
		}

		if g == 1 {
			m := be.newMutex(label)
			var lat []time.Duration
			for b.Loop() {
				took, err := cycle(m, &since[0])
				if err != nil {
					fatalf(b, "%s: %v", name, err)
				}
				if ping != nil {
					lat = append(lat, took)
				}
			}
			if ping != nil {
				b.StopTimer()
				b.ReportMetric(float64(summarize(lat).p50.Nanoseconds()), "lock-p50-ns")
				b.ReportMetric(float64(pingMedian(b, ping(b), len(lat)).Nanoseconds()), "ping-p50-ns")
			}
		} else {
			var ids atomic.Int64
			// RunParallel starts parallelism × GOMAXPROCS goroutines.
			procs := runtime.GOMAXPROCS(0)
			b.SetParallelism((g + procs - 1) / procs)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				id := int(ids.Add(1)) - 1
				m := be.newMutex(fmt.Sprintf("%s:%d", label, id))
				for pb.Next() {
					if _, err := cycle(m, &since[id%g]); err != nil {
						errorf(b, "%s: %v", name, err)
						return
					}
				}
			})
		}
		b.ReportMetric(perSecond(b, b.N), "ops/s")
		b.ReportMetric(float64(stalls()), "stalls")
	}
}

// lockUnlock takes m and releases it at once.
func lockUnlock(ctx context.Context, m mutex) error {
	if err := m.Lock(ctx); err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	if err := m.Unlock(ctx); err != nil {
		return fmt.Errorf("unlock: %w", err)
	}
	return nil
}

// pingMedian is the median of n back-to-back PINGs (at most 5000) to the
// server at addr, on a client of its own: the round trip that a Lock of
// one round trip cannot beat.
func pingMedian(b *testing.B, addr string, n int) time.Duration {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	ctx := context.Background()
	n = min(max(n, 100), 5000)
	ds := make([]time.Duration, 0, n)
	for i := range n + 10 {
		t0 := time.Now()
		if err := rdb.Ping(ctx).Err(); err != nil {
			fatalf(b, "ping: %v", err)
		}
		if i >= 10 { // the first ones dial and warm up
			ds = append(ds, time.Since(t0))
		}
	}
	return summarize(ds).p50
}
