package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// quorumNodes starts n independent masters and returns go-redis clients
// for them (closed when the test ends).
func quorumNodes(t *testing.T, n int) ([]*redistest.Server, []*redis.Client) {
	t.Helper()
	servers := redistest.StartNT(t, n, redistest.Options{})
	clients := make([]*redis.Client, n)
	for i, s := range servers {
		clients[i] = newRedis(t, s, func(o *redis.Options) {
			o.ContextTimeoutEnabled = true // the node timeout reaches the socket
			o.MaxRetries = -1
		})
	}
	return servers, clients
}

func quorumClient(t *testing.T, nodes []*redis.Client, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	// Generous node timeouts: the suite runs under -race on 2 busy cores.
	c, err := dlock.NewQuorum(nodes, append([]dlock.Option{dlock.WithNodeTimeout(time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// block makes node hold the lock for a foreign owner.
func block(t *testing.T, node *redis.Client, name string) {
	t.Helper()
	ctx := context.Background()
	key := keysOf(name).Lock
	if err := putHold(ctx, node, key, "foreign", time.Minute); err != nil {
		t.Fatal(err)
	}
}

func TestQuorumMatrix(t *testing.T) {
	ctx := context.Background()
	_, nodes := quorumNodes(t, 5)
	c := quorumClient(t, nodes)
	for mask := range 1 << 5 {
		name := fmt.Sprintf("%s-%02d", lockName(t), mask)
		key := keysOf(name).Lock
		blocked := 0
		for i := range 5 {
			if mask&(1<<i) != 0 {
				block(t, nodes[i], name)
				blocked++
			}
		}
		l, err := c.Mutex(name).TryLock(ctx)
		if free := 5 - blocked; free >= 3 {
			if err != nil {
				t.Fatalf("blocked %05b (%d free): %v; want the lock", mask, free, err)
			}
			unlock(t, l)
		} else if !errors.Is(err, dlock.ErrNotObtained) {
			t.Fatalf("blocked %05b (%d free): %v; want ErrNotObtained", mask, free, err)
		}
		// Nothing of ours is left: free nodes have no key, blocked nodes
		// only the foreign owner.
		for i, n := range nodes {
			hold, _ := lockFields(ctx, n, key)
			if mask&(1<<i) != 0 {
				if hold["foreign"] != "1" {
					t.Fatalf("blocked %05b: node %d holds %v; want only the foreign owner", mask, i, hold)
				}
			} else if len(hold) != 0 {
				t.Fatalf("blocked %05b: node %d still holds %v after the round", mask, i, hold)
			}
		}
	}
}

func TestQuorumSurvivesAMinorityDown(t *testing.T) {
	ctx := context.Background()
	servers, nodes := quorumNodes(t, 5)
	c := quorumClient(t, nodes)
	name := lockName(t)
	unlock(t, mustLock(t, c.Mutex(name), ctx)) // in service: every node has answered once
	_ = servers[0].Kill()
	_ = servers[3].Kill()
	l := mustLock(t, c.Mutex(name), ctx)
	if _, err := quorumClient(t, nodes).Mutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("second owner with 3 of 5 up: %v", err)
	}
	unlock(t, l)

	// A majority down: a clean, fast failure naming the nodes.
	_ = servers[1].Kill()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	start := time.Now()
	_, err := c.Mutex(name).Lock(wctx)
	var qe *dlock.QuorumError
	if !errors.As(err, &qe) {
		t.Fatalf("Lock with 3 of 5 nodes down: %v; want a *QuorumError", err)
	}
	if len(qe.Failing) != 3 || qe.Needed != 3 {
		t.Fatalf("QuorumError %+v; want 3 failing nodes, 3 needed", qe)
	}
	if wctx.Err() != nil || time.Since(start) > 5*time.Second {
		t.Fatal("Lock waited instead of failing fast")
	}
}

func TestQuorumFencesIncreaseAcrossMajorities(t *testing.T) {
	ctx := context.Background()
	_, nodes := quorumNodes(t, 5)
	c := quorumClient(t, nodes)
	name := lockName(t)
	key := keysOf(name).Lock
	last := int64(0)
	// Each round a different pair of nodes is blocked, so the majorities
	// differ; the fence must still go up every time.
	for _, pair := range [][2]int{{0, 1}, {3, 4}, {1, 2}, {0, 4}, {2, 3}, {0, 1}} {
		block(t, nodes[pair[0]], name)
		block(t, nodes[pair[1]], name)
		l, err := c.Mutex(name).TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if l.Fence() <= last {
			t.Fatalf("fence %d after %d (blocked %v)", l.Fence(), last, pair)
		}
		last = l.Fence()
		unlock(t, l)
		nodes[pair[0]].Del(ctx, key)
		nodes[pair[1]].Del(ctx, key)
	}
}

func TestQuorumReentryRenewalAndTTL(t *testing.T) {
	ctx := context.Background()
	_, nodes := quorumNodes(t, 3)
	c := quorumClient(t, nodes)
	m := c.Mutex(lockName(t), dlock.WithTTL(renewTTL))
	l := mustLock(t, m, ctx)
	inner := mustLock(t, m, l.Context(ctx))
	time.Sleep(2 * renewTTL) // several renewals
	if err := l.Err(); err != nil {
		t.Fatalf("renewed quorum lease lost: %v", err)
	}
	if ttl, err := l.TTL(ctx); err != nil || ttl <= 0 {
		t.Fatalf("TTL %v %v", ttl, err)
	}
	unlock(t, inner)
	if _, err := quorumClient(t, nodes).Mutex(m.Name()).TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("free while the outer quorum lease holds it: %v", err)
	}
	unlock(t, l)
	if _, err := c.FairMutex("x").TryLock(ctx); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("FairMutex on a quorum: %v", err)
	}
}

func TestQuorumWakeOnRelease(t *testing.T) {
	ctx := context.Background()
	_, nodes := quorumNodes(t, 3)
	name := lockName(t)
	holder := mustLock(t, quorumClient(t, nodes).Mutex(name), ctx) // 30 s TTL
	checkWokenByRelease(t, quorumClient(t, nodes).Mutex(name), func() { unlock(t, holder) })
}

func TestQuorumExclusionAcrossProcesses(t *testing.T) {
	servers, _ := quorumNodes(t, 3)
	addrs := make([]string, len(servers))
	for i, s := range servers {
		addrs[i] = s.Addr()
	}
	runContenders(t, lockName(t), 3, 4, 5, addrsEnv+"="+strings.Join(addrs, ","), addrEnv+"="+servers[0].Addr())
}

// A node restarted without persistence forgets the lock: with 3 nodes, a
// holder on {0, 1} and node 0 restarted empty, another owner wins {0, 2}
// while the first lease is still valid. Keeping the restarted node out for
// a TTL (the delayed-restart rule) prevents it.
func TestQuorumRestartWithoutPersistence(t *testing.T) {
	const ttl = time.Second
	for _, delayed := range []bool{false, true} {
		t.Run(map[bool]string{false: "immediate", true: "delayed"}[delayed], func(t *testing.T) {
			ctx := context.Background()
			servers, nodes := quorumNodes(t, 3)
			name := lockName(t)
			block(t, nodes[2], name)
			a := mustLock(t, quorumClient(t, nodes).Mutex(name), ctx, dlock.WithLease(ttl))
			b := quorumClient(t, nodes).Mutex(name)
			if delayed {
				if err := servers[0].Kill(); err != nil {
					t.Fatal(err)
				}
			} else if err := servers[0].Restart(false); err != nil {
				t.Fatal(err)
			}
			nodes[2].Del(ctx, keysOf(name).Lock) // the foreign owner leaves
			l, err := b.TryLock(ctx)
			if !delayed {
				if err != nil {
					t.Fatalf("expected the double grant to show, got %v", err)
				}
				if a.Err() != nil {
					t.Fatalf("first lease already ended: %v", a.Err())
				}
				t.Logf("double grant: fences %d and %d, both leases valid", a.Fence(), l.Fence())
				unlock(t, l)
				return
			}
			if !errors.Is(err, dlock.ErrNotObtained) {
				t.Fatalf("with node 0 kept out: %v; want ErrNotObtained", err)
			}
			<-a.Done() // the rule: rejoin only after the longest TTL
			if err := servers[0].Restart(false); err != nil {
				t.Fatal(err)
			}
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			l = mustLock(t, b, wctx)
			if a.Err() == nil {
				t.Fatal("second owner while the first lease is valid")
			}
			unlock(t, l)
		})
	}
}

func TestQuorumBadInput(t *testing.T) {
	_, nodes := quorumNodes(t, 1)
	if _, err := dlock.NewQuorum([]*redis.Client{}); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("no nodes: %v", err)
	}
	if _, err := dlock.NewQuorum([]dlock.Redis{nodes[0], nil}); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("nil node: %v", err)
	}
	if _, err := dlock.NewQuorum(nodes, dlock.WithoutScripts()); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("WithoutScripts: %v", err)
	}
	if _, err := dlock.NewQuorum(nodes, dlock.WithNodeTimeout(-1)); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("negative node timeout: %v", err)
	}
}

