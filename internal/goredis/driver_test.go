package goredis_test

import (
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/drivertest"
	"github.com/dlock-go/dlock/internal/goredis"
	"github.com/redis/go-redis/v9"
)

// The go-redis driver passes the conformance suite that every driver
// must (drivertest), on a single node, Sentinel and Cluster.
func TestGoRedisDriver(t *testing.T) {
	testDriver(t, goredis.New)
}

// So does the driver on dlock's own connections (internal/wire), which a
// single node's, a failover client's and a cluster's keyed commands go
// on (a cluster's: one Mux a master, cluster.go).
func TestGoRedisOwnDriver(t *testing.T) {
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
