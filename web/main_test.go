package web

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"go.uber.org/goleak"
)

// testServer is the redis-server the package's tests share (each uses a
// prefix of its own).
var testServer *redistest.Server

// TestMain starts the shared server, runs the tests, stops the shared
// browser and the server, and fails on goroutines left behind (goleak).
func TestMain(m *testing.M) {
	srv, err := redistest.Start(redistest.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "these tests need redis-server:", err)
		os.Exit(1)
	}
	testServer = srv
	code := m.Run()
	closeBrowser()
	srv.Close()
	if code == 0 {
		if err := goleak.Find(redistest.Ignored()...); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines left behind:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// quiet is a logger that drops everything.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// testPrefix is a key prefix of the test's own, and of this run of it:
// under -count=N a run must not find the records (a broken deadlock's
// lasts an hour) that the one before left on the shared server.
func testPrefix(t *testing.T) string {
	prefixMu.Lock()
	defer prefixMu.Unlock()
	if p, ok := prefixOf[t]; ok {
		return p
	}
	p := "web-" + strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
	if runs[p]++; runs[p] > 1 {
		p += fmt.Sprintf("-run%d", runs[p])
	}
	prefixOf[t] = p
	return p
}

// the prefixes given, by test and by name (testPrefix)
var (
	prefixMu sync.Mutex
	prefixOf = map[*testing.T]string{}
	runs     = map[string]int{}
)

// newClient returns a Client of the shared server under prefix, its
// owner labelled label, closed with the test.
func newClient(t *testing.T, prefix, label string) *dlock.Client {
	t.Helper()
	rdb := testServer.Client()
	t.Cleanup(func() { rdb.Close() })
	opts := []dlock.Option{dlock.WithPrefix(prefix)}
	if label != "" {
		opts = append(opts, dlock.WithOwnerLabel(label))
	}
	c, err := dlock.New(rdb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// testCtx is a context that ends with the test, or after a minute.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// waitFor polls cond every 10 ms until it holds, failing the test after
// timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: still not %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waiter is a Lock waiting in the background.
type waiter struct {
	done   chan struct{}
	cancel context.CancelFunc
	lease  *dlock.Lease
	err    error
}

// lockInBackground starts m.Lock in a goroutine; stop cancels it (or
// unlocks what it got) and waits for it.
func lockInBackground(t *testing.T, lock func(ctx context.Context) (*dlock.Lease, error)) *waiter {
	ctx, cancel := context.WithCancel(context.Background())
	w := &waiter{done: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(w.done)
		w.lease, w.err = lock(ctx)
	}()
	t.Cleanup(w.stop)
	return w
}

// stop cancels the wait, waits for it to end, and unlocks a lease it got.
func (w *waiter) stop() {
	w.cancel()
	<-w.done
	if w.lease != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.lease.Unlock(ctx)
		w.lease = nil
	}
}

// waitWaiters waits until the lock has n waiters.
func waitWaiters(t *testing.T, c *dlock.Client, kd dlock.Kind, name string, n int) {
	t.Helper()
	waitFor(t, 5*time.Second, fmt.Sprintf("%s %q waited for by %d", kd, name, n), func() bool {
		l, err := c.Inspect(context.Background(), kd, name)
		return err == nil && len(l.Waiters) == n
	})
}
