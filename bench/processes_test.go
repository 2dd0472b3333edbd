package bench

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

var (
	processesFlag  = flag.Bool("processes", false, "TestProcesses: W workers, each with its own client, contend for one key")
	processesW     = flag.String("processes.w", "16,64", "TestProcesses: worker counts W, comma-separated")
	processesDur   = flag.Duration("processes.dur", 3*time.Second, "TestProcesses: measured wall time per contender and W")
	processesWarm  = flag.Duration("processes.warm", 300*time.Millisecond, "TestProcesses: contention before the measured window, not counted")
	processesHold  = flag.Duration("processes.hold", time.Millisecond, "TestProcesses: the work done while holding the lock (a sleep)")
	processesCmds  = flag.Bool("processes.cmds", false, "TestProcesses: also print each contender's Redis commands per acquisition, by command")
	processesImpls = flag.String("processes.impls", strings.Join(processesNames, ","), "TestProcesses: contenders, comma-separated, in run order")
)

// processesNames are the contenders of TestProcesses, dlock's first; the
// others are the anchors its ratios are taken against.
var processesNames = []string{"dlock", "dlock-fair", "redsync", "setnx", "redislock", "redislock-1ms", "rueidislock"}

// processesLockTimeout bounds each Lock of TestProcesses: far beyond any
// wait of the run, so that only a lost wake-up reaches it.
const processesLockTimeout = 60 * time.Second

// TestProcesses is the contended case with every worker set up as a
// process of its own would be: W goroutines of this process, each with its
// own go-redis client and its own lock client (dlock Client, redsync,
// redislock, rueidis Locker) opened for it alone, all on one key of one
// redis-server started for the test.
// Nothing is shared between the workers but the server, so every handoff
// goes through Redis, as between the nodes of a service. Each worker
// loops: Lock, -processes.hold of work (a sleep), Unlock, and Lock again
// at once. After -processes.warm the test measures for -processes.dur,
// then cancels the waits still running. It prints, per W, a markdown
// table of the contenders and their ratios to the best anchor. It fails if
// two workers ever held the lock at once, or a Lock or Unlock failed.
//
//	go test -run '^TestProcesses$' -processes -count=1 -v -timeout 20m .
func TestProcesses(t *testing.T) {
	if !*processesFlag {
		t.Skip("run with -processes")
	}
	ws, err := parseInts(*processesW)
	if err != nil {
		t.Fatalf("-processes.w: %v", err)
	}
	names := strings.Split(*processesImpls, ",")
	s := redistest.StartT(t, redistest.Options{})
	admin := s.Client()
	defer admin.Close()

	started := time.Now()
	var runs []procRun
	for _, w := range ws {
		for _, name := range names {
			r := runProcesses(t, s.Addr(), admin, name, w)
			fmt.Fprintf(os.Stderr, "processes W=%d %s: %d acquisitions, %.0f acq/s, util %.2f, max wait %s, %d overlaps, %d errors\n",
				w, name, r.acquisitions, r.acqPerSec, r.util, dur(float64(r.maxWait)), r.overlaps, r.errs)
			if r.overlaps > 0 {
				t.Errorf("%s W=%d: %d critical sections overlapped", name, w, r.overlaps)
			}
			if r.warmStalls > 0 {
				fmt.Fprintf(os.Stderr, "processes W=%d %s: %d warm-up Locks of a free key stalled and were called again\n",
					w, name, r.warmStalls)
			}
			if r.errs > 0 {
				t.Errorf("%s W=%d: %d Lock or Unlock errors, the first: %v", name, w, r.errs, r.firstErr)
			}
			runs = append(runs, r)
			time.Sleep(200 * time.Millisecond) // let the closed clients go
		}
	}
	printProcesses(admin, runs, ws, time.Since(started))
}