// A RedLock acquire whose ctx ends while a majority of nodes stall gives
// back what it was granted: at once on the nodes that answered, and, on the
// stalled ones, once their late grants have run.
func TestQuorumAcquireCutShortLeavesNothing(t *testing.T) {
	ctx := context.Background()
	servers := redistest.StartNT(t, 3, redistest.Options{})
	nodes := make([]*redis.Client, len(servers))
	for i, s := range servers {
		// As users make them: no ContextTimeoutEnabled. A long read
		// timeout: go-redis does not give up on the stalled nodes by itself.
		nodes[i] = newRedis(t, s, func(o *redis.Options) { o.ReadTimeout = time.Minute })
	}
	c := quorumClient(t, nodes, dlock.WithNodeTimeout(5*time.Second))
	unlock(t, mustLock(t, c.Mutex(lockName(t)), ctx)) // every node has the scripts
	name := lockName(t)
	key := keysOf(name).Lock
	for _, s := range servers[1:] {
		if err := s.Pause(); err != nil {
			t.Fatal(err)
		}
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			for _, s := range servers[1:] {
				_ = s.Resume()
			}
		}
	}
	defer resume()
	lctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err := c.Mutex(name).Lock(lctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock with two of three nodes stalled: %v; want its ctx's error", err)
	}
	waitFor(t, "the answering node's grant given back", func() bool { return nodes[0].Exists(ctx, key).Val() == 0 })
	resume()
	for i, n := range nodes[1:] {
		waitFor(t, fmt.Sprintf("stalled node %d's late grant given back", i+1), func() bool { return n.Exists(ctx, key).Val() == 0 })
	}
}

