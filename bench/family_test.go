package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// The rest of dlock's family under contention, measured with the loop of
// BenchmarkContended: FairMutex, RWMutex with mostly reads, Semaphore with
// a few permits. None of the anchors has any of them; FairMutex is
// compared with the Mutexes of BenchmarkContended, the others with dlock's
// own Mutex doing the same work.

// BenchmarkFair is BenchmarkContended (g16, g64, procs4xg4) for dlock's
// FairMutex: waiters are served in arrival order, so every wait should be
// about N handoffs long, N being the number of contenders. The report
// compares it with the BenchmarkContended rows of the same configuration.
func BenchmarkFair(b *testing.B) { runCases(b, fairCases()) }

func fairCases() []benchCase {
	var cs []benchCase
	for _, g := range contendedGoroutines {
		cs = append(cs, benchCase{"Fair", fmt.Sprintf("g%d", g), "dlock", contended(shared("dlock-fair"), g)})
	}
	return append(cs, benchCase{"Fair", fmt.Sprintf("procs%dxg%d", workerProcs, workerGoroutines),
		"dlock", contendedProcs("dlock-fair", workerProcs, workerGoroutines)})
}

// dlockFairMutexes makes be's handles FairMutexes of c.
func dlockFairMutexes(c *dlock.Client, be *backend) {
	be.newMutex = func(key string) mutex {
		return &dlockMutex{m: c.FairMutex(key, dlock.WithTTL(lockTTL))}
	}
}

// The run of BenchmarkRWMutex: rwGoroutines goroutines on one key, each
// turn a read with probability rwReadShare, else a write.
const (
	rwGoroutines = 32
	rwReadShare  = 0.9
)

// BenchmarkRWMutex measures a read-mostly load: rwGoroutines goroutines
// sharing one client loop on one key, each turn a read (RLock, the tiny
// critical section, unlock) with probability rwReadShare, else a write
// (Lock …). dlock-rwmutex is dlock's RWMutex; dlock-mutex, the baseline,
// runs the same turns on a Mutex, every one exclusive. b.N is the number of
// turns; metrics: ops/s (turns per second), read-wait and write-wait
// p50/p99/max (from calling the lock to its return, with the waits cut
// short at the end as in BenchmarkContended), read-share (the reads'
// share of the b.N turns), stalls.
func BenchmarkRWMutex(b *testing.B) { runCases(b, rwCases()) }

func rwCases() []benchCase {
	v := fmt.Sprintf("g%dr%.0f", rwGoroutines, rwReadShare*100)
	return []benchCase{
		{"RWMutex", v, "dlock-rwmutex", mixed(shared("dlock-rwmutex"), rwGoroutines, rwReadShare)},
		{"RWMutex", v, "dlock-mutex", mixed(shared("dlock"), rwGoroutines, rwReadShare)},
	}
}

// dlockRWMutexes makes be's handles the two sides of RWMutexes of c.
func dlockRWMutexes(c *dlock.Client, be *backend) {
	be.newMutex = func(key string) mutex {
		return &dlockMutex{m: c.RWMutex(key, dlock.WithTTL(lockTTL))}
	}
	be.newReader = func(key string) mutex {
		return &dlockMutex{m: c.RWMutex(key, dlock.WithTTL(lockTTL)).RLocker()}
	}
}

// mixed returns the benchmark of a contest of g goroutines with the given
// share of reads, on the implementation that o opens.
func mixed(o opener, g int, readShare float64) func(*testing.B) {
	return func(b *testing.B) {
		be := o(b)
		turns, res, stalls := contend(b, be, g, readShare)
		var reads, writes []time.Duration
		for _, a := range turns {
			if a.read {
				reads = append(reads, a.wait)
			} else {
				writes = append(writes, a.wait)
			}
		}
		b.ReportMetric(perSecond(b, b.N), "ops/s")
		b.ReportMetric(float64(len(reads))/float64(max(len(turns), 1)), "read-share")
		summarize(append(reads, res.unservedReads...)).report(b, "read-wait")
		summarize(append(writes, res.unserved...)).report(b, "write-wait")
		b.ReportMetric(float64(stalls), "stalls")
	}
}

// The run of BenchmarkSemaphore: semGoroutines goroutines contend for
// semPermits permits.
const (
	semGoroutines = 32
	semPermits    = 4
)

// BenchmarkSemaphore is BenchmarkContended with semGoroutines goroutines
// for a dlock Semaphore of semPermits permits (each turn acquires one),
// and, as the baseline, for a dlock Mutex (one permit, so to speak). The
// critical section checks that no more than the permits are ever held.
// Metrics as for BenchmarkContended; handoffs mean little here.
func BenchmarkSemaphore(b *testing.B) { runCases(b, semCases()) }

func semCases() []benchCase {
	v := fmt.Sprintf("g%dn%d", semGoroutines, semPermits)
	return []benchCase{
		{"Semaphore", v, "dlock-semaphore", contended(shared("dlock-semaphore"), semGoroutines)},
		{"Semaphore", v, "dlock-mutex", contended(shared("dlock"), semGoroutines)},
	}
}

// dlockSemaphores makes be's handles one permit each of Semaphores of c
// with semPermits permits.
func dlockSemaphores(c *dlock.Client, be *backend) {
	be.capacity = semPermits
	be.newMutex = func(key string) mutex {
		return &semMutex{s: c.Semaphore(key, semPermits, dlock.WithTTL(lockTTL))}
	}
}

// semMutex takes one permit of a Semaphore.
type semMutex struct {
	s *dlock.Semaphore
	l *dlock.Lease
}

func (m *semMutex) Lock(ctx context.Context) (err error) {
	m.l, err = m.s.Acquire(ctx, 1)
	return err
}

func (m *semMutex) Unlock(ctx context.Context) error { return m.l.Unlock(ctx) }