// procRun is the outcome of one contender with W workers.
type procRun struct {
	name string
	w    int

	acquisitions int     // Lock returned in the window
	acqPerSec    float64 // acquisitions ÷ window
	util         float64 // time spent in the work, within the window ÷ window
	// maxWait is the longest Lock, from call to return, among those that
	// returned in the window and those cut short at its end (counted up to
	// the end).
	maxWait time.Duration
	// gap is the median time from one Unlock's return to the next Lock's
	// return (by anyone); hold the median time of the work itself.
	gap, hold      time.Duration
	minAcq, maxAcq int // acquisitions in the window of the least and most served workers

	cmdsPerAcq float64 // Redis commands (script-internal ones too) per acquisition
	cpuPerAcq  float64 // redis-server CPU (user+sys) per acquisition, µs
	// cmdsBy is cmdsPerAcq by command (-processes.cmds prints it).
	cmdsBy map[string]float64

	// warmStalls counts the warm-up Locks of a free key that had to be
	// called again (see warmLockUnlock).
	warmStalls int64
	overlaps   int64 // acquisitions made while another worker held the lock
	errs       int64 // Lock (other than the final cancel) and Unlock errors
	firstErr   error
}

func (r procRun) spread() float64 {
	if r.maxAcq == 0 {
		return 0
	}
	return float64(r.minAcq) / float64(r.maxAcq)
}

// procRec is one acquisition by one worker, as offsets from the start of
// the run: Lock called, Lock returned, work done (Unlock called), Unlock
// returned.
type procRec struct{ called, locked, worked, unlocked time.Duration }

// runProcesses runs one contender with w workers on a fresh key of the
// server at addr; admin reads the server's statistics.
func runProcesses(t *testing.T, addr string, admin *redis.Client, name string, w int) procRun {
	t.Helper()
	r := procRun{name: name, w: w}
	fail := func(err error) procRun {
		t.Errorf("%s W=%d: %v", name, w, err)
		r.firstErr = err
		return r
	}

	// Each worker's own clients, warmed up on a key of its own so that
	// connections are dialled and scripts loaded before the run.
	bes := make([]*backend, w)
	defer func() {
		for _, be := range bes {
			if be != nil {
				be.close()
			}
		}
	}()
	key := newKey("processes")
	errs := make([]error, w)
	var warmStalls atomic.Int64
	var wg sync.WaitGroup
	for i := range w {
		wg.Go(func() {
			if bes[i], errs[i] = openProcessBackend(name, addr); errs[i] != nil {
				return
			}
			var n int64
			n, errs[i] = warmLockUnlock(bes[i].newMutex(fmt.Sprintf("%s:warm:%d", key, i)))
			warmStalls.Add(n)
		})
	}
	wg.Wait()
	r.warmStalls = warmStalls.Load()
	if err := errors.Join(errs...); err != nil {
		return fail(fmt.Errorf("opening: %w", err))
	}

	var (
		holders, overlaps, errCount atomic.Int64
		errOnce                     sync.Once
		firstErr                    error
	)
	noteErr := func(err error) {
		errCount.Add(1)
		errOnce.Do(func() { firstErr = err })
	}
	recs := make([][]procRec, w)
	cut := make([]time.Duration, w) // when a wait cut short at the end began; -1 if none
	// run ends the waits still running when the window closes; Unlock must
	// not fail because of that.
	run, stop := context.WithCancel(context.Background())
	defer stop()
	unlockCtx, cancelUnlocks := context.WithTimeout(context.Background(), processesLockTimeout)
	defer cancelUnlocks()
	begin := make(chan struct{})
	var start time.Time
	since := func() time.Duration { return time.Since(start) }
	for i := range w {
		m := bes[i].newMutex(key)
		cut[i] = -1
		wg.Go(func() {
			<-begin
			for run.Err() == nil {
				var rec procRec
				rec.called = since()
				// The Lock's context must live until after Unlock
				// (rueidislock releases the lock when it ends), so the end
				// of the run cancels it only while Lock waits.
				ctx, cancel := context.WithTimeout(context.Background(), processesLockTimeout)
				detach := context.AfterFunc(run, cancel)
				err := m.Lock(ctx)
				rec.locked = since()
				if !detach() { // the run ended while Lock waited
					if err == nil {
						_ = m.Unlock(unlockCtx)
					}
					cancel()
					cut[i] = rec.called
					return
				}
				if err != nil {
					cancel()
					noteErr(fmt.Errorf("lock after %v: %w", rec.locked-rec.called, err))
					continue
				}
				// The critical section: no other worker may be in it.
				if holders.Add(1) != 1 {
					overlaps.Add(1)
				}
				time.Sleep(*processesHold)
				rec.worked = since()
				holders.Add(-1)
				if err := m.Unlock(unlockCtx); err != nil {
					noteErr(fmt.Errorf("unlock: %w", err))
				}
				rec.unlocked = since()
				cancel()
				recs[i] = append(recs[i], rec)
			}
		})
	}

	start = time.Now()
	close(begin)
	time.Sleep(*processesWarm)
	from := since()
	s0, err := readServerStats(admin)
	if err != nil {
		stop()
		wg.Wait()
		return fail(err)
	}
	time.Sleep(*processesWarm + *processesDur - since())
	to := since()
	s1, err := readServerStats(admin)
	stop()
	wg.Wait()
	if err != nil {
		return fail(err)
	}

	// Tally the window [from, to): acquisitions whose Lock returned in it.
	window := to - from
	var all []procRec
	var holds, waits []time.Duration
	var worked time.Duration
	r.minAcq = math.MaxInt
	for i := range w {
		n := 0
		for _, rec := range recs[i] {
			all = append(all, rec)
			// Work time within the window, whenever the Lock returned.
			worked += max(0, min(rec.worked, to)-max(rec.locked, from))
			if rec.locked < from || rec.locked >= to {
				continue
			}
			n++
			holds = append(holds, rec.worked-rec.locked)
			waits = append(waits, rec.locked-rec.called)
		}
		if cut[i] >= 0 && cut[i] < to {
			waits = append(waits, to-cut[i])
		}
		r.acquisitions += n
		r.minAcq, r.maxAcq = min(r.minAcq, n), max(r.maxAcq, n)
	}
	slices.SortFunc(all, func(x, y procRec) int { return cmp.Compare(x.locked, y.locked) })
	var gaps []time.Duration
	for k := 1; k < len(all); k++ {
		if all[k].locked >= from && all[k].locked < to {
			gaps = append(gaps, all[k].locked-all[k-1].unlocked)
		}
	}
	r.acqPerSec = float64(r.acquisitions) / window.Seconds()
	r.util = float64(worked) / float64(window)
	r.maxWait = summarize(waits).max
	r.gap = summarize(gaps).p50
	r.hold = summarize(holds).p50
	if r.acquisitions > 0 {
		r.cmdsPerAcq = float64(s1.calls-s0.calls) / float64(r.acquisitions)
		r.cpuPerAcq = (s1.cpu - s0.cpu) * 1e6 / float64(r.acquisitions)
		r.cmdsBy = make(map[string]float64)
		for cmd, n := range s1.by {
			if d := n - s0.by[cmd]; d > 0 {
				r.cmdsBy[cmd] = float64(d) / float64(r.acquisitions)
			}
		}
	}
	r.overlaps, r.errs, r.firstErr = overlaps.Load(), errCount.Load(), firstErr
	return r
}

