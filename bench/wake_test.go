package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// wakeSettle is how long the holder keeps the lock after asking the waiter
// to Lock: time enough on loopback for the waiter to get the request, fail
// its attempt and start waiting.
const wakeSettle = 3 * time.Millisecond

// hotPingCount is how many back-to-back PINGs each iteration times.
const hotPingCount = 4

// BenchmarkWake measures how soon a waiting Lock returns once the lock is
// released. The holder is this process; the waiter is a worker process
// (this test binary, re-executed), as two nodes of a service would be.
// Each iteration: the holder locks and tells the waiter to Lock, sleeps
// wakeSettle, times one PING and unlocks. Times are taken on the machine's
// wall clock, which both processes read:
//
//   - wake-p50/p99/max-ns: from the holder's Unlock returning to the
//     waiter's Lock returning. On a busy machine the holder's process may
//     be scheduled after the waiter's, and then this is negative;
//   - handover-p50/p99-ns: from the holder calling Unlock to the waiter's
//     Lock returning. It never is negative; it includes the release's own
//     trip to the server.
//
// PING round trips are timed with a go-redis client of the holder's
// process, in two ways. ping-idle-p50-ns is the PING sent after the
// holder's wakeSettle of idleness: like a woken waiter, it pays for
// threads that were asleep (and it is what redis-cli --latency measures,
// one PING every 10 ms). ping-hot-p50-ns is over back-to-back PINGs, the
// best case. wake/ping-idle and wake/ping-hot divide the wake median by
// each. ns/op is the whole iteration.
//
// A polling waiter's wake latency is its retry delay less the time since
// its last attempt, which here is about wakeSettle.
func BenchmarkWake(b *testing.B) { runCases(b, wakeCases()) }

func wakeCases() []benchCase {
	var cs []benchCase
	for _, name := range backendNames {
		cs = append(cs, benchCase{"Wake", "", name, wake(name)})
	}
	return cs
}

// wake returns the benchmark of one implementation.
func wake(name string) func(*testing.B) {
	return func(b *testing.B) {
		be := open(b, name)
		pinger := redis.NewClient(&redis.Options{Addr: serverAddr(b), PoolSize: 1})
		b.Cleanup(func() { _ = pinger.Close() })
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()

		key := newKey("wake")
		holder := be.newMutex(key)
		warm, cancelWarm := context.WithTimeout(ctx, warmTimeout)
		defer cancelWarm()
		if err := lockUnlock(warm, holder); err != nil {
			fatalf(b, "%s: warm-up: %v", name, err)
		}
		waiter := startWorker(b, "wait", name, key, 1)
		defer waiter.close()
		if err := pinger.Ping(ctx).Err(); err != nil {
			fatalf(b, "%v", err)
		}

		var lat, handover, idlePings, hotPings []time.Duration
		var stalls int64 // the waiter's

		// The holder locks a free lock; should that stall, it too is
		// called again, and counted with the waiter's stalls.
		w := newWaits(ctx)
		since := make([]atomic.Int64, 1)
		done := make(chan struct{})
		defer close(done)
		holderStalls := longWaitWatch(since, done, w.unstick)
		ping := func(into *[]time.Duration) {
			t0 := time.Now()
			if err := pinger.Ping(ctx).Err(); err != nil {
				fatalf(b, "%v", err)
			}
			*into = append(*into, time.Since(t0))
		}
		for b.Loop() {
			since[0].Store(time.Now().UnixNano())
			err := w.lock(holder)
			since[0].Store(0)
			if err != nil {
				fatalf(b, "%s: holder lock: %v", name, err)
			}
			if err := waiter.send("lock"); err != nil {
				fatalf(b, "%v", err)
			}
			time.Sleep(wakeSettle)
			ping(&idlePings)
			unlocking := time.Now().UnixNano()
			if err := holder.Unlock(ctx); err != nil {
				fatalf(b, "%s: holder unlock: %v", name, err)
			}
			released := time.Now().UnixNano()
			line, err := waiter.read()
			if err != nil {
				fatalf(b, "%s waiter: %v", name, err)
			}
			var at int64
			if _, err := fmt.Sscanf(line, "t %d %d", &at, &stalls); err != nil {
				fatalf(b, "%s waiter: bad line %q", name, line)
			}
			lat = append(lat, time.Duration(at-released))
			handover = append(handover, time.Duration(at-unlocking))
			if line, err := waiter.read(); err != nil || line != "u" {
				fatalf(b, "%s waiter: unlock: %q %v", name, line, err)
			}
			for range hotPingCount {
				ping(&hotPings)
			}
		}
		s := summarize(lat)
		s.report(b, "wake")
		h := summarize(handover)
		b.ReportMetric(float64(h.p50), "handover-p50-ns")
		b.ReportMetric(float64(h.p99), "handover-p99-ns")
		idle, hot := summarize(idlePings).p50, summarize(hotPings).p50
		b.ReportMetric(float64(idle), "ping-idle-p50-ns")
		b.ReportMetric(float64(hot), "ping-hot-p50-ns")
		b.ReportMetric(float64(s.p50)/float64(idle), "wake/ping-idle")
		b.ReportMetric(float64(s.p50)/float64(hot), "wake/ping-hot")
		b.ReportMetric(float64(stalls+holderStalls()), "stalls")
	}
}

// waitWorker is the waiter of BenchmarkWake. For each line "lock" it
// Locks, reports "t <UnixNano> <stalls>" the moment Lock returns, Unlocks
// and reports "u". It ends when stdin closes. A Lock that has not returned
// after stallAfter is called again; stalls counts how often that happened.
func waitWorker(out *lineWriter) error {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	be, err := workerBackend(1)
	if err != nil {
		return err
	}
	defer be.close()
	m := be.newMutex(os.Getenv(workerKey))
	warm, cancelWarm := context.WithTimeout(ctx, warmTimeout)
	defer cancelWarm()
	if err := lockUnlock(warm, m); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	w := newWaits(ctx)
	since := make([]atomic.Int64, 1)
	done := make(chan struct{})
	defer close(done)
	stalls := longWaitWatch(since, done, w.unstick)
	out.printf("ready")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		since[0].Store(time.Now().UnixNano())
		err := w.lock(m)
		since[0].Store(0)
		if err != nil {
			return fmt.Errorf("lock: %w", err)
		}
		out.printf("t %d %d", time.Now().UnixNano(), stalls())
		if err := m.Unlock(ctx); err != nil {
			return fmt.Errorf("unlock: %w", err)
		}
		out.printf("u")
	}
	return nil
}
