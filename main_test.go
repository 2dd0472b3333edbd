package dlock_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/envdriver"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// renewTTL is the TTL of tests that hold a renewed lease for a while: the
// watchdog renews at TTL/3, and the suite runs under -race on 2 busy cores,
// so a renewal may be late by a good part of it without the lease being
// lost.
const renewTTL = 600 * time.Millisecond

// srv is the package's shared redis-server; tests use fresh lock names.
var srv *redistest.Server

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(helperMain(mode))
	}
	var err error
	srv, err = redistest.Start(redistest.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "dlock tests need redis-server:", err)
		os.Exit(1)
	}
	// The examples connect where a user's program would: REDIS_ADDR, or
	// localhost:6379 when it is unset.
	os.Setenv("REDIS_ADDR", srv.Addr())
	code := m.Run()
	srv.Close()
	if code == 0 {
		// go-redis retries dialling a dead node (a killed cluster master)
		// in a goroutine that sleeps a second and ends by itself, after
		// its pool is closed.
		// rueidis and valkey-go (DLOCK_TEST_DRIVER) close the connections
		// of nodes that left a cluster's slot map 5 s later, on a
		// goroutine that outlives the client; after a MOVED (a slot that
		// moved) they refresh the slot map once more about a second
		// later, on a goroutine that sleeps until then (DelayDo).
		if err := goleak.Find(goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"),
			goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).queuedNewConn.func2"),
			goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"),
			goleak.IgnoreAnyFunction("github.com/valkey-io/valkey-go.(*clusterClient)._refresh.func2"),
			goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*call).DelayDo.func1"),
			goleak.IgnoreAnyFunction("github.com/valkey-io/valkey-go.(*call).DelayDo.func1")); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines left behind:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// newRedis returns a go-redis client of s, closed when the test ends.
func newRedis(t testing.TB, s *redistest.Server, opts ...func(*redis.Options)) *redis.Client {
	t.Helper()
	rdb := s.Client(opts...)
	t.Cleanup(func() {
		_ = rdb.Close()
		envdriver.Forget(rdb)
	})
	return rdb
}

// newClient returns a dlock Client on rdb, closed when the test ends. With
// DLOCK_TEST_DRIVER=rueidis (or valkey-go) the Client reaches Redis through
// a client of that library that connects where rdb does (envdriver).
func newClient(t testing.TB, rdb dlock.Redis, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	c, err := envdriver.New(rdb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// client returns a dlock Client on the shared server with its own connection.
func client(t testing.TB, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	return newClient(t, newRedis(t, srv), opts...)
}

// lockName returns a name no other test uses.
func lockName(t testing.TB) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return strings.ReplaceAll(t.Name(), "/", ".") + "-" + hex.EncodeToString(b[:])
}

func mustLock(t testing.TB, m dlock.Locker, ctx context.Context, opts ...dlock.LockOption) *dlock.Lease {
	t.Helper()
	l, err := m.Lock(ctx, opts...)
	if err != nil {
		t.Fatalf("Lock(%q): %v", m.Name(), err)
	}
	return l
}

func unlock(t testing.TB, l *dlock.Lease) {
	t.Helper()
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatalf("Unlock(%q): %v", l.Name(), err)
	}
}

// crashingClient returns a Client on the shared server and a func that
// stops it as a crash would: no more renewals and no release (its Redis
// connection goes first, so Close cannot release anything).
func crashingClient(t testing.TB) (*dlock.Client, func()) {
	t.Helper()
	rdb := srv.Client()
	d := seamDriver(t, rdb)
	crashed := &crashDriver{Driver: d}
	c, err := dlock.NewWithDriver(crashed)
	if err != nil {
		t.Fatal(err)
	}
	crash := func() {
		crashed.dead.Store(true) // nothing more reaches Redis, as from a dead process
		_ = rdb.Close()
		envdriver.Forget(rdb)
		_ = c.Close()
	}
	t.Cleanup(crash)
	return c, crash
}

// crashDriver sends nothing once dead: the Client's last words (Close's
// releases) do not reach Redis.
type crashDriver struct {
	driver.Driver
	dead atomic.Bool
}

var errCrashed = errors.New("crashed")

func (d *crashDriver) Do(ctx context.Context, c driver.Command) driver.Reply {
	if d.dead.Load() {
		return driver.Reply{Err: errCrashed}
	}
	return d.Driver.Do(ctx, c)
}

func (d *crashDriver) Pipeline(ctx context.Context, cmds []driver.Command) []driver.Reply {
	if d.dead.Load() {
		out := make([]driver.Reply, len(cmds))
		for i := range out {
			out[i].Err = errCrashed
		}
		return out
	}
	return d.Driver.Pipeline(ctx, cmds)
}

func (d *crashDriver) Dedicated(ctx context.Context, key string, fn func(driver.Conn) error) error {
	if d.dead.Load() {
		return errCrashed
	}
	return d.Driver.Dedicated(ctx, key, fn)
}

// keysOf returns the keys of the Mutex called name under the default
// prefix.
func keysOf(name string) dlock.Keys {
	k, err := dlock.KeysOf(dlock.DefaultPrefix, name)
	if err != nil {
		panic(err) // a test's own lock name: never empty
	}
	return k
}

// waitFor polls an observable condition (not a sleep standing in for a
// signal: the state lives in Redis, and this is how the test sees it).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// onlyGoRedis skips a test that builds its Client on go-redis itself (its
// fault is go-redis's own: how it closes and re-sends), so that the
// runs of the suite on the other drivers do not repeat it unchanged.
func onlyGoRedis(t *testing.T) {
	t.Helper()
	if name := envdriver.Name(); name != "go-redis" {
		t.Skipf("a go-redis fault, tested once with the default driver (this run: %s)", name)
	}
}

// seamClient returns a Client on the shared server whose driver is the
// seam's (seamDriver) as wrap wraps it, closed when the test ends.
func seamClient(t testing.TB, wrap func(driver.Driver) driver.Driver, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	c, err := dlock.NewWithDriver(wrap(seamDriver(t, newRedis(t, srv))), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// seamDriver returns the driver a test wraps to inject faults at the
// seam: DLOCK_TEST_DRIVER's library's (internal/envdriver), or go-redis's
// (goRedisDriver).
func seamDriver(t testing.TB, rdb dlock.Redis) driver.Driver {
	t.Helper()
	d, err := envdriver.Driver(rdb)
	if err != nil {
		t.Fatal(err)
	}
	if d == nil {
		d = goRedisDriver(t, rdb)
	}
	return d
}

// goRedisDriver returns dlock.GoRedisDriver(rdb), closed when the test
// ends (a Client made by NewWithDriver does not close its driver).
func goRedisDriver(t testing.TB, rdb dlock.Redis) driver.Driver {
	d := dlock.GoRedisDriver(rdb)
	t.Cleanup(func() { _ = d.(io.Closer).Close() })
	return d
}