// warmLockUnlock takes and releases m, a lock no one else uses, calling
// Lock again whenever it has not returned within stallAfter; it returns
// how many times it did. rueidislock needs this when many clients connect
// at once: an acquire whose reply takes longer than its TryNextAfter
// (20 ms) counts as failed, and the Lock then waits for a wake-up that
// never comes (see README.md).
func warmLockUnlock(m mutex) (stalls int64, err error) {
	for try := 0; ; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), stallAfter)
		err = m.Lock(ctx)
		if err == nil {
			err = m.Unlock(ctx)
			cancel()
			return stalls, err
		}
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || try == 4 {
			return stalls, fmt.Errorf("warm-up lock: %w", err)
		}
		stalls++
	}
}

// openProcessBackend opens the named contender of TestProcesses or
// TestWakeLatency on the server at addr: one of openBackend's, or one of
// the two that only these tests use:
//
//   - setnx: the lock most services write by hand: SET key token NX PX,
//     retried every millisecond until it succeeds, and a Lua
//     compare-and-delete to release;
//   - redislock-1ms: bsm/redislock retrying every millisecond
//     (LinearBackoff(1ms)) instead of the 100 ms the other benchmarks
//     give it (redislockRetry): its best case for throughput and wake-up,
//     at the price of a request per waiter per millisecond.
func openProcessBackend(name, addr string) (*backend, error) {
	switch name {
	case "setnx":
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		return &backend{
			name:     name,
			newMutex: func(key string) mutex { return &setnxMutex{rdb: rdb, key: key} },
			close:    func() { _ = rdb.Close() },
		}, nil
	case "redislock-1ms":
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		c := redislock.New(rdb)
		opts := &redislock.Options{RetryStrategy: redislock.LinearBackoff(setnxRetry)}
		return &backend{
			name:     name,
			newMutex: func(key string) mutex { return &redislockMutex{c: c, key: key, opts: opts} },
			close:    func() { _ = rdb.Close() },
		}, nil
	}
	return openBackend(name, addr)
}

