package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/dlock-go/dlock/internal/history"
	"github.com/redis/go-redis/v9"
)

// demoSynopsis is the demo's usage line.
const demoSynopsis = "dlock demo [--workers 4] [--rounds 5] [--redis URL] [--prefix dlock-demo]"

// Demo settings that have no flag.
const (
	demoTTL     = 2 * time.Second       // each worker's lease, renewed
	demoJob     = 30 * time.Millisecond // the pause in the racy increment
	demoTimeout = 60 * time.Second      // the whole demo, should anything hang
	readyWait   = 15 * time.Second      // for the workers to connect
	maxWorkers  = 64                    // processes, a sanity bound
	maxRounds   = 1000                  // per worker, a sanity bound
	workerGrace = 3 * time.Second       // SIGTERM to SIGKILL for a cancelled worker
	cleanupWait = 5 * time.Second       // for the key clean-up at start
	demoPrefix  = "dlock-demo"          // default key prefix
	counterName = "counter"             // <prefix>:counter, the lost-update detector
	resourceKey = "resource"            // the fenced resource: <prefix>:{resource}, its Guard's record <prefix>:fenced:{resource}
	historyGlob = "worker-*.jsonl"      // the workers' history files
	historyFile = "worker-%d.jsonl"     // one worker's history file
)

// demoConfig is the demo's command line.
type demoConfig struct {
	workers  int
	rounds   int
	url      string
	prefix   string
	embedded bool
}

// counterKey is the key of the demo's lost-update counter.
func counterKey(prefix string) string { return prefix + ":" + counterName }

// demoCmd is "dlock demo": it starts a server unless given one, lets
// worker processes contend for one lock, shows a lease being lost, and
// checks the outcome. It returns 0 when every check passed, 1 otherwise.
func demoCmd(args []string, stdout, stderr io.Writer) int {
	var c demoConfig
	fs := newFlags("demo")
	fs.IntVar(&c.workers, "workers", 4, "`n` worker processes contend for the lock")
	fs.IntVar(&c.rounds, "rounds", 5, "acquisitions per worker")
	fs.StringVar(&c.url, "redis", "", "use the Redis at `URL` instead of starting one: "+serverForm+", "+clusterForm+" or "+sentinelForm)
	fs.StringVar(&c.prefix, "prefix", demoPrefix, "key `prefix`; the demo resets its counter under it")
	fs.BoolVar(&c.embedded, "embedded", false, "") // internal: use miniredis even if redis-server exists
	_ = fs.MarkHidden("embedded")
	if code, ok := parseFlags(fs, demoSynopsis, args, stdout, stderr); !ok {
		return code
	}
	switch {
	case fs.NArg() > 0:
		return usageError(stderr, demoSynopsis, "demo takes no arguments, got %q", fs.Args())
	case c.workers < 1 || c.workers > maxWorkers:
		return usageError(stderr, demoSynopsis, "--workers %d: want 1 to %d", c.workers, maxWorkers)
	case c.rounds < 1 || c.rounds > maxRounds:
		return usageError(stderr, demoSynopsis, "--rounds %d: want 1 to %d", c.rounds, maxRounds)
	}
	if err := checkPrefix(c.prefix); err != nil {
		return usageError(stderr, demoSynopsis, "%v", err)
	}

	sig, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(sig, demoTimeout)
	defer cancel()
	ok, err := demo(ctx, c, stdout, stderr)
	switch {
	case sig.Err() != nil:
		fmt.Fprintln(stderr, "dlock demo: interrupted")
		return exitInterrupted
	case errors.Is(err, context.DeadlineExceeded):
		fmt.Fprintf(stderr, "dlock demo: did not finish within %v\n", demoTimeout)
		return exitFail
	case err != nil:
		fmt.Fprintf(stderr, "dlock demo: %v\n", err)
		return exitFail
	case !ok:
		return exitFail
	}
	return exitOK
}

// demo runs the show. It returns whether every check passed, or an error
// when the demo could not be carried out at all.
func demo(ctx context.Context, c demoConfig, stdout, stderr io.Writer) (bool, error) {
	fmt.Fprintf(stdout, "dlock demo: %d processes take lock %q %d times each and, holding it,\n"+
		"increment a counter with a racy read-sleep-write (lost updates show overlaps)\n",
		c.workers, demoLock, c.rounds)
	srv, err := chooseServer(ctx, c.url, c.embedded)
	if err != nil {
		return false, err
	}
	defer srv.stop()
	rdb, where, err := dialURL(ctx, srv.url)
	if err != nil {
		return false, err
	}
	defer rdb.Close()
	if srv.given {
		srv.addr = where // a cluster found through a node's URL shows as one
	}
	version := srv.version
	if version == "" {
		version = serverVersion(ctx, rdb)
	}
	given := ""
	if srv.given {
		given = " (--redis)"
	}
	fmt.Fprintf(stdout, "server: %s on %s%s\n", strings.TrimSpace(srv.kind+" "+version), srv.addr, given)

	k := keysFor(c.prefix, demoLock)
	if err := resetKeys(ctx, rdb, c.prefix); err != nil {
		return false, err
	}
	fmt.Fprintf(stdout, "keys: lock %s, fences %s (never reset), counter %s (reset to 0)\n\n",
		k.Lock, k.Fence, counterKey(c.prefix))

	dir, err := os.MkdirTemp("", "dlock-demo-history-")
	if err != nil {
		return false, err
	}
	defer os.RemoveAll(dir)

	sh := newShow(stdout, time.Now())
	fleet, err := startFleet(ctx, c, srv.url, dir, sh, stderr)
	if err != nil {
		sh.close()
		return false, err
	}
	runErr := fleet.run(ctx)
	if ctx.Err() != nil {
		sh.close()
		return false, ctx.Err()
	}
	sh.println("\nsafety: a holder whose fixed lease runs out in the middle of its job")
	scene, sceneErr := safetyScene(ctx, rdb, c.prefix, sh)
	sh.close()
	if ctx.Err() != nil {
		return false, ctx.Err()
	}

	events, readErr := readHistories(dir)
	counter, cerr := history.NewCounter(rdb, counterKey(c.prefix)).Value(ctx)
	v := judge(c, fleet.failures(), events, counter, errors.Join(runErr, readErr, cerr), scene, sceneErr)
	fmt.Fprintln(stdout)
	fmt.Fprintln(stdout, v.line())
	for _, d := range v.details {
		fmt.Fprintln(stdout, "  "+d)
	}
	return v.ok(), nil
}

