package bench

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
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
			cs = append(cs, benchCase{"Uncontended", fmt.Sprintf("g%d", g), name, uncontended(shared(name), g)})
		}
	}
	return cs
}

// uncontended returns the benchmark of the implementation that o opens,
// with g goroutines. A Lock that has not returned after stallAfter (a lost
// wake-up: the lock is free) is cancelled and called again, and counted in
// the stalls metric.
func uncontended(o opener, g int) func(*testing.B) {
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
		cycle := func(m mutex, slot *atomic.Int64) error {
			slot.Store(time.Now().UnixNano())
			err := w.lock(m)
			slot.Store(0)
			if err != nil {
				return fmt.Errorf("lock: %w", err)
			}
			if err := m.Unlock(ctx); err != nil {
				return fmt.Errorf("unlock: %w", err)
			}
			return nil
		}

		if g == 1 {
			m := be.newMutex(label)
			for b.Loop() {
				if err := cycle(m, &since[0]); err != nil {
					fatalf(b, "%s: %v", name, err)
				}
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
					if err := cycle(m, &since[id%g]); err != nil {
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