// setnxRetry is how long the hand-written SET NX lock (and redislock-1ms)
// waits between two attempts.
const setnxRetry = time.Millisecond

// setnxRelease deletes the key only if it still holds the caller's token.
var setnxRelease = redis.NewScript(`
if redis.call("get", KEYS[1]) == ARGV[1] then
	return redis.call("del", KEYS[1])
end
return 0`)

// setnxMutex is the hand-written lock: a random token per acquisition,
// SET NX PX lockTTL, polled every setnxRetry.
type setnxMutex struct {
	rdb   *redis.Client
	key   string
	token string
}

func (m *setnxMutex) Lock(ctx context.Context) error {
	token := rand.Text()
	for {
		err := m.rdb.Do(ctx, "set", m.key, token, "nx", "px", lockTTL.Milliseconds()).Err()
		if err == nil {
			m.token = token
			return nil
		}
		if !errors.Is(err, redis.Nil) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(setnxRetry):
		}
	}
}

func (m *setnxMutex) Unlock(ctx context.Context) error {
	n, err := setnxRelease.Run(ctx, m.rdb, []string{m.key}, m.token).Int()
	if err == nil && n != 1 {
		err = errors.New("setnx: lock no longer held at unlock")
	}
	return err
}

// serverStats are the server's counters that TestProcesses reads before
// and after the window.
type serverStats struct {
	calls int64            // sum of calls= over INFO commandstats, but INFO's own
	by    map[string]int64 // the same by command
	cpu   float64          // used_cpu_user + used_cpu_sys, seconds
}

// readServerStats reads the counters. Commands run by scripts are counted
// in commandstats too (besides the EVALSHA itself); the INFO calls of this
// probe are left out.
func readServerStats(rdb *redis.Client) (serverStats, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st := serverStats{by: map[string]int64{}}
	cpu, err := rdb.Info(ctx, "cpu").Result()
	if err != nil {
		return st, fmt.Errorf("INFO cpu: %w", err)
	}
	for line := range strings.Lines(cpu) {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if k == "used_cpu_user" || k == "used_cpu_sys" {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return st, fmt.Errorf("INFO cpu: %q: %w", line, err)
			}
			st.cpu += f
		}
	}
	cmds, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return st, fmt.Errorf("INFO commandstats: %w", err)
	}
	for line := range strings.Lines(cmds) {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") || name == "cmdstat_info" {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
		n, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			return st, fmt.Errorf("INFO commandstats: %q: %w", line, err)
		}
		st.calls += n
		st.by[strings.TrimPrefix(name, "cmdstat_")] = n
	}
	return st, nil
}

