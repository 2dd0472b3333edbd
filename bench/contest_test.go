package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// contest is one run of goroutines of one process taking turns at a lock.
// Each loops: Lock (blocking), a tiny critical section, Unlock, and at once
// again, until stop is called; Locks still waiting then are cancelled.
type contest struct {
	*waits
	be  *backend
	key string
	g   int
}

// contention is the outcome of a contest.
type contention struct {
	acquisitions int64
	switches     int64 // acquisitions by another goroutine than the last
	overlaps     int64 // critical sections entered while one was running
	// unserved are the waits of Locks that stop cut short, up to the
	// moment they returned: lower bounds of waits that never ended.
	unserved []time.Duration
}

func newContest(base context.Context, be *backend, key string, g int) *contest {
	return &contest{waits: newWaits(base), be: be, key: key, g: g}
}

// acquisition is one turn at the lock.
type acquisition struct {
	wait  time.Duration // from calling Lock to its return, across restarts
	at    time.Time     // when Lock returned
	owner int           // the goroutine: 0 <= owner < g
}

// run starts the goroutines and gives each its handle; then it calls begin
// and lets them go. After every acquisition, once the lock is released
// again, the acquiring goroutine passes it to acquired. run returns when
// every goroutine has finished, after stop or at the first error.
func (c *contest) run(begin func(), acquired func(acquisition)) (contention, error) {
	var (
		acquisitions, switches, overlaps atomic.Int64
		inside                           atomic.Int32
		last                             atomic.Int64
		errOnce                          sync.Once
		firstErr                         error
		wg                               sync.WaitGroup
	)
	fail := func(err error) {
		errOnce.Do(func() { firstErr = err })
		c.stop()
	}
	// Unlock must not fail because the run stopped meanwhile.
	unlockCtx, cancel := context.WithTimeout(context.WithoutCancel(c.base), waitTimeout)
	defer cancel()
	start := make(chan struct{})
	unserved := make([]time.Duration, c.g)
	last.Store(-1)
	for i := range c.g {
		m := c.be.newMutex(c.key)
		id := int64(i)
		wg.Go(func() {
			<-start
			for !c.isStopped() {
				t0 := time.Now()
				if err := c.lock(m); errors.Is(err, errStopped) {
					unserved[i] = time.Since(t0)
					return
				} else if err != nil {
					fail(fmt.Errorf("lock: %w", err))
					return
				}
				at := time.Now()
				// The critical section: check that it is ours alone and
				// note who had the lock before.
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				if last.Swap(id) != id {
					switches.Add(1)
				}
				acquisitions.Add(1)
				inside.Add(-1)
				if err := m.Unlock(unlockCtx); err != nil {
					fail(fmt.Errorf("unlock: %w", err))
					return
				}
				acquired(acquisition{wait: at.Sub(t0), at: at, owner: i})
			}
		})
	}
	begin()
	close(start)
	wg.Wait()
	res := contention{acquisitions: acquisitions.Load(), switches: switches.Load(), overlaps: overlaps.Load()}
	for _, d := range unserved {
		if d > 0 {
			res.unserved = append(res.unserved, d)
		}
	}
	if firstErr == nil && res.overlaps > 0 {
		firstErr = fmt.Errorf("%d critical sections overlapped", res.overlaps)
	}
	return res, firstErr
}
