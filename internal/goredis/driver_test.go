package goredis_test

import (
	"context"
	"crypto/tls"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/drivertest"
	"github.com/dlock-go/dlock/internal/goredis"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// The go-redis driver passes the conformance suite that every driver
// must (drivertest), on a single node, Sentinel and Cluster.
func TestGoRedisDriver(t *testing.T) {
	t.Parallel() // servers of its own (drivertest), mostly waiting: beside the other driver's run
	testDriver(t, goredis.New)
}

// So does the driver on dlock's own connections (internal/wire), which a
// single node's and a cluster's keyed commands go on (a cluster's: one
// Mux a master, cluster.go); a failover client's go through its pool
// (TestFailoverClientGoesThroughItsPool).
func TestGoRedisOwnDriver(t *testing.T) {
	t.Parallel() // servers of its own (drivertest), mostly waiting: beside the other driver's run
	testDriver(t, goredis.Own)
}

func testDriver(t *testing.T, newDriver func(goredis.Redis) *goredis.Driver) {
	closing := func(t *testing.T, rdb redis.UniversalClient) driver.Driver {
		d := newDriver(rdb)
		t.Cleanup(func() { _ = d.Close(); _ = rdb.Close() })
		return d
	}
	drivertest.Run(t,
		func(t *testing.T, addr string) driver.Driver {
			return closing(t, redis.NewClient(&redis.Options{Addr: addr}))
		},
		drivertest.Cluster(func(t *testing.T, addrs []string) driver.Driver {
			return closing(t, redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs}))
		}),
		drivertest.Sentinel(func(t *testing.T, master string, sentinels []string) driver.Driver {
			return closing(t, redis.NewFailoverClient(&redis.FailoverOptions{MasterName: master, SentinelAddrs: sentinels}))
		}))
}

// Info's ResendAfter is when go-redis sends a call again: its ReadTimeout
// (5 s by default), none when it never retries or never times a read out;
// a cluster client re-sends through its redirects whatever MaxRetries
// says.
func TestResendAfterIsTheReadTimeout(t *testing.T) {
	for _, c := range []struct {
		name string
		rdb  goredis.Redis
		want time.Duration
	}{
		{"defaults", redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), 5 * time.Second},
		{"ReadTimeout", redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ReadTimeout: 400 * time.Millisecond}), 400 * time.Millisecond},
		{"no retries", redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1}), 0},
		{"no read timeout", redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ReadTimeout: -1}), 0},
		{"cluster", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, ReadTimeout: time.Second, MaxRetries: -1}), time.Second},
		{"ring", redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}}), 5 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			defer c.rdb.(interface{ Close() error }).Close()
			if got := goredis.New(c.rdb).Info().ResendAfter; got != c.want {
				t.Errorf("ResendAfter %v, want %v", got, c.want)
			}
		})
	}
}

// A call returns when its ctx ends even while a connection is being made
// by a dialer that does not watch ctx: go-redis's own with TLS
// (tls.DialWithDialer, bounded by DialTimeout alone), here stuck in the
// handshake with a server that never answers.
func TestDialBoundedByCtx(t *testing.T) {
	for _, c := range []struct {
		name string
		rdb  redis.UniversalClient
	}{
		{"client", redis.NewClient(&redis.Options{Addr: blackHole(t), TLSConfig: &tls.Config{InsecureSkipVerify: true},
			DialTimeout: time.Minute, MaxRetries: -1})},
		{"cluster", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{blackHole(t)}, TLSConfig: &tls.Config{InsecureSkipVerify: true},
			DialTimeout: time.Minute, MaxRetries: -1, MaxRedirects: -1})},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := goredis.Own(c.rdb)
			t.Cleanup(func() { _ = d.Close(); _ = c.rdb.Close() })
			if !d.Info().CtxBound {
				t.Fatal("not CtxBound")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			start := time.Now()
			r := d.Do(ctx, driver.Command{Args: []any{"GET", "k"}, FirstKey: 1, Keys: 1})
			if !errors.Is(r.Err, context.DeadlineExceeded) {
				t.Fatalf("Do = %v, %v; want the ctx's deadline", r.Val, r.Err)
			}
			// a bound far from the dial's minute, for a loaded CI machine
			if took := time.Since(start); took > 10*time.Second {
				t.Errorf("Do returned after %v; its ctx ended after 100ms", took)
			}
		})
	}
}

// A failover client's commands go through its pool, which alone follows
// the sentinels to a new master (Own, failover): Own finds it by the
// Addr go-redis gives its options, and a plain client's still go on
// connections of dlock's own.
func TestFailoverClientGoesThroughItsPool(t *testing.T) {
	fo := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"127.0.0.1:1"}})
	plain := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	for _, c := range []struct {
		name string
		rdb  *redis.Client
		own  bool
	}{{"failover", fo, false}, {"plain", plain, true}} {
		t.Run(c.name, func(t *testing.T) {
			d := goredis.Own(c.rdb)
			t.Cleanup(func() { _ = d.Close(); _ = c.rdb.Close() })
			if own := d.Info().AutoPipeline; own != c.own {
				t.Errorf("on dlock's own connections: %v, want %v (Addr %q)", own, c.own, c.rdb.Options().Addr)
			}
		})
	}
}

// Closing the go-redis client closes Own's connections to a single
// server: once a pipeline (the watchdog's renewals) or a dial has found
// the client closed, every call fails with an error wrapping
// redis.ErrClosed, as through the pool (issue 45). Until then a lone
// call (Do) costs one atomic load more: it is not asked.
func TestOwnConnectionsCloseWithTheirClient(t *testing.T) {
	s := redistest.StartT(t, redistest.Options{})
	cl := redistest.StartClusterT(t, redistest.ClusterOptions{})
	ctx := context.Background()
	get := driver.Command{Args: []any{"GET", "k"}, FirstKey: 1, Keys: 1}
	pipeline := func(d *goredis.Driver) error { return d.Pipeline(ctx, []driver.Command{get})[0].Err }
	dedicated := func(d *goredis.Driver) error {
		return d.Dedicated(ctx, "k", func(driver.Conn) error { return nil })
	}
	for _, c := range []struct {
		name string
		rdb  func() redis.UniversalClient
		find func(*goredis.Driver) error // what finds the client closed
	}{
		{"pipeline", func() redis.UniversalClient { return s.Client() }, pipeline},
		{"dedicated", func() redis.UniversalClient { return s.Client() }, dedicated},
		{"cluster pipeline", func() redis.UniversalClient { return cl.Client() }, pipeline},
		{"cluster dedicated", func() redis.UniversalClient { return cl.Client() }, dedicated},
	} {
		t.Run(c.name, func(t *testing.T) {
			rdb := c.rdb()
			d := goredis.Own(rdb)
			t.Cleanup(func() { _ = d.Close() })
			if r := d.Do(ctx, get); r.Err != nil {
				t.Fatal(r.Err)
			}
			if err := c.find(d); err != nil {
				t.Fatal(err)
			}
			if err := rdb.Close(); err != nil {
				t.Fatal(err)
			}
			if err := c.find(d); !errors.Is(err, redis.ErrClosed) {
				t.Fatalf("after Close: %v; want redis.ErrClosed", err)
			}
			if r := d.Do(ctx, get); !errors.Is(r.Err, redis.ErrClosed) {
				t.Fatalf("Do after Close: %v, %v; want redis.ErrClosed", r.Val, r.Err)
			}
		})
	}
}
