package bench

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// contendedGoroutines are the goroutine counts of the one-process runs of
// BenchmarkContended.
var contendedGoroutines = []int{16, 64}

// BenchmarkContended measures goroutines taking turns at one lock. Each
// loops: Lock (blocking), a tiny critical section, Unlock, and at once
// Lock again. The g16 and g64 runs share one client per implementation in
// this process; the procs4xg4 run spreads 16 goroutines over 4 worker
// processes (this test binary, re-executed), each with its own client.
//
// b.N is the number of acquisitions: the run stops when the b.N-th one is
// released, and Locks still waiting then are cancelled. Metrics:
//
//   - acq/s: acquisitions per second;
//   - handoffs/s: acquisitions per second that went to another goroutine
//     than the previous one, that is, the lock changing hands; a
//     goroutine that takes the lock straight back after its Unlock while
//     others wait makes acquisitions but no handoffs;
//   - wait-p50/p99/max-ns: the time from calling Lock to its return, over
//     the b.N acquisitions and the waits cut short at the end (counted up
//     to that moment, so a starved goroutine shows);
//   - stalls: how often no acquisition happened for stallAfter and every
//     waiting Lock was cancelled and called again (0 for a working lock).
func BenchmarkContended(b *testing.B) { runCases(b, contendedCases()) }

func contendedCases() []benchCase {
	var cs []benchCase
	for _, g := range contendedGoroutines {
		for _, name := range backendNames {
			cs = append(cs, benchCase{"Contended", fmt.Sprintf("g%d", g), name, contended(shared(name), g)})
		}
	}
	for _, name := range backendNames {
		cs = append(cs, benchCase{"Contended", fmt.Sprintf("procs%dxg%d", workerProcs, workerGoroutines),
			name, contendedProcs(name, workerProcs, workerGoroutines)})
	}
	return cs
}

// contended returns the one-process benchmark of the implementation that
// o opens, with g goroutines.
func contended(o opener, g int) func(*testing.B) {
	return func(b *testing.B) {
		be := o(b)
		turns, res, stalls := contend(b, be, g, 0)
		waits := make([]time.Duration, len(turns))
		for k, a := range turns {
			waits[k] = a.wait
		}
		slices.SortFunc(turns, func(x, y acquisition) int { return x.at.Compare(y.at) })
		owners := make([]int, len(turns))
		for k, a := range turns {
			owners[k] = a.owner
		}
		// Switches are counted over every acquisition, a few more than b.N.
		share := float64(res.switches) / float64(res.acquisitions)
		reportContention(b, waits, res.unserved, share, inTurn(owners, g), stalls)
	}
}

// contend runs a contest of g goroutines of this process on a key of its
// own, with the given share of reads, until the b.N-th acquisition has
// been released, and returns the b.N acquisitions, the contest's outcome
// and how many stalls there were. The timer runs from the start of the
// goroutines to that release.
func contend(b *testing.B, be *backend, g int, readShare float64) ([]acquisition, contention, int64) {
	warmUp(b, be, g)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()

	c := newContest(ctx, be, newKey("contended"), g)
	c.readShare = readShare
	turns := make([]acquisition, b.N)
	var count, progress atomic.Int64
	progress.Store(time.Now().UnixNano())
	done := make(chan struct{})
	stalls := stallWatch(&progress, done, c.unstick)
	res, err := c.run(b.ResetTimer, func(a acquisition) {
		progress.Store(a.at.UnixNano())
		k := count.Add(1)
		if k <= int64(b.N) {
			turns[k-1] = a
		}
		if k == int64(b.N) {
			b.StopTimer()
			c.stop()
		}
	})
	close(done)
	if err != nil {
		fatalf(b, "%s: %v", be.name, err)
	}
	return turns, res, stalls()
}

// reportContention reports the metrics of a contended run: waits of the
// b.N acquisitions, waits cut short at the end, the share of acquisitions
// that were handoffs, the share that came in turn (see inTurn), and the
// stalls.
func reportContention(b *testing.B, waits, unserved []time.Duration, handoffShare, turnShare float64, stalls int64) {
	acq := perSecond(b, b.N)
	b.ReportMetric(acq, "acq/s")
	b.ReportMetric(acq*handoffShare, "handoffs/s")
	b.ReportMetric(turnShare, "in-turn")
	summarize(append(waits, unserved...)).report(b, "wait")
	b.ReportMetric(float64(stalls), "stalls")
}

// inTurn returns the share of acquisitions, by contenders that had
// acquired before, that came exactly when a round robin of n contenders
// would have given them: after n-1 acquisitions by the others since their
// previous one. owners lists who acquired, in the order of the
// acquisitions. A lock granted in arrival order, with every contender
// asking again as soon as it has released, scores 1 (less a little when
// two acquisitions' timestamps come out in the wrong order); a lock that
// a releaser takes straight back scores near 0.
func inTurn[T comparable](owners []T, n int) float64 {
	last := make(map[T]int)
	again, inTurn := 0, 0
	for k, o := range owners {
		if p, ok := last[o]; ok {
			again++
			if k-p-1 == n-1 {
				inTurn++
			}
		}
		last[o] = k
	}
	if again == 0 {
		return 0
	}
	return float64(inTurn) / float64(again)
}

func TestInTurn(t *testing.T) {
	for _, tc := range []struct {
		name   string
		owners []int
		n      int
		want   float64
	}{
		{"empty", nil, 3, 0},
		{"round robin", []int{0, 1, 2, 0, 1, 2, 0}, 3, 1},
		{"taken straight back", []int{0, 0, 0, 1, 1}, 2, 0},
		{"one swap", []int{0, 1, 2, 0, 2, 1}, 3, 1.0 / 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := inTurn(tc.owners, tc.n); got != tc.want {
				t.Errorf("inTurn(%v, %d) = %v, want %v", tc.owners, tc.n, got, tc.want)
			}
		})
	}
}
