package bench

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
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
	scaleHeap  = flag.String("scale.heapprofile", "", "TestScale: write a heap profile of the allocations still live once the leases are acquired to this file")
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
	if *scaleHeap != "" {
		runtime.MemProfileRate = 4096 // a sample every 4 KiB: close enough, and not slow
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
	if *scaleHeap != "" {
		f, err := os.Create(*scaleHeap)
		if err != nil {
			t.Fatal(err)
		}
		if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}

	// The server's work while the leases are only held and renewed:
	// INFO cpu and commandstats before and after the hold.
	cpu0, calls0, usec0, inner0 := scaleServerWork(t, rdb)
	held := time.Now()
	time.Sleep(*scaleHold)
	cpu1, calls1, usec1, inner1 := scaleServerWork(t, rdb)
	heldFor := time.Since(held).Seconds()
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
	t.Logf("while held: server CPU %.0f%% of a core, %.0f script calls/s (%.0f per lease per TTL), %.1f us each",
		100*(cpu1-cpu0)/heldFor, float64(calls1-calls0)/heldFor,
		float64(calls1-calls0)/heldFor/float64(n)*scaleTTL.Seconds(), float64(usec1-usec0)/float64(max(calls1-calls0, 1)))
	// Each renewal reads its hold once (renew.lua's GET), and nothing else
	// runs while the leases are only held: the GETs count the renewals.
	if renewals := inner1["get"][0] - inner0["get"][0]; renewals > 0 {
		t.Logf("  %.0f renewals/s (%.2f per lease per TTL), server CPU %.2f us per renewal",
			float64(renewals)/heldFor, float64(renewals)/heldFor/float64(n)*scaleTTL.Seconds(), 1e6*(cpu1-cpu0)/float64(renewals))
	}
	for _, name := range slices.Sorted(maps.Keys(inner1)) {
		c := inner1[name]
		c[0] -= inner0[name][0]
		c[1] -= inner0[name][1]
		if c[0] > 0 && name != "info" {
			t.Logf("  %s: %.0f/s, %.2f us each", name, float64(c[0])/heldFor, float64(c[1])/float64(c[0]))
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d leases lost", lost, n)
	}

	// Release them all, as many goroutines as acquired them.
	next.Store(0)
	start = time.Now()
	for range *scaleConns {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				_ = leases[i].Unlock(ctx)
			}
		})
	}
	wg.Wait()
	t.Logf("released in %v", time.Since(start).Round(time.Millisecond))
}

// scaleServerWork reads the server's CPU seconds (user and system) and its
// script calls (EVALSHA and EVAL: how many, and their microseconds).
func scaleServerWork(t *testing.T, rdb *redis.Client) (cpu float64, calls, usec int64, inner map[string][2]int64) {
	inner = map[string][2]int64{}
	info, err := rdb.Info(context.Background(), "cpu", "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		k, v, _ := strings.Cut(line, ":")
		switch k {
		case "used_cpu_sys", "used_cpu_user":
			f, _ := strconv.ParseFloat(v, 64)
			cpu += f
		default:
			if !strings.HasPrefix(k, "cmdstat_") {
				continue
			}
			var c [2]int64
			for _, kv := range strings.Split(v, ",") {
				a, b, _ := strings.Cut(kv, "=")
				x, _ := strconv.ParseInt(b, 10, 64)
				switch a {
				case "calls":
					c[0] = x
				case "usec":
					c[1] = x
				}
			}
			inner[strings.TrimPrefix(k, "cmdstat_")] = c
			if k != "cmdstat_evalsha" && k != "cmdstat_eval" {
				continue
			}
			for _, kv := range strings.Split(v, ",") {
				a, b, _ := strings.Cut(kv, "=")
				x, _ := strconv.ParseInt(b, 10, 64)
				switch a {
				case "calls":
					calls += x
				case "usec":
					usec += x
				}
			}
		}
	}
	return cpu, calls, usec, inner
}
