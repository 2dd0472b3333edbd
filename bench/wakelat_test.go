package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

var (
	wakelatFlag  = flag.Bool("wakelat", false, "TestWakeLatency: time from a release to the waiter's wake-up, each side its own client")
	wakelatN     = flag.Int("wakelat.n", 300, "TestWakeLatency: wake-ups timed per implementation")
	wakelatImpls = flag.String("wakelat.impls", "dlock,rueidislock,redsync,redislock,redislock-1ms,setnx",
		"TestWakeLatency: implementations, comma-separated, in run order")
)

// wakelatSettle is how long the holder keeps the lock after the waiter has
// called Lock: on loopback, time enough for the waiter's first attempt to
// fail and for it to start waiting (subscribed, tracking, or between two
// polls).
const wakelatSettle = 5 * time.Millisecond

// TestWakeLatency measures how soon a waiting Lock returns once the lock
// is released, with holder and waiter each on their own clients (as two
// processes would be), on a redis-server started for the test. Each of
// -wakelat.n rounds: the holder locks; the waiter calls Lock in a goroutine
// of its own; after wakelatSettle the test times one PING on a third
// (go-redis) client and the holder unlocks. The wake latency is the time
// from the start of the holder's Unlock to the waiter's Lock returning
// (both read the same monotonic clock): what a user waits for. (Timed from
// the Unlock's return, as it was before issue 26, it went negative when
// the waiter returned before the holder's reply, and flattered whoever
// hands off in the release itself.) A waiter not woken within stallAfter of the release
// is cancelled, counted as a stall and left out of the percentiles.
//
// A polling waiter's latency is its retry delay less the time since its
// last attempt (at least wakelatSettle).
//
//	go test -run '^TestWakeLatency$' -wakelat -count=1 -v .
func TestWakeLatency(t *testing.T) {
	if !*wakelatFlag {
		t.Skip("run with -wakelat")
	}
	s := redistest.StartT(t, redistest.Options{})
	pinger := s.Client(func(o *redis.Options) { o.PoolSize = 1 })
	defer pinger.Close()

	started := time.Now()
	var res []wakeRun
	var idle, hot []time.Duration
	for _, name := range strings.Split(*wakelatImpls, ",") {
		r, err := wakeLatency(s.Addr(), pinger, name, *wakelatN)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		fmt.Fprintf(os.Stderr, "wakelat %s: %d wake-ups, p50 %s, p90 %s, %d stalls\n",
			name, len(r.lat), dur(float64(r.p50)), dur(float64(r.p90)), r.stalls)
		idle, hot = append(idle, r.idlePings...), append(hot, r.hotPings...)
		res = append(res, r)
	}

	pingIdle, pingHot := summarize(idle).p50, summarize(hot).p50
	var ref time.Duration // rueidislock's median
	for _, r := range res {
		if r.name == "rueidislock" {
			ref = r.p50
		}
	}
	p := func(format string, args ...any) { fmt.Printf(format, args...) }
	p("\n## Wake latency: holder and waiter each with their own client\n\n")
	p("%s, GOMAXPROCS=%d (%d CPUs), redis-server %s on loopback; %d rounds per implementation, waiter settled %v before the release; took %v.\n",
		runtime.Version(), runtime.GOMAXPROCS(0), runtime.NumCPU(), serverVersion(pinger),
		*wakelatN, wakelatSettle, time.Since(started).Round(time.Second))
	p("wake: holder's Unlock starts → waiter's Lock returns.\n\n")
	p("| implementation | wake-ups | wake p50 | wake p90 | wake max | stalls | p50 ÷ idle PING p50 | p50 ÷ rueidislock p50 |\n")
	p("|---|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range res {
		p("| %s | %d | %s | %s | %s | %d | %s | %s |\n", r.name, len(r.lat),
			dur(float64(r.p50)), dur(float64(r.p90)), dur(float64(r.max)), r.stalls,
			ratio(float64(r.p50), float64(pingIdle)), ratio(float64(r.p50), float64(ref)))
	}
	p("\nPING round trip (go-redis, pool of 1), p50: %s after the settle (what a woken waiter pays), %s back to back.\n",
		dur(float64(pingIdle)), dur(float64(pingHot)))
	for _, r := range res {
		if r.name == "dlock" && ref > 0 {
			p("dlock wake p50 ÷ rueidislock wake p50 = %s ÷ %s = %s\n",
				dur(float64(r.p50)), dur(float64(ref)), ratio(float64(r.p50), float64(ref)))
		}
	}
	p("\n")
}

