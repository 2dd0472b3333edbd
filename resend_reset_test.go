package dlock_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/faultproxy"
	"github.com/redis/go-redis/v9"
)

// An acquire whose connection is reset while its bytes are on their way
// is sent again by the client (go-redis's MaxRetries, on its pool or on
// dlock's own connections), and the second copy takes the lock; the
// first, held on a stalled path, reaches the server after the lease was
// released (a load balancer restarting with the old connection's bytes
// still in flight). The acquire was sent twice, so the lease buries its
// token before its release: the late copy takes nothing, and nobody holds
// the lock afterwards.
func TestAcquireResentAfterResetLeavesNoLateHolder(t *testing.T) {
	onlyGoRedis(t)
	for _, way := range []struct {
		name string
		opts []dlock.Option
	}{{"own", nil}, {"pool", []dlock.Option{dlock.WithoutOwnConnections()}}} {
		for _, call := range []string{"TryLock", "Lock"} {
			t.Run(way.name+"/"+call, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				p, err := faultproxy.New(srv.Addr())
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = p.Close() })
				rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), PoolSize: 1}) // MaxRetries: go-redis's default, 3
				t.Cleanup(func() { _ = rdb.Close() })
				c := newClient(t, rdb, way.opts...)
				unlock(t, mustLock(t, c.Mutex(lockName(t)+"-warm"), ctx)) // scripts loaded, connection up
				name := lockName(t)
				m := c.Mutex(name)
				admin := newRedis(t, srv)

				// Stall the connections open now; the ones made after go on.
				var taking atomic.Bool
				taking.Store(true)
				deliver := p.Stall(taking.Load, nil)
				taking.Store(false)
				defer deliver()
				type result struct {
					l   *dlock.Lease
					err error
				}
				done := make(chan result, 1)
				go func() {
					var r result
					if call == "TryLock" {
						r.l, r.err = m.TryLock(ctx)
					} else {
						r.l, r.err = m.Lock(ctx)
					}
					done <- r
				}()
				if err := p.WaitHeld(ctx); err != nil {
					t.Fatal(err)
				}
				p.ResetClients() // the client sends the acquire again, on a new connection
				r := <-done
				if r.err == nil {
					unlock(t, r.l)
				} else {
					t.Logf("%s: %v (an acquire that fails must leave nothing either)", call, r.err)
				}
				n0 := p.Conns()
				deliver() // the first copy reaches the server now
				waitFor(t, "the late copy to run", func() bool { return p.Conns() < n0 })
				if n, _ := admin.Exists(ctx, keysOf(name).Lock).Result(); n != 0 {
					v, _ := admin.HGetAll(ctx, keysOf(name).Lock).Result()
					pt, _ := admin.PTTL(ctx, keysOf(name).Lock).Result()
					t.Fatalf("after the %s returned and its lease was released, the late copy holds the lock for nobody: %v, for %v", call, v, pt)
				}
				other := client(t)
				l, err := other.Mutex(name).TryLock(ctx)
				if err != nil {
					t.Fatalf("another Client's TryLock after the late copy: %v", err)
				}
				unlock(t, l)
			})
		}
	}
}
