package dlock_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/history"
	"github.com/dlock-go/dlock/internal/redistest"
)

// TestClusterShake is a seeded random run on a Redis Cluster while its
// topology changes: workers (each its own Client, half of them with
// WithReplicaSync) take a few Mutexes in turn, while a fault loop
// migrates a lock's slot to another master or fails a master over
// (CLUSTER FAILOVER). It checks that no two workers were in a lock's
// critical section at once, that fences increased, and that no Lock
// whose ctx was live returned an error. DLOCK_CLUSTER_SHAKE sets its
// length (default 6 s; e.g. 2m for a soak), DLOCK_CLUSTER_SHAKE_SEED its
// seed.
func TestClusterShake(t *testing.T) {
	d := 6 * time.Second
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
	base := lockName(t)
	names := []string{base + "/a", base + "/b", base + "/c"}
	recs := make([]*history.Recorder, len(names))
	for i := range recs {
		recs[i] = &history.Recorder{}
	}
	const workers = 6
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	acquired := make([]int, workers)
	for w := range workers {
		var opts []dlock.Option
		if w%2 == 1 {
			opts = append(opts, dlock.WithReplicaSync(1, time.Second))
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
				i := wrng.IntN(len(names))
				m := c.Mutex(names[i], dlock.WithTTL(time.Duration(300+wrng.IntN(700))*time.Millisecond))
				lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				l, err := m.Lock(lctx)
				cancel()
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("worker %d Lock %s: %w", w, names[i], err))
					mu.Unlock()
					continue
				}
				exit := recs[i].Enter(strconv.Itoa(w), l.Fence())
				time.Sleep(time.Duration(wrng.IntN(2000)) * time.Microsecond)
				if l.Err() == nil { // only a stay it still believed in counts
					exit()
				}
				acquired[w]++
				uctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				if err := l.Unlock(uctx); err != nil && l.Err() == nil {
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
		if rng.IntN(3) == 0 {
			replica, err := cl.ReplicaOf(from)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("fault %d: CLUSTER FAILOVER of %s (serving %s)", faults, from.Addr(), key)
			if err := cl.Failover(replica); err != nil {
				// Redis may not complete a manual failover (the replica
				// did not catch up in time, say): the harness's, not a
				// lock's, failure. Go on once the cluster is whole.
				t.Logf("fault %d: the failover did not complete: %v", faults, err)
				if err := cl.WaitHealthy(30 * time.Second); err != nil {
					t.Fatal(err)
				}
			}
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
			t.Errorf("%s: %v", names[i], err)
		}
	}
	t.Logf("%d faults, %d acquisitions", faults, total)
}

func slicesIndex(ss []*redistest.Server, s *redistest.Server) int {
	for i, x := range ss {
		if x == s {
			return i
		}
	}
	return -1
}
