//go:build dlockprobe

// A measurement, not a test: it checks nothing, so it is outside the suite
// and built only when asked for:
//
//	go test -race -tags dlockprobe -run TestProbeBlockedWriteOverrun -v .

package dlock_test

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestProbeBlockedWriteOverrun reproduces the torture's blockedwrite ctx
// overruns (issue 45) outside the torture, and measures them; it checks
// nothing. 24 goroutines (DLOCK_PROBE_G) Lock or TryLock names of 32 and
// 4 KiB (and short ones) with 20-300 ms ctxs (log-uniform) for 4 s, on a
// ContextTimeoutEnabled client and one with a 400 ms ReadTimeout, while
// redis-server is SIGSTOPped from +150 ms for 1.5 s; it logs how far past
// its deadline each call returned, the process's CPU, and how late a
// 5 ms sleeper woke (the scheduler's latency). Built with -tags dlockprobe
// (go-redis only); DLOCK_PROBE_POOL=1 for go-redis's pool
// (WithoutOwnConnections); DLOCK_PROBE_DUMP=dir for goroutine dumps
// (up to 8) when a call has overrun by 150 ms, the late calls' goroutine
// ids first; DLOCK_PROBE_MUTEX=file for a mutex profile.
func TestProbeBlockedWriteOverrun(t *testing.T) {
	onlyGoRedis(t)
	gors := 24
	if v, err := strconv.Atoi(os.Getenv("DLOCK_PROBE_G")); err == nil {
		gors = v
	}
	var opts []dlock.Option
	if os.Getenv("DLOCK_PROBE_POOL") != "" {
		opts = append(opts, dlock.WithoutOwnConnections())
	}
	dumpDir := os.Getenv("DLOCK_PROBE_DUMP")
	stopFor := 1500 * time.Millisecond
	total := 4 * time.Second

	if f := os.Getenv("DLOCK_PROBE_MUTEX"); f != "" {
		runtime.SetMutexProfileFraction(1)
		defer func() {
			w, _ := os.Create(f)
			_ = pprof.Lookup("mutex").WriteTo(w, 0)
			_ = w.Close()
			runtime.SetMutexProfileFraction(0)
		}()
	}
	s := redistest.StartT(t, redistest.Options{})
	var clients []*dlock.Client
	for i := range 3 {
		rdb := newRedis(t, s, func(o *redis.Options) {
			o.ContextTimeoutEnabled = i == 0
			if i == 2 {
				o.ReadTimeout = 400 * time.Millisecond
			}
		})
		clients = append(clients, newClient(t, rdb, opts...))
	}
	base := lockName(t)
	long := func(a string, n int) string { return base + a + "." + strings.Repeat("z", n) }
	names := []string{long("mL0", 32<<10), long("mL0", 32<<10), long("mL1", 4<<10), base + "m0", base + "m1"}
	fair := long("fL0", 32<<10)
	for _, c := range clients {
		unlock(t, mustLock(t, c.Mutex(base+"warm"), context.Background()))
		unlock(t, mustLock(t, c.FairMutex(base+"warmf"), context.Background()))
	}

	type active struct {
		gid      string
		what     string
		deadline time.Time
		dumped   bool
	}
	var mu sync.Mutex
	act := map[int]*active{}
	type result struct {
		what    string
		at      time.Duration // since start, at return
		over    time.Duration
		err     error
		timeout time.Duration
	}
	var results []result
	start := time.Now()
	var stopAt, resumeAt time.Duration
	stopped := make(chan struct{})
	go func() {
		time.Sleep(150 * time.Millisecond)
		stopAt = time.Since(start)
		_ = s.Pause()
		time.Sleep(stopFor)
		_ = s.Resume()
		resumeAt = time.Since(start)
		close(stopped)
	}()
	defer func() { <-stopped }()

	done := make(chan struct{})
	dumps := 0
	// a sleeper: how late a goroutine whose timer fired is run (the
	// scheduler's latency), in 100 ms windows
	var lagMu sync.Mutex
	lags := map[int]time.Duration{}
	go func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			t0 := time.Now()
			time.Sleep(5 * time.Millisecond)
			lag := time.Since(t0) - 5*time.Millisecond
			w := int(t0.Sub(start) / (100 * time.Millisecond))
			lagMu.Lock()
			lags[w] = max(lags[w], lag)
			lagMu.Unlock()
		}
	}()
	var ru0 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	go func() { // monitor
		tk := time.NewTicker(10 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-done:
				return
			case <-tk.C:
			}
			now := time.Now()
			var late []*active
			mu.Lock()
			for _, a := range act {
				if !a.dumped && now.Sub(a.deadline) > 150*time.Millisecond {
					a.dumped = true
					late = append(late, a)
				}
			}
			mu.Unlock()
			if len(late) == 0 || dumpDir == "" || dumps >= 8 {
				continue
			}
			dumps++
			var b bytes.Buffer
			_ = pprof.Lookup("goroutine").WriteTo(&b, 2)
			var hdr strings.Builder
			for _, a := range late {
				fmt.Fprintf(&hdr, "LATE goroutine %s %s over %v at +%v\n", a.gid, a.what, now.Sub(a.deadline), now.Sub(start))
			}
			_ = os.WriteFile(fmt.Sprintf("%s/dump-%d.txt", dumpDir, dumps), append([]byte(hdr.String()), b.Bytes()...), 0o644)
		}
	}()

	var wg sync.WaitGroup
	for i := range gors {
		rng := rand.New(rand.NewPCG(uint64(i), 4511))
		wg.Go(func() {
			for time.Since(start) < total {
				c := clients[[]int{0, 2}[rng.IntN(2)]]
				timeout := time.Duration(math.Exp(math.Log(20e6) + rng.Float64()*(math.Log(300e6)-math.Log(20e6))))
				ttl := dlock.WithTTL(time.Duration(100+rng.IntN(700)) * time.Millisecond)
				var call func(context.Context) (*dlock.Lease, error)
				var what string
				if n := rng.IntN(12); n < 3 {
					f := c.FairMutex(fair, ttl)
					call, what = func(ctx context.Context) (*dlock.Lease, error) { return f.Lock(ctx) }, "fair Lock"
				} else {
					m := c.Mutex(names[rng.IntN(len(names))], ttl)
					if rng.IntN(2) == 0 {
						call, what = func(ctx context.Context) (*dlock.Lease, error) { return m.Lock(ctx) }, "Lock"
					} else {
						call, what = func(ctx context.Context) (*dlock.Lease, error) { return m.TryLock(ctx) }, "TryLock"
					}
				}
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				dl, _ := ctx.Deadline()
				var sb [64]byte
				gid := strings.Fields(string(sb[:runtime.Stack(sb[:], false)]))[1]
				mu.Lock()
				act[i] = &active{gid: gid, what: what, deadline: dl}
				mu.Unlock()
				l, err := call(ctx)
				now := time.Now()
				cancel()
				mu.Lock()
				delete(act, i)
				results = append(results, result{what, now.Sub(start), now.Sub(dl), err, timeout})
				mu.Unlock()
				if err == nil {
					time.Sleep(time.Duration(100+rng.IntN(4900)) * time.Microsecond)
					uctx, ucancel := context.WithTimeout(context.Background(), 3*time.Second)
					_ = l.Unlock(uctx)
					ucancel()
				}
			}
		})
	}
	wg.Wait()
	close(done)
	<-stopped
	var ru1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	cpu := time.Duration((ru1.Utime.Nano() + ru1.Stime.Nano()) - (ru0.Utime.Nano() + ru0.Stime.Nano()))
	var lagLine strings.Builder
	var lagMax time.Duration
	lagMu.Lock()
	defer lagMu.Unlock()
	for w := 0; w < 45; w++ {
		fmt.Fprintf(&lagLine, " %d", lags[w].Milliseconds())
		lagMax = max(lagMax, lags[w])
	}
	t.Logf("CPU of the process %v in %v; a 5 ms sleeper woke late by at most %v; per 100 ms window (ms):%s", cpu.Round(time.Millisecond), time.Since(start).Round(time.Millisecond), lagMax.Round(time.Millisecond), lagLine.String())
	// overrun per 100 ms window of the return
	ov := map[int]time.Duration{}
	for _, r := range results {
		w := int(r.at / (100 * time.Millisecond))
		ov[w] = max(ov[w], r.over)
	}
	var ovLine strings.Builder
	for w := 0; w < 45; w++ {
		fmt.Fprintf(&ovLine, " %d", ov[w].Milliseconds())
	}
	t.Logf("largest overrun of a call returning in each 100 ms window (ms):%s", ovLine.String())
	sort.Slice(results, func(i, j int) bool { return results[i].over > results[j].over })
	var n50, n150, n300 int
	for _, r := range results {
		switch {
		case r.over > 300*time.Millisecond:
			n300++
			fallthrough
		case r.over > 150*time.Millisecond:
			n150++
			fallthrough
		case r.over > 50*time.Millisecond:
			n50++
		}
	}
	t.Logf("%d calls; stop %v-%v; past deadline by >50ms %d, >150ms %d, >300ms %d", len(results), stopAt.Round(time.Millisecond), resumeAt.Round(time.Millisecond), n50, n150, n300)
	for _, r := range results[:min(15, len(results))] {
		phase := "before"
		switch {
		case r.at-r.over-r.timeout >= stopAt && r.at-r.over-r.timeout < resumeAt:
			phase = "called during stop"
		case r.at-r.over-r.timeout >= resumeAt:
			phase = "called after resume"
		}
		t.Logf("  %s ctx %v returned at +%v, %v past its deadline (%s): %v", r.what, r.timeout.Round(time.Millisecond), r.at.Round(time.Millisecond), r.over.Round(time.Millisecond), phase, short(r.err))
	}
}

func short(err error) string {
	if err == nil {
		return "ok"
	}
	s := err.Error()
	if i := strings.Index(s, "zzzz"); i >= 0 {
		j := strings.LastIndex(s, "zzzz")
		s = s[:i] + "…" + s[j+4:]
	}
	return s
}
