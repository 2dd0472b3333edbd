package goredis_test

import (
	"testing"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/drivertest"
	"github.com/dlock-go/dlock/internal/goredis"
	"github.com/redis/go-redis/v9"
)

// The go-redis driver passes the conformance suite that every driver
// must (drivertest), on a single node, Sentinel and Cluster.
func TestGoRedisDriver(t *testing.T) {
	closing := func(t *testing.T, rdb redis.UniversalClient) driver.Driver {
		t.Cleanup(func() { _ = rdb.Close() })
		return goredis.New(rdb)
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
