package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

func ExampleMutex_Lock() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")}) // "" is localhost:6379
	defer rdb.Close()
	c, err := dlock.New(rdb, dlock.WithPrefix("example"))
	if err != nil {
		panic(err)
	}
	defer c.Close()

	// Wait up to 10 s for the lock; the watchdog renews it until Unlock.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	lease, err := c.Mutex("reports/daily").Lock(wctx)
	if errors.Is(err, dlock.ErrNotObtained) {
		fmt.Println("someone else is running the report")
		return
	}
	if err != nil {
		panic(err)
	}
	defer lease.Unlock(ctx)

	// Work under the lease's context: it is cancelled if the lease is lost.
	work := lease.Context(ctx)
	fmt.Println("fenced:", lease.Fence() > 0, "context live:", work.Err() == nil)
	// Output: fenced: true context live: true
}

func ExampleMutex_TryLock() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")}) // "" is localhost:6379
	defer rdb.Close()
	c, _ := dlock.New(rdb, dlock.WithPrefix("example"))
	defer c.Close()

	m := c.Mutex("cron/cleanup")
	first, err := m.TryLock(ctx, dlock.WithLease(time.Minute)) // fixed lease, no renewal
	fmt.Println("first:", err)
	_, err = m.TryLock(ctx)
	fmt.Println("second:", errors.Is(err, dlock.ErrNotObtained))
	_ = first.Unlock(ctx)
	// Output:
	// first: <nil>
	// second: true
}

func ExampleLease_Context() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")}) // "" is localhost:6379
	defer rdb.Close()
	c, _ := dlock.New(rdb, dlock.WithPrefix("example"))
	defer c.Close()

	m := c.Mutex("accounts/7")
	outer, _ := m.Lock(ctx)
	// Code handed the lease's context re-enters instead of deadlocking.
	inner, _ := m.Lock(outer.Context(ctx))
	fmt.Println("same fence:", inner.Fence() == outer.Fence())
	_ = inner.Unlock(ctx) // still held by outer
	_ = outer.Unlock(ctx) // now free
	fmt.Println("outer:", outer.Err())
	// Output:
	// same fence: true
	// outer: dlock: lease unlocked
}

func ExampleLease_Done() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")}) // "" is localhost:6379
	defer rdb.Close()
	c, _ := dlock.New(rdb, dlock.WithPrefix("example"))
	defer c.Close()

	lease, _ := c.Mutex("batch/import").Lock(ctx, dlock.WithLease(100*time.Millisecond))
	select {
	case <-lease.Done(): // the fixed lease ran out before the work was done
		fmt.Println(errors.Is(lease.Err(), dlock.ErrLeaseLost))
	case <-time.After(5 * time.Second): // the work
		_ = lease.Unlock(ctx)
	}
	// Output: true
}

func ExampleFairMutex() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")}) // "" is localhost:6379
	defer rdb.Close()
	c, _ := dlock.New(rdb, dlock.WithPrefix("example"))
	defer c.Close()

	// Waiters are served in arrival order; a waiter that dies is skipped
	// within the queue TTL (here 2 s) instead of stalling the queue.
	f := c.FairMutex("printer", dlock.WithQueueTTL(2*time.Second))
	lease, err := f.Lock(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("printing, fence > 0:", lease.Fence() > 0)
	_ = lease.Unlock(ctx)
	// Output: printing, fence > 0: true
}

func ExampleRWMutex() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")}) // "" is localhost:6379
	defer rdb.Close()
	c, _ := dlock.New(rdb, dlock.WithPrefix("example"))
	defer c.Close()

	rw := c.RWMutex("config")
	r1, _ := rw.RLock(ctx)
	r2, _ := rw.RLock(ctx) // readers share the lock
	_, err := rw.TryLock(ctx)
	fmt.Println("writer while reading:", errors.Is(err, dlock.ErrNotObtained))
	_ = r1.Unlock(ctx)
	_ = r2.Unlock(ctx)

	w, _ := rw.Lock(ctx)
	// Read inside the write lock, then release the write: a downgrade.
	r, _ := rw.RLock(w.Context(ctx))
	_ = w.Unlock(ctx)
	r3, err := rw.TryRLock(ctx)
	fmt.Println("reader after downgrade:", err)
	_ = r.Unlock(ctx)
	_ = r3.Unlock(ctx)
	// Output:
	// writer while reading: true
	// reader after downgrade: <nil>
}

