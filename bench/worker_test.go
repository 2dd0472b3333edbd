package bench

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A worker is this test binary started with workerEnv set; TestMain then
// runs workerMain instead of the tests. It plays one side of a
// multi-process benchmark, talking to the benchmark over its stdin and
// stdout, one line per message.
const (
	workerEnv  = "DLOCK_BENCH_WORKER" // "contend" or "wait"
	workerImpl = "DLOCK_BENCH_IMPL"   // implementation name
	workerAddr = "DLOCK_BENCH_ADDR"   // redis-server address
	workerKey  = "DLOCK_BENCH_KEY"    // lock name
	workerG    = "DLOCK_BENCH_G"      // goroutines (contend)
)

// The procs run of BenchmarkContended: workerProcs processes with
// workerGoroutines goroutines each contend for one lock.
const (
	workerProcs      = 4
	workerGoroutines = 4
)

// worker is a running worker process.
type worker struct {
	cmd *exec.Cmd
	out *bufio.Reader

	mu    sync.Mutex // guards stdin
	stdin io.WriteCloser
}

// startWorker starts a worker of the given kind and waits for its "ready".
// It is killed, if still running, when the benchmark run ends.
func startWorker(b *testing.B, kind, name, key string, g int) *worker {
	b.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), workerEnv+"="+kind, workerImpl+"="+name,
		workerAddr+"="+serverAddr(b), workerKey+"="+key, workerG+"="+strconv.Itoa(g))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		fatalf(b, "%v", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		fatalf(b, "%v", err)
	}
	if err := cmd.Start(); err != nil {
		fatalf(b, "starting worker: %v", err)
	}
	w := &worker{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout)}
	b.Cleanup(w.kill)
	if line, err := w.read(); err != nil || line != "ready" {
		fatalf(b, "%s worker did not get ready: %q %v", name, line, err)
	}
	return w
}

// send writes a line to the worker; after close it does nothing.
func (w *worker) send(line string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stdin == nil {
		return nil
	}
	_, err := io.WriteString(w.stdin, line+"\n")
	return err
}

// close closes the worker's stdin: the worker finishes.
func (w *worker) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stdin != nil {
		_ = w.stdin.Close()
		w.stdin = nil
	}
}

// read returns the worker's next line. A line "error ..." is returned as
// an error.
func (w *worker) read() (string, error) {
	line, err := w.out.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSpace(line)
	if msg, ok := strings.CutPrefix(line, "error "); ok {
		return "", errors.New(msg)
	}
	return line, nil
}

// kill stops the worker if it is still running.
func (w *worker) kill() {
	w.close()
	if w.cmd.ProcessState == nil {
		_ = w.cmd.Process.Kill()
		_ = w.cmd.Wait()
	}
}

// contendedProcs returns the multi-process benchmark of one
// implementation. The timer runs from the moment every worker is ready to
// the moment the b.N-th acquisition (of any worker) is reported. Stalls are
// watched here, over the acquisitions of all workers.
//
// Protocol: the benchmark sends "go", then "unstick" after a stall, and
// closes stdin to stop. The worker reports "w <wait ns> <UnixNano> <goroutine>"
// after each acquisition, "u <ns>" for each wait cut short by the stop,
// and "end". Handoffs are counted by ordering the acquisitions of all
// workers by the wall-clock time at which they were made.
func contendedProcs(name string, procs, g int) func(*testing.B) {
	return func(b *testing.B) {
		key := newKey("procs")
		ws := make([]*worker, procs)
		for i := range ws {
			ws[i] = startWorker(b, "contend", name, key, g)
		}
		stopAll := sync.OnceFunc(func() {
			for _, w := range ws {
				w.close()
			}
		})
		defer stopAll()

		type turn struct {
			at    int64 // UnixNano
			owner string
		}
		waits := make([]time.Duration, b.N)
		turns := make([]turn, b.N)
		var (
			count, progress atomic.Int64
			mu              sync.Mutex
			unserved        []time.Duration
			wg              sync.WaitGroup
		)
		errs := make([]error, procs)
		done := make(chan struct{})
		b.ResetTimer()
		progress.Store(time.Now().UnixNano())
		stalls := stallWatch(&progress, done, func() {
			for _, w := range ws {
				_ = w.send("unstick")
			}
		})
		for i, w := range ws {
			if err := w.send("go"); err != nil {
				fatalf(b, "%v", err)
			}
			wg.Go(func() {
				defer func() {
					if errs[i] != nil {
						stopAll()
					}
				}()
				for {
					line, err := w.read()
					if err != nil {
						errs[i] = err
						return
					}
					if line == "end" {
						errs[i] = w.cmd.Wait()
						return
					}
					kind, v, err := parseLine(line)
					if err != nil {
						errs[i] = err
						return
					}
					switch kind {
					case "w":
						progress.Store(time.Now().UnixNano())
						k := count.Add(1)
						if k <= int64(b.N) {
							waits[k-1] = time.Duration(v[0])
							turns[k-1] = turn{at: v[1], owner: fmt.Sprint(i, ".", v[2])}
						}
						if k == int64(b.N) {
							b.StopTimer()
							stopAll()
						}
					case "u":
						mu.Lock()
						unserved = append(unserved, time.Duration(v[0]))
						mu.Unlock()
					}
				}
			})
		}
		wg.Wait()
		close(done)
		if err := errors.Join(errs...); err != nil {
			fatalf(b, "%s worker: %v", name, err)
		}
		if count.Load() < int64(b.N) {
			fatalf(b, "%s: workers made %d acquisitions, want %d", name, count.Load(), b.N)
		}
		slices.SortFunc(turns, func(x, y turn) int { return cmp.Compare(x.at, y.at) })
		handoffs := 0
		owners := make([]string, len(turns))
		for k := range turns {
			owners[k] = turns[k].owner
			if k > 0 && turns[k].owner != turns[k-1].owner {
				handoffs++
			}
		}
		reportContention(b, waits, unserved, float64(handoffs)/float64(max(b.N-1, 1)),
			inTurn(owners, procs*g), stalls())
	}
}