// wakeRun is the outcome of TestWakeLatency for one implementation.
type wakeRun struct {
	name                string
	lat                 []time.Duration // wake latencies, sorted
	p50, p90, max       time.Duration
	stalls              int
	idlePings, hotPings []time.Duration
}

// wakeLatency times n wake-ups of the named implementation on the server
// at addr, with a holder and a waiter on clients of their own, and PINGs
// on pinger.
func wakeLatency(addr string, pinger *redis.Client, name string, n int) (wakeRun, error) {
	r := wakeRun{name: name}
	hb, err := openProcessBackend(name, addr)
	if err != nil {
		return r, err
	}
	defer hb.close()
	wb, err := openProcessBackend(name, addr)
	if err != nil {
		return r, err
	}
	defer wb.close()

	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	key := newKey("wakelat")
	holder, waiter := hb.newMutex(key), wb.newMutex(key)
	for _, m := range []mutex{holder, waiter} {
		if err := lockUnlock(ctx, m); err != nil {
			return r, fmt.Errorf("warm-up: %w", err)
		}
	}
	ping := func(into *[]time.Duration) error {
		t0 := time.Now()
		if err := pinger.Ping(ctx).Err(); err != nil {
			return err
		}
		*into = append(*into, time.Since(t0))
		return nil
	}

	type woken struct {
		at  time.Time
		err error
	}
	for range n {
		if err := holder.Lock(ctx); err != nil {
			return r, fmt.Errorf("holder lock: %w", err)
		}
		done := make(chan woken, 1)
		wctx, wcancel := context.WithCancel(ctx)
		go func() {
			err := waiter.Lock(wctx)
			done <- woken{time.Now(), err}
		}()
		time.Sleep(wakelatSettle)
		select {
		case w := <-done:
			wcancel()
			return r, fmt.Errorf("waiter's Lock returned while the lock was held (err %v)", w.err)
		default:
		}
		if err := ping(&r.idlePings); err != nil {
			wcancel()
			return r, err
		}
		released := time.Now() // the Unlock's start
		if err := holder.Unlock(ctx); err != nil {
			wcancel()
			return r, fmt.Errorf("holder unlock: %w", err)
		}
		var w woken
		select {
		case w = <-done:
		case <-time.After(stallAfter):
			wcancel() // a lost wake-up: give up on this round
			w = <-done
		}
		switch {
		case w.err == nil:
			r.lat = append(r.lat, w.at.Sub(released))
			// wctx ends after Unlock: rueidislock releases the lock
			// when the context of its Lock ends.
			err := waiter.Unlock(ctx)
			wcancel()
			if err != nil {
				return r, fmt.Errorf("waiter unlock: %w", err)
			}
		case errors.Is(w.err, context.Canceled) && ctx.Err() == nil:
			wcancel()
			r.stalls++
		default:
			wcancel()
			return r, fmt.Errorf("waiter lock: %w", w.err)
		}
		for range hotPingCount {
			if err := ping(&r.hotPings); err != nil {
				return r, err
			}
		}
	}
	s := summarize(r.lat)
	r.p50, r.max = s.p50, s.max
	if len(r.lat) > 0 {
		r.p90 = rank(r.lat, 0.90)
	}
	return r, nil
}
