package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/history"
	"github.com/dlock-go/dlock/internal/redistest"
)

// TestClusterShake is a seeded random run on a Redis Cluster while its
// topology changes: workers (each its own Client, half of them with
// WithReplicaSync, on Mutexes of their own) take a few Mutexes in turn,
// while a fault loop migrates a lock's slot to another master or fails a
// master over (CLUSTER FAILOVER). It checks that no two workers were in a
// lock's critical section at once, that fences increased, and that no
// Lock whose ctx was live returned an error. DLOCK_CLUSTER_SHAKE sets its
// length (default 3 s, 6 s under ./test.sh --full; e.g. 2m for a soak), DLOCK_CLUSTER_SHAKE_SEED its
// seed.
//
// DLOCK_CLUSTER_SHAKE_KILLS=1 adds kill -9 of a lock's master (its
// replica takes over after the node timeout; the killed node is then
// started again and rejoins as a replica), half of the time after its
// replica was stopped for 100-500 ms, so that the writes acknowledged
// meanwhile are lost with the master. A write the killed master had
// not replicated is lost: the replica-sync workers' locks must still
// never have two owners (their grants and renewals were acknowledged by
// the replica), while the others' may, as documented — their violations
// are logged, not failed, once a kill has happened. Between a kill and
// the old node's return a replica-sync grant on that shard fails with
// ErrReplicaSync (no replica acknowledges it): counted, not failed.
func TestClusterShake(t *testing.T) {
	t.Parallel()         // servers of its own, mostly waiting: beside the other such tests
	d := 3 * time.Second // 6 s under ./test.sh --full
	if redistest.Full() {
		d = 6 * time.Second
	}
	if s := os.Getenv("DLOCK_CLUSTER_SHAKE"); s != "" {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			t.Fatalf("DLOCK_CLUSTER_SHAKE=%q: %v", s, err)
		}
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("DLOCK_CLUSTER_SHAKE_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (DLOCK_CLUSTER_SHAKE_SEED), %v", seed, d)
	rng := rand.New(rand.NewPCG(seed, 0))
	ctx := context.Background()
	cl := redistest.StartClusterT(t, redistest.ClusterOptions{})
	kills := os.Getenv("DLOCK_CLUSTER_SHAKE_KILLS") != ""
	base := lockName(t)
	// names[:2] for the replica-sync workers, names[2:] for the others:
	// four workers on two locks, so that waits span the faults
	names := []string{base + "/s-a", base + "/s-b", base + "/a", base + "/b"}
	recs := make([]*history.Recorder, len(names))
	for i := range recs {
		recs[i] = &history.Recorder{}
	}
	const workers = 8
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	var killed atomic.Bool // a master was killed: unreplicated writes may be lost
	var unsynced atomic.Int64
	var stays []shakeStay     // under mu
	var windows []shakeWindow // failovers and kills, by the fault loop
	acquired := make([]int, workers)
	for w := range workers {
		var opts []dlock.Option
		first := 2 // its Mutexes: names[first:first+2]
		synced := w%2 == 1
		if synced {
			opts = append(opts, dlock.WithReplicaSync(1, time.Second))
			first = 0
		}
		c := newClient(t, clusterClient(t, cl), opts...)
		wrng := rand.New(rand.NewPCG(seed, uint64(w)+1))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				i := first + wrng.IntN(2)
				m := c.Mutex(names[i], dlock.WithTTL(time.Duration(300+wrng.IntN(700))*time.Millisecond))
				lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				call := time.Now()
				l, err := m.Lock(lctx)
				cancel()
				if err != nil && synced && killed.Load() && errors.Is(err, dlock.ErrReplicaSync) {
					unsynced.Add(1) // a shard without its replica, after a kill
					continue
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("worker %d Lock %s: %w", w, names[i], err))
					mu.Unlock()
					continue
				}
				exit := recs[i].Enter(strconv.Itoa(w), l.Fence())
				enter := time.Now()
				hold := time.Duration(wrng.IntN(8000)) * time.Microsecond
				if wrng.IntN(10) == 0 {
					hold = time.Duration(50+wrng.IntN(150)) * time.Millisecond // a queue forms behind it
				}
				time.Sleep(hold)
				if l.Err() == nil { // only a stay it still believed in counts
					exit()
					mu.Lock()
					stays = append(stays, shakeStay{i, call, enter, time.Now()})
					mu.Unlock()
				}
				acquired[w]++
				uctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				if err := l.Unlock(uctx); err != nil && l.Err() == nil && !(synced && killed.Load() && errors.Is(err, dlock.ErrReplicaSync)) {
					mu.Lock()
					errs = append(errs, fmt.Errorf("worker %d Unlock %s: %w", w, names[i], err))
					mu.Unlock()
				}
				cancel()
			}
		}()
	}
	masters, err := cl.Masters()
	if err != nil {
		t.Fatal(err)
	}
	faults := 0
	for end := time.Now().Add(d); time.Now().Before(end); faults++ {
		time.Sleep(time.Duration(300+rng.IntN(700)) * time.Millisecond)
		key := keysOf(names[rng.IntN(len(names))]).Lock
		from, err := cl.MasterOf(key)
		if err != nil {
			t.Fatal(err)
		}
		if kills && rng.IntN(4) == 0 {
			killed.Store(true)
			began := time.Now()
			// With a lost write: its replica is stopped for a while
			// first, so that the writes the master acknowledges meanwhile
			// (grants, renewals, releases) never reach it.
			var lagging *redistest.Server
			if rng.IntN(2) == 0 {
				if lagging, err = cl.ReplicaOf(from); err != nil {
					t.Fatal(err)
				}
				if err := lagging.Pause(); err != nil {
					t.Fatal(err)
				}
				time.Sleep(time.Duration(100+rng.IntN(400)) * time.Millisecond)
			}
			t.Logf("fault %d: kill -9 of %s (serving %s; writes lost: %v)", faults, from.Addr(), key, lagging != nil)
			if err := from.Kill(); err != nil {
				t.Fatal(err)
			}
			if lagging != nil {
				if err := lagging.Resume(); err != nil {
					t.Fatal(err)
				}
			}
			if err := cl.WaitFailoverAfterKill(from, 30*time.Second); err != nil {
				t.Fatal(err)
			}
			// back as a replica of its successor (its nodes.conf says who
			// it was; the cluster says it was failed over)
			if err := from.Restart(false); err != nil {
				t.Fatal(err)
			}
			if err := cl.WaitHealthy(30 * time.Second); err != nil {
				t.Fatal(err)
			}
			t.Logf("fault %d: %s is back", faults, from.Addr())
			// a lost holder's lock lingers for its TTL (1 s at most),
			// and a waiter looks its node up again for up to movedFor
			windows = append(windows, shakeWindow{began, time.Now(), 3 * time.Second})
			if masters, err = cl.Masters(); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if rng.IntN(3) == 0 {
			replica, err := cl.ReplicaOf(from)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("fault %d: CLUSTER FAILOVER of %s (serving %s)", faults, from.Addr(), key)
			began := time.Now()
			if err := cl.Failover(replica); err != nil {
				// Redis may not complete a manual failover (the replica
				// did not catch up in time, say): the harness's, not a
				// lock's, failure. Go on once the cluster is whole.
				t.Logf("fault %d: the failover did not complete: %v", faults, err)
				if err := cl.WaitHealthy(30 * time.Second); err != nil {
					t.Fatal(err)
				}
			}
			windows = append(windows, shakeWindow{began, time.Now(), 0})
			if masters, err = cl.Masters(); err != nil {
				t.Fatal(err)
			}
			continue
		}
		to := masters[rng.IntN(len(masters))]
		if to == from {
			to = masters[(slicesIndex(masters, to)+1)%len(masters)]
		}
		t.Logf("fault %d: slot of %s from %s to %s", faults, key, from.Addr(), to.Addr())
		if _, err := cl.MigrateSlot(key, to); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	for _, err := range errs {
		t.Errorf("%v", err)
	}
	total := 0
	for w, n := range acquired {
		total += n
		if n == 0 {
			t.Errorf("worker %d never got a lock", w)
		}
	}
	for i, r := range recs {
		if err := history.Check(r.Events()); err != nil {
			if i >= 2 && killed.Load() {
				t.Logf("%s (no replica sync, after a kill, as documented): %v", names[i], err)
				continue
			}
			t.Errorf("%s: %v", names[i], err)
		}
	}
	t.Logf("%d faults, %d acquisitions; %d replica-sync grants refused after a kill", faults, total, unsynced.Load())
	handOffs(t, stays, windows, d >= handOffRun)
}

func slicesIndex(ss []*redistest.Server, s *redistest.Server) int {
	for i, x := range ss {
		if x == s {
			return i
		}
	}
	return -1
}

// shakeStay is a worker's stay in lock's critical section, and when its
// Lock was called.
type shakeStay struct {
	lock              int
	call, enter, exit time.Time
}

// shakeWindow is when a failover or a kill made a node unreachable, and
// how long after it hand-offs are not counted.
type shakeWindow struct {
	from, to time.Time
	quiet    time.Duration
}

// handOffs checks how long a lock lay free while a worker waited for it:
// from a stay's exit (its Unlock began right after) to the next stay's
// entry, when that stay's Lock was called before the exit (checked when
// check is set; logged either way). Slot
// migrations come every 0.3-1 s and are not excluded: a hand-off right
// after one must be as quick as any, its waiters' wake-up channels
// having followed the slot; after a failover likewise. Hand-offs during
// a failover are not counted (the node is paused for its replica to
// catch up), nor during a kill and for 3 s after it (the slot's node is
// unreachable for seconds, and a lost holder's lock lingers for its TTL).
func handOffs(t *testing.T, stays []shakeStay, windows []shakeWindow, check bool) {
	t.Helper()
	byLock := map[int][]shakeStay{}
	for _, s := range stays {
		byLock[s.lock] = append(byLock[s.lock], s)
	}
	var gaps []time.Duration
	excluded := 0
	for _, ss := range byLock {
		slices.SortFunc(ss, func(a, b shakeStay) int { return a.enter.Compare(b.enter) })
		for k := 1; k < len(ss); k++ {
			a, b := ss[k-1], ss[k]
			if !b.call.Before(a.exit) {
				continue // nobody waited
			}
			near := false
			for _, w := range windows {
				if a.exit.Before(w.to.Add(w.quiet)) && !w.from.After(b.enter) {
					near = true
				}
			}
			if near {
				excluded++
				continue
			}
			gaps = append(gaps, b.enter.Sub(a.exit))
		}
	}
	slices.Sort(gaps)
	if len(gaps) == 0 {
		t.Logf("hand-offs: none away from failovers and kills (%d during them)", excluded)
		return
	}
	at := func(q float64) time.Duration { return gaps[int(q*float64(len(gaps)-1))].Round(time.Microsecond) }
	slow := len(gaps) - sort.Search(len(gaps), func(i int) bool { return gaps[i] > slowHandOff })
	t.Logf("hand-offs away from failovers and kills: %d (%d during them); median %v, p99 %v, p99.9 %v, max %v; %d over %v",
		len(gaps), excluded, at(0.5), at(0.99), at(0.999), gaps[len(gaps)-1].Round(time.Microsecond), slow, slowHandOff)
	// A count, not a time: a hand-off that waited for a poll (a wake-up
	// lost with a moved slot, the bug this test was written for, made
	// every hand-off after a migration wait ~1 s) is slow; one in 200 is
	// allowed (a subscription that reached the old node as the slot left
	// is rechecked at its first poll, 256 ms). With the wake-ups' move
	// turned off (hub.moved), a 20 s run had 11 of 1039 hand-offs slow;
	// as it is, 2 of 1930.
	if check && slow > len(gaps)/200+1 {
		t.Errorf("%d of %d hand-offs took over %v: wake-ups are lost while the cluster changes", slow, len(gaps), slowHandOff)
	}
}

// handOffRun is the shortest run whose hand-offs are checked (in one of
// 6 s inside ./test.sh, beside the torture test on 2 cores, a few
// hundred hand-offs had a median of 13 ms and 3 over 300 ms: too few,
// too loaded, to tell a lost wake-up from a slow machine); shorter ones
// are only logged.
const handOffRun = 20 * time.Second

// slowHandOff is a hand-off that no wake-up served: longer than a first
// poll (256 ms).
const slowHandOff = 300 * time.Millisecond
