package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
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
	// readShare is the probability that a turn is a read, taken with the
	// backend's read handle (newReader, or newMutex if it has none);
	// 0 makes every turn a write. Each goroutine draws from a generator
	// seeded with its number, so a run's mix is the same for every
	// implementation.
	readShare float64
}

// contention is the outcome of a contest.
type contention struct {
	acquisitions int64
	switches     int64 // acquisitions by another goroutine than the last
	// overlaps counts critical sections entered while they should not
	// have been: a write while a read or more than the backend's capacity
	// of writes ran, a read while a write ran.
	overlaps int64
	// unserved are the waits of writes that stop cut short, up to the
	// moment they returned: lower bounds of waits that never ended;
	// unservedReads the same for reads.
	unserved, unservedReads []time.Duration
}

func newContest(base context.Context, be *backend, key string, g int) *contest {
	return &contest{waits: newWaits(base), be: be, key: key, g: g}
}

// acquisition is one turn at the lock.
type acquisition struct {
	wait  time.Duration // from calling Lock to its return, across restarts
	at    time.Time     // when Lock returned
	owner int           // the goroutine: 0 <= owner < g
	read  bool          // a read turn (see contest.readShare)
}

// run starts the goroutines and gives each its handle; then it calls begin
// and lets them go. After every acquisition, once the lock is released
// again, the acquiring goroutine passes it to acquired. run returns when
// every goroutine has finished, after stop or at the first error.
func (c *contest) run(begin func(), acquired func(acquisition)) (contention, error) {
	var (
		acquisitions, switches, overlaps atomic.Int64
		readers, writers                 atomic.Int32
		last                             atomic.Int64
		errOnce                          sync.Once
		firstErr                         error
		wg                               sync.WaitGroup
	)
	capacity := int32(max(c.be.capacity, 1))
	fail := func(err error) {
		errOnce.Do(func() { firstErr = err })
		c.stop()
	}
	// Unlock must not fail because the run stopped meanwhile.
	unlockCtx, cancel := context.WithTimeout(context.WithoutCancel(c.base), waitTimeout)
	defer cancel()
	start := make(chan struct{})
	unserved := make([]time.Duration, c.g)
	unservedRead := make([]bool, c.g)
	last.Store(-1)
	for i := range c.g {
		writer := c.be.newMutex(c.key)
		reader := writer
		if c.readShare > 0 && c.be.newReader != nil {
			reader = c.be.newReader(c.key)
		}
		rng := rand.New(rand.NewPCG(uint64(i), 0x5eed))
		id := int64(i)
		wg.Go(func() {
			<-start
			for !c.isStopped() {
				read := c.readShare > 0 && rng.Float64() < c.readShare
				m := writer
				if read {
					m = reader
				}
				t0 := time.Now()
				if err := c.lock(m); errors.Is(err, errStopped) {
					unserved[i], unservedRead[i] = time.Since(t0), read
					return
				} else if err != nil {
					fail(fmt.Errorf("lock: %w", err))
					return
				}
				at := time.Now()
				// The critical section: check that it is shared only as
				// it may be (atomics are sequentially consistent: of a
				// read and a write that overlap, at least one sees the
				// other) and note who had the lock before.
				if read {
					readers.Add(1)
					if writers.Load() != 0 {
						overlaps.Add(1)
					}
				} else if writers.Add(1) > capacity || readers.Load() != 0 {
					overlaps.Add(1)
				}
				if last.Swap(id) != id {
					switches.Add(1)
				}
				acquisitions.Add(1)
				if read {
					readers.Add(-1)
				} else {
					writers.Add(-1)
				}
				if err := m.Unlock(unlockCtx); err != nil {
					fail(fmt.Errorf("unlock: %w", err))
					return
				}
				acquired(acquisition{wait: at.Sub(t0), at: at, owner: i, read: read})
			}
		})
	}
	begin()
	close(start)
	wg.Wait()
	res := contention{acquisitions: acquisitions.Load(), switches: switches.Load(), overlaps: overlaps.Load()}
	for i, d := range unserved {
		switch {
		case d <= 0:
		case unservedRead[i]:
			res.unservedReads = append(res.unservedReads, d)
		default:
			res.unserved = append(res.unserved, d)
		}
	}
	if firstErr == nil && res.overlaps > 0 {
		firstErr = fmt.Errorf("%d critical sections overlapped", res.overlaps)
	}
	return res, firstErr
}