// printProcesses prints TestProcesses' tables, one section per W.
func printProcesses(admin *redis.Client, runs []procRun, ws []int, took time.Duration) {
	p := func(format string, args ...any) { fmt.Printf(format, args...) }
	p("\n## Processes: W workers, each with its own client, on one key\n\n")
	p("%s, GOMAXPROCS=%d (%d CPUs), redis-server %s on loopback; hold %v (a sleep), window %v after %v of warm-up; took %v.\n",
		runtime.Version(), runtime.GOMAXPROCS(0), runtime.NumCPU(), serverVersion(admin),
		*processesHold, *processesDur, *processesWarm, took.Round(time.Second))
	for _, w := range ws {
		var rs []procRun
		for _, r := range runs {
			if r.w == w {
				rs = append(rs, r)
			}
		}
		p("\n### W = %d\n\n", w)
		p("| contender | acq/s | util | max wait | median gap | spread | min acq | max acq | cmds/acq | server CPU/acq | overlaps | errors |\n")
		p("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
		for _, r := range rs {
			p("| %s | %.0f | %.2f | %s | %s | %.2f | %d | %d | %.1f | %.1f µs | %d | %d |\n",
				r.name, r.acqPerSec, r.util, dur(float64(r.maxWait)), dur(float64(r.gap)),
				r.spread(), r.minAcq, r.maxAcq, r.cmdsPerAcq, r.cpuPerAcq, r.overlaps, r.errs)
		}

		// Ratios to the best anchor of each column.
		cols := []struct {
			head    string
			highest bool // higher is better
			of      func(procRun) float64
		}{
			{"acq/s", true, func(r procRun) float64 { return r.acqPerSec }},
			{"util", true, func(r procRun) float64 { return r.util }},
			{"max wait", false, func(r procRun) float64 { return float64(r.maxWait) }},
			{"median gap", false, func(r procRun) float64 { return float64(r.gap) }},
			{"spread", true, func(r procRun) float64 { return r.spread() }},
			{"cmds/acq", false, func(r procRun) float64 { return r.cmdsPerAcq }},
			{"server CPU/acq", false, func(r procRun) float64 { return r.cpuPerAcq }},
		}
		best := make([]*procRun, len(cols))
		for c, col := range cols {
			for k := range rs {
				r := &rs[k]
				if strings.HasPrefix(r.name, "dlock") || r.acquisitions == 0 {
					continue
				}
				if b := best[c]; b == nil || (col.highest && col.of(*r) > col.of(*b)) ||
					(!col.highest && col.of(*r) < col.of(*b)) {
					best[c] = r
				}
			}
		}
		p("\n| ÷ best anchor |")
		for _, col := range cols {
			p(" %s |", col.head)
		}
		p("\n|---|%s\n", strings.Repeat("--:|", len(cols)))
		for _, r := range rs {
			p("| %s |", r.name)
			for c, col := range cols {
				// A ratio to a best of zero or below (a gap can be
				// negative) says nothing.
				if b := best[c]; b == nil || col.of(*b) <= 0 {
					p(" – |")
				} else {
					p(" %s |", ratio(col.of(r), col.of(*b)))
				}
			}
			p("\n")
		}
		p("| best anchor |")
		for c := range cols {
			if best[c] == nil {
				p(" – |")
			} else {
				p(" %s |", best[c].name)
			}
		}
		p("\n\n")

		for _, r := range rs {
			if r.warmStalls > 0 {
				p("%s: %d warm-up Locks (one per worker, each on a free key of its own) did not return within %v and were called again.\n",
					r.name, r.warmStalls, stallAfter)
			}
		}

		if *processesCmds {
			p("Redis commands per acquisition, by command (script-internal calls included):\n\n")
			for _, r := range rs {
				cmds := slices.SortedFunc(maps.Keys(r.cmdsBy), func(a, b string) int {
					return cmp.Or(cmp.Compare(r.cmdsBy[b], r.cmdsBy[a]), cmp.Compare(a, b))
				})
				var parts []string
				for _, c := range cmds {
					parts = append(parts, fmt.Sprintf("%s %.2f", c, r.cmdsBy[c]))
				}
				p("- %s: %s\n", r.name, strings.Join(parts, ", "))
			}
			p("\n")
		}

		// dlock's bounds: a waiter is served within 4 (Mutex) or 2
		// (FairMutex) rounds of all W workers.
		for _, r := range rs {
			k := map[string]int{"dlock": 4, "dlock-fair": 2}[r.name]
			if k == 0 || r.acquisitions == 0 {
				continue
			}
			bound := time.Duration(k*w) * (r.hold + r.gap)
			verdict := "holds"
			if r.maxWait > bound {
				verdict = "does NOT hold"
			}
			p("%s: max wait bound %d×W×(hold+gap) = %d×%d×(%s + %s) = %s; max wait %s (%s of the bound): %s\n",
				r.name, k, k, w, dur(float64(r.hold)), dur(float64(r.gap)), dur(float64(bound)),
				dur(float64(r.maxWait)), ratio(float64(r.maxWait), float64(bound)), verdict)
		}
	}
	p("\n")
}

// serverVersion asks the server behind rdb for its version.
func serverVersion(rdb *redis.Client) string {
	info, err := rdb.Info(context.Background(), "server").Result()
	if err != nil {
		return "(unknown)"
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v
		}
	}
	return "(unknown)"
}

// parseInts parses a comma-separated list of positive integers.
func parseInts(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("bad count %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}
