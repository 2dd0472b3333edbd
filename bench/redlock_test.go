package bench

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// quorumSize is how many independent masters BenchmarkRedLock runs on.
const quorumSize = 5

// redlockGoroutines is the goroutine count of BenchmarkRedLock's contended
// run.
const redlockGoroutines = 16

// The quorumSize redis-servers of BenchmarkRedLock, started by its first
// run and stopped by TestMain.
var (
	quorumOnce sync.Once
	quorumSrvs []*redistest.Server
	quorumErr  error
)

// quorumAddrs returns the addresses of the RedLock servers, starting them
// on first use.
func quorumAddrs(b *testing.B) []string {
	b.Helper()
	quorumOnce.Do(func() {
		quorumSrvs, quorumErr = redistest.StartN(quorumSize, redistest.Options{})
		if quorumErr == nil {
			atExit(func() {
				for _, s := range quorumSrvs {
					s.Close()
				}
			})
		}
	})
	if quorumErr != nil {
		fatalf(b, "starting %d redis-servers: %v", quorumSize, quorumErr)
	}
	addrs := make([]string, len(quorumSrvs))
	for i, s := range quorumSrvs {
		addrs[i] = s.Addr()
	}
	return addrs
}

// nodeClient is the go-redis client of one RedLock node, for dlock and
// redsync alike: with ContextTimeoutEnabled, as NewQuorum's documentation
// asks, so that a node's timeout bounds its socket calls.
func nodeClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
}

// netDelay is the delay each way of BenchmarkRedLock's uncontended-rtt
// variant: every node behind a proxy, as over a network with a round trip
// of 2 × netDelay.
const netDelay = time.Millisecond

// The proxies in front of the RedLock servers, started on first use and
// stopped by TestMain.
var (
	delayedOnce  sync.Once
	delayedAddrs []string
	delayedErr   error
)

// delayedQuorumAddrs returns the addresses of proxies that forward to the
// RedLock servers, netDelay late each way.
func delayedQuorumAddrs(b *testing.B) []string {
	b.Helper()
	addrs := quorumAddrs(b)
	delayedOnce.Do(func() {
		var ps []*delayProxy
		for _, a := range addrs {
			p, err := startDelayProxy(a, netDelay)
			if err != nil {
				delayedErr = err
				break
			}
			ps = append(ps, p)
			delayedAddrs = append(delayedAddrs, p.Addr())
		}
		atExit(func() {
			for _, p := range ps {
				p.Close()
			}
		})
	})
	if delayedErr != nil {
		fatalf(b, "starting delay proxies: %v", delayedErr)
	}
	return delayedAddrs
}

// BenchmarkRedLock compares RedLock over quorumSize independent masters:
// dlock-quorum is dlock.NewQuorum over one client per node, redsync is
// redsync.New with one pool per node (both need a majority, 3 of 5), and
// dlock-1node is an ordinary dlock Client on the first of those nodes
// alone, to show what the quorum costs over one node. Variants:
//
//   - uncontended: Lock+Unlock of a free lock by one goroutine, as in
//     BenchmarkUncontended/g1 (ns/op is its latency), on loopback;
//   - uncontended-rtt2ms: the same with every node behind a proxy that
//     delays each direction by netDelay, as a network would: there the
//     time is in the round trips, not in the CPU, and calling the nodes
//     in parallel or one after another makes the difference;
//   - contended-g16: BenchmarkContended's loop with redlockGoroutines
//     goroutines sharing one client, one key, on loopback.
func BenchmarkRedLock(b *testing.B) { runCases(b, redlockCases()) }

func redlockCases() []benchCase {
	impls := []struct {
		name string
		o    func(addrs func(*testing.B) []string) opener
	}{
		{"dlock-quorum", openQuorum},
		{"redsync", openRedsyncPools},
		{"dlock-1node", openOneNode},
	}
	rtt := fmt.Sprintf("uncontended-rtt%dms", 2*netDelay/time.Millisecond)
	var cs []benchCase
	for _, im := range impls {
		cs = append(cs, benchCase{"RedLock", "uncontended", im.name, uncontended(im.o(quorumAddrs), 1, nil)})
	}
	for _, im := range impls {
		cs = append(cs, benchCase{"RedLock", rtt, im.name, uncontended(im.o(delayedQuorumAddrs), 1, nil)})
	}
	for _, im := range impls {
		cs = append(cs, benchCase{"RedLock", fmt.Sprintf("contended-g%d", redlockGoroutines),
			im.name, contended(im.o(quorumAddrs), redlockGoroutines)})
	}
	return cs
}

// openQuorum opens dlock's RedLock: NewQuorum over every node, defaults
// otherwise (node timeout 50 ms, retry jitter 50 ms).
func openQuorum(addrs func(*testing.B) []string) opener {
	return func(b *testing.B) *backend {
		b.Helper()
		as := addrs(b)
		rdbs := make([]*redis.Client, len(as))
		for i, a := range as {
			rdbs[i] = nodeClient(a)
		}
		closeAll := func() {
			for _, rdb := range rdbs {
				_ = rdb.Close()
			}
		}
		c, err := dlock.NewQuorum(rdbs)
		if err != nil {
			closeAll()
			return keep(b, nil, err)
		}
		be := &backend{name: "dlock-quorum", close: func() {
			_ = c.Close()
			closeAll()
		}}
		dlockMutexes(c, be)
		return keep(b, be, nil)
	}
}

// openRedsyncPools opens redsync with one pool per node.
func openRedsyncPools(addrs func(*testing.B) []string) opener {
	return func(b *testing.B) *backend {
		b.Helper()
		as := addrs(b)
		rdbs := make([]redis.UniversalClient, len(as))
		for i, a := range as {
			rdbs[i] = nodeClient(a)
		}
		return keep(b, redsyncOn("redsync", rdbs...), nil)
	}
}

// openOneNode opens an ordinary dlock Client on the first node.
func openOneNode(addrs func(*testing.B) []string) opener {
	return func(b *testing.B) *backend {
		b.Helper()
		be, err := dlockOn("dlock-1node", nodeClient(addrs(b)[0]), dlockMutexes)
		return keep(b, be, err)
	}
}
