package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/faultproxy"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// proxiedQuorum starts n masters, each behind a proxy that can cut it off
// (SetDown), and returns the servers, the proxies and a Client on them.
func proxiedQuorum(t *testing.T, n int) ([]*redistest.Server, []*faultproxy.Proxy, *dlock.Client) {
	t.Helper()
	servers := redistest.StartNT(t, n, redistest.Options{})
	proxies := make([]*faultproxy.Proxy, n)
	nodes := make([]*redis.Client, n)
	for i, s := range servers {
		p, err := faultproxy.New(s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		proxies[i] = p
		nodes[i] = redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
		t.Cleanup(func() { _ = nodes[i].Close() })
	}
	return servers, proxies, quorumClient(t, nodes)
}

// Finding 8: fences of a RedLock never repeat or go back across
// partitions and a node restarted empty. Node 2 cut off, five holds on
// {0, 1}; node 2 back, node 1 restarted without its counters (kept out
// twice the TTL, as the delayed-restart rule asks), node 0 cut off: {1, 2}
// know no fence above the first. The lock must not be granted with a
// fence that was issued before; once a majority that kept its counters
// answers, the next fence is above all of them.
func TestQuorumFencesNeverRepeatAfterARestart(t *testing.T) {
	ctx := context.Background()
	const ttl = 200 * time.Millisecond
	servers, proxies, c := proxiedQuorum(t, 3)
	m := c.Mutex(lockName(t))
	var top int64
	hold := func() {
		t.Helper()
		l := mustLock(t, m, ctx, dlock.WithLease(ttl))
		if l.Fence() <= top {
			t.Fatalf("fence %d after fence %d", l.Fence(), top)
		}
		top = l.Fence()
		unlock(t, l)
	}
	hold() // in service: every node answered once

	proxies[2].SetDown(true)
	for range 5 {
		hold()
	}
	proxies[2].SetDown(false)
	if err := servers[1].Kill(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * ttl) // the delayed-restart rule: out for twice the TTL
	if err := servers[1].Restart(false); err != nil {
		t.Fatal(err)
	}
	proxies[0].SetDown(true)

	bounded, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if l, err := m.Lock(bounded, dlock.WithLease(ttl)); err == nil {
		unlock(t, l)
		if l.Fence() <= top {
			t.Fatalf("granted fence %d on {1, 2} after fence %d was issued on {0, 1}", l.Fence(), top)
		}
	} else if _, ok := errors.AsType[*dlock.QuorumError](err); !ok {
		t.Fatalf("Lock on {1, 2}: %v; want a grant above %d or a *QuorumError", err, top)
	}

	proxies[0].SetDown(false)
	hold() // a majority that kept its counters answers: above every fence
	proxies[1].SetDown(true)
	hold() // node 1 was brought up to date and marked: {0, 2} and {1, 2} both count on
	proxies[1].SetDown(false)
	proxies[0].SetDown(true)
	hold()
}
