package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/history"
)

// The demo's worker processes: each is this binary run as
// "dlock demo-worker ...", started by demo.
const (
	// workerCommand is the hidden subcommand a worker process runs.
	workerCommand = "demo-worker"
	// workerEnv is set to "1" in every worker's environment. The real
	// binary needs only the subcommand; a test binary, which is what
	// os.Executable names under "go test", checks it in TestMain to run
	// the worker instead of the tests.
	workerEnv = "DLOCK_DEMO_WORKER"
	// demoLock is the one lock that the demo's processes contend for.
	demoLock = "demo/job"
	// workerGo is what demo writes to every worker's stdin once all of
	// them are ready, so that the contention starts at once for all.
	workerGo = "go"
)

// Events a worker reports on stdout, one line each:
// "<unix nanoseconds> <event> <fence> <detail>".
const (
	evReady    = "ready"    // connected, waiting for workerGo
	evAcquired = "acquired" // detail: how long Lock waited
	evReleased = "released" // detail: how long the lock was held
	evLost     = "lost"     // detail: the lease's error
)

// workerLine formats one event line of the worker protocol.
func workerLine(at time.Time, event string, fence int64, detail string) string {
	return fmt.Sprintf("%d %s %d %s\n", at.UnixNano(), event, fence, detail)
}

// parseWorkerLine parses a line made by workerLine.
func parseWorkerLine(line string) (at time.Time, event string, fence int64, detail string, ok bool) {
	f := strings.SplitN(line, " ", 4)
	if len(f) != 4 {
		return time.Time{}, "", 0, "", false
	}
	ns, err1 := strconv.ParseInt(f[0], 10, 64)
	fence, err2 := strconv.ParseInt(f[2], 10, 64)
	if err1 != nil || err2 != nil {
		return time.Time{}, "", 0, "", false
	}
	return time.Unix(0, ns), f[1], fence, f[3], true
}

// workerConfig is what demo tells a worker on its command line.
type workerConfig struct {
	id      int
	url     string
	prefix  string
	rounds  int
	ttl     time.Duration // renewed lease of each acquisition
	job     time.Duration // the pause inside the counter's read-modify-write
	history string        // file to write the critical sections to
}

// args renders c as the worker's command line.
func (c workerConfig) args() []string {
	return []string{workerCommand,
		"--id", strconv.Itoa(c.id), "--redis", c.url, "--prefix", c.prefix,
		"--rounds", strconv.Itoa(c.rounds), "--ttl", c.ttl.String(),
		"--job", c.job.String(), "--history", c.history}
}

// demoWorkerCmd is the hidden "demo-worker" command: one contending
// process of the demo. It takes the demo lock rounds times; each time it
// increments the lost-update counter under the lock and records its stay
// in the critical section. It reports its events on stdout and writes its
// history to the file demo named. It exits 1 if any round failed.
func demoWorkerCmd(args []string, stdout, stderr io.Writer) int {
	var c workerConfig
	fs := newFlags(workerCommand)
	fs.IntVar(&c.id, "id", 0, "worker number")
	fs.StringVar(&c.url, "redis", "", "Redis URL")
	fs.StringVar(&c.prefix, "prefix", "", "key prefix")
	fs.IntVar(&c.rounds, "rounds", 1, "acquisitions")
	durationVar(fs, &c.ttl, "ttl", "", 2*time.Second, "lease TTL")
	durationVar(fs, &c.job, "job", "", 30*time.Millisecond, "pause inside the job")
	fs.StringVar(&c.history, "history", "", "history file")
	if code, ok := parseFlags(fs, "dlock "+workerCommand+" (internal: started by dlock demo)", args, stdout, stderr); !ok {
		return code
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := runWorker(ctx, c, stdout); err != nil {
		if ctx.Err() != nil {
			return exitInterrupted // the demo was interrupted too: no noise
		}
		fmt.Fprintf(stderr, "%v\n", err)
		return exitFail
	}
	return exitOK
}

// runWorker does a worker's rounds, then writes its history (also after a
// failed round, so that the demo can check what happened).
func runWorker(ctx context.Context, c workerConfig, stdout io.Writer) (err error) {
	rdb, _, err := dialURL(ctx, c.url)
	if err != nil {
		return err
	}
	defer rdb.Close()
	client, err := dlock.New(rdb, dlock.WithPrefix(c.prefix))
	if err != nil {
		return err
	}
	defer client.Close()

	var rec history.Recorder
	defer func() {
		if werr := writeHistory(c.history, &rec); werr != nil {
			err = errors.Join(err, werr)
		}
	}()

	io.WriteString(stdout, workerLine(time.Now(), evReady, 0, "-"))
	if err := awaitGo(ctx, os.Stdin); err != nil {
		return err
	}

	m := client.Mutex(demoLock, dlock.WithTTL(c.ttl))
	counter := history.NewCounter(rdb, counterKey(c.prefix))
	who := fmt.Sprintf("worker %d", c.id)
	for round := 0; round < c.rounds; round++ {
		asked := time.Now()
		lease, err := m.Lock(ctx)
		if err != nil {
			return fmt.Errorf("round %d: %w", round+1, err)
		}
		got := time.Now()
		io.WriteString(stdout, workerLine(got, evAcquired, lease.Fence(), "waited "+formatMillis(got.Sub(asked))))

		exit := rec.Enter(who, lease.Fence())
		jobErr := counter.Increment(lease.Context(ctx), c.job)
		exit()
		left := time.Now()
		if lerr := lease.Err(); lerr != nil {
			io.WriteString(stdout, workerLine(left, evLost, lease.Fence(), lerr.Error()))
			return fmt.Errorf("round %d: %w", round+1, lerr)
		}
		if jobErr != nil {
			_ = unlock(lease)
			return fmt.Errorf("round %d: job: %w", round+1, jobErr)
		}
		// Stamped before the release, so it comes before the next owner's
		// "acquired" in the show.
		io.WriteString(stdout, workerLine(left, evReleased, lease.Fence(), "held "+formatMillis(left.Sub(got))))
		if err := unlock(lease); err != nil {
			return fmt.Errorf("round %d: %w", round+1, err)
		}
		// Think a little between rounds, so that the others get a turn.
		if err := sleep(ctx, rand.N(20*time.Millisecond)); err != nil {
			return err
		}
	}
	return nil
}

// unlockTimeout bounds an Unlock, which must run even after a Ctrl-C.
const unlockTimeout = 5 * time.Second

// unlock releases lease within unlockTimeout.
func unlock(lease *dlock.Lease) error {
	ctx, cancel := context.WithTimeout(context.Background(), unlockTimeout)
	defer cancel()
	return lease.Unlock(ctx)
}

// awaitGo waits for the demo's go-ahead line on r.
func awaitGo(ctx context.Context, r io.Reader) error {
	got := make(chan error, 1)
	go func() { // may outlive a cancelled wait; the process exits then
		line, err := bufio.NewReader(r).ReadString('\n')
		if err == nil && strings.TrimSpace(line) != workerGo {
			err = fmt.Errorf("unexpected go-ahead %q", line)
		}
		got <- err
	}()
	select {
	case err := <-got:
		if err != nil {
			return fmt.Errorf("waiting for the go-ahead: %w", err)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// writeHistory writes rec's events to the file at path as JSON lines.
func writeHistory(path string, rec *history.Recorder) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := rec.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
