package redisfence_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/fence/redisfence"
	"github.com/dlock-go/dlock/internal/fencetest"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// srv is the package's redis-server.
var srv *redistest.Server

const helperEnv = "REDISFENCE_TEST_HELPER"

func TestMain(m *testing.M) {
	if kind := os.Getenv(helperEnv); kind != "" {
		os.Exit(holder(kind))
	}

	var err error
	srv, err = redistest.Start(redistest.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "redisfence tests need redis-server:", err)
		os.Exit(1)
	}
	os.Setenv("REDIS_ADDR", srv.Addr()) // where the examples connect
	code := m.Run()
	srv.Close()
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial")); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines left behind:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// token is a fence.Token of a given fence.
type token int64

func (t token) Fence() int64 { return int64(t) }

func newRedis(t testing.TB, s *redistest.Server) *redis.Client {
	rdb := s.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

func name(t testing.TB) string { return strings.ReplaceAll(t.Name(), "/", ".") }

func TestSetRefusesALowerFence(t *testing.T) {
	ctx := context.Background()
	rdb := newRedis(t, srv)
	g := redisfence.New(rdb)
	res, key := name(t), name(t)+":data"
	if err := g.Set(ctx, token(5), res, key, "five", 0); err != nil {
		t.Fatal(err)
	}
	if err := g.Set(ctx, token(5), res, key, "five again", 0); err != nil {
		t.Fatalf("an equal fence: %v", err)
	}
	err := g.Set(ctx, token(4), res, key, "four", 0)
	if !errors.Is(err, fence.ErrStale) || !strings.Contains(err.Error(), "accepted fence 5") {
		t.Fatalf("a lower fence: %v; want ErrStale naming fence 5", err)
	}
	if err := g.Delete(ctx, token(3), res, key); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("a lower fence's Delete: %v", err)
	}
	if err := g.HSet(ctx, token(2), res, key+":h", "f", "v"); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("a lower fence's HSet: %v", err)
	}
	if v := rdb.Get(ctx, key).Val(); v != "five again" {
		t.Fatalf("the data is %q after refused writes", v)
	}
	if n := rdb.Exists(ctx, key+":h").Val(); n != 0 {
		t.Fatal("a refused HSet wrote")
	}
	if f, err := g.Fence(ctx, res); err != nil || f != 5 {
		t.Fatalf("Fence = %d, %v; want 5", f, err)
	}
	if err := g.Set(ctx, token(1<<62), res, key, "big", time.Minute); err != nil {
		t.Fatal(err)
	}
	if ttl := rdb.PTTL(ctx, key).Val(); ttl <= 0 || ttl > time.Minute {
		t.Errorf("Set with a TTL: the key's TTL is %v", ttl)
	}
	if err := g.HSet(ctx, token(1<<62), res, key+":h", "a", "1", "b", "2"); err != nil {
		t.Fatal(err)
	}
	if err := g.Delete(ctx, token(1<<62+1), res, key, key+":h"); err != nil {
		t.Fatal(err)
	}
	if n := rdb.Exists(ctx, key, key+":h").Val(); n != 0 {
		t.Fatal("Delete left keys")
	}
	if f, _ := g.Fence(ctx, res); f != 1<<62+1 {
		t.Fatalf("Fence = %d past 2^53; want %d exactly", f, int64(1<<62+1))
	}
	if f, err := g.Fence(ctx, res+"/never"); err != nil || f != 0 {
		t.Fatalf("Fence of a resource never written = %d, %v", f, err)
	}
}

func TestTxRunsUnderTheCheck(t *testing.T) {
	ctx := context.Background()
	rdb := newRedis(t, srv)
	g := redisfence.New(rdb)
	res, key := name(t), name(t)+":total"
	add := func(f int64, n int64) error {
		return g.Tx(ctx, token(f), res, []string{key}, func(tx *redis.Tx, pipe redis.Pipeliner) error {
			cur, err := tx.Get(ctx, key).Int64()
			if err != nil && !errors.Is(err, redis.Nil) {
				return err
			}
			pipe.Set(ctx, key, cur+n, 0)
			return nil
		})
	}
	if err := add(10, 5); err != nil {
		t.Fatal(err)
	}
	if err := add(9, 100); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("a lower fence's Tx: %v", err)
	}
	mine := errors.New("mine")
	if err := g.Tx(ctx, token(11), res, []string{key}, func(*redis.Tx, redis.Pipeliner) error { return mine }); err != mine {
		t.Fatalf("fn's error: %v", err)
	}
	if f, _ := g.Fence(ctx, res); f != 10 {
		t.Fatalf("a Tx whose fn failed recorded its fence: %d", f)
	}
	if v := rdb.Get(ctx, key).Val(); v != "5" {
		t.Fatalf("total %q", v)
	}
}

// Concurrent writers with different fences: the guard serialises them per
// resource, so the accepted fences, in the order they were applied, never
// go down, and the data is the highest writer's.
func TestConcurrentWritersNeverGoBack(t *testing.T) {
	ctx := context.Background()
	rdb := newRedis(t, srv)
	g := redisfence.New(rdb)
	res, key, log := name(t), name(t)+":v", name(t)+":log"
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 40 {
				f := int64((i*7+w*13)%50 + 1)
				err := g.Tx(ctx, token(f), res, []string{key, log}, func(_ *redis.Tx, pipe redis.Pipeliner) error {
					pipe.Set(ctx, key, f, 0)
					pipe.RPush(ctx, log, f)
					return nil
				})
				if err != nil && !errors.Is(err, fence.ErrStale) {
					t.Error(err)
				}
			}
		})
	}
	// and another resource at once, not blocked by this one
	wg.Go(func() {
		for i := range 40 {
			if err := g.Set(ctx, token(int64(i+1)), res+"/other", key+"/other", "x", 0); err != nil {
				t.Error(err)
			}
		}
	})
	wg.Wait()
	applied := rdb.LRange(ctx, log, 0, -1).Val()
	prev := int64(0)
	for _, s := range applied {
		f, _ := strconv.ParseInt(s, 10, 64)
		if f < prev {
			t.Fatalf("fence %d applied after %d: %v", f, prev, applied)
		}
		prev = f
	}
	if v := rdb.Get(ctx, key).Val(); v != strconv.FormatInt(prev, 10) || prev != 50 {
		t.Fatalf("data %q, last applied %d; want the highest fence, 50", v, prev)
	}
}

