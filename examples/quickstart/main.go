// Command quickstart is the README's quick start: one job, one place at a
// time. Run it twice at once against one Redis: the second waits.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	c, err := dlock.New(rdb, dlock.WithPrefix("myapp"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close() // releases what it still holds; stops the watchdog and pub/sub

	lease, err := c.Mutex("orders/42").Lock(ctx) // waits; ctx bounds the wait
	if errors.Is(err, dlock.ErrNotObtained) {
		log.Print("gave up waiting (Ctrl-C): someone else has it")
		return
	}
	if err != nil {
		log.Print(err) // Redis unreachable, say
		return
	}
	defer lease.Unlock(context.Background())

	// Work under the lease's context: it is cancelled the moment the lease
	// may have been lost. The fence (an int64 that grows with every owner
	// of orders/42) goes with whatever you write, so that the store can
	// refuse a stale owner (see "Fences that your storage checks").
	if err := process(lease.Context(ctx), 42, lease.Fence()); err != nil {
		log.Print(err)
	}
}

// process is your job.
func process(ctx context.Context, order int, fence int64) error {
	fmt.Printf("processing order %d with fence %d\n", order, fence)
	select {
	case <-time.After(3 * time.Second): // the work
		return nil
	case <-ctx.Done(): // the lease may be lost, or Ctrl-C
		return context.Cause(ctx)
	}
}