// parseLine splits a worker's line "kind n1 n2 ..." into its kind and
// integers: at least one, and as many as the kind has.
func parseLine(line string) (kind string, v []int64, err error) {
	f := strings.Fields(line)
	if len(f) == 0 {
		return "", nil, fmt.Errorf("bad line %q", line)
	}
	want := map[string]int{"w": 3, "u": 1}[f[0]]
	if want == 0 || len(f)-1 != want {
		return "", nil, fmt.Errorf("bad line %q", line)
	}
	v = make([]int64, want)
	for j := range v {
		if v[j], err = strconv.ParseInt(f[j+1], 10, 64); err != nil {
			return "", nil, fmt.Errorf("bad line %q", line)
		}
	}
	return f[0], v, nil
}

// workerMain is a worker process's main; it returns the exit code.
func workerMain() int {
	out := &lineWriter{w: bufio.NewWriter(os.Stdout)}
	var err error
	switch kind := os.Getenv(workerEnv); kind {
	case "contend":
		err = contendWorker(out)
	case "wait":
		err = waitWorker(out)
	default:
		err = fmt.Errorf("unknown worker kind %q", kind)
	}
	if err != nil {
		out.printf("error %v", err)
		return 1
	}
	return 0
}

// lineWriter writes whole lines to stdout, each at once, from any
// goroutine.
type lineWriter struct {
	mu sync.Mutex
	w  *bufio.Writer
}

func (l *lineWriter) printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, format+"\n", args...)
	_ = l.w.Flush()
}

// workerBackend opens the worker's implementation and warms it up with g
// goroutines on keys of the worker's own.
func workerBackend(g int) (*backend, error) {
	be, err := openBackend(os.Getenv(workerImpl), os.Getenv(workerAddr))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), warmTimeout)
	defer cancel()
	warm := fmt.Sprintf("%s:warm:%d", os.Getenv(workerKey), os.Getpid())
	errs := make([]error, g)
	var wg sync.WaitGroup
	for i := range g {
		wg.Go(func() { errs[i] = lockUnlock(ctx, be.newMutex(fmt.Sprintf("%s:%d", warm, i))) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		be.close()
		return nil, fmt.Errorf("warm-up: %w", err)
	}
	return be, nil
}

// contendWorker is one process of the procs run of BenchmarkContended.
func contendWorker(out *lineWriter) error {
	g, err := strconv.Atoi(os.Getenv(workerG))
	if err != nil {
		return fmt.Errorf("%s: %w", workerG, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	be, err := workerBackend(g)
	if err != nil {
		return err
	}
	defer be.close()

	c := newContest(ctx, be, os.Getenv(workerKey), g)
	in := bufio.NewScanner(os.Stdin)
	res, err := c.run(func() {
		out.printf("ready")
		if !in.Scan() || in.Text() != "go" {
			c.stop()
			return
		}
		go func() {
			for in.Scan() {
				if in.Text() == "unstick" {
					c.unstick()
				}
			}
			c.stop() // stdin closed: the benchmark has all it needs
		}()
	}, func(a acquisition) { out.printf("w %d %d %d", a.wait, a.at.UnixNano(), a.owner) })
	if err != nil {
		return err
	}
	for _, d := range res.unserved {
		out.printf("u %d", d)
	}
	out.printf("end")
	return nil
}
