package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// redisAddr is the address of a Redis server: in these examples, the one
// the package's tests start.
var redisAddr string

func ExampleMutex_Lock() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
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
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
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
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
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
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
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
