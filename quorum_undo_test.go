package dlock_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// Nodes stopped (SIGSTOP) while a lock is taken and released run the
// acquire when they resume: the claim they then hold is nobody's, and
// must be undone as soon as they answer — not left for its TTL, during
// which a majority that needs them cannot form. The lock is taken and
// released with two of five nodes stopped; they resume; two others stop;
// the next Lock needs the two that resumed and must get the lock well
// within the TTL (a minute here).
func TestQuorumStoppedNodesKeepNoClaim(t *testing.T) {
	t.Parallel() // servers of its own, mostly waiting: beside the other such tests
	ctx := context.Background()
	servers, nodes := quorumNodes(t, 5)
	c := quorumClient(t, nodes, dlock.WithNodeTimeout(time.Second))
	name := lockName(t)
	unlock(t, mustLock(t, c.Mutex(name), ctx)) // every node has the scripts
	for _, s := range servers[:2] {
		if err := s.Pause(); err != nil {
			t.Fatal(err)
		}
	}
	paused := servers[:2]
	defer func() {
		for _, s := range paused {
			_ = s.Resume()
		}
	}()
	l := mustLock(t, c.Mutex(name), ctx, dlock.WithTTL(time.Minute))
	unlock(t, l)
	for _, s := range servers[:2] {
		if err := s.Resume(); err != nil {
			t.Fatal(err)
		}
	}
	paused = servers[3:]
	for _, s := range paused {
		if err := s.Pause(); err != nil {
			t.Fatal(err)
		}
	}
	next := quorumClient(t, nodes, dlock.WithNodeTimeout(time.Second))
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	l2, err := next.Mutex(name).Lock(lctx)
	if err != nil {
		held := 0
		for _, n := range nodes[:3] {
			held += int(n.Exists(ctx, keysOf(name).Lock).Val())
		}
		t.Fatalf("the next Lock on nodes 0-2, after 0 and 1 resumed: %v (%d of them hold the lock); want the lock well within its minute's TTL", err, held)
	}
	unlock(t, l2)
}

// A new Client on a quorum with a minority of nodes stopped (SIGSTOP)
// takes a free lock: its first acquire's checks (the eviction policy,
// the fence fold) give a node that does not answer the node timeout, not
// the acquire's whole ctx.
func TestQuorumNewClientLocksWithAMinorityStopped(t *testing.T) {
	t.Parallel() // servers of its own, mostly waiting: beside the other such tests
	ctx := context.Background()
	servers, nodes := quorumNodes(t, 5)
	c := quorumClient(t, nodes, dlock.WithNodeTimeout(time.Second))
	unlock(t, mustLock(t, c.Mutex(lockName(t)), ctx)) // scripts, fold marks
	for _, s := range servers[3:] {
		if err := s.Pause(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = s.Resume() }()
	}
	fresh := quorumClient(t, nodes, dlock.WithNodeTimeout(time.Second))
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	l, err := fresh.Mutex(lockName(t) + "/free").Lock(lctx)
	if err != nil {
		t.Fatalf("a new Client's Lock of a free lock, 2 of 5 nodes stopped: %v", err)
	}
	unlock(t, l)
}

// A new quorum issues no fence until every node has answered once (the
// price of fences that never repeat). With one of three nodes down from
// the start (Redisson's RedLock test): a TryLock says so plainly and
// names the node not yet seen; a Lock keeps trying within its ctx and
// takes the lock once that node answers.
func TestQuorumFirstUseSaysWhoIsNotSeen(t *testing.T) {
	ctx := context.Background()
	_, proxies, c := proxiedQuorum(t, 3)
	proxies[2].SetDown(true)
	name := lockName(t)
	_, err := c.Mutex(name).TryLock(ctx)
	qe, ok := errors.AsType[*dlock.QuorumError](err)
	if !ok || qe.Op != "fence" || !slices.Equal(qe.NotSeen, []int{2}) ||
		!strings.Contains(err.Error(), "not yet seen: node 2") || !strings.Contains(err.Error(), "every node has answered once") {
		t.Fatalf("TryLock on a new quorum, node 2 down from the start: %v; want a *QuorumError of Op fence naming node 2 as not yet seen", err)
	}
	// A Lock waits within its ctx, and says why when it ends.
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = c.Mutex(name).Lock(short)
	cancel()
	if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "not yet seen: node 2") {
		t.Fatalf("Lock with a 500 ms ctx on the new quorum: %v; want ErrNotObtained at its deadline, naming node 2", err)
	}
	done := make(chan error, 1)
	lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	go func() {
		l, err := c.Mutex(name).Lock(lctx)
		if err == nil {
			err = l.Unlock(ctx)
		}
		done <- err
	}()
	proxies[2].SetDown(false)
	if err := <-done; err != nil {
		t.Fatalf("a Lock waiting while node 2 came back: %v", err)
	}
	// Seen once: a majority suffices from now on.
	proxies[2].SetDown(true)
	l, err := c.Mutex(name).TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock with node 2 down after every node was seen: %v", err)
	}
	unlock(t, l)
}

// A quorum Lock places its waiter on every node; a node that said "held
// by another" while a majority granted keeps that place unless it is
// removed — until its QueueTTL, the node's wake-ups going to a waiter
// that no longer waits. The winner's place goes from every node.
func TestQuorumWinnerLeavesEveryQueue(t *testing.T) {
	ctx := context.Background()
	_, nodes := quorumNodes(t, 3)
	c := quorumClient(t, nodes)
	name := lockName(t)
	unlock(t, mustLock(t, c.Mutex(name+"/warm"), ctx))
	block(t, nodes[2], name) // node 2: held by a foreign owner
	l := mustLock(t, c.Mutex(name), ctx, dlock.WithQueueTTL(time.Minute))
	defer unlock(t, l)
	for i, n := range nodes {
		if places := n.ZCard(ctx, keysOf(name).Lock+":queue").Val(); places != 0 {
			t.Errorf("node %d keeps %d place(s) in the queue after the Lock won", i, places)
		}
	}
}