func ExampleSemaphore() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")}) // "" is localhost:6379
	defer rdb.Close()
	c, _ := dlock.New(rdb, dlock.WithPrefix("example"))
	defer c.Close()

	// At most 3 concurrent calls to a rate-limited API, across all nodes.
	api := c.Semaphore("partner-api", 3)
	lease, err := api.Acquire(ctx, 2) // a heavy call takes 2 permits
	if err != nil {
		panic(err)
	}
	capacity, free, _ := api.Permits(ctx)
	fmt.Println(capacity, free)
	_ = lease.Unlock(ctx) // a crashed holder's permits come back at its TTL
	// Output: 3 1
}

func ExampleLatch() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")}) // "" is localhost:6379
	defer rdb.Close()
	c, _ := dlock.New(rdb, dlock.WithPrefix("example"))
	defer c.Close()

	l := c.Latch("shards-loaded")
	_, _ = l.TrySetCount(ctx, 2, time.Hour)
	for _, shard := range []string{"shard-1", "shard-2", "shard-2"} {
		_, _ = l.CountDownOnce(ctx, shard) // shard-2 counts once
	}
	fmt.Println(l.Wait(ctx))
	// Output: <nil>
}

func ExampleLockAll() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")}) // "" is localhost:6379
	defer rdb.Close()
	c, _ := dlock.New(rdb, dlock.WithPrefix("example"))
	defer c.Close()

	// Move money between two accounts: both or neither, in a fixed order
	// whatever the argument order, so transfers never deadlock.
	set, err := dlock.LockAll(ctx, c.Mutex("accounts/9"), c.Mutex("accounts/3"))
	if err != nil {
		panic(err)
	}
	for _, p := range set.Parts() {
		fmt.Println(p.Name())
	}
	_ = set.Unlock(ctx)
	// Output:
	// accounts/3
	// accounts/9
}

func ExampleWithMeterProvider() {
	ctx := context.Background()
	// The application's OpenTelemetry SDK; here one read by hand.
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(ctx)

	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")}) // "" is localhost:6379
	defer rdb.Close()
	c, err := dlock.New(rdb, dlock.WithPrefix("example"), dlock.WithMeterProvider(mp))
	if err != nil {
		panic(err)
	}
	defer c.Close()
	lease, err := c.Mutex("metrics/demo").Lock(ctx)
	if err != nil {
		panic(err)
	}

	var rm metricdata.ResourceMetrics
	_ = reader.Collect(ctx, &rm)
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if held, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "dlock.leases.held" {
				fmt.Println(m.Name, held.DataPoints[0].Value)
			}
		}
	}
	_ = lease.Unlock(ctx)
	// Output: dlock.leases.held 1
}

// A Client checks its deployment at its first acquire: a server that may
// evict keys is refused (ErrEvictionPolicy) unless WithEvictionRisk
// accepts the risk, and a pub/sub channel its ACL user may not use shows
// in Health. The short ctx bounds the whole call, even if Redis stalls.
func ExampleClient_Health() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")}) // "" is localhost:6379
	defer rdb.Close()
	c, _ := dlock.New(rdb, dlock.WithPrefix("example"))
	defer c.Close()

	tctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	lease, err := c.Mutex("deploy/check").Lock(tctx)
	switch {
	case errors.Is(err, dlock.ErrEvictionPolicy):
		fmt.Println("set maxmemory-policy noeviction:", err)
		return
	case errors.Is(err, context.DeadlineExceeded):
		fmt.Println("no lock within 200 ms")
		return
	case err != nil:
		panic(err)
	}
	defer lease.Unlock(ctx)
	fmt.Println("health:", c.Health())
	// Output: health: <nil>
}

