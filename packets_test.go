package dlock_test

// Packets dropped in a network namespace (internal/redistest, netns.go):
// the client's own TCP retransmits what was dropped, and delivers it after
// the caller gave up — no proxy decides when. Root only; skipped, and
// said, elsewhere.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestPartitionedAcquireHoldsForNobody: a Lock whose commands are dropped
// (a partition) gives up when its ctx ends, and its undo cannot reach the
// server either. go-redis gives up too (ReadTimeout, its retries) and
// closes its connections — but a closed socket still retransmits what it
// holds, so once the path heals the server runs the acquire: for nobody,
// after the undo's first tries. The undo must keep trying while that claim
// can still live (a TTL from when it was sent), so that the lock is free
// long before its TTL: Lock's doc says any acquisition that may have
// happened is undone. Before the fix: held for nobody (watched for 5 s of
// its 30 s TTL) 3 of 3.
func TestPartitionedAcquireHoldsForNobody(t *testing.T) {
	onlyGoRedis(t)
	t.Parallel() // servers of its own, mostly waiting: beside the other such tests
	n := redistest.NewNet(t)
	srv := n.Start(t, redistest.Options{})
	ctx := context.Background()
	const ttl = 30 * time.Second

	rdb := srv.Client(func(o *redis.Options) { o.ReadTimeout = 500 * time.Millisecond })
	defer rdb.Close()
	c, err := dlock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	name := t.Name()
	m := c.Mutex(name)
	// A first lock and unlock: the connection and scripts are there
	// before the partition.
	l, err := m.Lock(ctx, dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	if err := n.DropRequests(srv.Port()); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = m.Lock(short, dlock.WithTTL(ttl))
	cancel()
	if !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("Lock across a partition: %v, want ErrNotObtained", err)
	}
	// Longer than the background undo's first tries.
	time.Sleep(3500 * time.Millisecond) // the fault's length, not a synchronisation
	if err := n.Heal(); err != nil {
		t.Fatal(err)
	}

	// TCP retransmits the acquire (a few seconds at most, its backoff
	// doubling from 200 ms); watch the lock from another connection.
	admin := srv.Client()
	defer admin.Close()
	key := "dlock:{" + name + "}"
	var seen time.Time
	for end := time.Now().Add(6 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		held, err := admin.Exists(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case held == 1 && seen.IsZero():
			seen = time.Now()
		case held == 1 && time.Since(seen) > 5*time.Second:
			t.Fatalf("the late acquire holds the lock for nobody %v after it ran (TTL %v): the undo gave up", time.Since(seen).Round(time.Millisecond), ttl)
		case held == 0 && !seen.IsZero():
			t.Logf("the late acquire's claim was undone %v after it ran", time.Since(seen).Round(time.Millisecond))
			return
		}
	}
	if seen.IsZero() {
		t.Log("the late acquire never took the lock (its token was buried first)")
	}
}