// RedLock's fence write-back compares fences past 2^53 exactly.
func TestQuorumFencesPast2Pow53(t *testing.T) {
	ctx := context.Background()
	_, nodes := quorumNodes(t, 3)
	c := quorumClient(t, nodes)
	name := lockName(t)
	k, _ := dlock.KeysOf("dlock", name)
	const base = 1 << 53
	for i, v := range []int64{base + 3, base + 1, base + 1} {
		nodes[i].Set(ctx, k.Fence, v, 0)
	}
	want := int64(base + 4)
	for range 3 {
		l := mustLock(t, c.Mutex(name), ctx)
		if l.Fence() != want {
			t.Fatalf("fence %d, want %d", l.Fence(), want)
		}
		unlock(t, l)
		want++
	}
}

// With one of three RedLock masters hung, quorum leases are renewed by the
// other two: renewals go to each node as one batch, side by side, and a
// lease counts as renewed once a majority confirmed it.
func TestQuorumRenewalsPastAHungNode(t *testing.T) {
	t.Parallel() // servers of its own, mostly waiting: beside the other such tests
	ctx := context.Background()
	servers, nodes := quorumNodes(t, 3)
	c := quorumClient(t, nodes, dlock.WithNodeTimeout(500*time.Millisecond))
	const n = 30
	base := lockName(t)
	leases := make([]*dlock.Lease, n)
	for i := range leases {
		leases[i] = mustLock(t, c.Mutex(fmt.Sprintf("%s-%d", base, i)), ctx, dlock.WithTTL(2*time.Second))
	}
	hung := servers[2].Client()
	defer hung.Close()
	if err := hung.Do(ctx, "DEBUG", "SLEEP", "4").Err(); err != nil { // blocks the node for 4 s
		t.Fatal(err)
	}
	// Two TTLs have passed with one node hung.
	lost := 0
	for _, l := range leases {
		if l.Err() != nil {
			lost++
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d quorum leases lost while a majority of nodes was healthy", lost, n)
	}
	for _, l := range leases {
		unlock(t, l)
	}
}
