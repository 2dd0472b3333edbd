package dlock_test

import (
	"context"
	"errors"
	"strings"
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
	} else if _, ok := errors.AsType[*dlock.QuorumError](err); !ok && !errors.Is(err, dlock.ErrNotObtained) {
		// Refusing is allowed, repeating a fence is not. A refusal is a
		// *QuorumError (at once, or as why a Lock's ctx ended, "its last
		// round"), or, on a loaded machine where every round outlasted
		// the 200 ms lease, a wait that ended: seen once in CI.
		t.Fatalf("Lock on {1, 2}: %v; want a grant above %d or a refusal", err, top)
	} else {
		t.Logf("Lock on {1, 2} refused: %v", err)
	}

	proxies[0].SetDown(false)
	hold() // a majority that kept its counters answers: above every fence
	proxies[1].SetDown(true)
	hold() // node 1 was brought up to date and marked: {0, 2} and {1, 2} both count on
	proxies[1].SetDown(false)
	proxies[0].SetDown(true)
	hold()
}

// Found by the torture's soak (qsplit, seed 953926024): a node that
// answers "held by another" (a hold or a place whose release could not
// reach it) keeps its counter at the latest fence F and does not INCR,
// while a stale node that missed F grants with its own INCR, which
// comes to F again. Fence F was issued once, so the round must go above
// every counter of a node that answered without granting.
func TestQuorumFenceAboveANodeThatSaidNo(t *testing.T) {
	ctx := context.Background()
	const ttl = 200 * time.Millisecond
	servers, proxies, c := proxiedQuorum(t, 3)
	name := lockName(t)
	m := c.Mutex(name)
	l := mustLock(t, m, ctx, dlock.WithLease(ttl)) // every node marked
	unlock(t, l)

	proxies[2].SetDown(true)
	l = mustLock(t, m, ctx, dlock.WithLease(ttl)) // on {0, 1}: node 2 misses it
	top := l.Fence()
	unlock(t, l)
	proxies[2].SetDown(false)

	node1 := servers[1].Client()
	defer node1.Close()
	block(t, node1, name) // node 1 says no, its counter at top
	if err := servers[0].Kill(); err != nil {
		t.Fatal(err)
	}
	if err := servers[0].Restart(false); err != nil { // nothing was held there
		t.Fatal(err)
	}

	bounded, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	l, err := m.TryLock(bounded, dlock.WithLease(ttl))
	if err != nil {
		var qe *dlock.QuorumError
		if errors.As(err, &qe) || errors.Is(err, dlock.ErrNotObtained) {
			return // refusing is allowed; repeating a fence is not
		}
		t.Fatal(err)
	}
	defer unlock(t, l)
	if l.Fence() <= top {
		t.Fatalf("granted fence %d on {0 (restarted), 2 (stale)} with node 1 at %d saying no: fence %d was issued before", l.Fence(), top, top)
	}
}

// A TryLock or Lock whose every round a majority grants, but too slowly
// to leave the lease any validity, says so: not "is held", not a bare
// "context deadline exceeded".
func TestQuorumTooSlowSaysWhy(t *testing.T) {
	const ttl = 60 * time.Millisecond
	_, proxies, c := proxiedQuorum(t, 3)
	m := c.Mutex(lockName(t))
	mustLock(t, m, context.Background()) // connections made
	for _, p := range proxies {
		p.SetLatency(ttl) // each round: at least a round trip of 60 ms
	}
	check := func(how string, l *dlock.Lease, err error) {
		t.Helper()
		if err == nil {
			unlock(t, l)
			t.Fatalf("%s granted a %v lease over rounds of at least %v", how, ttl, ttl)
		}
		if !errors.Is(err, dlock.ErrNotObtained) || !strings.Contains(err.Error(), "no validity left") {
			t.Fatalf("%s: %v; want ErrNotObtained saying no validity was left", how, err)
		}
	}
	other := c.Mutex(lockName(t) + "-free")
	l, err := other.TryLock(context.Background(), dlock.WithLease(ttl))
	check("TryLock", l, err)
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	l, err = other.Lock(ctx, dlock.WithLease(ttl))
	check("Lock", l, err)
}
