package dlock_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/envdriver"
	"github.com/dlock-go/dlock/internal/history"
	"github.com/dlock-go/dlock/internal/protocol"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// The test binary doubles as the helper processes of the tests about
// several processes: with helperEnv set, TestMain runs helperMain instead
// of the tests. Settings come in the environment.
const (
	helperEnv  = "DLOCK_TEST_HELPER" // mode: contend, hold, fairwait, mutexwait, readwait, observe, lead
	addrEnv    = "DLOCK_TEST_ADDR"   // redis-server address
	nameEnv    = "DLOCK_TEST_NAME"   // lock name
	ttlEnv     = "DLOCK_TEST_TTL"    // lease TTL (time.Duration)
	outEnv     = "DLOCK_TEST_OUT"    // contend: file for the history
	roundsEnv  = "DLOCK_TEST_ROUNDS" // contend: acquisitions per goroutine
	workersEnv = "DLOCK_TEST_GOROUTINES"
	addrsEnv   = "DLOCK_TEST_QUORUM" // comma-separated masters: a RedLock client
)

func helperMain(mode string) int {
	ctx := context.Background()
	if mode == "party" { // (deadlock_test.go: a Client of its own making)
		return helperParty(ctx)
	}
	ttl, _ := time.ParseDuration(os.Getenv(ttlEnv))
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv(addrEnv)})
	defer rdb.Close()
	defer envdriver.Forget(rdb)
	c, err := envdriver.New(rdb) // DLOCK_TEST_DRIVER is inherited
	if addrs := os.Getenv(addrsEnv); addrs != "" {
		var nodes []*redis.Client
		for _, a := range strings.Split(addrs, ",") {
			n := redis.NewClient(&redis.Options{Addr: a, ContextTimeoutEnabled: true})
			defer n.Close()
			nodes = append(nodes, n)
		}
		c, err = dlock.NewQuorum(nodes, dlock.WithNodeTimeout(time.Second)) // a loaded CI machine
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer c.Close()
	m := c.Mutex(os.Getenv(nameEnv), dlock.WithTTL(ttl))
	switch mode {
	case "contend":
		err = helperContend(ctx, rdb, m)
	case "hold":
		err = helperHold(ctx, rdb, m)
	case "semaphore":
		err = helperSemaphore(ctx, rdb, c.Semaphore(m.Name(), 3, dlock.WithTTL(ttl)))
	case "fairwait":
		err = helperWait(ctx, c.FairMutex(m.Name(), dlock.WithTTL(ttl), dlock.WithQueueTTL(ttl)))
	case "mutexwait":
		err = helperWait(ctx, c.Mutex(m.Name(), dlock.WithTTL(ttl), dlock.WithQueueTTL(ttl)))
	case "readwait":
		err = helperWait(ctx, c.RWMutex(m.Name(), dlock.WithTTL(ttl), dlock.WithQueueTTL(ttl)).RLocker())
	case "latesdk":
		err = helperLateSDK(ctx, m)
	case "observe":
		err = helperObserve(ctx, c.Election(m.Name()))
	case "lead":
		err = helperLead(ctx, c.Election(m.Name(), dlock.WithTTL(ttl)))
	default:
		err = fmt.Errorf("unknown helper mode %q", mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	return 0
}

// helperLateSDK locks and unlocks m, installs OpenTelemetry SDK
// providers as the global ones (as a program that sets them up after it
// made its Client does), locks and unlocks again, and says "ok" when the
// SDK saw the second round's spans and measurements (only those).
func helperLateSDK(ctx context.Context, m *dlock.Mutex) error {
	round := func() error {
		l, err := m.Lock(ctx)
		if err != nil {
			return err
		}
		return l.Unlock(ctx)
	}
	if err := round(); err != nil {
		return err
	}
	spans := tracetest.NewSpanRecorder()
	reader := sdkmetric.NewManualReader()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)))
	otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	if err := round(); err != nil {
		return err
	}
	var names []string
	for _, s := range spans.Ended() {
		names = append(names, s.Name())
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		return err
	}
	acquires := uint64(0)
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			if h, ok := mt.Data.(metricdata.Histogram[float64]); ok && mt.Name == "dlock.acquire.duration" {
				for _, p := range h.DataPoints {
					acquires += p.Count
				}
			}
		}
	}
	fmt.Println(strings.Join(append([]string{"ok"}, names...), " "), acquires)
	return nil
}