func ExampleElection() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")}) // "" is localhost:6379
	defer rdb.Close()
	c, err := dlock.New(rdb, dlock.WithPrefix("example"))
	if err != nil {
		panic(err)
	}
	defer c.Close()
	e := c.Election("scheduler")

	// Anyone can follow who leads: here, in the same process.
	octx, stop := context.WithCancel(ctx)
	defer stop()
	changes := e.Observe(octx)
	show := func(info dlock.LeaderInfo) string {
		if info.Term == 0 {
			return "nobody leads"
		}
		return info.Value + " leads"
	}
	fmt.Println(show(<-changes))

	// Campaign waits its turn, then leads until Resign or until its lease
	// is lost (ld.Done, ld.Err; ld.Context is cancelled then).
	ld, err := e.Campaign(ctx, "10.0.0.7:8080")
	if err != nil {
		panic(err)
	}
	fmt.Println(show(<-changes))
	// Whatever the leader writes, it writes with its term: a store that
	// refuses a term lower than one it has seen cannot be written by a
	// leader that was deposed without knowing.
	fmt.Println("term given:", ld.Term() > 0)

	if err := ld.Resign(ctx); err != nil {
		panic(err)
	}
	fmt.Println(show(<-changes))
	// Output:
	// nobody leads
	// 10.0.0.7:8080 leads
	// term given: true
	// nobody leads
}

func ExampleElection_Leader() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")}) // "" is localhost:6379
	defer rdb.Close()
	c, _ := dlock.New(rdb, dlock.WithPrefix("example"), dlock.WithOwnerLabel("billing-7"))
	defer c.Close()
	e := c.Election("billing/primary")

	ld, err := e.Campaign(ctx, "billing-7.internal:9000")
	if err != nil {
		panic(err)
	}
	defer ld.Resign(ctx)

	info, err := e.Leader(ctx)
	if errors.Is(err, dlock.ErrNoLeader) {
		fmt.Println("nobody leads")
		return
	}
	if err != nil {
		panic(err)
	}
	fmt.Println(info.Value, info.Owner.Label, info.Term == ld.Term())
	// Output: billing-7.internal:9000 billing-7 true
}

func ExampleBusyError() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")}) // "" is localhost:6379
	defer rdb.Close()
	c, _ := dlock.New(rdb, dlock.WithPrefix("example"))
	defer c.Close()

	m := c.Mutex("migrations")
	held, err := m.Lock(ctx, dlock.WithLabel("schema v42 by deploy #1337"))
	if err != nil {
		panic(err)
	}
	defer held.Unlock(ctx)

	_, err = m.TryLock(ctx)
	var busy *dlock.BusyError
	if errors.As(err, &busy) && busy.Holder != nil {
		fmt.Println("not obtained:", errors.Is(err, dlock.ErrNotObtained))
		fmt.Println("held by:", busy.Holder.Label)
		fmt.Println("same fence:", busy.Holder.Fence == held.Fence())
	}
	// Output:
	// not obtained: true
	// held by: schema v42 by deploy #1337
	// same fence: true
}

func ExampleDeadlockError() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")}) // "" is localhost:6379
	defer rdb.Close()
	// Two services, each with its own Client (as two processes would):
	// each holds one lock and, holding it, waits for the other's.
	start := make(chan struct{})
	service := func(have, want string, out chan<- error) {
		c, _ := dlock.New(rdb, dlock.WithPrefix("example"), dlock.WithDeadlockDelay(100*time.Millisecond))
		defer c.Close()
		held, err := c.Mutex(have).Lock(ctx)
		if err != nil {
			out <- err
			return
		}
		defer held.Unlock(ctx) // on ErrDeadlock, letting go serves the other
		out <- nil             // holding
		<-start
		wctx, cancel := context.WithTimeout(held.Context(ctx), 10*time.Second)
		defer cancel()
		second, err := c.Mutex(want).Lock(wctx) // waits holding `have`: the ctx says so
		if err == nil {
			second.Unlock(ctx)
		}
		out <- err
	}
	a, b := make(chan error, 2), make(chan error, 2)
	go service("ledger", "inventory", a)
	go service("inventory", "ledger", b)
	<-a // both hold their first lock before either waits
	<-b
	close(start)
	deadlocks, served := 0, 0
	for _, err := range []error{<-a, <-b} {
		var de *dlock.DeadlockError
		switch {
		case errors.As(err, &de):
			deadlocks++
			fmt.Println("gave up:", errors.Is(err, dlock.ErrDeadlock), errors.Is(err, dlock.ErrNotObtained), "cycle of", len(de.Waits))
		case err == nil:
			served++
		}
	}
	fmt.Println("deadlocks:", deadlocks, "served:", served)
	// Output:
	// gave up: true true cycle of 2
	// deadlocks: 1 served: 1
}
