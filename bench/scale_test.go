package bench

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

var (
	scaleFlag  = flag.Bool("scale", false, "TestScale: hold many leases on one Client and count the lost ones")
	scaleN     = flag.Int("scale.n", 100_000, "TestScale: leases held at once")
	scaleTTL   = flag.Duration("scale.ttl", 3*time.Second, "TestScale: their TTL (renewed by the watchdog)")
	scaleHold  = flag.Duration("scale.hold", 30*time.Second, "TestScale: how long they are held")
	scaleConns = flag.Int("scale.acquirers", 64, "TestScale: goroutines acquiring them")
)

// TestScale holds -scale.n leases of distinct locks on one Client, renewed
// by its watchdog, for -scale.hold, and reports how many were lost, the
// acquire rate (and that of the first tenth, for comparison) and the heap
// per lease. It is a measurement, not a check: it fails only if a lease
// was lost.
//
//	go test -run '^TestScale$' -scale -scale.n 100000 -scale.ttl 3s -timeout 30m .
func TestScale(t *testing.T) {
	if !*scaleFlag {
		t.Skip("run with -scale")
	}
	s, err := redistest.Start(redistest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), PoolSize: *scaleConns})
	defer rdb.Close()
	c, err := dlock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)

	ctx := context.Background()
	n := *scaleN
	leases := make([]*dlock.Lease, n)
	var next atomic.Int64
	var tenth time.Duration
	var tenthOnce sync.Once
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, *scaleConns)
	for range *scaleConns {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				l, err := c.Mutex(fmt.Sprintf("scale-%d", i), dlock.WithTTL(*scaleTTL)).TryLock(ctx)
				if err != nil {
					errs <- err
					return
				}
				leases[i] = l
				if i == n/10 {
					tenthOnce.Do(func() { tenth = time.Since(start) })
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	took := time.Since(start)
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)

	time.Sleep(*scaleHold)
	lost := 0
	for _, l := range leases {
		if l.Err() != nil {
			lost++
		}
	}
	rate := float64(n) / took.Seconds()
	first := float64(n/10) / tenth.Seconds()
	t.Logf("%d leases, TTL %v, held %v: %d lost", n, *scaleTTL, *scaleHold, lost)
	t.Logf("acquired in %v: %.0f/s overall, %.0f/s for the first tenth (ratio %.2f)", took.Round(time.Millisecond), rate, first, rate/first)
	t.Logf("heap per lease: %.0f B", float64(after.HeapAlloc-before.HeapAlloc)/float64(n))
	if lost > 0 {
		t.Errorf("%d of %d leases lost", lost, n)
	}
}