// helperContend runs goroutines that each take the lock rounds times, do
// a lost-update-prone increment under it, and record their critical
// sections; the history goes to the file named by outEnv.
func helperContend(ctx context.Context, rdb *redis.Client, m *dlock.Mutex) error {
	rounds, _ := strconv.Atoi(os.Getenv(roundsEnv))
	workers, _ := strconv.Atoi(os.Getenv(workersEnv))
	counter := history.NewCounter(rdb, m.Name()+":counter")
	var rec history.Recorder
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for g := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			who := fmt.Sprintf("p%d/g%d", os.Getpid(), g)
			for range rounds {
				l, err := m.Lock(ctx)
				if err != nil {
					errs <- err
					return
				}
				exit := rec.Enter(who, l.Fence())
				err = counter.Increment(ctx, 200*time.Microsecond)
				exit()
				if err == nil {
					err = l.Unlock(ctx)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	f, err := os.Create(os.Getenv(outEnv))
	if err != nil {
		return err
	}
	if _, err := rec.WriteTo(f); err != nil {
		return err
	}
	return f.Close()
}

// fencedSet is the protected resource of the pause test: it stores a
// value only with a fence at least as high as any it has stored.
var fencedSet = redis.NewScript(`
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
if tonumber(ARGV[1]) < cur then return 0 end
redis.call('SET', KEYS[1], ARGV[1])
return 1`)

// helperHold takes the lock, prints "locked <fence>", then acts as owner
// every few milliseconds — a fenced write, done only while its lease says
// it is held — until it learns the lease is lost: it prints "lost" then.
// A write the fence rejects prints "rejected".
func helperHold(ctx context.Context, rdb *redis.Client, m *dlock.Mutex) error {
	l, err := m.Lock(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("locked %d\n", l.Fence())
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for range tick.C {
		if err := l.Err(); err != nil {
			fmt.Printf("lost %v\n", err)
			return nil
		}
		ok, err := fencedSet.Run(ctx, rdb, []string{m.Name() + ":store"}, l.Fence()).Int()
		if err != nil {
			return err
		}
		if ok == 0 {
			fmt.Println("rejected")
		}
	}
	return nil
}

// helperWait reads "wait <id>" lines on stdin; for each it waits for the
// lock (fairwait: a FairMutex; mutexwait: a Mutex; readwait: an RWMutex's
// read side) in a goroutine, prints
// "granted <id> <fence>" when it has it, and unlocks. It returns when stdin
// is closed and every wait is over.
func helperWait(ctx context.Context, f dlock.Locker) error {
	var wg sync.WaitGroup
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		id, ok := strings.CutPrefix(sc.Text(), "wait ")
		if !ok {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := f.Lock(ctx)
			if err != nil {
				fmt.Fprintln(os.Stderr, "helper:", err)
				return
			}
			fmt.Printf("granted %s %d\n", id, l.Fence())
			_ = l.Unlock(ctx)
		}()
	}
	wg.Wait()
	return sc.Err()
}

// helperSemaphore runs goroutines that each take one permit rounds times
// and count themselves in a Redis counter while they hold it; a count above
// the capacity (3) is an error.
func helperSemaphore(ctx context.Context, rdb *redis.Client, s *dlock.Semaphore) error {
	rounds, _ := strconv.Atoi(os.Getenv(roundsEnv))
	workers, _ := strconv.Atoi(os.Getenv(workersEnv))
	inside := s.Name() + ":inside"
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				l, err := s.Acquire(ctx, 1)
				if err != nil {
					errs <- err
					return
				}
				if n := rdb.Incr(ctx, inside).Val(); n > 3 {
					errs <- fmt.Errorf("%d holders inside a semaphore of 3", n)
				}
				time.Sleep(time.Millisecond)
				rdb.Decr(ctx, inside)
				if err := l.Unlock(ctx); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// helper is a running helper process.
type helper struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string // its stdout, a line at a time; closed at exit
}

// send writes a line to the helper's stdin.
func (h *helper) send(t *testing.T, line string) {
	t.Helper()
	if _, err := fmt.Fprintln(h.stdin, line); err != nil {
		t.Fatal(err)
	}
}

// startHelper starts the test binary as a helper process in mode, with
// env added to its environment. It is killed when the test ends.
func startHelper(t *testing.T, mode string, env ...string) *helper {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), append(env, helperEnv+"="+mode)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &helper{cmd: cmd, stdin: in, lines: make(chan string, 64)}
	go func() {
		defer close(h.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			h.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		for range h.lines {
		}
		_ = cmd.Wait()
	})
	return h
}

// expect waits for the helper's next line and checks its first word.
func (h *helper) expect(t *testing.T, word string, within time.Duration) string {
	t.Helper()
	select {
	case line, ok := <-h.lines:
		if !ok {
			t.Fatalf("helper exited before saying %q", word)
		}
		if !strings.HasPrefix(line, word) {
			t.Fatalf("helper said %q, want %q", line, word)
		}
		return line
	case <-time.After(within):
		t.Fatalf("helper did not say %q within %v", word, within)
	}
	return ""
}

func fenceOf(t *testing.T, line string) int64 {
	t.Helper()
	f, err := strconv.ParseInt(strings.Fields(line)[1], 10, 64)
	if err != nil {
		t.Fatalf("no fence in %q", line)
	}
	return f
}

// waitForSubscribers waits until the server has at least n pub/sub
// channels with subscribers.
func waitForSubscribers(t *testing.T, admin *redis.Client, n int) {
	t.Helper()
	for range 500 {
		chs, err := admin.PubSubChannels(context.Background(), "*").Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(chs) >= n {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("no subscriber appeared")
}

// lockKind is one kind of lock, taken through its own API.
type lockKind struct {
	name string
	lock func(c *dlock.Client, name string, ctx context.Context, opts ...dlock.LockOption) (*dlock.Lease, error)
	// try makes one attempt at an acquire of the kind itself.
	try func(c *dlock.Client, name string, ctx context.Context) (*dlock.Lease, error)
	// probe makes one attempt at an acquire that the kind's hold excludes
	// (for a read hold: a writer's).
	probe func(c *dlock.Client, name string, ctx context.Context) (*dlock.Lease, error)
}

// allKinds are the exclusive-or-counted kinds: Mutex, FairMutex, the two
// sides of an RWMutex, and a Semaphore of one permit.
var allKinds = []lockKind{
	{"Mutex",
		func(c *dlock.Client, n string, ctx context.Context, o ...dlock.LockOption) (*dlock.Lease, error) {
			return c.Mutex(n).Lock(ctx, o...)
		},
		func(c *dlock.Client, n string, ctx context.Context) (*dlock.Lease, error) {
			return c.Mutex(n).TryLock(ctx)
		},
		func(c *dlock.Client, n string, ctx context.Context) (*dlock.Lease, error) {
			return c.Mutex(n).TryLock(ctx)
		}},
	{"FairMutex",
		func(c *dlock.Client, n string, ctx context.Context, o ...dlock.LockOption) (*dlock.Lease, error) {
			return c.FairMutex(n).Lock(ctx, o...)
		},
		func(c *dlock.Client, n string, ctx context.Context) (*dlock.Lease, error) {
			return c.FairMutex(n).TryLock(ctx)
		},
		func(c *dlock.Client, n string, ctx context.Context) (*dlock.Lease, error) {
			return c.FairMutex(n).TryLock(ctx)
		}},
	{"RWMutex.RLock",
		func(c *dlock.Client, n string, ctx context.Context, o ...dlock.LockOption) (*dlock.Lease, error) {
			return c.RWMutex(n).RLock(ctx, o...)
		},
		func(c *dlock.Client, n string, ctx context.Context) (*dlock.Lease, error) {
			return c.RWMutex(n).TryRLock(ctx)
		},
		func(c *dlock.Client, n string, ctx context.Context) (*dlock.Lease, error) {
			return c.RWMutex(n).TryLock(ctx)
		}},
	{"RWMutex.Lock",
		func(c *dlock.Client, n string, ctx context.Context, o ...dlock.LockOption) (*dlock.Lease, error) {
			return c.RWMutex(n).Lock(ctx, o...)
		},
		func(c *dlock.Client, n string, ctx context.Context) (*dlock.Lease, error) {
			return c.RWMutex(n).TryLock(ctx)
		},
		func(c *dlock.Client, n string, ctx context.Context) (*dlock.Lease, error) {
			return c.RWMutex(n).TryLock(ctx)
		}},
	{"Semaphore",
		func(c *dlock.Client, n string, ctx context.Context, o ...dlock.LockOption) (*dlock.Lease, error) {
			return c.Semaphore(n, 1).Acquire(ctx, 1, o...)
		},
		func(c *dlock.Client, n string, ctx context.Context) (*dlock.Lease, error) {
			return c.Semaphore(n, 1).TryAcquire(ctx, 1)
		},
		func(c *dlock.Client, n string, ctx context.Context) (*dlock.Lease, error) {
			return c.Semaphore(n, 1).TryAcquire(ctx, 1)
		}},
}

// lockFields reads a lock's key: a mutex's hold (one string, see
// protocol.ParseHold) as the fields the other kinds' hashes keep, and a
// hash as it is.
func lockFields(ctx context.Context, rdb *redis.Client, key string) (map[string]string, error) {
	typ, err := rdb.Type(ctx, key).Result()
	if err != nil || typ != "string" {
		if err == nil {
			return rdb.HGetAll(ctx, key).Result()
		}
		return nil, err
	}
	v, err := rdb.Get(ctx, key).Result()
	if err != nil {
		return map[string]string{}, nil // gone since TYPE
	}
	h, ok := protocol.ParseHold(v)
	if !ok {
		return nil, fmt.Errorf("%s = %q: not a mutex hold", key, v)
	}
	return h.Fields(), nil
}

// putHold makes key a mutex hold of token (fence 1, taken at 0), as the
// scripts would write one, for ttl.
func putHold(ctx context.Context, rdb *redis.Client, key, token string, ttl time.Duration) error {
	return rdb.Set(ctx, key, token+" 1 0 1 0 0 ", ttl).Err()
}

// fieldsOf is lockFields that fails t on an error.
func fieldsOf(t *testing.T, rdb *redis.Client, key string) map[string]string {
	t.Helper()
	f, err := lockFields(context.Background(), rdb, key)
	if err != nil {
		t.Fatal(err)
	}
	return f
}
