package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// testServer is the redis-server that run and the operator's commands are
// tested against, shared by the package's tests (each uses its own lock names).
var testServer *redistest.Server

// TestMain doubles as the programs that the CLI starts as itself:
// os.Executable() is this test binary under "go test". It is the demo's
// worker when workerEnv is set, run's guard when called as guardCommand,
// the whole CLI when cliEnv is set (the tests that kill a "dlock run"
// process), and a test helper when helperEnv is set. Otherwise it starts
// the shared server, runs the tests and checks that they left no
// goroutine behind.
func TestMain(m *testing.M) {
	redis.SetLogger(quietLogger{}) // as main does: the tests check what dlock says
	switch {
	case os.Getenv(workerEnv) == "1", os.Getenv(cliEnv) == "1",
		len(os.Args) > 1 && os.Args[1] == guardCommand:
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	case os.Getenv(helperEnv) != "":
		os.Exit(helperMain(os.Getenv(helperEnv), os.Args[1:]))
	}
	srv, err := redistest.Start(redistest.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testServer = srv
	code := m.Run()
	closeTopologies()
	srv.Close()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// serverURL is the redis:// URL of the shared test server.
func serverURL() string { return "redis://" + testServer.Addr() }

// testClient returns a client of the shared server, closed with the test.
func testClient(t *testing.T) *redis.Client {
	t.Helper()
	rdb := testServer.Client()
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// testPrefix returns a key prefix of the test's own.
func testPrefix(t *testing.T) string {
	return "cli-" + strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
}

// dlockClient returns a library client on the shared server with prefix,
// closed with the test.
func dlockClient(t *testing.T, prefix string) *dlock.Client {
	t.Helper()
	c, err := dlock.New(testClient(t), dlock.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// result is what one call of run produced.
type result struct {
	code           int
	stdout, stderr string
}

// runCLI calls run with args and returns its exit status and output.
func runCLI(args ...string) result {
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return result{code, out.String(), errb.String()}
}

// syncBuffer is a bytes.Buffer that a test may read while run writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p to the buffer.
func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was written so far.
func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitFor polls cond every 10 ms until it holds, failing the test after
// timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// testCtx returns a context that ends with the test or after 10 s.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestUsage checks the usage text, -h and the bad command lines.
func TestUsage(t *testing.T) {
	r := runCLI()
	if r.code != exitUsage || !strings.Contains(r.stderr, "usage:") {
		t.Errorf("no args: code %d, stderr %q; want %d and the usage", r.code, r.stderr, exitUsage)
	}
	r = runCLI("-h")
	if r.code != exitOK {
		t.Errorf("-h: code %d, want 0", r.code)
	}
	for _, cmd := range []string{"demo", "run", "inspect", "ls", "top", "web", "deadlocks", "unlock"} {
		if !strings.Contains(r.stdout, "\n  "+cmd+" ") {
			t.Errorf("-h does not list %q:\n%s", cmd, r.stdout)
		}
	}
	if strings.Contains(r.stdout, workerCommand) {
		t.Errorf("-h lists the hidden %q:\n%s", workerCommand, r.stdout)
	}
	if r := runCLI("frobnicate"); r.code != exitUsage || !strings.Contains(r.stderr, `unknown command "frobnicate"`) {
		t.Errorf("unknown command: code %d, stderr %q", r.code, r.stderr)
	}
	r = runCLI("demo", "-h")
	if r.code != exitOK || !strings.Contains(r.stdout, "--workers") || strings.Contains(r.stdout, "--embedded") {
		t.Errorf("demo -h: code %d, want 0 and the public flags only:\n%s", r.code, r.stdout)
	}
	bad := [][]string{
		{"demo", "--workers", "0"},
		{"demo", "extra"},
		{"demo", "--prefix", "a{b"},
		{"run", "name", "x"},
		{"run", "-c", "true", "name", "--", "true"},
		{"run", "--ttl", "1ms", "name", "--", "true"},
		{"run"},
		{"inspect"},
		{"inspect", "a", "b"},
		{"inspect", "--kind", "table", "x"},
		{"unlock", "--bogus", "x"},
		{"unlock", "x"}, // --force is required
		{"unlock", "--force"},
		{"ls", "a", "b"},
		{"ls", "["},
		{"top", "--interval", "1ms"},
		{"top", "--iterations", "-1"},
		{"top", "-n", "1"}, // run's -n (no wait) is not top's
		{"ls", "--prefix", "a{b"},
	}
	for _, args := range bad {
		if r := runCLI(args...); r.code != exitUsage {
			t.Errorf("%q: code %d, want %d; stderr %q", args, r.code, exitUsage, r.stderr)
		}
	}
}

// TestKeysFor checks the key names against the library's scheme.
func TestKeysFor(t *testing.T) {
	for _, tc := range []struct {
		prefix, name, lock string
	}{
		{"dlock", "orders/42", "dlock:{orders/42}"},
		{"p", "a{b}c", "p:{a%7Bb%7Dc}"},
		{"p", "100%", "p:{100%25}"},
		{"p", "%7B", "p:{%257B}"}, // not the same key as "{"
	} {
		k := keysFor(tc.prefix, tc.name)
		if k.Lock != tc.lock || k.Fence != tc.prefix+":fence" || k.Channel != tc.lock+":ch" {
			t.Errorf("keysFor(%q, %q) = %+v, want lock %q", tc.prefix, tc.name, k, tc.lock)
		}
	}
}
