package bench

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/rueidisdlock"
	"github.com/redis/rueidis"
)

// clusterGoroutines are the parallelisms of BenchmarkCluster (issue 25's
// targets are at 1, 16 and 64).
var clusterGoroutines = []int{1, 16, 64}

// The Redis Cluster of BenchmarkCluster (3 masters with a replica each,
// redistest's default), started by its first run and stopped by TestMain.
var (
	clusterOnce sync.Once
	clusterSrv  *redistest.Cluster
	clusterErr  error
)

// cluster returns the benchmark's cluster, starting it on first use.
func cluster(b *testing.B) *redistest.Cluster {
	b.Helper()
	clusterOnce.Do(func() {
		clusterSrv, clusterErr = redistest.StartCluster(redistest.ClusterOptions{})
		if clusterErr == nil {
			atExit(clusterSrv.Close)
		}
	})
	if clusterErr != nil {
		fatalf(b, "starting a Redis Cluster: %v", clusterErr)
	}
	return clusterSrv
}

// BenchmarkCluster is BenchmarkUncontended on a Redis Cluster of 3
// masters with a replica each: clusterGoroutines goroutines, a key each,
// so the keys spread over the masters' slots. Each implementation talks
// to the cluster as its documentation says: dlock, redsync and redislock
// through a go-redis ClusterClient, rueidislock through a rueidis client
// given every node. Compare with BenchmarkUncontended/g64, the same on one
// node (the report does).
func BenchmarkCluster(b *testing.B) { runCases(b, clusterCases()) }

func clusterCases() []benchCase {
	var cs []benchCase
	for _, g := range clusterGoroutines {
		for _, name := range append(slices.Clone(backendNames), "dlock-rueidis") {
			cs = append(cs, benchCase{"Cluster", fmt.Sprintf("g%d", g), name,
				uncontended(onCluster(name), g, nil)})
		}
	}
	return cs
}

// onCluster opens the named implementation on the cluster.
func onCluster(name string) opener {
	return func(b *testing.B) *backend {
		b.Helper()
		cl := cluster(b)
		var (
			be  *backend
			err error
		)
		switch name {
		case "dlock":
			be, err = dlockOn(name, cl.Client(), dlockMutexes)
		case "redsync":
			be = redsyncOn(name, cl.Client())
		case "redislock":
			be = redislockOn(name, cl.Client())
		case "dlock-rueidis": // dlock through rueidisdlock, as rueidislock's users would
			var addrs []string
			for _, n := range cl.Nodes() {
				addrs = append(addrs, n.Addr())
			}
			be, err = dlockRueidisOn(name, addrs)
		case "rueidislock":
			var addrs []string
			for _, n := range cl.Nodes() {
				addrs = append(addrs, n.Addr())
			}
			be, err = rueidislockOn(name, addrs...)
		default:
			err = fmt.Errorf("bench: unknown implementation %q", name)
		}
		return keep(b, be, err)
	}
}

// dlockRueidisOn is dlock on one rueidis client of the cluster (rueidisdlock).
func dlockRueidisOn(name string, addrs []string) (*backend, error) {
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true})
	if err != nil {
		return nil, err
	}
	c, err := rueidisdlock.New(rc)
	if err != nil {
		rc.Close()
		return nil, err
	}
	be := &backend{name: name, close: func() { _ = c.Close(); rc.Close() }}
	dlockMutexes(c, be)
	return be, nil
}
