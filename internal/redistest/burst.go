package redistest

import (
	"context"
	"sync"
	"testing"
	"time"
)

// Burst is what BurstWhilePaused measured.
type Burst struct {
	Slowest   time.Duration // the slowest call's time, from its start to its return
	Succeeded int           // calls that returned no error: their replies came while the server was stopped, or after their ctx ended
	// AfterResume counts the calls that returned only once the server ran
	// again: their ctx did not bound them (a count, not a time, so a
	// loaded machine does not fail it: a bound call returns long before).
	AfterResume int
}

// BurstWhilePaused stops s (SIGSTOP), makes n calls at once, each with a
// ctx of bound, and reports the slowest and how many succeeded; s is
// resumed after resume at the latest (so that a call its ctx does not
// bound ends, and the test with it), or when the calls have returned.
// A call's write may block on full socket buffers as well as its read:
// the measurement the tests of a ctx's bound on a stopped server share.
func BurstWhilePaused(t testing.TB, s *Server, n int, bound, resume time.Duration, call func(ctx context.Context, i int) error) Burst {
	t.Helper()
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		b       Burst
		wg      sync.WaitGroup
		resumed bool // guarded by mu
	)
	timer := time.AfterFunc(resume, func() {
		mu.Lock()
		resumed = true // before the server runs: a call it answers returns after this
		mu.Unlock()
		_ = s.Resume()
	})
	defer func() {
		if timer.Stop() {
			_ = s.Resume()
		}
	}()
	for i := range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), bound)
			defer cancel()
			start := time.Now()
			err := call(ctx, i)
			took := time.Since(start)
			mu.Lock()
			b.Slowest = max(b.Slowest, took)
			if err == nil {
				b.Succeeded++
			}
			if resumed {
				b.AfterResume++
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	return b
}