func TestBadInput(t *testing.T) {
	ctx := context.Background()
	rdb := newRedis(t, srv)
	g := redisfence.New(rdb)
	var nilLease *dlock.Lease
	res, key := name(t), name(t)+":k"
	for what, err := range map[string]error{
		"nil token":       g.Set(ctx, nil, res, key, "v", 0),
		"nil lease":       g.Set(ctx, nilLease, res, key, "v", 0),
		"fence 0":         g.Set(ctx, token(0), res, key, "v", 0),
		"negative fence":  g.Set(ctx, token(-3), res, key, "v", 0),
		"empty resource":  g.Set(ctx, token(1), "", key, "v", 0),
		"empty key":       g.Set(ctx, token(1), res, "", "v", 0),
		"negative ttl":    g.Set(ctx, token(1), res, key, "v", -time.Second),
		"no key":          g.Delete(ctx, token(1), res),
		"odd fields":      g.HSet(ctx, token(1), res, key, "f"),
		"nil fn":          g.Tx(ctx, token(1), res, []string{key}, nil),
		"nil client":      redisfence.New(nil).Set(ctx, token(1), res, key, "v", 0),
		"brace in prefix": redisfence.New(rdb, redisfence.WithPrefix("a{")).Set(ctx, token(1), res, key, "v", 0),
		"no receipt TTL":  redisfence.New(rdb, redisfence.WithReceiptTTL(0)).Set(ctx, token(1), res, key, "v", 0),
	} {
		if !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("%s: %v; want ErrInvalid", what, err)
		}
	}
	if n := rdb.Exists(ctx, key, g.Record(res)).Val(); n != 0 {
		t.Fatal("bad input wrote")
	}
	closed := srv.Client()
	_ = closed.Close()
	if err := redisfence.New(closed).Set(ctx, token(1), res, key, "v", 0); err == nil || errors.Is(err, fence.ErrStale) {
		t.Fatalf("a closed client: %v", err)
	}
}

func TestCluster(t *testing.T) {
	ctx := context.Background()
	cl := redistest.StartClusterT(t, redistest.ClusterOptions{})
	rdb := cl.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	g := redisfence.New(rdb)
	for i := range 20 {
		res := fmt.Sprintf("orders/%d", i)
		key := "{" + res + "}:total"
		if err := g.Set(ctx, token(2), res, key, "two", 0); err != nil {
			t.Fatal(err)
		}
		if err := g.Set(ctx, token(1), res, key, "one", 0); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("%s: a lower fence on a cluster: %v", res, err)
		}
		if err := g.Tx(ctx, token(3), res, []string{key}, func(_ *redis.Tx, p redis.Pipeliner) error {
			p.Set(ctx, key, "three", 0)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if v := rdb.Get(ctx, key).Val(); v != "three" {
			t.Fatalf("%s: %q", res, v)
		}
	}
	if err := g.Set(ctx, token(5), "orders/1", "total-without-tag", "v", 0); !errors.Is(err, fence.ErrInvalid) ||
		!strings.Contains(err.Error(), "{orders/1}") {
		t.Fatalf("a key of another slot: %v", err)
	}
}

// The scene of Kleppmann's fencing argument, with real processes: a
// holder is stopped (SIGSTOP) past its lease; another takes the lock and
// writes through the guard; the first resumes and writes: refused, and the
// data stays the newer writer's. For each kind that hands out fences.
func TestPausedHolderIsRefused(t *testing.T) {
	c, err := dlock.New(newRedis(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() }) // after the parallel subtests
	rdb := newRedis(t, srv)
	g := redisfence.New(rdb)
	for _, kind := range fencetest.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel() // a lock, a resource and a holder process of its own; mostly waiting out a lease
			lock := name(t)
			res, key := lock+"/res", lock+"/data"
			fencetest.PausedHolder(t, c, kind, lock, fencetest.Store{
				Env:   []string{helperEnv + "=" + kind, "REDIS_ADDR=" + srv.Addr(), "LOCK=" + lock, "RESOURCE=" + res, "KEY=" + key},
				Write: func(ctx context.Context, h fencetest.Hold) error { return g.Set(ctx, h, res, key, "new", 0) },
				Data:  func(ctx context.Context) (string, error) { return rdb.Get(ctx, key).Result() },
				Fence: func(ctx context.Context) (int64, error) { return g.Fence(ctx, res) },
			})
		})
	}
}

// holder is the helper process: fencetest.Holder, writing "old" through
// the guard.
func holder(kind string) int {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	c, err := dlock.New(rdb)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	g := redisfence.New(rdb)
	return fencetest.Holder(c, kind, os.Getenv("LOCK"), func(t fence.Token) error {
		return g.Set(context.Background(), t, os.Getenv("RESOURCE"), os.Getenv("KEY"), "old", 0)
	})
}
