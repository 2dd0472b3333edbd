package bench

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

// srv is the one redis-server every benchmark of the run talks to. It is
// started by the first benchmark that needs it and stopped by TestMain.
var (
	srvOnce sync.Once
	srv     *redistest.Server
	srvErr  error
)

func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) != "" {
		os.Exit(workerMain())
	}
	code := m.Run()
	if srv != nil {
		srv.Close()
	}
	closeServers()
	os.Exit(code)
}

// serverAddr returns the address of the shared redis-server, starting it
// on first use.
func serverAddr(b *testing.B) string {
	b.Helper()
	srvOnce.Do(func() { srv, srvErr = redistest.Start(redistest.Options{}) })
	if srvErr != nil {
		fatalf(b, "starting redis-server: %v", srvErr)
	}
	return srv.Addr()
}

// open connects a fresh instance of the named implementation to the shared
// server, closed when the benchmark run ends.
func open(b *testing.B, name string) *backend {
	b.Helper()
	be, err := openBackend(name, serverAddr(b))
	return keep(b, be, err)
}

// keep ends the benchmark run if an open failed, and otherwise closes the
// backend when the run ends.
func keep(b *testing.B, be *backend, err error) *backend {
	b.Helper()
	if err != nil {
		fatalf(b, "%v", err)
	}
	b.Cleanup(be.close)
	return be
}

// servers holds what closeServers stops when the tests end: the servers
// that some benchmarks start for themselves (see quorumAddrs, cluster).
var servers struct {
	sync.Mutex
	closers []func()
}

// atExit has TestMain call f when the tests end.
func atExit(f func()) {
	servers.Lock()
	defer servers.Unlock()
	servers.closers = append(servers.closers, f)
}

func closeServers() {
	servers.Lock()
	defer servers.Unlock()
	for _, f := range servers.closers {
		f()
	}
	servers.closers = nil
}

// opener connects a fresh instance of an implementation, to a server or
// servers of its own choice, for one benchmark run; the backend is closed
// when the run ends.
type opener func(b *testing.B) *backend

// shared opens the named implementation on the shared server.
func shared(name string) opener {
	return func(b *testing.B) *backend { return open(b, name) }
}

// keySeq makes every benchmark run's keys its own: the testing package
// runs a benchmark function several times while it sizes b.N.
var keySeq atomic.Int64

// newKey returns a lock name no other benchmark run uses.
func newKey(label string) string {
	return fmt.Sprintf("bench:%s:%d", label, keySeq.Add(1))
}

// waitTimeout bounds every blocking Lock of a benchmark: far above any
// wait a working lock should see, so that a stuck run fails instead of
// hanging.
const waitTimeout = 2 * time.Minute

// warmTimeout bounds a warm-up, which has no way out of a lost wake-up.
const warmTimeout = 10 * time.Second

// warmUp takes and releases n locks at once (each side of a read-write
// lock), on keys of their own, so that connection pools are filled and
// scripts are loaded before the timer starts.
func warmUp(b *testing.B, be *backend, n int) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), warmTimeout)
	defer cancel()
	label := newKey("warm")
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			key := fmt.Sprintf("%s:%d", label, i)
			ms := []mutex{be.newMutex(key)}
			if be.newReader != nil {
				ms = append(ms, be.newReader(key))
			}
			for k := range 2 * len(ms) {
				m := ms[k%len(ms)]
				if err := m.Lock(ctx); err != nil {
					errorf(b, "%s: warm-up lock: %v", be.name, err)
					return
				}
				if err := m.Unlock(ctx); err != nil {
					errorf(b, "%s: warm-up unlock: %v", be.name, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
}

// benchCase is one implementation in one benchmark configuration.
// BenchmarkX runs it as BenchmarkX/variant/impl (BenchmarkX/impl without
// a variant); TestReport runs it with testing.Benchmark.
type benchCase struct {
	bench, variant, impl string
	fn                   func(*testing.B)
}

// sub is the case's sub-benchmark name under its Benchmark function.
func (c benchCase) sub() string {
	if c.variant == "" {
		return c.impl
	}
	return c.variant + "/" + c.impl
}

// runCases runs the cases as sub-benchmarks of b.
func runCases(b *testing.B, cs []benchCase) {
	for _, c := range cs {
		b.Run(c.sub(), c.fn)
	}
}

// lastFailure keeps the message of the latest benchmark failure, for
// TestReport: testing.Benchmark discards what a benchmark logs.
var lastFailure struct {
	sync.Mutex
	msg string
}

func noteFailure(format string, args ...any) {
	lastFailure.Lock()
	defer lastFailure.Unlock()
	lastFailure.msg = fmt.Sprintf(format, args...)
}

// fatalf is b.Fatalf, noting the message for TestReport.
func fatalf(b *testing.B, format string, args ...any) {
	b.Helper()
	noteFailure(format, args...)
	b.Fatalf(format, args...)
}

// errorf is b.Errorf, noting the message for TestReport. It may be called
// from any goroutine.
func errorf(b *testing.B, format string, args ...any) {
	b.Helper()
	noteFailure(format, args...)
	b.Errorf(format, args...)
}
