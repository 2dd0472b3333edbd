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
// the lock afterwards (another Client's acquire that the kind's hold
// excludes succeeds). Every kind, its one attempt and its Lock.
func TestAcquireResentAfterResetLeavesNoLateHolder(t *testing.T) {
	onlyGoRedis(t)
	for _, way := range []struct {
		name string
		opts []dlock.Option
	}{{"own", nil}, {"pool", []dlock.Option{dlock.WithoutOwnConnections()}}} {
		for _, kind := range allKinds {
			for _, call := range []string{"try", "lock"} {
				t.Run(way.name+"/"+kind.name+"/"+call, func(t *testing.T) {
					resentAcquire(t, way.opts, kind, call == "lock")
				})
			}
		}
	}
}

// resentAcquire is one case of TestAcquireResentAfterResetLeavesNoLateHolder.
func resentAcquire(t *testing.T, opts []dlock.Option, kind lockKind, wait bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := faultproxy.New(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), PoolSize: 1}) // MaxRetries: go-redis's default, 3
	t.Cleanup(func() { _ = rdb.Close() })
	c := newClient(t, rdb, opts...)
	warm, err := kind.lock(c, lockName(t)+"-warm", ctx) // scripts loaded, connection up
	if err != nil {
		t.Fatal(err)
	}
	unlock(t, warm)
	name := lockName(t)

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
		if wait {
			r.l, r.err = kind.lock(c, name, ctx)
		} else {
			r.l, r.err = kind.try(c, name, ctx)
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
		t.Logf("the acquire: %v (one that fails must leave nothing either)", r.err)
	}
	n0 := p.Conns()
	deliver() // the first copy reaches the server now
	waitFor(t, "the late copy to run", func() bool { return p.Conns() < n0 })
	l, err := kind.probe(client(t), name, ctx)
	if err != nil {
		t.Fatalf("after the acquire returned and its lease was released, another Client's acquire: %v (a late copy holds the lock for nobody)", err)
	}
	unlock(t, l)
}
