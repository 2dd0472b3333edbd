package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/envdriver"
)

// Script calls made while another is in flight go together, as one
// pipeline, when it returns: the server is paused so that the first call
// stays in flight while the others come.
func TestCallsInFlightShareAPipeline(t *testing.T) {
	skipAutoPipeline(t)
	ctx := context.Background()
	c, rec := countedThroughClient(t)
	name := lockName(t)
	unlock(t, mustLock(t, c.Mutex(name), ctx)) // loads the script, records the Client
	admin := newRedis(t, srv)
	rec.take()
	if err := admin.Do(ctx, "CLIENT", "PAUSE", 300, "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	const n = 8
	var wg sync.WaitGroup
	leases := make([]*dlock.Lease, n)
	for i := range n {
		wg.Go(func() {
			l, err := c.Mutex(fmt.Sprintf("%s/%d", name, i)).TryLock(ctx)
			if err != nil {
				t.Error(err)
			}
			leases[i] = l
		})
	}
	wg.Wait()
	trips := rec.take()
	batched := 0
	for _, names := range trips {
		batched = max(batched, len(names))
	}
	if batched < 2 || len(trips) >= n {
		t.Fatalf("%d TryLocks during a pause went in %d round trips %v; want fewer, some carrying several", n, len(trips), trips)
	}
	for _, l := range leases {
		if l != nil {
			unlock(t, l)
		}
	}
}

// A call whose ctx ends while it is queued behind a batch in flight is
// taken back unsent: nothing of it reaches Redis.
func TestQueuedCallGivenUpIsNotSent(t *testing.T) {
	skipAutoPipeline(t)
	ctx := context.Background()
	c := newClient(t, newRedis(t, srv), dlock.WithoutOwnConnections()) // on its own connections, a call is written at once
	name := lockName(t)
	unlock(t, mustLock(t, c.Mutex(name), ctx))
	admin := newRedis(t, srv)
	if err := admin.Do(ctx, "CLIENT", "PAUSE", 400, "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	// More calls than may be in flight at once: the later ones queue.
	const first = 8
	firsts := make(chan error, first)
	for i := range first {
		go func() {
			l, err := c.Mutex(fmt.Sprintf("%s/first/%d", name, i)).TryLock(ctx)
			if err == nil {
				err = l.Unlock(ctx)
			}
			firsts <- err
		}()
	}
	// Sampling, not synchronisation: the first calls are on their way (no
	// signal says they are in flight inside the paused server).
	time.Sleep(30 * time.Millisecond)
	qctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := c.Mutex(name + "/queued").TryLock(qctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the queued TryLock: %v; want its deadline", err)
	}
	for range first {
		if err := <-firsts; err != nil {
			t.Fatal(err)
		}
	}
	if n := admin.Exists(ctx, keysOf(name+"/queued").Lock).Val(); n != 0 {
		t.Fatalf("the given-up call reached Redis (%d of its keys exist)", n)
	}
}

// skipAutoPipeline skips a test of the Client's own batching when
// DLOCK_TEST_DRIVER names a driver that batches calls itself (rueidis,
// valkey-go): the Client then sends each call on its own.
// (The Client's own batching serves a driver that does not batch by
// itself: go-redis through the client, WithoutOwnConnections.)
func skipAutoPipeline(t *testing.T) {
	if d := envdriver.Name(); d != "go-redis" {
		t.Skipf("DLOCK_TEST_DRIVER=%s batches calls itself", d)
	}
}