// resetKeys deletes the demo's counter and fenced resource, so that a
// rerun against the same server starts from zero. The lock's fencing
// counter is left alone: fences never go back.
func resetKeys(ctx context.Context, rdb redis.Cmdable, prefix string) error {
	ctx, cancel := context.WithTimeout(ctx, cleanupWait)
	defer cancel()
	// One key at a time: on a cluster they are in different slots. The
	// resource goes with its Guard's record.
	for _, k := range []string{counterKey(prefix), dataKey(prefix), fencedGuard(nil, prefix).Record(resourceKey)} {
		if err := rdb.Del(ctx, k).Err(); err != nil {
			return fmt.Errorf("resetting the demo keys: %w", err)
		}
	}
	return nil
}

// readHistories reads and merges the workers' history files in dir.
func readHistories(dir string) ([]history.Event, error) {
	files, err := filepath.Glob(filepath.Join(dir, historyGlob))
	if err != nil {
		return nil, err
	}
	var all []history.Event
	var errs []error
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		events, err := history.Read(f)
		f.Close()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", filepath.Base(name), err))
		}
		all = append(all, events...)
	}
	return all, errors.Join(errs...)
}

// verdict is the outcome of the demo's checks.
type verdict struct {
	problems []string // one line each; empty when everything held
	facts    []string // what was shown to hold
	details  []string // the violations behind the problems, one per line
}

// ok reports whether every check passed.
func (v verdict) ok() bool { return len(v.problems) == 0 }

// line is the verdict line the demo ends with.
func (v verdict) line() string {
	if v.ok() {
		return "verdict: OK — " + strings.Join(v.facts, ", ")
	}
	return "verdict: FAIL — " + strings.Join(v.problems, "; ")
}

// judge checks the recorded history, the counter and the safety scene.
// err gathers what went wrong while running or reading the results.
func judge(c demoConfig, failed []string, events []history.Event, counter int64,
	err error, scene safetyResult, sceneErr error) verdict {
	var v verdict
	if err != nil {
		v.problems = append(v.problems, err.Error())
	}
	v.problems = append(v.problems, failed...)

	want := c.workers * c.rounds
	n := len(events)
	if n != want {
		v.problems = append(v.problems, fmt.Sprintf("%d of %d acquisitions recorded", n, want))
	}
	sorted := slices.Clone(events)
	slices.SortFunc(sorted, func(a, b history.Event) int { return cmp.Compare(a.Enter, b.Enter) })
	handoffs := 0
	for i := 1; i < len(sorted); i++ {
		if sorted[i].Worker != sorted[i-1].Worker {
			handoffs++
		}
	}
	v.facts = append(v.facts, fmt.Sprintf("%d acquisitions by %d processes (%d handoffs)", n, c.workers, handoffs))
	if cerr := history.Check(events); cerr != nil {
		head, rest, _ := strings.Cut(cerr.Error(), "\n")
		v.problems = append(v.problems, strings.TrimSuffix(head, ":")+" of mutual exclusion or fence order")
		if rest != "" {
			v.details = append(v.details, strings.Split(rest, "\n")...)
		}
	} else if n > 0 {
		v.facts = append(v.facts, fmt.Sprintf("fences %d..%d strictly increasing, no overlapping critical sections",
			sorted[0].Fence, sorted[n-1].Fence))
	}
	if counter != int64(n) {
		v.problems = append(v.problems, fmt.Sprintf("counter %d/%d: updates were lost, critical sections overlapped", counter, n))
	} else {
		v.facts = append(v.facts, fmt.Sprintf("counter %d/%d", counter, n))
	}

	if sceneErr != nil {
		v.problems = append(v.problems, "safety scene: "+sceneErr.Error())
	} else if p := scene.problems(); len(p) > 0 {
		v.problems = append(v.problems, p...)
	} else {
		v.facts = append(v.facts, "lost lease signalled before the next owner got it, stale write fenced off")
	}
	return v
}
